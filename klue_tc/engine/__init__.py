"""The Lightning plumbing both training engines share: atomic checkpoints, resumable random state."""
