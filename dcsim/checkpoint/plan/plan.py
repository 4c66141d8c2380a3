"""The checkpoint plan, answered once: the request (``PlanRequest``, the settings beside the
training state's) and the report every face renders (``CheckpointPlan``, with its JSON record and
its verdict), built from memory's laid-out state by the modules beside this one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dcsim.checkpoint.plan import interval as intervals
from dcsim.checkpoint.plan.content import Content
from dcsim.checkpoint.plan.loss import Loss, local_loss, persistent_loss
from dcsim.checkpoint.plan.placement import DEFAULT_DEVICES_PER_HOST, Hosts, check_devices_per_host
from dcsim.checkpoint.plan.restore import RestorePlan, plan_restore
from dcsim.checkpoint.plan.storage import (
    DEFAULT_STORAGE,
    HOST_LINKS,
    STORAGES,
    CurvePoint,
    HostLink,
    SaveTime,
    Storage,
    default_policy,
    flattens_at,
    save_time,
    speedup_curve,
)
from dcsim.checkpoint.plan.writers import NO_LIMITS, SliceLimits, Writes, check_policy, host_files, plan_writes
from dcsim.inputs import show
from dcsim.memory.state import MemoryReport, compute_memory
from dcsim.memory.training import check_dtype
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.serving.catalog import get_accelerator
from dcsim.sharding.meshes import MeshSpec, Rule

MAX_KEEP = 10_000
# What no figure of the plan counts, in plain words.
LEAVES_OUT = (
    "compression (zstd off: the arrays' raw bytes)",
    "metadata round trips and the storage's caching",
    "contention between a host's devices",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SettingNames:
    """What a refusal calls each of the plan's settings: the command line's flags by default; the
    Checkpoint page passes its controls' labels, so each face names what its user sees."""

    devices_per_host: str = "--devices-per-host"
    device: str = "--device"
    asynchronous: str = "--async"
    restore_mesh: str = "--restore-mesh"
    mttf_hours: str = "--mttf-hours"
    restart_seconds: str = "--restart-seconds"
    write_bandwidth: str = "--write-bandwidth"
    storage_bandwidth: str = "--storage-bandwidth"
    keep: str = "--keep"


