"""Run engine workers in child processes: a fresh interpreter, its own environment, a time limit.

Some measurements cannot run in the caller's process: virtual CPU devices must be configured
(``XLA_FLAGS``) before JAX starts, and a concrete initialisation must not grow the memory of a
long-lived server. A worker is a module run as ``python -m MODULE REQUEST RESULT PROGRESS``: it
reads its request from the JSON file REQUEST, appends one stage name per line to PROGRESS as it
goes, and writes its result to the JSON file RESULT (``{"error": message}`` when it failed in a
way it could describe).

Each worker starts in a session of its own, so its whole process group (and anything it spawned)
can be ended at once. ``run_workers`` runs several together and ends every one of them as soon as
one fails, hangs past the time limit, or the caller is interrupted: no orphan keeps running.

The time limit is the work's, and it starts when every worker is up (has reported its first
stage). Starting, an interpreter importing JAX, Flax and Orbax, has an allowance of its own: it is
CPU work that P workers queue on a machine's few cores, and on a busy machine it alone took most
of a limit meant to catch a hang, so a healthy group of four was ended while it was importing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

# The folder that holds the dcsim package, so ``python -m dcsim...`` finds this same copy of it
# whatever the caller's working directory.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_POLL_SECONDS = 0.05
_STDERR_TAIL_CHARS = 600


# XLA's backend optimisation level for the workers' programs, unless the caller chose one. A
# worker's concrete init is one program run once, so its compile time is what the measurement
# waits for: ResNet-18's init compiled in 4.6 s at XLA's default level 3 and in 2.0 s at level 1,
# and ran as fast (0.11 s against 0.13 s) with the same values (the random bits do not depend on
# it). Level 0 compiled barely faster and ran six times slower, a cost that grows with the model.
OPT_LEVEL_FLAG = "--xla_backend_optimization_level"
WORKER_OPT_LEVEL = 1
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"

# XLA's persistent compilation cache (JAX's own, ``jax_compilation_cache_dir``) for the
# single-process checkpoint measurement: its init is one program that takes most of the command's
# time to compile (ResNet-18: 1.7 s of a 4.6 s command here) and that a team measures again and
# again (another dtype's save, the same model tomorrow); read back from the cache it loads in
# 0.25 s. Bounded (JAX evicts the least recently used entries past ``COMPILATION_CACHE_MAX_BYTES``),
# in the user's cache folder, or where ``DCSIM_COMPILATION_CACHE`` says; ``off`` turns it off, and
# a caller's own ``JAX_COMPILATION_CACHE_DIR`` is left as it is. Only programs that took a second
# or more to compile are kept (JAX's default), so small models leave nothing behind.
COMPILATION_CACHE_ENV = "DCSIM_COMPILATION_CACHE"
COMPILATION_CACHE_MAX_BYTES = 256 * 2**20
_CACHE_OFF = frozenset({"off", "0", "false", "no", "none"})


def compilation_cache_folder() -> Path | None:
    """Where the workers' compilation cache lives (``None``: off), from ``DCSIM_COMPILATION_CACHE``,
    else ``$XDG_CACHE_HOME/dcsim/xla`` (``~/.cache/dcsim/xla``)."""
    choice = os.environ.get(COMPILATION_CACHE_ENV, "").strip()
    if choice.lower() in _CACHE_OFF:
        return None
    if choice:
        return Path(choice).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "dcsim" / "xla"


def compilation_cache_env() -> dict[str, str]:
    """The environment that turns the compilation cache on in a worker, or ``{}`` when it is off,
    when the caller set JAX's own, or when its folder cannot be made (the measurement then simply
    compiles, as without a cache)."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return {}
    try:
        folder = compilation_cache_folder()
        if folder is None:
            return {}
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # compiled programs: the user's alone
        if not os.access(folder, os.W_OK | os.X_OK):
            return {}
    except (OSError, RuntimeError):  # RuntimeError: no home folder to expand ``~`` against
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(COMPILATION_CACHE_MAX_BYTES),
    }


