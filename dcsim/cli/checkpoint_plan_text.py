"""``checkpoint-plan``'s text: the plan's verdict first, then each answer with its inputs. Renders
``dcsim.checkpoint.plan.plan.CheckpointPlan`` and adds nothing to it."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from dcsim.checkpoint.plan import content as contents
from dcsim.checkpoint.plan import interval as intervals
from dcsim.checkpoint.plan.plan import LEAVES_OUT, host_runs, hosts_label, ratio_text, seconds_text
from dcsim.quantities import units

if TYPE_CHECKING:
    from dcsim.checkpoint.plan.plan import CheckpointPlan

MAX_HOST_ROWS = 12  # runs of hosts that write alike are one row; past this many rows, the rest summed
MAX_LOST_PATHS = 3  # the worst host's lost arrays named on its line; the rest counted (--format json lists all)


def _bytes(n: int) -> str:
    return f"{n:,} bytes ({units.decimal_bytes(n)})"


def _rate(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"


def _idle_text(idle: Sequence[int]) -> str:
    """``hosts 1-7`` for a run, else the first few by number."""
    if idle[-1] - idle[0] == len(idle) - 1:
        return hosts_label(idle[0], idle[-1])
    return ", ".join(map(str, idle[:8])) + (", ..." if len(idle) > 8 else "")


def _host_lines(plan: CheckpointPlan) -> list[str]:
    runs = host_runs(list(zip(plan.host_bytes, plan.files, strict=True)))
    lines = [
        f"  {hosts_label(first, last):<16} {size:>22,} bytes  {files:,} files" + (" each" if last > first else "")
        for first, last, (size, files) in runs[:MAX_HOST_ROWS]
    ]
    if len(runs) > MAX_HOST_ROWS:
        rest = runs[MAX_HOST_ROWS:]
        lines.append(
            f"  ... {len(rest):,} more runs of hosts (hosts {rest[0][0]}-{rest[-1][1]}); --format json lists each"
        )
    return lines


def _loss_line(plan: CheckpointPlan) -> list[str]:
    local = plan.loss_local
    total = plan.content.total_bytes
    worst = max(range(len(local.bytes_lost)), key=local.bytes_lost.__getitem__)
    lost = local.bytes_lost[worst]
    lines = [
        "loss of a host",
        "  persistent: nothing is lost when a host dies: every byte sits on the shared storage, which alone can "
        "lose it",
    ]
    if lost:
        lines.append(
            f"  local tier: host {worst} alone holds {_bytes(lost)}, {ratio_text(Fraction(lost, total))} "
            f"of the checkpoint, in {units.many(local.arrays_lost[worst], 'array')}; "
            f"{units.many(sum(1 for size in local.bytes_lost if size), 'host')} hold data no other host has"
        )
        lines.append(f"    host {worst} takes with it: {_paths_text(local.paths_lost(worst))}")
    else:
        lines.append("  local tier: no host holds a shard alone: every shard has a copy on another host")
    lines.append(
        f"  fewest hosts whose loss loses data (local tier): {local.min_hosts_to_lose_data:,}; persistent: none "
        "(the storage only)"
    )
    return lines


def _paths_text(paths: Sequence[str]) -> str:
    """The first ``MAX_LOST_PATHS`` arrays, then how many more: ``a, b, c and 2,889 more``."""
    shown = ", ".join(paths[:MAX_LOST_PATHS])
    rest = len(paths) - MAX_LOST_PATHS
    return f"{shown} and {units.count(rest)} more (--format json lists each)" if rest > 0 else shown


def render_plan(plan: CheckpointPlan, num_params: int) -> str:
    content = plan.content
    request = plan.request
    parts = ", ".join(f"{part} {size:,}" for part, size in content.parts.items())
    dlio = content.dlio_formula_bytes(num_params)
    mean = Fraction(sum(plan.host_bytes), len(plan.host_bytes))
    save = plan.save
    storage = request.storage
    idle = plan.idle_hosts
    lines = [
        plan.verdict,
        "",
        f"checkpoint         {_bytes(content.total_bytes)}: {parts} (the arrays' bytes, grads not saved; "
        f"optimizer scalars {content.scalar_bytes:,} bytes)",
        f"DLIO's formula     {contents.DLIO_BYTES_PER_PARAM} bytes x {num_params:,} parameters = {dlio:,} bytes "
        f"(MLPerf Storage); this state is {content.total_bytes - dlio:+,} bytes off it. For Llama 3 8B MLPerf "
        f"gives {contents.MLPERF_LLAMA3_8B_BYTES:,} = 14 x {contents.MLPERF_LLAMA3_8B_PARAMS:,} + "
        f"{contents.MLPERF_LLAMA3_8B_EXTRA:,}, its 5 x hidden fp32 values in 3 optimizer groups on each of 8 ranks",
        f"hosts              {plan.hosts.num_hosts:,} x {plan.hosts.devices_per_host:,} devices, in mesh order",
        f"policy             {plan.policy}: {plan.policy_why}",
        f"bytes a host ({plan.policy}):",
        *_host_lines(plan),
        f"writing hosts      {save.writing_hosts:,} of {plan.hosts.num_hosts:,}"
        + (f"; {len(idle):,} write nothing ({_idle_text(idle)})" if idle else "; every host writes"),
        f"busiest host       {_bytes(plan.max_host_bytes)}, {ratio_text(plan.imbalance)}x the mean "
        f"{f'{float(mean):,.0f}'} bytes (1: an even split)",
        f"storage            {storage.name}: a host {_rate(storage.host_bytes_per_s)}, aggregate "
        + (_rate(storage.aggregate_bytes_per_s) if storage.aggregate_bytes_per_s else "no shared limit")
        + f"; {storage.source}",
        f"save (estimate)    {seconds_text(save.seconds)}"
        + (f" to {seconds_text(save.seconds_high)}" if save.seconds_high != save.seconds else "")
        + f": host {save.slowest_host}'s {plan.host_bytes[save.slowest_host]:,} bytes at "
        f"{_rate(save.per_host_bytes_per_s)} ({save.limit}) plus its files' cost",
        "speedup (estimate) "
        + ", ".join(f"{units.many(point.hosts, 'host')} {seconds_text(point.seconds)}" for point in plan.curve),
        f"  flattens at {units.many(plan.flat.hosts, 'host')}: {plan.curve[-1].limit}",
    ]
    link = request.link
    if request.asynchronous and link is not None:
        lines.append(
            f"async save         blocks {seconds_text(plan.blocking_seconds)}: the busiest device's "
            f"{plan.writes.max_device_bytes:,} bytes over {link.device}'s host link {_rate(link.bytes_per_s)} "
            f"({link.source}); host RAM to stage {_bytes(plan.host_staging_bytes)} on the busiest host; background "
            f"write {seconds_text(plan.save.seconds)}"
        )
    else:
        lines.append(
            f"sync save          blocks the whole write, {seconds_text(plan.blocking_seconds)} (--async with --device: "
            f"only the device-to-host copy blocks, and the host stages up to {_bytes(plan.host_staging_bytes)})"
        )
    restore = plan.restore
    target = (
        "the same mesh" if request.restore_mesh is None else ",".join(f"{n}={s}" for n, s in request.restore_mesh.axes)
    )
    lines += [
        f"restore onto {target}: {units.many(restore.hosts.num_hosts, 'host')}",
        f"  a host holds up to {max(restore.bytes_held):,} bytes and reads up to {max(restore.bytes_read):,}; "
        f"read amplification {ratio_text(restore.read_amplification)} (stored bytes read / bytes held; 1 "
        f"on the saving mesh); about {seconds_text(plan.restore_save.seconds)} at the storage's figures (an estimate)",
        *([f"  {restore.cast_text()}"] if restore.casts else []),
        *_loss_line(plan),
    ]
    interval = plan.interval
    observed = intervals.llama3_mtbi_seconds()
    lines += [
        f"interval           M = {interval.mttf_hours:,.0f} h x 3,600 / {interval.num_devices:,} devices = "
        f"{seconds_text(interval.mtbi)} ({intervals.MTTF_SOURCE}); observed: Llama 3 405B, "
        f"{intervals.LLAMA3_INTERRUPTIONS} interruptions in {intervals.LLAMA3_DAYS} days on "
        f"{intervals.LLAMA3_GPUS:,} GPUs, M = {seconds_text(observed)} ({intervals.LLAMA3_SOURCE})",
        f"  delta = {seconds_text(interval.delta)} blocking, R = {seconds_text(interval.restart)} restart "
        f"(restore + {request.restart_seconds:g} s): Young {seconds_text(interval.young)}, Daly "
        f"{seconds_text(interval.daly)}; goodput at Daly's {interval.goodput_at_optimum:.4%}; work lost a failure "
        f"about {seconds_text(interval.lost_per_failure)}",
    ]
    if plan.save_every > interval.daly:
        lines.append(
            f"  an async save's background write ({seconds_text(plan.save.seconds)}) outlasts Daly's interval: save "
            "no more often than it"
        )
    lines += [
        f"kept checkpoints   {request.keep:,} x the checkpoint = {_bytes(plan.keep_bytes)} of storage",
        f"not counted        {'; '.join(LEAVES_OUT)}",
    ]
    return "\n".join(lines) + "\n"