FLAG_NAMES = SettingNames()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The plan's settings beside the training state's (memory's model, mesh and training);
    ``names``: what its refusals call them."""

    devices_per_host: int = DEFAULT_DEVICES_PER_HOST
    device: str | None = None
    policy: str | None = None  # None: Orbax's default for the device
    storage: Storage = STORAGES[DEFAULT_STORAGE]
    asynchronous: bool = False
    restore_mesh: MeshSpec | None = None
    restore_strategy: str | None = None
    restore_rules: tuple[Rule, ...] = ()
    restore_dtype: str | None = None  # None: as saved; else the params' dtype the restore casts to
    mttf_hours: float = intervals.DEFAULT_MTTF_HOURS
    restart_seconds: float = 0.0
    keep: int = 1
    slice_limits: SliceLimits = NO_LIMITS
    names: SettingNames = FLAG_NAMES

    def __post_init__(self) -> None:
        names = self.names
        if self.device is not None:
            get_accelerator(self.device)
        if self.policy is not None:
            check_policy(self.policy)
        if self.restore_dtype is not None:
            check_dtype(self.restore_dtype, "restore")
        intervals.check_positive(self.mttf_hours, names.mttf_hours, "hours")
        intervals.check_non_negative(self.restart_seconds, names.restart_seconds, "seconds")
        for field, value in (
            (names.write_bandwidth, self.storage.host_bytes_per_s),
            (names.storage_bandwidth, self.storage.aggregate_bytes_per_s),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{field} must be above 0 bytes a second, got {show(value)}")
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or not 1 <= self.keep <= MAX_KEEP:
            raise ValueError(
                f"{names.keep} must be a whole number of checkpoints from 1 to {MAX_KEEP:,}, got {show(self.keep)}"
            )
        if self.asynchronous and self.link is None:
            raise ValueError(
                f"{names.asynchronous} needs {names.device} with a host link figure ({', '.join(HOST_LINKS)}), "
                f"got {show(self.device)}"
            )

    @property
    def link(self) -> HostLink | None:
        return HOST_LINKS.get(self.device or "")

    @property
    def chosen_policy(self) -> tuple[str, str]:
        """The policy, and why: as asked, or Orbax's default for the device."""
        if self.policy is not None:
            return self.policy, "as asked"
        return default_policy(self.device)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointPlan:
    """Everything the plan answers, exact where it counts bytes, estimates where it times."""

    request: PlanRequest
    content: Content
    hosts: Hosts
    writes: Writes
    policy: str
    policy_why: str
    host_bytes: tuple[int, ...]
    save: SaveTime
    curve: tuple[CurvePoint, ...]
    restore: RestorePlan
    restore_save: SaveTime
    loss_persistent: Loss
    loss_local: Loss
    interval: intervals.Interval

    @property
    def files(self) -> tuple[int, ...]:
        return host_files(self.host_bytes)

    @property
    def max_host_bytes(self) -> int:
        return max(self.host_bytes)

    @property
    def idle_hosts(self) -> tuple[int, ...]:
        return tuple(host for host, size in enumerate(self.host_bytes) if not size)

    @property
    def imbalance(self) -> Fraction:
        """The largest host's bytes over the mean (1: an even split)."""
        total = sum(self.host_bytes)
        return Fraction(self.max_host_bytes * len(self.host_bytes), total) if total else Fraction(1)

    @property
    def flat(self) -> CurvePoint:
        return flattens_at(self.curve)

    @property
    def blocking_seconds(self) -> float:
        """δ: the device-to-host copy when asynchronous, else the whole save."""
        return blocking_seconds(self.request, self.writes, self.save)

    @property
    def background_seconds(self) -> float | None:
        return self.save.seconds if self.request.asynchronous else None

    @property
    def host_staging_bytes(self) -> int:
        """Host RAM an async save needs on the busiest host: its devices' written bytes."""
        return self.max_host_bytes

    @property
    def keep_bytes(self) -> int:
        return self.request.keep * self.content.total_bytes

    @property
    def save_every(self) -> float:
        """Daly's interval, or an async save's background write when that is longer: a save cannot
        start before the last one is written."""
        background = self.background_seconds
        return max(self.interval.daly, background) if background is not None else self.interval.daly

    @property
    def daly_text(self) -> str:
        """Daly's interval in the unit a reader expects (``2.57 h``), for the charts' words."""
        return _seconds(self.interval.daly)

    @property
    def every_text(self) -> str:
        if self.save_every > self.interval.daly:
            return (
                f"{_seconds(self.save_every)} (the background write; Daly's {_seconds(self.interval.daly)} is "
                "shorter than a save)"
            )
        return f"{_seconds(self.save_every)} (Daly)"

    @functools.cached_property
    def verdict(self) -> str:
        idle = len(self.idle_hosts)
        hosts = self.hosts.num_hosts
        mode = "an async save blocks" if self.request.asynchronous else "a save blocks"
        return (
            f"{units.decimal_bytes(self.content.total_bytes)} checkpoint, {self.save.writing_hosts:,} of "
            f"{units.many(hosts, 'host')} write under {self.policy}"
            f"{f' ({idle:,} write nothing)' if idle else ''}, the busiest "
            f"{ratio_text(self.imbalance)}x an even split; {mode} about {_seconds(self.blocking_seconds)} on "
            f"{self.request.storage.name}, save every {self.every_text}. Estimates for times; "
            f"not counted: {'; '.join(LEAVES_OUT)}."
        )

    def record(self) -> dict[str, Any]:
        """The JSON object (keys in docs/checkpoint.md)."""
        files = self.files
        return {
            "total_bytes": self.content.total_bytes,
            "parts": dict(self.content.parts),
            "hosts": [
                {"host": host, "bytes_written": size, "files": files[host]} for host, size in enumerate(self.host_bytes)
            ],
            "writing_hosts": self.save.writing_hosts,
            "max_host_bytes": self.max_host_bytes,
            "policy": self.policy,
            "save_seconds": self.save.seconds,
            "blocking_seconds": self.blocking_seconds,
            "host_staging_bytes": self.host_staging_bytes,
            "mtbi_seconds": self.interval.mtbi,
            "young_interval_seconds": self.interval.young,
            "daly_interval_seconds": self.interval.daly,
            "goodput_at_optimum": self.interval.goodput_at_optimum,
            "restore": self.restore.record(),
            "loss": {"persistent": self.loss_persistent.record(), "local": self.loss_local.record()},
        }


def blocking_seconds(request: PlanRequest, writes: Writes, save: SaveTime) -> float:
    """δ: the busiest device's written bytes over its host link when asynchronous, else the save."""
    link = request.link
    if request.asynchronous and link is not None:
        return writes.max_device_bytes / link.bytes_per_s
    return save.seconds


def host_runs(values: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """Consecutive hosts with equal values as ``(first, last, value)``: 2,048 hosts that write alike
    are one row."""
    runs: list[tuple[int, int, Any]] = []
    for host, value in enumerate(values):
        if runs and runs[-1][2] == value:
            runs[-1] = (runs[-1][0], host, value)
        else:
            runs.append((host, host, value))
    return runs


def hosts_label(first: int, last: int) -> str:
    return f"host {first}" if first == last else f"hosts {first}-{last}"


def ratio_text(value: Fraction) -> str:
    """An exact ratio as people read it: ``1`` when exact, else four significant digits."""
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.4g}"


def _seconds(value: float) -> str:
    if value < 1e-6:
        return "under 1 µs"
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    if value < 120:
        return f"{value:.3g} s"
    if value < 7200:
        return f"{value / 60:.3g} min"
    return f"{value / 3600:.3g} h"


seconds_text = _seconds


def plan_checkpoint(
    report: ParamReport, memory: MemoryReport, request: PlanRequest, *, rules: Sequence[Rule] = ()
) -> CheckpointPlan:
    """The plan of a checkpoint of ``memory``'s state (the model counted as ``report``)."""
    names = request.names
    hosts = Hosts(memory.mesh, check_devices_per_host(request.devices_per_host, memory.mesh, names.devices_per_host))
    content = Content(memory)
    policy, why = request.chosen_policy
    writes = plan_writes(content.arrays, memory.mesh, policy, request.slice_limits)
    host_bytes = writes.host_bytes(hosts)
    save = save_time(host_bytes, request.storage)
    curve = speedup_curve(writes.device_bytes, hosts.num_hosts, request.storage)
    # A restore dtype lays the target out as training with those params would hold it (the optimizer
    # state too when it follows the params' dtype), so the casts are the ones a real target would ask.
    asked = request.restore_dtype or memory.training.param_dtype
    cast = asked != memory.training.param_dtype
    target = dataclasses.replace(memory.training, param_dtype=asked) if cast else memory.training
    if request.restore_mesh is None and not cast:
        restored, restore_hosts = content.arrays, hosts
    elif request.restore_mesh is None:
        laid = compute_memory(report, memory.mesh, memory.strategy, memory.rules, target)
        restored, restore_hosts = Content(laid).arrays, hosts
    else:
        strategy = request.restore_strategy or memory.strategy
        try:
            restore_hosts = Hosts(
                request.restore_mesh,
                check_devices_per_host(request.devices_per_host, request.restore_mesh, names.devices_per_host),
            )
            laid = compute_memory(report, request.restore_mesh, strategy, request.restore_rules, target, by_stage=False)
        except ValueError as err:
            raise ValueError(f"{names.restore_mesh}: the restore cannot lay the checkpoint out: {err}") from None
        restored = Content(laid).arrays
    restore = plan_restore(writes.arrays, restored, restore_hosts, cast=cast)
    restore_save = save_time(restore.bytes_read, request.storage)
    restart = restore_save.seconds + request.restart_seconds
    delta = blocking_seconds(request, writes, save)
    return CheckpointPlan(
        request=request,
        content=content,
        hosts=hosts,
        writes=writes,
        policy=policy,
        policy_why=why,
        host_bytes=host_bytes,
        save=save,
        curve=curve,
        restore=restore,
        restore_save=restore_save,
        loss_persistent=persistent_loss(hosts),
        loss_local=local_loss(writes.arrays, hosts),
        interval=intervals.plan_interval(memory.num_devices, request.mttf_hours, delta, restart),
    )
