"""XLA's checks in a child process: the slots a server runs them in, their time limit and their
one way of failing. A check compiles a program on virtual CPU devices in a child
(``dcsim.runtime.workers``) and reads XLA's memory analysis; what it compiles and what it compares
belong to its caller (``dcsim.memory.verify`` and ``verify_step``, ``dcsim.serving.verify``), which
share these slots.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dcsim.runtime.limits import check_timeout, timeout_from_env
from dcsim.runtime.workers import WorkerFailed, WorkerJob, WorkerTimeout, cpu_worker_env, run_workers

# XLA's CPU backend compiles for at most 2,048 devices in one process: from device id 2,048 on it
# reads ids as another process's and refuses ("Multiprocess computations aren't implemented on the
# CPU backend", jaxlib 0.10.2). Up to there the check stays quick: Llama 2 7B's 1,456 arrays
# compiled in 2.4 s whole (0.5 GB) on 2,048 devices, against 1.9 s on 256.
MAX_VERIFY_DEVICES = 2048
# About seven times the slowest check within the bounds, for a busy shared machine.
DEFAULT_TIMEOUT_SECONDS = 60.0
TIMEOUT_ENV = "DCSIM_VERIFY_TIMEOUT_SECONDS"
FOLDER_PREFIX = "dcsim-verify-"


# Checks one server runs at once: each child compiles on the machine's few cores and may take up to
# about 1.3 GB within the bounds above, so visitors pressing Verify together queue, and past
# ``BUSY_WAIT_SECONDS`` are told the server is busy instead of waiting on a spinner.
MAX_RUNNING = 2
BUSY_WAIT_SECONDS = 30.0
_RUNNING = threading.BoundedSemaphore(MAX_RUNNING)


class VerifyFailed(RuntimeError):
    """The child did not give XLA's figure: it failed, crashed or overran its time limit. The
    message is one line a person can read; the child was ended and its folder removed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class XlaCheck:
    """What every XLA check gives: XLA's bytes a device beside the bytes dcsim expects there, which
    agree to the byte or not, for the arrays compiled in the child's time. A subclass holds XLA's
    figure among its own fields and names it ``xla_bytes_per_device``."""

    expected_bytes_per_device: int
    num_arrays: int
    seconds: float

    @property
    def xla_bytes_per_device(self) -> int:
        raise NotImplementedError

    @property
    def matches(self) -> bool:
        return self.xla_bytes_per_device == self.expected_bytes_per_device

    @property
    def difference_bytes(self) -> int:
        """XLA's figure minus the expected one (0 when they match)."""
        return self.xla_bytes_per_device - self.expected_bytes_per_device


def default_timeout_seconds() -> float:
    """The child's time limit: ``DCSIM_VERIFY_TIMEOUT_SECONDS`` if set, else ``DEFAULT_TIMEOUT_SECONDS``."""
    return timeout_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS)


def run_check(
    module: str, name: str, request: dict[str, Any], num_devices: int, timeout_seconds: float | None = None
) -> tuple[dict[str, Any], float]:
    """Run one XLA check: the child ``module`` on ``num_devices`` virtual CPU devices with
    ``request``; its result and wall time. At most ``MAX_RUNNING`` checks of any kind run at once
    per server (the memory checks and ``dcsim.serving.verify``'s share the slots); the child runs under a
    time limit, is ended with its process group on any failure, and its folder is always removed.
    Raises ValueError for a bad time limit and ``VerifyFailed`` naming ``name`` otherwise."""
    seconds = default_timeout_seconds() if timeout_seconds is None else check_timeout(timeout_seconds)
    if not _RUNNING.acquire(timeout=BUSY_WAIT_SECONDS):
        raise VerifyFailed(
            f"this server is already running {MAX_RUNNING} XLA checks and none finished within "
            f"{BUSY_WAIT_SECONDS:g} s; try again in a minute"
        )
    try:
        return _run_check(module, name, request, num_devices, seconds)
    finally:
        _RUNNING.release()


def _run_check(
    module: str, name: str, request: dict[str, Any], num_devices: int, seconds: float
) -> tuple[dict[str, Any], float]:
    try:
        folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    except OSError as err:
        raise VerifyFailed(f"no temporary folder could be made for the {name}: {err}") from None
    try:
        job = WorkerJob(name=name, module=module, request=request, folder=folder, env=cpu_worker_env(num_devices))
        started = time.monotonic()
        try:
            (result,) = run_workers([job], timeout_seconds=seconds)
        except WorkerTimeout as err:
            raise VerifyFailed(f"{err}; allow it longer ({TIMEOUT_ENV} sets the default limit, in seconds)") from None
        except WorkerFailed as err:
            raise VerifyFailed(str(err)) from None
        except OSError as err:  # the request could not be written: a full disk, say
            raise VerifyFailed(f"the {name} could not start: {err}") from None
        return result, time.monotonic() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
