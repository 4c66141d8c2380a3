"""``python -m dcsim``: see ``dcsim.cli``."""

import sys

from dcsim.cli import main

if __name__ == "__main__":
    sys.exit(main())
