"""``python -m dcsim``: see ``dcsim.cli``.

A single-process ``checkpoint`` starts its child before anything imports JAX, so the child's
start-up overlaps the parent's (``dcsim.checkpoint.prestart``); the child is ended on the way out unless the
measurement used it.

That same command then leaves without the interpreter's teardown: by the time ``main`` returns the
child has been ended, its temporary folder removed and the report written, so what is left is
Python freeing JAX's, Flax's and Orbax's modules one by one (0.6-0.9 s here, a third of what the
command adds over ``count``). Output is flushed first; the exit code is ``main``'s. Every other
command, ``count`` included, exits the ordinary way.
"""

import contextlib
import os
import sys

from dcsim.checkpoint import prestart


def _leave_now(code: int) -> None:
    """Flush what was written and end the process with ``code``, skipping the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    fast_exit = prestart.wanted(sys.argv[1:])
    if fast_exit:
        prestart.start()
    try:
        from dcsim.cli import main

        code = main()
    finally:
        prestart.discard()
    if fast_exit:
        _leave_now(code)
    sys.exit(code)