def worker_xla_flags(flags_text: str, num_devices: int | None) -> str:
    """A worker's ``XLA_FLAGS``: the caller's, with our device count (``None``: none, the worker
    sets it itself before JAX's backend starts) and ``WORKER_OPT_LEVEL`` unless the caller set a
    level of their own."""
    flags = [flag for flag in flags_text.split() if DEVICE_COUNT_FLAG[2:] not in flag]
    if not any(flag.split("=")[0] == OPT_LEVEL_FLAG for flag in flags):
        flags.append(f"{OPT_LEVEL_FLAG}={WORKER_OPT_LEVEL}")
    if num_devices is not None:
        flags.append(f"{DEVICE_COUNT_FLAG}={num_devices}")
    return " ".join(flags)


def cpu_worker_env(num_devices: int | None, *, compilation_cache: bool = True) -> dict[str, str]:
    """The variables a worker on virtual CPU devices starts with: the caller's ``XLA_FLAGS`` with
    ours (``worker_xla_flags``; ``num_devices`` as there), JAX's CPU backend as the only one, and
    unless ``compilation_cache`` is false the compilation cache's (``compilation_cache_env``)."""
    env = {"XLA_FLAGS": worker_xla_flags(os.environ.get("XLA_FLAGS", ""), num_devices), "JAX_PLATFORMS": "cpu"}
    return env | compilation_cache_env() if compilation_cache else env


