"""A checkpoint saved by several processes at once, as several hosts save one, run on this machine.

Real distributed checkpoints are written by one process per host, each holding only its own shards,
coordinated by JAX's distributed runtime and Orbax. This module runs that very engine as P child
processes (``dcsim.checkpoint.child group``, running ``multiprocess_worker``) on loopback: each
joins ``jax.distributed`` with a coordinator on 127.0.0.1 and a port chosen for the run, holds N/P
of the mesh's N virtual CPU devices, and saves into one temporary folder; then each restores and
compares its own shards.

It reuses the single-process measurement's pieces: ``dcsim.checkpoint`` plans (validation and the
parameter ceiling, for the group's whole mesh), builds the group's totals as a ``CheckpointReport``
and explains them; ``dcsim.runtime.workers`` runs the group, so a failure or a hang of any one process
ends every process at once. The temporary folder is always removed. A server wraps a group in the
same ``MeasurementLock`` as a single measurement: one at a time, whatever its size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dcsim.checkpoint import measurement, prestart
from dcsim.checkpoint.measurement import (
    DEFAULT_OPTIONS,
    CheckpointFailed,
    CheckpointPlan,
    CheckpointTimeout,
    MeasurementOptions,
    plan_checkpoint,
)
from dcsim.checkpoint.results import MultiprocessReport, ProcessReport, file_process
from dcsim.inputs import number_from_text, show
from dcsim.model.config import ModelConfig
from dcsim.quantities import units
from dcsim.runtime.workers import WorkerFailed, WorkerJob, WorkerTimeout, cpu_worker_env, run_workers
from dcsim.sharding.meshes import MeshSpec
from dcsim.sharding.wire import mesh_json, spec_json

# Each process imports JAX, Flax and Orbax (about 300 MB before any work): a bound on the group.
MAX_PROCESSES = 8
SWEEP_PROCESSES = (1, 2, 4)
STAGES = ("connecting", *measurement.STAGES)
# A port taken between the probe and the coordinator's bind: try again on a fresh one this often.
PORT_ATTEMPTS = 3
CONNECT_TIMEOUT_SECONDS = 60  # at least; see ``_jobs``
PORT_TAKEN = "coordinator port taken"  # dcsim.checkpoint.multiprocess_worker.PORT_TAKEN, without importing JAX


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


# The Orbax writing policies a group can save under (``ArrayHandler``'s ``use_replica_parallel``
# False or True); ``dcsim.checkpoint.plan.writers`` predicts what each process writes under them.
ORBAX_POLICIES = ("single-replica", "replica-parallel")


def check_orbax_policy(value: Any, field: str = "--policy") -> str:
    if not isinstance(value, str) or value not in ORBAX_POLICIES:
        raise ValueError(
            f"{field} must be one of {', '.join(ORBAX_POLICIES)} (Orbax's ArrayHandler), got {show(value)}"
        )
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiprocessPlan:
    """A validated group measurement: the single-process plan for the whole mesh, and P.

    With a ``policy`` the group saves under it (zstd off) and ``predicted_bytes`` holds each
    process's array bytes as predicted before the save (``dcsim.checkpoint.plan.verify`` fills
    both), so the report can compare them with what each process stored.
    """

    checkpoint: CheckpointPlan
    num_processes: int
    policy: str | None = None
    predicted_bytes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.policy is not None:
            check_orbax_policy(self.policy)
        if self.predicted_bytes is not None and len(self.predicted_bytes) != self.num_processes:
            raise ValueError(
                f"a prediction names {units.many(len(self.predicted_bytes), 'process', 'processes')} for a group "
                f"of {self.num_processes}"
            )

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
            f"holds the same number of devices: mesh {mesh.text} has {units.many(mesh.num_devices, 'device')}, "
            f"not a multiple of {num_processes} processes"
        )


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
        chunks = result.get("chunk_bytes")
        processes.append(
            ProcessReport(
                process_id=process_id,
                num_devices=int(result["num_local_devices"]),
                device_bytes=int(result["device_bytes"]),
                num_files=len(own),
                num_bytes=sum(file.num_bytes for file in own),
                chunk_bytes=None if chunks is None else int(chunks),
                predicted_bytes=None if plan.predicted_bytes is None else plan.predicted_bytes[process_id],
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
        policy=plan.policy,
    )


def _process_name(process_id: int, num_processes: int) -> str:
    return f"process {process_id} of {num_processes}"


def _jobs(plan: MultiprocessPlan, folder: Path, port: int) -> list[WorkerJob]:
    base = plan.checkpoint
    request = {
        "config": base.config.to_dict(),
        "dtype": base.dtype,
        "mesh": mesh_json(base.mesh),
        "specs": {path: spec_json(spec) for path, spec in base.specs.items()},
        "num_processes": plan.num_processes,
        "policy": plan.policy,
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
                env=cpu_worker_env(plan.devices_per_process, compilation_cache=False),
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
