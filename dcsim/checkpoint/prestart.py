"""Start the checkpoint child before the parent imports JAX, so the two start up side by side.

``python -m dcsim checkpoint`` spends about a second importing JAX and the CLI and half a second
planning (the abstract count and the layout) before it starts its child, and the child spends
another second or more starting Python and importing JAX, Flax and Orbax. ``dcsim.__main__``
therefore starts the child first, through this module, which imports no JAX: the child imports
while the parent imports and plans, then waits for its request file (``dcsim.checkpoint.child
single --wait``). The parent validates everything exactly as before and only then writes the request;
nothing is initialised before the ceiling check.

Whatever happens the child does not outlive its use: when the parent does not hand it a request
(bad input, the ceiling refused, an error, an interrupt), ``discard`` ends its process group and
removes its folder (``dcsim.__main__`` calls it on the way out, and ``atexit`` does too); if the
parent dies without doing so, the child sees it and exits, removing its folder; and it never waits
longer than ``WAIT_SECONDS``.

Only the single-process measurement is started early: its device count is set by the child once
the request names the mesh (``jax_num_cpu_devices``, before JAX's backend starts).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dcsim.runtime import workers

# The child: ``python -m dcsim.checkpoint.child single --wait`` (not imported here: it imports JAX).
WAIT_FLAG = "--wait"
CHILD_MODULE, CHILD_ARGS = "dcsim.checkpoint.child", ("single", WAIT_FLAG)
# The model and dtype, shown to the waiting child ahead of the request (``Prestarted.preview``).
PREVIEW_FILE = "preview.json"
FOLDER_PREFIX = "dcsim-checkpoint-"
# The longest the child waits for its request; the parent plans in seconds, even for a model at
# the ceiling, so this only bounds a parent that hangs.
WAIT_SECONDS = 600.0
# The waiting child's parent, so the child can tell it has gone (then its parent is another process).
PARENT_ENV = "DCSIM_PRESTART_PARENT"
# Flags that take the command elsewhere: several processes, or only the help text.
_OTHER_PATHS = ("--processes", "--processes-sweep", "-h", "--help")


def wanted(argv: Sequence[str]) -> bool:
    """Whether a command line is a single-process ``checkpoint``, the one a pre-started child serves."""
    if not argv or argv[0] != "checkpoint":
        return False
    return not any(arg.split("=")[0] in _OTHER_PATHS for arg in argv[1:])


@dataclasses.dataclass(eq=False)
class Prestarted:
    """A checkpoint child waiting in ``folder`` (a fresh temporary folder it may use) for its request."""

    folder: Path
    process: subprocess.Popen

    def alive(self) -> bool:
        return self.process.poll() is None

    def preview(self, config: Mapping[str, Any], dtype: str) -> None:
        """Show the child the model (``ModelConfig.to_dict()``) and dtype before the request, so it
        traces the init while the parent counts and lays it out. Only shapes: the child makes no
        array until the request, which comes after the ceiling check. Written whole, then named."""
        with contextlib.suppress(OSError):  # no preview: the child traces when the request comes
            workers.write_whole(self.folder / PREVIEW_FILE, {"config": dict(config), "dtype": dtype})

    def discard(self) -> None:
        """End the child's process group and remove its folder (again: a no-op)."""
        workers.end_group(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)


_pending: Prestarted | None = None


def start() -> Prestarted | None:
    """Start a waiting checkpoint child (``None`` if it could not start: the parent then starts its
    own as before). It is ``pending()`` until ``discard``; ``atexit`` discards it."""
    global _pending
    discard()
    try:
        folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    except OSError:
        return None
    # No device count yet: the child sets it from the request, before JAX's backend starts.
    env = workers.cpu_worker_env(None) | {PARENT_ENV: str(os.getpid())}
    try:
        with open(folder / "stderr.txt", "wb") as stderr:
            process = subprocess.Popen(
                workers.worker_command(CHILD_MODULE, folder, CHILD_ARGS),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=folder,
                env=workers.worker_environment(env),
                start_new_session=True,
            )
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    _pending = Prestarted(folder=folder, process=process)
    atexit.register(discard)
    return _pending


def pending() -> Prestarted | None:
    """The waiting child, if one was started, is alive and was not discarded."""
    if _pending is not None and not _pending.alive():
        discard()
    return _pending


def discard() -> None:
    """End the waiting child, if any, and remove its folder."""
    global _pending
    waiting, _pending = _pending, None
    if waiting is not None:
        with contextlib.suppress(Exception):
            waiting.discard()
