"""A checkpoint saved by several processes at once, as several hosts save one, run on this machine.

Real distributed checkpoints are written by one process per host, each holding only its own shards,
coordinated by JAX's distributed runtime and Orbax. This module runs that very engine as P child
processes (``dcsim.checkpoint.child group``, running ``multiprocess_worker``) on loopback: each
joins ``jax.distributed`` with a coordinator on 127.0.0.1 and a port chosen for the run, holds N/P
of the mesh's N virtual CPU devices, and saves into one temporary folder; then each restores and
compares its own shards.

It reuses the single-process measurement's pieces: ``dcsim.checkpoint`` plans (validation and the
parameter ceiling, for the group's whole mesh), builds the group's totals as a ``CheckpointReport``
and explains them; ``dcsim.checkpoint.workers`` runs the group, so a failure or a hang of any one process
ends every process at once. The temporary folder is always removed. A server wraps a group in the
same ``MeasurementLock`` as a single measurement: one at a time, whatever its size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dcsim.checkpoint import measurement, prestart
from dcsim.checkpoint.measurement import (
    DEFAULT_OPTIONS,
    CheckpointFailed,
    CheckpointPlan,
    CheckpointReport,
    CheckpointTimeout,
    MeasurementOptions,
    plan_checkpoint,
)
from dcsim.checkpoint.workers import WorkerFailed, WorkerJob, WorkerTimeout, run_workers
from dcsim.inputs import number_from_text, show
from dcsim.model.config import ModelConfig
from dcsim.report import units
from dcsim.sharding.layout import MeshSpec

# Each process imports JAX, Flax and Orbax (about 300 MB before any work): a bound on the group.
MAX_PROCESSES = 8
SWEEP_PROCESSES = (1, 2, 4)
STAGES = ("connecting", *measurement.STAGES)
# A port taken between the probe and the coordinator's bind: try again on a fresh one this often.
PORT_ATTEMPTS = 3
CONNECT_TIMEOUT_SECONDS = 60  # at least; see ``_jobs``
PORT_TAKEN = "coordinator port taken"  # dcsim.checkpoint.multiprocess_worker.PORT_TAKEN, without importing JAX

MULTIHOST_NOTE = (
    "What this means for a real multi-host save: each host writes only the shards its devices hold, "
    "into its own ocdbt.process_N folder, at the same time as the others, and process 0 commits the "
    "checkpoint once every host has finished; the files follow the processes, not the device shards. "
    "What it cannot show: the network and storage bandwidth of a real cluster. Here every process "
    "runs on this one machine, shares its disk and its CPU cores (more processes than cores compete "
    "for the same CPUs), and talks to the others over loopback, so save times here show the "
    "coordination cost, not how a cluster's save would scale."
)


def check_processes(value: Any, name: str = "processes") -> int:
    """A number of processes: an integer from 1 to ``MAX_PROCESSES``."""
    rule = f"an integer from 1 to {MAX_PROCESSES}"
    shown = value
    if isinstance(value, str):
        value = number_from_text(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
    if not 1 <= value <= MAX_PROCESSES:
        raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
    return value


def parse_processes_list(text: str, name: str = "processes_sweep") -> tuple[int, ...]:
    """``"1,2,4"``: distinct process counts, each from 1 to ``MAX_PROCESSES``, in rising order."""
    items = [item.strip() for item in str(text).split(",")]
    if not items or any(not item for item in items):
        raise ValueError(f"`{name}` must be process counts separated by commas, e.g. 1,2,4, got {show(text)}")
    counts = sorted({check_processes(item, name) for item in items})
    return tuple(counts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiprocessPlan:
    """A validated group measurement: the single-process plan for the whole mesh, and P."""

    checkpoint: CheckpointPlan
    num_processes: int

    @property
    def devices_per_process(self) -> int:
        return self.checkpoint.mesh.num_devices // self.num_processes


def plan_multiprocess(
    config: ModelConfig, options: MeasurementOptions = DEFAULT_OPTIONS, *, processes: int
) -> MultiprocessPlan:
    """Validate a group measurement, allocating nothing.

    Everything ``plan_checkpoint`` checks, for the whole mesh (the ceiling bounds the values all
    devices of all processes hold together); then P from 1 to ``MAX_PROCESSES``, and a mesh whose
    device count P divides, so every process holds the same number of devices.
    """
    num_processes = check_processes(processes)
    plan = plan_checkpoint(config, options)
    check_divides(plan.mesh, num_processes)
    return MultiprocessPlan(checkpoint=plan, num_processes=num_processes)


def check_divides(mesh: MeshSpec, num_processes: int) -> None:
    """Each process must hold the same number of the mesh's devices."""
    if mesh.num_devices % num_processes:
        raise ValueError(
            f"the mesh's device count must be a multiple of the number of processes, so that each process "
            f"holds the same number of devices: mesh {mesh.text} has {mesh.num_devices:,} device(s), "
            f"not a multiple of {num_processes} processes"
        )


