"""A job from its config to its records: setup, input checks, folds, ranks, loggers, progress and sweeps."""
