"""The plan checked against a real Orbax save: each process's bytes predicted before it saves.

``checkpoint --processes P --policy POLICY`` saves the model's parameters from P processes on JAX's
distributed runtime (``dcsim.checkpoint.multiprocess``), through Orbax's ``ArrayHandler`` with
``use_replica_parallel`` set by the policy and zstd off. Before any process starts, this module
lays the same parameters out as ``memory`` does (``compute_memory``'s params rows, in the
measurement's dtype), has the plan's writers (``plan_writes``) say which device writes which
bytes, and sums them per process as the plan sums them per host: a process is a host of N/P
devices in mesh order. Each process then reads back the chunks it stored in its own OCDBT
database; the report compares the two to the byte, and says what the files add beyond them.

The save's time is predicted too, after a sweep: the plan's storage model (``storage.save_time``)
given the bytes each process wrote and this disk's bandwidth and cost a file as measured here
(``dcsim.checkpoint.disk``), shown beside the measured time with the ratio and what the model
leaves out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from dcsim.checkpoint.disk import DiskProbe
from dcsim.checkpoint.multiprocess import MultiprocessPlan, check_orbax_policy
from dcsim.checkpoint.plan.placement import Hosts
from dcsim.checkpoint.plan.storage import Storage, save_time
from dcsim.checkpoint.plan.writers import plan_writes
from dcsim.checkpoint.results import MultiprocessReport
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.quantities import units
from dcsim.sharding.meshes import Rule


def predict_process_bytes(plan: MultiprocessPlan, policy: str, rules: Sequence[Rule] = ()) -> tuple[int, ...]:
    """The array bytes each process of ``plan``'s group writes under ``policy``, by the plan's engine.

    ``rules``: the measurement's own (``MeasurementOptions.rules``), so the layout is the one the
    processes will build.
    """
    check_orbax_policy(policy)
    base = plan.checkpoint
    # ZeRO-3 lays the params out with the strategy; only the params rows are kept (the measurement
    # saves the parameters alone), in the dtype the processes store.
    memory = compute_memory(
        base.report, base.mesh, base.strategy, tuple(rules), Training.stage(3, param_dtype=base.dtype), by_stage=False
    )
    params = [row for row in memory.arrays if row.part == "params"]
    laid = {row.path: row.spec for row in params}
    if laid != base.specs:
        raise RuntimeError("the plan's layout and the measurement's differ: the prediction would be of another save")
    writes = plan_writes(params, base.mesh, policy)
    return writes.host_bytes(Hosts(base.mesh, plan.devices_per_process))


def with_prediction(plan: MultiprocessPlan, policy: str, rules: Sequence[Rule] = ()) -> MultiprocessPlan:
    """``plan`` saving under ``policy``, with each process's bytes predicted."""
    return dataclasses.replace(plan, policy=policy, predicted_bytes=predict_process_bytes(plan, policy, rules))


# --- the save's time on this machine (issue 44, section 4) -------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepTime:
    """One run of a sweep: the storage model's save time from this disk's probe (an estimate, from
    the fastest try's bandwidth and file cost to the slowest's) beside the save time measured."""

    num_processes: int
    predicted_seconds: float
    predicted_seconds_high: float
    measured_seconds: float
    limit: str

    @property
    def ratio(self) -> float:
        """Measured over predicted (the fastest try's): how much the model leaves out."""
        return self.measured_seconds / self.predicted_seconds if self.predicted_seconds > 0 else math.inf

    def record(self) -> dict[str, object]:
        """The run as JSON: its fields, and the ratio."""
        return dataclasses.asdict(self) | {"ratio": self.ratio}


def disk_storage(probe: DiskProbe, *, fastest: bool) -> Storage:
    """This disk as the plan's storage: one disk that every process shares, so a process's own
    bandwidth and the aggregate are the same measured figure, and the measured cost a file."""
    rate = max(probe.bytes_per_s) if fastest else min(probe.bytes_per_s)
    cost = min(probe.file_micros) if fastest else max(probe.file_micros)
    return Storage(
        name="this-disk",
        title="this machine's disk, measured",
        host_bytes_per_s=rate,
        aggregate_bytes_per_s=rate,
        file_micros=cost,
        file_micros_high=cost,
        source=f"measured here: {probe.num_bytes:,} bytes written and synced in {probe.folder}",
    )


def predict_sweep_times(reports: Sequence[MultiprocessReport], probe: DiskProbe) -> tuple[SweepTime, ...]:
    """Each run's save time by the plan's storage model, from the bytes each process wrote (its
    files) and this disk's probe."""
    fast, slow = disk_storage(probe, fastest=True), disk_storage(probe, fastest=False)
    times = []
    for report in reports:
        host_bytes = [process.num_bytes for process in report.processes]
        low, high = save_time(host_bytes, fast), save_time(host_bytes, slow)
        times.append(
            SweepTime(
                num_processes=report.num_processes,
                predicted_seconds=low.seconds,
                predicted_seconds_high=high.seconds,
                measured_seconds=report.checkpoint.save_seconds,
                limit=low.limit,
            )
        )
    return tuple(times)


def describe_disk(probe: DiskProbe) -> str:
    """The probe's figures in one line: the bandwidths and costs a file its tries bound the prediction with."""
    return (
        f"{units.decimal_bytes(max(probe.bytes_per_s))}/s to {units.decimal_bytes(min(probe.bytes_per_s))}/s "
        f"({units.many(len(probe.bytes_per_s), 'try', 'tries')} of {probe.num_bytes:,} bytes written and synced in "
        f"{probe.folder}), a file {min(probe.file_micros):,} to {max(probe.file_micros):,} us"
    )


def on_this_machine_record(reports: Sequence[MultiprocessReport], probe: DiskProbe) -> dict[str, object]:
    """The sweep's save times predicted from this disk's probe, beside the measured ones: the
    ``on_this_machine`` key of the CLI's JSON and of the Checkpoint page's sweep download."""
    return {
        "disk": probe.record(),
        "runs": [time.record() for time in predict_sweep_times(reports, probe)],
        "not_modelled": sweep_leaves_out(reports),
    }


def sweep_leaves_out(reports: Sequence[MultiprocessReport]) -> str:
    """What the storage model leaves out of a save measured here."""
    cores = units.many(reports[-1].cpu_count, "CPU core")
    most = units.many(max(report.num_processes for report in reports), "process", "processes")
    return (
        f"CPU contention ({most} of JAX and Orbax on {cores}, load average "
        f"{reports[-1].load_average:.2f}); Orbax's fixed costs a save (its thread pools, the barriers between "
        "processes, the metadata process 0 commits); the page cache (the probe syncs each file, as tensorstore "
        "does, but reads nothing)"
    )