# --- where the files came from -------------------------------------------------------------------

_OWN_FOLDER = re.compile(r"^(?:ocdbt\.process_(\d+)(?:/|$)|array_metadatas/process_(\d+)$)")


def file_process(path: str) -> int:
    """The process that wrote a file of the checkpoint, from its path.

    Orbax gives each process its own ``ocdbt.process_<id>/`` folder (its shards' data and index)
    and ``array_metadatas/process_<id>``; everything else (the tree metadata, the merged index,
    the commit marker) is written by process 0, which commits the save.
    """
    match = _OWN_FOLDER.match(path)
    if match is None:
        return 0
    return int(match.group(1) or match.group(2))


def file_place(path: str) -> str:
    """Where a file sits: its ``ocdbt.process_<id>`` folder, ``array_metadatas``, or the top level."""
    first = path.split("/")[0]
    if first.startswith("ocdbt.process_") or first == "array_metadatas":
        return first + "/"
    return "top level"


# --- the report -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessReport:
    """What one process of the group held, wrote and spent.

    Attributes:
      process_id: its ``jax.process_index()``; process 0 runs the coordinator and commits.
      num_devices: the virtual CPU devices it held (N/P).
      device_bytes: the bytes its devices held (its shards, replicas included).
      num_files, num_bytes: the files it wrote (by ``file_process``) and their bytes.
      init_seconds, save_seconds, restore_seconds: its own concrete init, save until committed
        (Orbax waits for every process before it commits) and restore.
      restore_verified: its shards came back bit for bit.
      baseline_rss_bytes, peak_rss_bytes: its peak resident memory (``VmHWM``) once connected,
        before any work, and over the whole measurement.
    """

    process_id: int
    num_devices: int
    device_bytes: int
    num_files: int
    num_bytes: int
    init_seconds: float
    save_seconds: float
    restore_seconds: float
    restore_verified: bool
    baseline_rss_bytes: int
    peak_rss_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiprocessReport:
    """A checkpoint saved by a group of processes: the totals, each process, and the machine.

    Attributes:
      checkpoint: the group's totals in the single-process report's form: every file, disk
        bytes, the raw payload, ``save_seconds``/``restore_seconds`` as the group's wall time
        (first process starting to last finishing), ``restore_verified`` on every process, and
        the peak memory of the process that peaked highest.
      num_processes: P.
      processes: one ``ProcessReport`` per process, by process id.
      cpu_count, load_average: this machine's cores and its 1-minute load average when the
        group finished: the processes share these cores.
    """

    checkpoint: CheckpointReport
    num_processes: int
    processes: tuple[ProcessReport, ...]
    cpu_count: int
    load_average: float

    @property
    def devices_per_process(self) -> int:
        return self.checkpoint.num_devices // self.num_processes

    @property
    def total_peak_rss_bytes(self) -> int:
        """The processes' peaks added up: at most this much memory was in use at once."""
        return sum(process.peak_rss_bytes for process in self.processes)


