"""Fine-tuning one fold: its module, callbacks, checkpoints, inference, metrics; the linear baselines."""
