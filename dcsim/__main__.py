"""``python -m dcsim``: see ``dcsim.cli``.

A single-process ``checkpoint`` starts its child before anything imports JAX, so the child's
start-up overlaps the parent's (``dcsim.prestart``); the child is ended on the way out unless the
measurement used it.
"""

import sys

from dcsim import prestart

if __name__ == "__main__":
    if prestart.wanted(sys.argv[1:]):
        prestart.start()
    try:
        from dcsim.cli import main

        code = main()
    finally:
        prestart.discard()
    sys.exit(code)
