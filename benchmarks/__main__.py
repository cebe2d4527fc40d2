"""`python -m benchmarks`: runs the command line (benchmarks.cli.main)."""

import sys

from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main())
