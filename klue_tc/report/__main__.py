import sys

from klue_tc.report.cli import main

sys.exit(main())
