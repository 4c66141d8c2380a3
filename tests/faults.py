"""Faults injected into checkpoint child processes from outside the production modules.

A test puts ``environment(...)`` into a child's environment (``inject`` for an in-process parent,
the ``env`` of a served app's server otherwise). The child then imports ``tests/startup/
sitecustomize.py`` as it starts, which calls ``install()``: a JAX monitoring listener on the
worker's stage events (``dcsim.checkpoint.worker.STAGE_EVENT``) that acts when the child reaches
the named stage. The stages are the progress stages (``initialising``, ``saving``, ``measuring``,
...; a group's first is ``connecting``) and ``writing`` (the save has begun, not yet committed).

A fault is ``STAGE:ACTION``, the action one of
  raise: raise a RuntimeError (the child reports it as its failure);
  kill: SIGKILL itself, before it writes a result;
  hang: sleep past any time limit;
  pause: write its pid to the file ``PAUSED_ENV`` names, then wait there to be killed from outside
    (``wait_until_paused``): a kill that lands at a known stage, not a race against a poll;
or ``fsize:BYTES``: from its first stage no file it writes may grow past BYTES (RLIMIT_FSIZE,
SIGXFSZ ignored so the write fails with EFBIG): a full temporary disk without root.

The fault is read at each stage from ``FAULT_ENV``, or if that is empty from the file
``FAULT_FILE_ENV`` names, so a running server's next child can get another fault. In a group only
process ``PROCESS_ENV`` (0 unless set) acts on it.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path
from typing import Any

FAULT_ENV = "DCSIM_TEST_FAULT"
FAULT_FILE_ENV = "DCSIM_TEST_FAULT_FILE"
PROCESS_ENV = "DCSIM_TEST_FAULT_PROCESS"
PAUSED_ENV = "DCSIM_TEST_FAULT_PAUSED"
_STARTUP = Path(__file__).resolve().parent / "startup"
_TESTS = Path(__file__).resolve().parent
_ACTIONS = ("raise", "kill", "hang", "pause")
_EVENT = "/dcsim/checkpoint/stage"  # dcsim.checkpoint.worker.STAGE_EVENT, checked by test_checkpoint


def environment(
    fault: str = "",
    *,
    fault_file: Path | None = None,
    process: int | None = None,
    paused: Path | None = None,
) -> dict[str, str]:
    """The variables that give a child ``fault`` (or the fault in ``fault_file``)."""
    path = os.pathsep.join(filter(None, [str(_STARTUP), str(_TESTS), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, FAULT_ENV: fault}
    if fault_file is not None:
        env[FAULT_FILE_ENV] = str(fault_file)
    if process is not None:
        env[PROCESS_ENV] = str(process)
    if paused is not None:
        env[PAUSED_ENV] = str(paused)
    return env


def inject(monkeypatch: Any, fault: str = "", **options: Any) -> None:
    """Give every child this test starts ``fault`` (see ``environment`` for the options)."""
    for name, value in environment(fault, **options).items():
        monkeypatch.setenv(name, value)


def wait_until_paused(paused: Path, *, limit: float = 120.0) -> int:
    """The pid a ``pause`` fault wrote to ``paused``, once it is written (bounded by ``limit``)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            text = paused.read_text()
        except FileNotFoundError:
            text = ""
        if text.endswith("\n"):
            return int(text)
        time.sleep(0.05)
    raise TimeoutError(f"no child paused within {limit} s ({paused} never written)")


def _fault() -> str:
    fault = os.environ.get(FAULT_ENV, "")
    if not fault and os.environ.get(FAULT_FILE_ENV):
        try:
            fault = Path(os.environ[FAULT_FILE_ENV]).read_text().strip()
        except OSError:
            fault = ""
    return fault


def _limit_file_size(size: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _act(stage: str, action: str) -> None:
    if action == "raise":
        raise RuntimeError(f"fault injected at {stage}")
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "pause":
        paused = Path(os.environ[PAUSED_ENV])
        partial = paused.with_suffix(".partial")
        partial.write_text(f"{os.getpid()}\n")
        partial.replace(paused)
    if action in ("hang", "pause"):
        time.sleep(3600)


def _listener(event: str, **details: Any) -> None:
    if event != _EVENT:
        return
    fault = _fault()
    name, _, argument = fault.partition(":")
    if name == "fsize":
        _limit_file_size(int(argument))
        return
    if int(details.get("process_id", 0)) != int(os.environ.get(PROCESS_ENV, "0")):
        return
    if name == details.get("stage") and argument in _ACTIONS:
        _act(name, argument)


def install() -> None:
    """Listen for the worker's stage events, if this process was given a fault."""
    if not (os.environ.get(FAULT_ENV) or os.environ.get(FAULT_FILE_ENV)):
        return
    from jax import monitoring

    monitoring.register_event_listener(_listener)
