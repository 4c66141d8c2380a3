"""What a device of each pipeline stage holds when a mesh has a ``stage`` axis, as Megatron-LM and
Llama 3 run pipeline parallelism: its own stage's arrays, and its own blocks' residuals for every
micro-batch it has in flight.

- **The split** is the one ``serve`` and the step's time use (vLLM's ``get_pp_indices``:
  ``dcsim.serving.engine.stage_blocks``), the embedding on the first stage and the final norm and
  head on the last (a tied table on both), by ``dcsim.speed.pipeline.stage_of``. Each stage's
  arrays are laid out as today's strategies lay out any state, on the mesh with ``stage`` at 1:
  split over ``model`` and, where the ZeRO stage says, over the data axes.
- **Micro-batches in flight.** 1F1B (PipeDream-Flush) has stage s (0-based, of p) run p - s
  forwards before its first backward, so it keeps min(p - s, m) micro-batches' residuals of its own
  blocks: the first stage keeps min(p, m) (Narayanan et al. 2021, "Efficient Large-Scale Language
  Model Training on GPU Clusters Using Megatron-LM", SC'21, section 2.2.1). The interleaved
  schedule with v chunks a device warms up 2(p - s - 1) + (v - 1)p chunk-forwards before its first
  backward (Megatron-LM's ``forward_backward_pipelining_with_interleaving``), so stage s keeps
  2(p - s - 1) + (v - 1)p + 1 chunks' residuals, at most m v, each a v-th of its blocks': on the
  first stage p (1 + (p - 1)/(p v)) micro-batches' worth, the factor of Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", section 4.2.3.
- The residuals outside the blocks (the final norm's and head's inputs) and the loss's are the last
  stage's, for one micro-batch: its last chunk's backward follows each forward at once.

The stage reported is the one whose device holds the most, state and residuals together (the first
of equals).
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dcsim.memory.activations import ActivationReport
    from dcsim.memory.state import StateArray
    from dcsim.speed.pipeline import Pipeline

STAGE_AXIS = "stage"  # ``dcsim.speed.pipeline.STAGE_AXIS``, the axis ``serve`` reads
_BLOCK = re.compile(r"(?:^|/)block_(\d+)/")


def block_index(path: str) -> int | None:
    """The block a path belongs to (``block_3/attn/cached_key``: 3), or None (``position``)."""
    found = _BLOCK.search(path)
    return int(found.group(1)) if found else None


def stage_blocks(num_layers: int, num_stages: int) -> tuple[range, ...]:
    """The blocks of each pipeline stage: vLLM's ``get_pp_indices`` (``num_layers // stages`` each,
    the remainder one more to each stage before the last)."""
    if num_stages > num_layers:
        raise ValueError(
            f"the pipeline has {num_stages:,} stages (`stage`) and the model {num_layers:,} blocks: each stage "
            f"needs at least one block; use at most `stage`={num_layers:,}"
        )
    sizes = [num_layers // num_stages] * num_stages
    for index in range(2, num_layers % num_stages + 2):
        sizes[-index] += 1
    starts = [sum(sizes[:index]) for index in range(num_stages)]
    return tuple(range(start, start + size) for start, size in zip(starts, sizes, strict=True))


def stage_of(path: str, blocks: tuple[range, ...], tied: bool) -> tuple[int, ...]:
    """The stages holding a parameter or a state array at ``path`` (an optimizer's
    ``0/mu/block_3/...`` too): a block's own stage; the final norm and head the last; the token
    table the first (and the last too when the head is tied to it); anything else outside the
    blocks (position tables, a step count) the first."""
    last = len(blocks) - 1
    index = block_index(path)
    if index is not None:
        return tuple(stage for stage, members in enumerate(blocks) if index in members)
    segments = set(path.split("/"))
    if segments & {"final_norm", "lm_head"}:
        return (last,)
    if "embed" in segments and "token" in segments and tied:
        return tuple(sorted({0, last}))
    return (0,)


def num_stages(axes: tuple[tuple[str, int], ...]) -> int:
    """The mesh's ``stage`` axis (1 without one)."""
    return dict(axes).get(STAGE_AXIS, 1)


