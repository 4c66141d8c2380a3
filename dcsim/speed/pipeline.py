"""Pipeline stages for a training step's time: the schedule's settings, the checks they must pass
against the model and the mesh, and what the slowest stage's device does for one micro-batch.

A mesh's ``stage`` axis (``--mesh data=128,stage=16,model=8``, as ``serve`` reads it) splits the
blocks into contiguous stages as ``serve`` does (vLLM's ``get_pp_indices``:
``dcsim.serving.engine.stage_blocks``, the remainder one more block to each stage before the last),
the embedding on the first stage, the final norm, the head and the loss on the last (a tied table
on both). Each stage's FLOPs a micro-batch are the sum of its own blocks' traced FLOPs
(``ActivationReport.flops_parts``) and, on the last, the part outside the blocks; the stage with the
most sets the pace (the slowest stage), and its weights, residuals and state are what its device
moves through HBM.

A step runs ``micro_batches`` micro-batches a data-parallel replica (gradient accumulation; the
global batch is the data-parallel size x the micro-batch x the micro-batches). With ``p`` stages
the schedule leaves a bubble of ``(p - 1) / (v m)`` of the ideal time, where ``v`` is 1 for 1F1B
and the virtual stages (model chunks a device) for the interleaved schedule (Narayanan et al.
2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC'21,
section 2.2.1 for 1F1B (PipeDream-Flush) and 2.2.2 for the interleaved schedule, which also
requires the micro-batches to be a multiple of the stages; Megatron-LM also requires the blocks a
stage to split evenly into the chunks).

Settings are checked here, before any trace (``Pipeline``), and against the model and the mesh
(``Pipeline.check_for``); every refusal names the setting, the rule and the value.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dcsim.inputs import as_int, show
from dcsim.memory.stages import stage_of as stage_of  # which stage holds an array: one rule for time and memory

if TYPE_CHECKING:  # the stage's share reads traced and laid-out reports: JAX, when asked
    from dcsim.memory.activations import ActivationReport
    from dcsim.memory.flops import StepFlops
    from dcsim.memory.state import MemoryReport
    from dcsim.model.count import ParamReport

STAGE_AXIS = "stage"
SCHEDULES = ("1f1b", "interleaved")
DEFAULT_SCHEDULE = "1f1b"
MAX_MICRO_BATCHES = 1 << 20  # past any run's gradient accumulation, small enough for exact counts
MAX_VIRTUAL_STAGES = 1 << 10  # Megatron's chunks a device: a handful; more than the blocks is refused anyway


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pipeline:
    """How a step runs its micro-batches: ``micro_batches`` a data-parallel replica, on the
    ``schedule`` (``1f1b``, or ``interleaved`` with ``virtual_stages`` model chunks a device).

    The defaults (one micro-batch, 1F1B) are a step without gradient accumulation or stages.
    """

    micro_batches: int = 1
    schedule: str = DEFAULT_SCHEDULE
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        as_int(self.micro_batches, "micro-batches", maximum=MAX_MICRO_BATCHES, why="micro-batches a step")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"the pipeline schedule must be one of {', '.join(SCHEDULES)}, got {show(self.schedule)}")
        as_int(self.virtual_stages, "virtual stages", maximum=MAX_VIRTUAL_STAGES, why="model chunks a device")
        if self.schedule == "interleaved" and self.virtual_stages < 2:
            raise ValueError(
                f"the interleaved schedule runs 2 or more virtual stages (model chunks) a device, got "
                f"{self.virtual_stages}; with 1 it is the 1f1b schedule"
            )
        if self.schedule == "1f1b" and self.virtual_stages != 1:
            raise ValueError(
                f"virtual stages ({self.virtual_stages}) are the interleaved schedule's model chunks a device; "
                "1f1b runs one: give the interleaved schedule, or 1 virtual stage"
            )

    @property
    def text(self) -> str:
        chunks = f", {self.virtual_stages} virtual stages" if self.schedule == "interleaved" else ""
        return f"{self.micro_batches:,} micro-batches a step, {self.schedule}{chunks}"

    def check_for(self, stages: int, num_layers: int) -> None:
        """Refuse a schedule the mesh's ``stages`` and the model's ``num_layers`` blocks cannot run."""
        if stages > num_layers:
            raise ValueError(
                f"the pipeline has {stages:,} stages (`{STAGE_AXIS}`) and the model {num_layers:,} blocks: each stage "
                f"needs at least one block; use at most `{STAGE_AXIS}`={num_layers:,}"
            )
        if stages == 1:
            if self.schedule == "interleaved":
                raise ValueError(
                    f"the interleaved schedule interleaves pipeline stages, and the mesh has no `{STAGE_AXIS}` axis "
                    "(or one of size 1): add one, or use 1f1b"
                )
            return
        if self.micro_batches < stages:
            raise ValueError(
                f"{self.micro_batches:,} micro-batch{'' if self.micro_batches == 1 else 'es'} a step on {stages:,} "
                "pipeline stages: a schedule needs at least "
                f"as many micro-batches as stages (with fewer, each stage idles through most of the step); give at "
                f"least {stages:,}"
            )
        if self.schedule == "interleaved":
            chunks = stages * self.virtual_stages
            if num_layers % chunks:
                raise ValueError(
                    f"the interleaved schedule splits the model's {num_layers:,} blocks into {stages:,} stages x "
                    f"{self.virtual_stages} virtual stages = {chunks:,} equal chunks, which do not divide them "
                    "(Megatron-LM's rule); choose virtual stages that divide the blocks a stage, or 1f1b"
                )
            if self.micro_batches % stages:
                raise ValueError(
                    f"the interleaved schedule needs the micro-batches to be a multiple of the stages (Narayanan et "
                    f"al. 2021, section 2.2.2): {self.micro_batches:,} is not a multiple of {stages:,}"
                )

    def bubble_fraction(self, stages: int) -> Fraction:
        """The pipeline bubble over the ideal time: (p - 1) / (v m) (module docstring)."""
        return Fraction(stages - 1, self.virtual_stages * self.micro_batches)


def check_micro_batches(value: Any, label: str = "--micro-batches") -> int:
    return as_int(value, label, maximum=MAX_MICRO_BATCHES, why="micro-batches a step")


def check_virtual_stages(value: Any, label: str = "--virtual-stages") -> int:
    return as_int(value, label, maximum=MAX_VIRTUAL_STAGES, why="model chunks a device, interleaved")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageShare:
    """What a device of the slowest stage does for one micro-batch, and holds.

    Attributes:
      stage: the slowest stage (0-based), the one with the most FLOPs a micro-batch (the first of
        equals).
      num_stages: the mesh's ``stage`` axis (1: no pipeline).
      blocks: the stage's blocks.
      first, last: whether it holds the embedding, and the head and loss.
      flops: its FLOPs for one micro-batch on a device (the whole step's without stages).
      stage_flops: every stage's hardware FLOPs a micro-batch, in order (to show the balance).
      dense_values, expert_values: the parameter values of its arrays, whole (before any split),
        without and with routed experts.
      activation_bytes: the residuals a device of it keeps for one micro-batch.
      state_bytes: the training state a device of it holds (``state_of``).
    """

    stage: int
    num_stages: int
    blocks: range
    first: bool
    last: bool
    flops: StepFlops
    stage_flops: tuple[int, ...]
    dense_values: int
    expert_values: int
    activation_bytes: int
    state_bytes: int

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)


def stage_share(
    report: ParamReport, traced: ActivationReport, memory: MemoryReport, hparams: dict[str, Any], stages: int
) -> StageShare:
    """The slowest stage of ``stages`` (module docstring) for the step ``traced`` on the state laid
    out as ``memory``. One stage: the whole model, its state as laid out, exactly."""
    from dcsim.memory.flops import StepFlops
    from dcsim.memory.stages import stage_blocks
    from dcsim.model.count import is_routed_expert

    if traced.flops is None or traced.flops_parts is None:
        raise ValueError("a stage's time needs the step's FLOPs: trace it with with_recompute")
    num_layers = len(traced.blocks)
    blocks = stage_blocks(num_layers, stages)
    tied = bool(hparams.get("tied_embeddings", False)) or not any(
        row.path.startswith("lm_head/") for row in report.arrays
    )
    per_block, outside = traced.flops_parts
    last = stages - 1

    def flops_of(stage: int) -> StepFlops:
        rows = [per_block[index] for index in blocks[stage]] + ([outside] if stage == last else [])
        return StepFlops(
            forward=sum(row.forward for row in rows),
            backward=sum(row.backward for row in rows),
            recompute=sum(row.recompute for row in rows),
            tokens=outside.tokens,
            tensor_parallel=outside.tensor_parallel,
        )

    stage_flops = tuple(flops_of(stage).hardware for stage in range(stages))
    slowest = stage_flops.index(max(stage_flops))
    dense = experts = 0
    for row in report.arrays:
        if slowest in stage_of(row.path, blocks, tied):
            if is_routed_expert(row):
                experts += row.num_values
            else:
                dense += row.num_values
    activation = sum(traced.blocks[index].bytes for index in blocks[slowest])
    if slowest == last:
        activation += traced.outside.bytes + traced.loss_bytes
    if stages == 1:
        state = sum(memory.part_bytes(part) for part in memory.training.parts)
    else:
        state = state_of(memory, blocks, tied, slowest)
    return StageShare(
        stage=slowest,
        num_stages=stages,
        blocks=blocks[slowest],
        first=slowest == 0,
        last=slowest == last,
        flops=flops_of(slowest) if stages > 1 else traced.flops,
        stage_flops=stage_flops,
        dense_values=dense,
        expert_values=experts,
        activation_bytes=activation if stages > 1 else traced.bytes_per_device,
        state_bytes=state,
    )


def state_of(memory: MemoryReport, blocks: tuple[range, ...], tied: bool, stage: int) -> int:
    """A device of ``stage``'s training state, as Megatron-LM composes its parallelism: each array
    of the stage split over the tensor axis ``model`` (and routed experts over ``expert``), and the
    parts the ZeRO stage splits also over the data axes, whatever the strategy (the issue's rule for
    the time). The memory figures lay each stage's arrays out by the strategy instead
    (``dcsim.memory.stages``): every part over ``model`` at every ZeRO stage, but norms whole, the
    vocabulary padded, and under ``megatron`` and ``tensor`` never over the data axes (Megatron's
    distributed optimizer is not laid out; docs/time.md), so the stage's own arrays are counted
    here, whole, and divided by arithmetic (floored: an estimate's input, not a layout)."""
    from dcsim.sharding.megatron import EXPERT_AXIS, TENSOR_AXIS

    sizes = dict(memory.mesh.axes)
    t, e = sizes.get(TENSOR_AXIS, 1), sizes.get(EXPERT_AXIS, 1)
    data = math.prod(size for name, size in memory.mesh.axes if name not in (TENSOR_AXIS, STAGE_AXIS, EXPERT_AXIS))
    total = 0
    rows = memory.arrays if memory.pipeline is None else memory.pipeline.arrays  # every stage's
    for row in rows:
        if stage not in stage_of(row.path, blocks, tied):
            continue
        split = t * (e if "/experts/" in f"/{row.path}/" else 1)
        if row.part in memory.training.shard:
            split *= data * (1 if "/experts/" in f"/{row.path}/" else e)
        total += row.bytes // split
    return total