def free_loopback_port() -> int:
    """A port nobody listens on at 127.0.0.1 right now (it may be taken before it is used)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _group_report(plan: MultiprocessPlan, results: list[dict[str, Any]]) -> MultiprocessReport:
    results = sorted(results, key=lambda result: int(result["process_id"]))
    if [int(result["process_id"]) for result in results] != list(range(plan.num_processes)):
        raise CheckpointFailed("the processes' results do not name processes 0 to P-1 once each")
    files = results[0]["files"]
    highest = max(results, key=lambda result: int(result["peak_rss_bytes"]))
    totals = measurement._report(
        plan.checkpoint,
        {
            "files": files,
            "raw_payload_bytes": results[0]["raw_payload_bytes"],
            "num_devices": results[0]["num_devices"],
            "device_bytes": sum(int(result["device_bytes"]) for result in results),
            "init_seconds": max(float(result["init_seconds"]) for result in results),
            "save_seconds": max(r["save_ended"] for r in results) - min(r["save_started"] for r in results),
            "restore_seconds": max(r["restore_ended"] for r in results) - min(r["restore_started"] for r in results),
            "restore_verified": all(bool(result["restore_verified"]) for result in results),
            "baseline_rss_bytes": highest["baseline_rss_bytes"],
            "peak_rss_bytes": highest["peak_rss_bytes"],
            "peak_rss_before_stage": {
                stage: peak for stage, peak in highest["peak_rss_before_stage"].items() if stage in measurement.STAGES
            },
            "versions": results[0]["versions"],
        },
    )
    processes = []
    for result in results:
        process_id = int(result["process_id"])
        own = [file for file in totals.files if file_process(file.path) == process_id]
        processes.append(
            ProcessReport(
                process_id=process_id,
                num_devices=int(result["num_local_devices"]),
                device_bytes=int(result["device_bytes"]),
                num_files=len(own),
                num_bytes=sum(file.num_bytes for file in own),
                init_seconds=float(result["init_seconds"]),
                save_seconds=float(result["save_seconds"]),
                restore_seconds=float(result["restore_seconds"]),
                restore_verified=bool(result["restore_verified"]),
                baseline_rss_bytes=int(result["baseline_rss_bytes"]),
                peak_rss_bytes=int(result["peak_rss_bytes"]),
            )
        )
    return MultiprocessReport(
        checkpoint=totals,
        num_processes=plan.num_processes,
        processes=tuple(processes),
        cpu_count=os.cpu_count() or 1,
        load_average=os.getloadavg()[0],
    )


def _process_name(process_id: int, num_processes: int) -> str:
    return f"process {process_id} of {num_processes}"


def _jobs(plan: MultiprocessPlan, folder: Path, port: int) -> list[WorkerJob]:
    base = plan.checkpoint
    request = {
        "config": base.config.to_dict(),
        "dtype": base.dtype,
        "mesh": [list(axis) for axis in base.mesh.axes],
        "specs": {path: measurement._spec_json(spec) for path, spec in base.specs.items()},
        "num_processes": plan.num_processes,
        "port": port,
        "checkpoint": str(folder / "checkpoint"),
        # A process up early waits here for the others to finish starting: never give up before the
        # parent would (its start-up allowance, then the group's limit; it ends a hung group itself).
        "connect_timeout_seconds": int(max(CONNECT_TIMEOUT_SECONDS, 2 * base.timeout_seconds)),
    }
    jobs = []
    for process_id in range(plan.num_processes):
        own = folder / f"process_{process_id}"
        own.mkdir()
        jobs.append(
            WorkerJob(
                name=_process_name(process_id, plan.num_processes),
                module=prestart.CHILD_MODULE,
                args=("group",),
                request=request | {"process_id": process_id},
                folder=own,
                env=measurement._worker_env(plan.devices_per_process),
            )
        )
    return jobs


def run_multiprocess(
    plan: MultiprocessPlan, *, on_progress: Callable[[int, str], None] | None = None
) -> MultiprocessReport:
    """Run a planned group: P processes at once; ``on_progress(process_id, stage)`` sees ``STAGES``.

    Raises ``CheckpointTimeout`` past the plan's time limit (for the whole group) and
    ``CheckpointFailed`` if any process fails, naming the process and what it was doing; every
    process of the group is ended and the temporary folder removed either way.
    """
    root = Path(tempfile.mkdtemp(prefix="dcsim-multiprocess-"))
    names = {_process_name(i, plan.num_processes): i for i in range(plan.num_processes)}
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            folder = root / f"attempt_{attempt}"
            folder.mkdir()
            stages: dict[str, str] = {}

            def progress(name: str, stage: str, stages: dict[str, str] = stages) -> None:
                stages[name] = stage
                if on_progress is not None:
                    on_progress(names[name], stage)

            try:
                results = run_workers(
                    _jobs(plan, folder, free_loopback_port()),
                    timeout_seconds=plan.checkpoint.timeout_seconds,
                    on_progress=progress,
                )
            except WorkerTimeout as err:
                doing = ", ".join(f"{name} was {_doing(stages.get(name))}" for name in err.workers)
                limit = f"{plan.checkpoint.timeout_seconds:g} s for "
                limit += (
                    "starting the group (each process imports JAX, Flax and Orbax first)"
                    if err.starting
                    else "the group"
                )
                raise CheckpointTimeout(
                    f"the time limit of {limit} passed ({doing}); every process of the group was ended and the "
                    "temporary checkpoint was removed"
                ) from None
            except WorkerFailed as err:
                if _port_taken(err, folder, stages, plan.num_processes):
                    if attempt < PORT_ATTEMPTS:
                        shutil.rmtree(folder, ignore_errors=True)
                        continue
                    raise CheckpointFailed(
                        f"process 0 could not start the coordinator: each of {PORT_ATTEMPTS} free ports chosen on "
                        "127.0.0.1 was taken by another program before it could listen; every process of the group "
                        "was ended and the temporary checkpoint was removed"
                    ) from None
                name = err.workers[0] if err.workers else "group"
                raise CheckpointFailed(
                    f"{err} (while {_doing(stages.get(name))}); every process of the group was ended and the "
                    "temporary checkpoint was removed"
                ) from None
            return _group_report(plan, results)
        raise AssertionError("unreachable: the last attempt returns or raises")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _port_taken(err: WorkerFailed, folder: Path, stages: dict[str, str], num_processes: int) -> bool:
    """Whether process 0 failed because its coordinator could not listen on the port chosen.

    It says so in its result (``PORT_TAKEN``) when it can; gRPC's failed bind sometimes crashes
    the process before it can, so its log is read too.
    """
    name = _process_name(0, num_processes)
    if name not in err.workers or stages.get(name) != "connecting":
        return False
    if PORT_TAKEN in str(err):
        return True
    try:
        with open(folder / "process_0" / "stderr.txt", errors="replace") as log:
            return "Failed to add port to server" in log.read(1 << 20)
    except OSError:
        return False


def _doing(stage: str | None) -> str:
    return "starting" if stage is None else stage


def measure_multiprocess(
    config: ModelConfig,
    options: MeasurementOptions = DEFAULT_OPTIONS,
    *,
    processes: int,
    on_progress: Callable[[int, str], None] | None = None,
) -> MultiprocessReport:
    """Plan and run one group: ``run_multiprocess(plan_multiprocess(...))``."""
    plan = plan_multiprocess(config, options, processes=processes)
    return run_multiprocess(plan, on_progress=on_progress)


def plan_sweep(
    config: ModelConfig, options: MeasurementOptions = DEFAULT_OPTIONS, *, processes: Sequence[int] = SWEEP_PROCESSES
) -> tuple[MultiprocessPlan, ...]:
    """One plan per process count, all validated before any runs (the mesh must suit every P)."""
    if not processes:
        raise ValueError("a sweep needs at least one process count")
    return tuple(plan_multiprocess(config, options, processes=count) for count in processes)


def run_sweep(
    plans: Sequence[MultiprocessPlan], *, on_progress: Callable[[int, int, str], None] | None = None
) -> tuple[MultiprocessReport, ...]:
    """Run the plans one after the other (never two groups at once); ``on_progress(P, process_id, stage)``."""
    reports = []
    for plan in plans:
        report_progress = None
        if on_progress is not None:
            report_progress = lambda process_id, stage, count=plan.num_processes: on_progress(count, process_id, stage)  # noqa: E731
        reports.append(run_multiprocess(plan, on_progress=report_progress))
    return tuple(reports)


# --- what the front ends show ---------------------------------------------------------------------


def processes_frame(report: MultiprocessReport) -> pd.DataFrame:
    """One row per process: devices, bytes held, files and bytes written, times, peak memory."""
    rows = report.processes
    return pd.DataFrame(
        {
            "process": pd.array([row.process_id for row in rows], dtype="int64"),
            "num_devices": pd.array([row.num_devices for row in rows], dtype="int64"),
            "device_bytes": pd.array([row.device_bytes for row in rows], dtype="int64"),
            "num_files": pd.array([row.num_files for row in rows], dtype="int64"),
            "num_bytes": pd.array([row.num_bytes for row in rows], dtype="int64"),
            "save_seconds": [row.save_seconds for row in rows],
            "restore_seconds": [row.restore_seconds for row in rows],
            "peak_rss_bytes": pd.array([row.peak_rss_bytes for row in rows], dtype="int64"),
            "restore_verified": [row.restore_verified for row in rows],
        }
    )


def file_places_frame(report: MultiprocessReport) -> pd.DataFrame:
    """The files grouped by where they sit (each ``ocdbt.process_<id>/``, ``array_metadatas/``,
    the top level) and by the process that wrote them."""
    groups: dict[tuple[int, str], list[int]] = {}
    for file in report.checkpoint.files:
        groups.setdefault((file_process(file.path), file_place(file.path)), []).append(file.num_bytes)
    order = {"array_metadatas/": 1, "top level": 2}  # each process's own ocdbt folder first
    keys = sorted(groups, key=lambda key: (key[0], order.get(key[1], 0), key[1]))
    return pd.DataFrame(
        {
            "process": pd.array([process for process, _ in keys], dtype="int64"),
            "place": [place for _, place in keys],
            "num_files": pd.array([len(groups[key]) for key in keys], dtype="int64"),
            "num_bytes": pd.array([sum(groups[key]) for key in keys], dtype="int64"),
        }
    )


def sweep_frame(reports: Sequence[MultiprocessReport]) -> pd.DataFrame:
    """One row per process count: the group's totals and the largest per-process figures."""

    def ints(values: Any) -> Any:
        return pd.array(list(values), dtype="int64")

    return pd.DataFrame(
        {
            "num_processes": pd.array([r.num_processes for r in reports], dtype="int64"),
            "devices_per_process": pd.array([r.devices_per_process for r in reports], dtype="int64"),
            "num_files": pd.array([r.checkpoint.num_files for r in reports], dtype="int64"),
            "disk_bytes": pd.array([r.checkpoint.disk_bytes for r in reports], dtype="int64"),
            "raw_payload_bytes": pd.array([r.checkpoint.raw_payload_bytes for r in reports], dtype="int64"),
            "save_seconds": [r.checkpoint.save_seconds for r in reports],
            "restore_seconds": [r.checkpoint.restore_seconds for r in reports],
            "max_process_bytes": pd.array([max(p.num_bytes for p in r.processes) for r in reports], dtype="int64"),
            "max_peak_rss_bytes": pd.array(
                [max(p.peak_rss_bytes for p in r.processes) for r in reports], dtype="int64"
            ),
            "total_peak_rss_bytes": pd.array([r.total_peak_rss_bytes for r in reports], dtype="int64"),
            "restore_verified": [r.checkpoint.restore_verified for r in reports],
        }
    )


