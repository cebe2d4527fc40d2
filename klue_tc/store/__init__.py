"""The results store: the records a job writes, the code version that keys them, and where they are kept."""
