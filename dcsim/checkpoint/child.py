"""The one entry point of a checkpoint child process:
``python -m dcsim.checkpoint.child KIND [--wait] REQUEST RESULT PROGRESS``.

``KIND`` is ``single`` (one process holds every device: ``dcsim.checkpoint.worker``) or ``group``
(one process of a multi-process measurement: ``dcsim.checkpoint.multiprocess_worker``). With
``--wait`` a ``single`` child was pre-started (``dcsim.checkpoint.prestart``) and waits for its
request file. Either way the child reads the request, announces each stage in the progress file,
writes its result (or its error's message) whole, and leaves without Python's teardown.

Each stage is also a JAX monitoring event (``worker.STAGE_EVENT``), the seam the test suite's
fault injector (``tests/faults.py``) listens on; no test code lives in these modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from dcsim.checkpoint import prestart, worker
from dcsim.runtime import workers

SINGLE, GROUP = "single", "group"
KINDS = (SINGLE, GROUP)
MODULE = "dcsim.checkpoint.child"
# The exit code of a pre-started child whose request never came (its parent died or gave up).
NOT_REQUESTED = 3


def _measure(
    kind: str, request: dict[str, Any], workdir: Path, progress: Any, waited: worker.Waited | None
) -> dict[str, Any]:
    """``waited``: how a pre-started child's wait ended (``None`` if it was started with its request)."""
    if kind == GROUP:
        from dcsim.checkpoint import multiprocess_worker  # only a group joins JAX's distributed runtime

        return multiprocess_worker.measure(request, progress)
    return worker.measure(
        request,
        workdir,
        progress,
        set_device_count=waited is not None,
        traced=None if waited is None else waited.traced,
    )


def main(argv: list[str]) -> int:
    """Run one child; returns its exit code (0: measured, 1: failed with a message in the result)."""
    kind, rest = (argv[0], argv[1:]) if argv else ("", [])
    waiting = kind == SINGLE and rest[:1] == [prestart.WAIT_FLAG]
    if kind not in KINDS or len(rest) - waiting != 3:
        raise SystemExit(f"usage: python -m {MODULE} {{{','.join(KINDS)}}} [--wait] REQUEST RESULT PROGRESS")
    request_path, result_path, progress_path = (Path(arg) for arg in rest[waiting:])
    waited = None
    if waiting:
        waited = worker.wait_for_request(request_path, wait_seconds=prestart.WAIT_SECONDS)
        if not waited.requested:
            # Never used: the folder is ours alone (the parent made it for this child).
            shutil.rmtree(request_path.parent, ignore_errors=True)
            return NOT_REQUESTED
    try:
        with open(progress_path, "a") as progress:
            result = _measure(kind, json.loads(request_path.read_text()), result_path.parent, progress, waited)
        code, details = 0, ""
    except Exception as err:
        details = traceback.format_exc()
        result, code = {"error": worker.error_message(err, result_path.parent)}, 1
    workers.write_whole(result_path, result)  # the parent never reads half a result
    if code:
        # After the result: on a full disk the traceback may not fit, the message must.
        with contextlib.suppress(OSError):
            sys.stderr.write(details)
            sys.stderr.flush()
    return code


if __name__ == "__main__":
    exit_code = main(sys.argv[1:])
    # The result is written and the checkpoint folder removed: skip the interpreter's teardown
    # (JAX's and Orbax's exit handlers, and after a group's failure JAX's distributed client,
    # which would wait for its peers at the shutdown barrier), which the parent would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