def sweep_processes_frame(reports: Sequence[MultiprocessReport]) -> pd.DataFrame:
    """One row per process of every run: the run's P, the process, its bytes, memory and times."""
    rows = [(r.num_processes, p) for r in reports for p in r.processes]
    return pd.DataFrame(
        {
            "num_processes": pd.array([count for count, _ in rows], dtype="int64"),
            "process": pd.array([p.process_id for _, p in rows], dtype="int64"),
            "num_bytes": pd.array([p.num_bytes for _, p in rows], dtype="int64"),
            "peak_rss_bytes": pd.array([p.peak_rss_bytes for _, p in rows], dtype="int64"),
            "save_seconds": [p.save_seconds for _, p in rows],
            "restore_seconds": [p.restore_seconds for _, p in rows],
        }
    )


def explain_processes(report: MultiprocessReport) -> tuple[str, ...]:
    """What the group did, read off this measurement: who wrote what, the time, the memory."""
    places = file_places_frame(report)
    own = places[places["place"].str.startswith("ocdbt.process_")]
    top = places[places["place"] == "top level"]
    heaviest = max(report.processes, key=lambda p: p.num_bytes)
    lightest = min(report.processes, key=lambda p: p.num_bytes)
    lines = [
        f"Files: {len(own)} ocdbt.process_* folder(s) for {report.num_processes} process(es): each process wrote "
        "its own (its shards' data and their index) and its own array_metadatas/process_N; process 0 also wrote "
        f"the {int(top['num_files'].sum())} top-level files ({int(top['num_bytes'].sum()):,} bytes: tree metadata, "
        "merged index, commit marker) once every process had finished.",
        f"Bytes per process: process {heaviest.process_id} wrote the most ({heaviest.num_bytes:,} bytes), process "
        f"{lightest.process_id} the least ({lightest.num_bytes:,} bytes); a process writes only shards it holds, "
        f"and each value is written once, so the group wrote {report.checkpoint.disk_bytes:,} bytes for a raw "
        f"payload of {report.checkpoint.raw_payload_bytes:,}, as one process would.",
        f"Time: the group's save took {report.checkpoint.save_seconds:.2f} s from the first process starting to the "
        f"last finishing, its restore {report.checkpoint.restore_seconds:.2f} s; {report.num_processes} process(es) "
        f"shared this machine's {report.cpu_count} CPU core(s) (load average {report.load_average:.2f}).",
        f"Memory: each process peaked at up to {units.bytes_exact(max(p.peak_rss_bytes for p in report.processes))}, "
        f"{units.bytes_exact(report.total_peak_rss_bytes)} together; each pays its own interpreter, JAX and Orbax "
        f"(about {units.bytes_exact(min(p.baseline_rss_bytes for p in report.processes))} before any work).",
    ]
    data = {int(row.process): int(row.num_bytes) for row in own.itertuples()}
    split = bool(data) and max(data.values()) < 0.75 * sum(data.values())
    if report.num_processes > 1 and report.checkpoint.strategy == "replicated" and split:
        lines.insert(
            2,
            "Replicas: every process held every array whole, yet none wrote all of it: Orbax split the "
            "writing of each replicated array among the processes holding copies ("
            + ", ".join(f"process {process} {size:,} bytes" for process, size in sorted(data.items()))
            + " of array data).",
        )
    return tuple(lines)


def multiprocess_record(report: MultiprocessReport) -> dict[str, Any]:
    """The group measurement as one JSON-ready object: the single-process record for the totals,
    plus the processes, the files by place and the machine (keys in docs/checkpoint.md)."""
    return {
        **measurement.checkpoint_record(report.checkpoint),
        "num_processes": report.num_processes,
        "devices_per_process": report.devices_per_process,
        "save_wall_seconds": report.checkpoint.save_seconds,
        "restore_wall_seconds": report.checkpoint.restore_seconds,
        "total_peak_rss_bytes": report.total_peak_rss_bytes,
        "processes": [dataclasses.asdict(process) for process in report.processes],
        "file_places": file_places_frame(report).to_dict(orient="records"),
        "process_explanation": list(explain_processes(report)),
        "multihost_note": MULTIHOST_NOTE,
        "cpu_count": report.cpu_count,
        "load_average": report.load_average,
    }
