"""``python -m calibench``: the command line (:mod:`calibench.run.cli`)."""

import sys

from calibench.run.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports it
    sys.exit(main())
