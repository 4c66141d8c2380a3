"""The collectives one training step needs under a layout, and the bytes each device sends through
its link for each, by kind and mesh axis.

What a ring moves through a device's link (NCCL's ring algorithm; nccl-tests' bus bandwidth uses
the same factors): (n - 1)/n of the whole array for an all-gather or a reduce-scatter, 2(n - 1)/n
for an all-reduce, (n - 1)/n of the device's buffer for an all-to-all. The rows:

- **tensor parallelism** (the ``model`` axis, Megatron-LM; Korthikanti et al. 2022, section 4.2.2):
  each block all-reduces its (micro-batch, sequence, d_model) activations twice in the forward and
  twice in the backward, twice more when full remat runs the forward again; with sequence
  parallelism each all-reduce is an all-gather and a reduce-scatter of the same array. The
  vocabulary-parallel embedding all-reduces its output in the forward, the output layer its input's
  gradient in the backward (under sequence parallelism a reduce-scatter one way and an all-gather
  the other, for each), and the vocabulary-parallel cross-entropy all-reduces three float32
  figures a token (the maximum, the sum of exponentials, the target's logit);
- **data parallelism** (every other axis): ZeRO-3 (parameters split) gathers each block's
  parameters in the forward and again in the backward, in the parameters' dtype (PyTorch FSDP's
  FULL_SHARD), once a block and once outside the blocks; gradients are reduce-scattered where they
  are split (ZeRO-2 and 3), all-reduced where they are whole, in the gradients' dtype; where the
  optimizer state is split but the parameters are not (ZeRO-1 and 2), the updated parameters are
  all-gathered after the update (exposed: no compute is left to hide it). Routed experts' arrays,
  split over an ``expert`` axis, are reduced over the data axes without it;
- **expert parallelism** (an ``expert`` axis): each MoE block sends its tokens' copies (micro-batch
  x sequence x experts a token, d_model wide) to their experts and back: two all-to-alls in the
  forward, two in the backward (two more under full remat).

- **pipeline stages** (a ``stage`` axis; ``dcsim.speed.pipeline``): a stage sends each micro-batch's
  activations (micro-batch x sequence x d_model in the compute dtype) to the next stage in the
  forward, and their gradient back in the backward, as ``collective-permute`` rows on ``stage``
  (Narayanan et al. 2021, section 3.2: ``bsh`` a micro-batch between consecutive stages); the
  interleaved schedule sends once a model chunk, v times as often (their section 2.2.2). Under
  sequence parallelism the activations are already split over the tensor ranks, so each sends
  ``bsh / t`` (their section 4.1's scatter/gather, which Megatron-LM runs with tensor parallelism).
  A point-to-point send moves its whole array in one step.

With stages, a device runs its own stage's blocks (the slowest stage's, ``StageShare``): its
tensor- and expert-parallel collectives, its FSDP gathers and its gradients are those of its
blocks, and the embedding's and the head's only on the stage that holds them. With several
micro-batches a step (gradient accumulation), every collective of a micro-batch runs once for
each, while the gradients are reduced, and the updated parameters gathered, once a step (Megatron's
distributed optimizer and DeepSpeed reduce at the accumulation boundary; PyTorch FSDP's FULL_SHARD
gathers the parameters again for each micro-batch). Every byte count is a Python int.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dcsim.memory.step import Step
from dcsim.memory.training import Training
from dcsim.model.count import ParamReport, is_routed_expert
from dcsim.serving.cache import block_index
from dcsim.sharding.megatron import EXPERT_AXIS, TENSOR_AXIS
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import system
from dcsim.speed.pipeline import STAGE_AXIS, Pipeline, StageShare

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
__all__ = ["STAGE_AXIS", "Collective", "comm_record", "ring_bytes", "training_collectives"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Collective:
    """One kind of collective a step runs on one set of mesh axes.

    Attributes:
      kind: one of ``KINDS``.
      axis: the mesh axes it runs over, comma-joined in the mesh's order (``data,fsdp``).
      what: what it moves, in words (``FSDP parameter gathers, forward``).
      group: devices taking part (the product of the axes' sizes).
      count: how many times a step runs it.
      array_bytes: one call's array: the whole gathered or reduced array, or an all-to-all's
        buffer on one device (the average call's, where calls differ: a block's parameters and
        those outside the blocks).
      bytes: what one device sends through its link for all ``count`` calls (the ring's factor).
      inside_host: whether the axes run inside a host (``system.inside_host``).
      exposed: whether the step waits for it (tensor and expert parallelism), or whether it may hide
        behind compute (data parallelism and FSDP).
      phase: ``forward``, ``backward`` or ``update``.
      per_step: whether it runs once a step (the gradients' reduction, the gather after the
        update), not once a micro-batch.
    """

    kind: str
    axis: str
    what: str
    group: int
    count: int
    array_bytes: int
    bytes: int
    inside_host: bool
    exposed: bool
    phase: str
    per_step: bool = False

    @property
    def ring_steps(self) -> int:
        """The ring's steps a call: n - 1, an all-reduce 2(n - 1); a point-to-point send one."""
        if self.kind == "collective-permute":
            return 1
        return (2 if self.kind == "all-reduce" else 1) * (self.group - 1)


def ring_bytes(kind: str, array_bytes: int, group: int) -> int:
    """What one device sends for one call of ``kind`` over ``group`` devices, exactly (floored); a
    ``collective-permute`` (a point-to-point send to the next device) its whole array."""
    if kind == "collective-permute":
        return array_bytes if group > 1 else 0
    factor = 2 if kind == "all-reduce" else 1
    return factor * array_bytes * (group - 1) // group


def _itemsize(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


def _row(kind: str, axes: list[str], mesh: MeshSpec, what: str, count: int, total: int, **kw: Any) -> Collective:
    """``count`` calls moving ``total`` array bytes together (a call's array: ``total // count``)."""
    sizes = dict(mesh.axes)
    group = math.prod(sizes[name] for name in axes)
    return Collective(
        kind=kind,
        axis=",".join(axes),
        what=what,
        group=group,
        count=count,
        array_bytes=total // max(count, 1),
        bytes=ring_bytes(kind, total, group),
        inside_host=system.inside_host(mesh.axes, axes, kw.pop("devices_per_host")),
        **kw,
    )


def training_collectives(
    report: ParamReport,
    hparams: dict[str, Any],
    mesh: MeshSpec,
    setup: Training,
    step: Step,
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST,
    *,
    pipeline: Pipeline | None = None,
    share: StageShare | None = None,
) -> tuple[Collective, ...]:
    """Every collective of one training step on a device of ``mesh`` (module docstring), rows of a
    group of one left out: of the stage ``share`` (None: the whole model, no stages), for the
    ``pipeline``'s micro-batches (None: one)."""
    pipeline = pipeline or Pipeline()
    sizes = dict(mesh.axes)
    t = sizes.get(TENSOR_AXIS, 1)
    e = sizes.get(EXPERT_AXIS, 1)
    stages = sizes.get(STAGE_AXIS, 1)
    m = pipeline.micro_batches
    data_axes = [name for name, size in mesh.axes if name not in (TENSOR_AXIS, STAGE_AXIS) and size > 1]
    routed = [row for row in report.arrays if is_routed_expert(row)]
    if share is None:
        blocks, first, last = int(hparams["num_layers"]), True, True
        expert_values = sum(row.num_values for row in routed)
        dense_values = report.total_params - expert_values
        moe_blocks = len({row.module.split("/", 1)[0] for row in routed})
    else:
        blocks, first, last = share.num_blocks, share.first, share.last
        dense_values, expert_values = share.dense_values, share.expert_values
        moe_blocks = len({block_index(row.path) for row in routed} & set(share.blocks))
    compute = _itemsize(step.compute_dtype)
    tokens = step.micro_batch * step.sequence
    activation = tokens * int(hparams["d_model"]) * compute
    again = 1 if step.remat == "full" else 0  # the forward's collectives run again in the backward
    rows: list[Collective] = []
    common = {"devices_per_host": devices_per_host}

    def add(kind: str, axes: list[str], what: str, count: int, total: int, phase: str) -> None:
        """``count`` calls a micro-batch moving ``total`` bytes, run for each of the step's."""
        rows.append(_row(kind, axes, mesh, what, m * count, m * total, exposed=True, phase=phase, **common))

    if t > 1:
        tp = [TENSOR_AXIS]
        edges: tuple[tuple[str, str, str], ...]
        forward, backward = 2 * blocks, 2 * blocks * (1 + again)
        if step.sequence_parallel:
            for kind in ("all-gather", "reduce-scatter"):
                add(kind, tp, "tensor-parallel activations, forward", forward, forward * activation, "forward")
                add(kind, tp, "tensor-parallel activations, backward", backward, backward * activation, "backward")
            edges = (  # each all-reduce becomes a reduce-scatter one way, an all-gather the other
                ("reduce-scatter", "vocabulary-parallel embedding output, forward", "forward"),
                ("all-gather", "vocabulary-parallel embedding output's gradient, backward", "backward"),
                ("all-gather", "output layer's input, forward", "forward"),
                ("reduce-scatter", "output layer input's gradient, backward", "backward"),
            )
        else:
            add("all-reduce", tp, "tensor-parallel block outputs, forward", forward, forward * activation, "forward")
            add(
                "all-reduce",
                tp,
                "tensor-parallel block inputs' gradients, backward (and recomputed forward)",
                backward,
                backward * activation,
                "backward",
            )
            edges = (
                ("all-reduce", "vocabulary-parallel embedding output, forward", "forward"),
                ("all-reduce", "output layer input's gradient, backward", "backward"),
            )
        for kind, what, phase in edges:
            if first if "embedding" in what else last:
                add(kind, tp, what, 1, activation, phase)
        if last:
            add(
                "all-reduce",
                tp,
                "vocabulary-parallel cross-entropy (max, sum, target logit)",
                3,
                3 * tokens * 4,
                "forward",
            )
    if e > 1 and moe_blocks:
        copies = tokens * int(hparams["experts_per_token"]) * int(hparams["d_model"]) * compute
        for phase, count in (("forward", 2 * moe_blocks), ("backward", 2 * moe_blocks * (1 + again))):
            add("all-to-all", [EXPERT_AXIS], f"expert dispatch and combine, {phase}", count, count * copies, phase)
    if stages > 1:
        # Each stage but the last sends its activations on, each but the first their gradient back;
        # the slowest stage's device is counted as a middle one: both, once a model chunk.
        sent = activation // (t if step.sequence_parallel else 1)
        sends = pipeline.virtual_stages
        add(
            "collective-permute",
            [STAGE_AXIS],
            "pipeline activations to the next stage, forward",
            sends,
            sends * sent,
            "forward",
        )
        add(
            "collective-permute",
            [STAGE_AXIS],
            "pipeline activations' gradients to the previous stage, backward",
            sends,
            sends * sent,
            "backward",
        )
    # the calls a micro-batch: one a block, and one for the arrays outside the blocks where the stage holds them
    calls = blocks + (1 if first or last else 0)
    rows += _data_parallel(mesh, setup, data_axes, calls, t, e, common, dense_values, expert_values, m)
    return tuple(row for row in rows if row.group > 1 and row.count > 0)


def _data_parallel(
    mesh: MeshSpec,
    setup: Training,
    data_axes: list[str],
    calls: int,
    t: int,
    e: int,
    common: dict[str, Any],
    dense_values: int,
    expert_values: int,
    m: int,
) -> list[Collective]:
    groups = [(data_axes, dense_values // t, "")]
    if expert_values:
        groups.append(
            ([name for name in data_axes if name != EXPERT_AXIS], expert_values // (t * e), "routed experts' ")
        )
    rows = []
    param, grad = _itemsize(setup.param_dtype), _itemsize(setup.grads_dtype)
    for axes, values, whose in groups:
        if not axes or not values:
            continue
        if "params" in setup.shard:
            for phase in ("forward", "backward"):
                rows.append(
                    _row(
                        "all-gather",
                        axes,
                        mesh,
                        f"FSDP gathers of {whose}parameters, {phase}",
                        m * calls,
                        m * values * param,
                        exposed=False,
                        phase=phase,
                        **common,
                    )
                )
        kind = "reduce-scatter" if "grads" in setup.shard else "all-reduce"
        rows.append(
            _row(
                kind,
                axes,
                mesh,
                f"{whose}gradients",
                calls,
                values * grad,
                exposed=False,
                phase="backward",
                per_step=True,
                **common,
            )
        )
        if "params" not in setup.shard and setup.shard & {"optimizer", "master"}:
            rows.append(
                _row(
                    "all-gather",
                    axes,
                    mesh,
                    f"updated {whose}parameters after the split update",
                    1,
                    values * param,
                    exposed=True,
                    phase="update",
                    per_step=True,
                    **common,
                )
            )
    return rows


def comm_record(rows: tuple[Collective, ...]) -> list[dict[str, Any]]:
    """``comm_bytes_per_device``: one ``{kind, axis, bytes}`` a kind and axis, summed, with the
    calls and whether the axes run inside a host."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        entry = merged.setdefault(
            (row.kind, row.axis),
            {"kind": row.kind, "axis": row.axis, "bytes": 0, "calls": 0, "inside_host": row.inside_host},
        )
        entry["bytes"] += row.bytes
        entry["calls"] += row.count
    return list(merged.values())
