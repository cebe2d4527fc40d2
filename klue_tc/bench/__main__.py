"""`python -m klue_tc.bench`: runs the command line (klue_tc.bench.cli.main)."""
import sys

from klue_tc.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
