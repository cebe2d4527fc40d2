"""Self-supervised pretraining of an encoder: objectives, masking, its steps and the stored encoders."""
