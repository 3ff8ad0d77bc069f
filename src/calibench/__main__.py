"""``python -m calibench``: the command line (:mod:`calibench.run.cli`)."""

import sys

from calibench.run.cli import main

sys.exit(main())