class WorkerFailed(RuntimeError):
    """A worker ended without a result: it raised, crashed, was killed or was ended by us.

    ``workers`` names the worker that failed (or, for a timeout, every one still running), so a
    caller running a group can say which member and what it was doing.
    """

    def __init__(self, message: str, *, workers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.workers = workers


class WorkerTimeout(WorkerFailed):
    """The time limit passed before every worker finished; all of them were ended.

    ``starting`` is true when it was the start-up allowance: some worker never reported a stage.
    """

    def __init__(self, message: str, *, workers: tuple[str, ...] = (), starting: bool = False) -> None:
        super().__init__(message, workers=workers)
        self.starting = starting


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerJob:
    """One worker to run.

    Attributes:
      name: how messages name it, e.g. ``"checkpoint worker"`` or ``"process 1 of 4"``.
      module: the module run with ``python -m``, e.g. ``"dcsim.checkpoint.child"``.
      args: its arguments before the three file paths, e.g. ``("single",)``.
      request: the JSON-ready request the worker reads.
      folder: an existing folder the caller owns and removes; the request, result, progress
        and stderr files live there, and the worker may write its own files inside it.
      env: variables set in the worker's environment on top of the caller's.
      started: a worker already running in ``folder`` that waits for its request file (see
        ``dcsim.checkpoint.prestart``); ``run_workers`` writes the request and adopts it instead of starting
        one (``env`` is then unused: its environment was fixed when it started), and ends its
        process group like any other's.
    """

    name: str
    module: str
    request: Mapping[str, Any]
    args: tuple[str, ...] = ()
    folder: Path
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    started: subprocess.Popen | None = None


def worker_command(module: str, folder: Path, args: Sequence[str] = ()) -> list[str]:
    """``python -m MODULE ARGS... REQUEST RESULT PROGRESS`` for a worker whose files are in ``folder``."""
    paths = _folder_paths(Path(folder))
    return [sys.executable, "-m", module, *args, *(str(paths[k]) for k in ("request", "result", "progress"))]


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with ``env`` on top and this copy of dcsim first on ``PYTHONPATH``."""
    merged = dict(os.environ) | dict(env)
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, merged.get("PYTHONPATH")]))
    return merged


def _folder_paths(folder: Path) -> dict[str, Path]:
    return {name: folder / f"{name}.json" for name in ("request", "result")} | {
        "progress": folder / "progress.txt",
        "stderr": folder / "stderr.txt",
    }


def _paths(job: WorkerJob) -> dict[str, Path]:
    return _folder_paths(Path(job.folder))


def write_whole(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON beside ``path``, then name it ``path``: a process waiting for the file
    (a worker for its request or preview, the parent for a result) never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(dict(data)))
    partial.replace(path)


_MESSAGE_CHARS = 400


def first_line(err: BaseException) -> str:
    """One line a person can read: the error's first line, without JAX's long tail."""
    text = (str(err).strip().splitlines() or [""])[0] or type(err).__name__
    return text[:_MESSAGE_CHARS]


def write_stage(progress: TextIO, name: str) -> None:
    """Announce the stage ``name`` in a child's progress file, at once: the parent shows it and
    counts the child up from its first stage."""
    progress.write(name + "\n")
    progress.flush()


def check_child_main(
    argv: Sequence[str], module: str, work: Callable[[dict[str, Any], Any], dict[str, Any]], failure: str
) -> int:
    """The body of an XLA check's child, ``python -m MODULE REQUEST RESULT PROGRESS``: ``work`` the
    request (announcing stages in the progress file) and write its result whole; an error becomes
    ``{"error": "FAILURE: first line"}``, its traceback on stderr after the result (on a full disk
    the message must fit, the traceback may not). Returns the exit code (0, or 1 with an error)."""
    if len(argv) != 3:
        raise SystemExit(f"usage: python -m {module} REQUEST RESULT PROGRESS")
    request_path, result_path, progress_path = (Path(arg) for arg in argv)
    details = ""
    try:
        with open(progress_path, "a") as progress:
            result = work(json.loads(request_path.read_text()), progress)
        code = 0
    except Exception as err:
        details = traceback.format_exc()
        result, code = {"error": f"{failure}: {first_line(err)}"}, 1
    write_whole(result_path, result)
    if details:
        with contextlib.suppress(OSError):
            sys.stderr.write(details)
            sys.stderr.flush()
    return code


# The last stages of every XLA check's child, announced by ``memory_analysis``.
ANALYSIS_STAGES = ("compiling", "done")


def memory_analysis(lowered: Any, progress: TextIO, what: str) -> dict[str, int]:
    """An XLA check's last stages: compile ``lowered`` (a ``jax.stages.Lowered``) and give XLA's
    memory analysis of one device, ``{"argument_bytes", "output_bytes", "temp_bytes",
    "alias_bytes"}``, announcing each of ``ANALYSIS_STAGES``; RuntimeError naming ``what`` if XLA
    gave none."""
    return compiled_memory_analysis(lowered, progress, what)[0]


def compiled_memory_analysis(lowered: Any, progress: TextIO, what: str) -> tuple[dict[str, int], Any]:
    """``memory_analysis`` and the compiled program (a ``jax.stages.Compiled``) it read, for a check
    that reads more of it (its optimised HLO)."""
    write_stage(progress, ANALYSIS_STAGES[0])
    compiled = lowered.compile()
    analysis = compiled.memory_analysis()
    if analysis is None:
        raise RuntimeError(f"XLA gave no memory analysis for {what}")
    write_stage(progress, ANALYSIS_STAGES[1])
    return {
        "argument_bytes": int(analysis.argument_size_in_bytes),
        "output_bytes": int(analysis.output_size_in_bytes),
        "temp_bytes": int(analysis.temp_size_in_bytes),
        "alias_bytes": int(analysis.alias_size_in_bytes),
    }, compiled


def exit_child(code: int) -> None:
    """End a child whose result is written, skipping the interpreter's teardown of JAX, which the
    parent would wait for."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def end_group(process: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group, then reap the worker."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _stderr_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][-_STDERR_TAIL_CHARS:] if lines else ""


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (from outside this program, e.g. by the system when memory ran out)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


