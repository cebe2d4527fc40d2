"""User-facing errors: each is reported as one line and a non-zero exit, never a traceback."""


class KlueTcError(Exception):
    """Base of errors caused by input or configuration, not by a bug."""


class DataError(KlueTcError):
    """A data file (or the hub) cannot give valid labelled titles."""


class ConfigError(KlueTcError):
    """An override or config value is invalid."""


class ResourceError(KlueTcError):
    """A model or dataset is neither available locally nor downloadable."""
