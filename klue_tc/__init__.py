"""klue_tc: Hydra sweeps of from-scratch Korean headline topic classifiers on KLUE YNAT."""

__version__ = "0.1.0"
