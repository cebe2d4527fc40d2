import sys

from klue_tc.ensemble.cli import main

sys.exit(main())