def in_flight(stage: int, stages: int, schedule: Pipeline | None = None) -> Fraction:
    """Micro-batches of ``stage``'s own blocks whose residuals its device keeps at once (module
    docstring). Without a schedule: 1F1B with at least as many micro-batches as stages, the least
    any pipelined step runs (``dcsim.speed.pipeline.Pipeline.check_for``)."""
    if not 0 <= stage < stages:
        raise ValueError(f"a stage is 0 to {stages - 1}, got {stage}")
    if stages == 1:
        return Fraction(1)
    micro_batches = stages if schedule is None else schedule.micro_batches
    if schedule is None or schedule.schedule == "1f1b":
        return Fraction(min(stages - stage, micro_batches))
    v = schedule.virtual_stages
    chunks = 2 * (stages - stage - 1) + (v - 1) * stages + 1
    return Fraction(min(chunks, micro_batches * v), v)


def activation_bytes(
    traced: ActivationReport, blocks: tuple[range, ...], schedule: Pipeline | None = None
) -> tuple[int, ...]:
    """The residuals a device of each stage keeps at its peak: its blocks' for the micro-batches it
    has in flight, and on the last stage those outside the blocks and the loss's for one. Rounded
    up to a byte where a v-th of the blocks' bytes is not whole (never, for alike chunks)."""
    stages = len(blocks)
    if stages == 1:
        return (traced.bytes_per_device,)
    rows = []
    for stage, members in enumerate(blocks):
        own = sum(traced.blocks[index].bytes for index in members)
        held = in_flight(stage, stages, schedule) * own
        size = -(-held.numerator // held.denominator)
        if stage == stages - 1:
            size += traced.outside.bytes + traced.loss_bytes
        rows.append(size)
    return tuple(rows)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageSplit:
    """The training state of a mesh with a ``stage`` axis, each stage's.

    Attributes:
      stage: the stage whose device the report shows (``MemoryReport.arrays`` are its arrays).
      blocks: each stage's blocks.
      state_bytes: each stage's device's state, in order.
      activation_bytes: each stage's residuals at its peak, or None for the state alone.
      total_bytes: the whole state once (every array of every stage, a tied table once).
      devices_per_stage: the mesh's devices over the stages.
      arrays: every stage's state arrays, each as a device holding it holds it.
    """

    stage: int
    blocks: tuple[range, ...]
    state_bytes: tuple[int, ...]
    activation_bytes: tuple[int, ...] | None
    total_bytes: int
    devices_per_stage: int
    arrays: tuple[StateArray, ...] = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def num_stages(self) -> int:
        return len(self.blocks)

    @property
    def stage_bytes(self) -> tuple[int, ...]:
        """Each stage's device's state and residuals together."""
        extra = self.activation_bytes or (0,) * self.num_stages
        return tuple(state + more for state, more in zip(self.state_bytes, extra, strict=True))

    @property
    def text(self) -> str:
        """``stage 0 of 16 (blocks 0-6, the embedding)``."""
        members = self.blocks[self.stage]
        ends = [what for what, here in (("the embedding", 0), ("the head", self.num_stages - 1)) if here == self.stage]
        extra = f", {' and '.join(ends)}" if ends else ""
        return f"stage {self.stage} of {self.num_stages} (blocks {members[0]}-{members[-1]}{extra})"


def most_loaded(state_bytes: tuple[int, ...], activations: tuple[int, ...] | None) -> int:
    """The stage whose device holds the most, state and residuals together (the first of equals)."""
    totals = [state + (0 if activations is None else activations[stage]) for stage, state in enumerate(state_bytes)]
    return totals.index(max(totals))