def _read_result(job: WorkerJob, code: int) -> dict[str, Any]:
    paths = _paths(job)
    try:
        result = json.loads(paths["result"].read_text())
    except (OSError, ValueError):
        result = None
    if isinstance(result, dict) and "error" in result:
        raise WorkerFailed(f"the {job.name} failed: {result['error']}", workers=(job.name,))
    if code == 0 and isinstance(result, dict):
        return result
    detail = _stderr_tail(paths["stderr"])
    raise WorkerFailed(
        f"the {job.name} {_exit_reason(code)} before it wrote a result" + (f": {detail}" if detail else ""),
        workers=(job.name,),
    )


def _read_progress(path: Path) -> list[str]:
    """The stages a worker has finished writing: a line still being written is not one yet."""
    try:
        text = path.read_text()
    except OSError:
        return []
    return text[: text.rfind("\n") + 1].split()


def run_workers(
    jobs: Sequence[WorkerJob],
    *,
    timeout_seconds: float,
    start_seconds: float | None = None,
    on_progress: Callable[[str, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every job at once and return their results in order.

    Raises ``WorkerTimeout`` if some worker has not reported its first stage within
    ``start_seconds`` (``timeout_seconds`` unless given), or if they have not all finished within
    ``timeout_seconds`` of the last one reporting it; and ``WorkerFailed`` as soon as any one
    fails. Either way every worker's process group is ended before the error leaves.
    ``on_progress(job_name, stage)`` is called from this thread for each stage a worker reports.
    Files the workers wrote stay in their folders for the caller to remove.
    """
    processes: list[subprocess.Popen] = []
    seen = [0] * len(jobs)
    start_seconds = timeout_seconds if start_seconds is None else start_seconds
    start_deadline = time.monotonic() + start_seconds
    deadline: float | None = None  # set when every worker is up
    try:
        for job in jobs:
            paths = _paths(job)
            if job.started is not None:
                processes.append(job.started)  # ended in `finally` even if the request cannot be written
                write_whole(paths["request"], job.request)
                continue
            write_whole(paths["request"], job.request)
            with open(paths["stderr"], "wb") as stderr:
                processes.append(
                    subprocess.Popen(
                        worker_command(job.module, job.folder, job.args),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        cwd=job.folder,
                        env=worker_environment(job.env),
                        start_new_session=True,
                    )
                )
        results: list[dict[str, Any] | None] = [None] * len(jobs)

        def report_progress() -> None:
            for index, job in enumerate(jobs):
                stages = _read_progress(_paths(job)["progress"])
                if on_progress is not None:
                    for stage in stages[seen[index] :]:
                        on_progress(job.name, stage)
                seen[index] = len(stages)

        while True:
            report_progress()
            codes = [process.poll() for process in processes]
            # Workers that depend on each other fail together: when one is killed, its peers soon
            # report a lost connection. A worker killed by a signal is the cause, so it is read first.
            killed = {index for index, code in enumerate(codes) if code is not None and code < 0}
            for index in sorted(range(len(jobs)), key=lambda i: i not in killed):
                code = codes[index]
                if code is not None and results[index] is None:
                    results[index] = _read_result(jobs[index], code)
            if all(result is not None for result in results):
                report_progress()  # the stages written between this round's read and the exits
                return [result for result in results if result is not None]
            now = time.monotonic()
            if deadline is None and all(
                count or result is not None for count, result in zip(seen, results, strict=True)
            ):
                deadline = now + timeout_seconds
            if deadline is None and now > start_deadline:
                late = tuple(job.name for job, count in zip(jobs, seen, strict=True) if not count)
                raise WorkerTimeout(
                    f"the time limit of {start_seconds:g} s passed before the {', '.join(late)} had started (it "
                    "starts Python and imports JAX first, which a busy machine slows); it was ended",
                    workers=late,
                    starting=True,
                )
            if deadline is not None and now > deadline:
                late = tuple(job.name for job, result in zip(jobs, results, strict=True) if result is None)
                raise WorkerTimeout(
                    f"the time limit of {timeout_seconds:g} s passed before the {', '.join(late)} finished; "
                    "it was ended",
                    workers=late,
                )
            time.sleep(_POLL_SECONDS)
    finally:
        for process in processes:
            end_group(process)
