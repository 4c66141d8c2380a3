"""The training state each device holds: params, grads, master copy and optimizer state, laid out
by JAX's own sharding rules.

Parts the setup splits (``dcsim.memory.training``) follow the parameters' layout: the mesh, the
strategy and the rules place each parameter array exactly as ``dcsim.sharding.layout`` does, and
its gradient and master copy get the same ``PartitionSpec``. The layout composes as in Megatron-LM
and DeepSpeed: a strategy's splits over the model-parallel axes (``MODEL_PARALLEL_AXES``: tensor
``model``, ``expert``, pipeline ``stage``) split every part at every ZeRO stage, and the ZeRO stage
says which parts are also split over the data axes (every other axis). A part it does not split
keeps the strategy's spec with the data axes taken out (``over_model_axes``): whole over the data
axes, and whole on every device under ``fsdp`` and ``replicated``, whose splits are all data
parallelism. Before this composition dcsim kept such parts whole on every device under every
strategy (``COMPOSITION_CHANGED``).

The optimizer state is a real optax optimizer's, and so is its layout: ``optimizer.init`` is
evaluated abstractly (``jax.eval_shape``) on parameters that carry their shardings on an abstract
mesh whose axes are ``Explicit`` (JAX's sharding in types), so JAX itself propagates each
parameter's spec to the state it makes: Adam's moments take their parameter's spec, Adafactor's
factored moments its spec without the reduced dimension, and its one-value placeholders and the
int32 step counts are whole on every device. The state of one parameter depends only on its shape,
its dtype and its spec, so optax is asked once per distinct (shape, spec) and the answer is reused
for every array alike: llama2-70b's 723 arrays are six kinds.

Under JAX's rules every device of a mesh holds shards of the same shapes, so the most-loaded
device holds what every device holds, and ``per_device`` is exact for each. Bytes are Python ints
end to end: values x the dtype's size.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import jax
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from dcsim.memory import stages
from dcsim.memory import training as trainings
from dcsim.memory.stages import StageSplit
from dcsim.memory.training import PARTS, Training
from dcsim.model import optimizer as optimizers
from dcsim.model.count import ParamReport
from dcsim.model.optimizer import key_path
from dcsim.quantities import payload
from dcsim.sharding import layout
from dcsim.sharding.meshes import MeshSpec, Rule, abstract_mesh, entry_names, shape_text, spec_text

# The axes a strategy's split of a part survives at every ZeRO stage; every other axis is a data axis.
MODEL_PARALLEL_AXES = trainings.MODEL_PARALLEL_AXES  # (layout.TENSOR_AXIS, layout.EXPERT_AXIS, stages.STAGE_AXIS)
# The strategies that split over them; ``fsdp`` and ``replicated`` split over every axis at once or
# none, which is data parallelism alone (their expert split too: a part ZeRO does not split stays
# whole under them, as before).
MODEL_PARALLEL_STRATEGIES = trainings.MODEL_PARALLEL_STRATEGIES
MAX_CACHED_KINDS = 4096  # distinct (optimizer, dtype, shape, spec, axes): a 70B model has six
_PARAM = "p"  # the one parameter's key when optax is asked about one kind of array


@dataclasses.dataclass(frozen=True)
class Entry:
    """One state array optax makes for a parameter: where in its state (``0/mu``), its shape,
    dtype and spec."""

    prefix: str
    shape: tuple[int, ...]
    dtype: str
    spec: PartitionSpec


def _unit_mesh(names: tuple[str, ...]) -> AbstractMesh:
    """An abstract mesh with ``names``, every axis of size 1 and ``Explicit``: specs propagate as on
    any mesh of those axes (they depend on names, not sizes), and every spec divides every shape."""
    return AbstractMesh((1,) * len(names), names, axis_types=(AxisType.Explicit,) * len(names))


def same_spec(a: PartitionSpec, b: PartitionSpec, rank: int) -> bool:
    """Whether two specs lay an array of ``rank`` dimensions out alike (JAX writes ``P('data')`` for
    a 2-D array as ``P('data', None)``: trailing Nones say nothing)."""
    return (*a, *([None] * (rank - len(a)))) == (*b, *([None] * (rank - len(b))))


def trimmed(spec: PartitionSpec) -> PartitionSpec:
    """``spec`` without trailing Nones (``P()``: whole): JAX's propagation writes the same layout as
    ``P('data', None)`` that the layout writes ``P('data')``."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


def _spec(leaf: Any) -> PartitionSpec:
    """A leaf's spec as the layout writes specs (``trimmed``; whole when it has no sharding)."""
    sharding = getattr(leaf, "sharding", None)
    return trimmed(sharding.spec) if isinstance(sharding, NamedSharding) else PartitionSpec()


@functools.lru_cache(maxsize=MAX_CACHED_KINDS)
def state_entries(
    name: str, dtype: str, shape: tuple[int, ...], spec: PartitionSpec, names: tuple[str, ...]
) -> tuple[Entry, ...]:
    """The state optax ``name`` makes for one parameter of ``shape`` and ``dtype`` laid out as
    ``spec`` on a mesh with axes ``names``, with the specs JAX gives it."""
    mesh = _unit_mesh(names)
    leaf = jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))
    make = optimizers.OPTIMIZERS[name][1]
    with jax.sharding.use_abstract_mesh(mesh), jax.enable_x64(dtype == "float64"):
        state = jax.eval_shape(make().init, {_PARAM: leaf})
    entries = []
    for keys, value in jax.tree_util.tree_flatten_with_path(state)[0]:
        if keys and key_path(keys[-1:]) == _PARAM:  # the parameter's own state; the rest is global
            entries.append(
                Entry(key_path(keys[:-1]), tuple(int(d) for d in value.shape), str(value.dtype), _spec(value))
            )
    return tuple(entries)


@functools.lru_cache(maxsize=64)
def global_entries(name: str) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """The state optax ``name`` keeps whatever the parameters (its step counts): ``(path, shape, dtype)``."""
    state = jax.eval_shape(optimizers.OPTIMIZERS[name][1]().init, {})
    return tuple(
        (key_path(keys), tuple(int(d) for d in value.shape), str(value.dtype))
        for keys, value in jax.tree_util.tree_flatten_with_path(state)[0]
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateArray:
    """One array of the training state on the mesh.

    Attributes:
      path: the parameter's path for params, grads and master; optax's path in its state for the
        optimizer (``0/mu/block_0/attn/query/kernel``, ``0/count``).
      part: ``params``, ``grads``, ``master`` or ``optimizer``.
      shape, dtype: the whole array.
      spec: its PartitionSpec (``P()``: whole on every device).
      shard_shape: what each device holds of it (JAX's ``shard_shape`` of ``stored_shape``).
      note: why it is laid out so.
      stored_shape: the shape laid out: ``shape``, or the megatron strategy's padded vocabulary or
        repeated KV heads (``dcsim.sharding.layout.ArrayLayout.stored_shape``).
      bytes_per_device: bytes each device holds of it, set from ``shard_shape`` and ``dtype`` (not
        given), so no array carries bytes its shard does not hold.
    """

    path: str
    part: str
    shape: tuple[int, ...]
    dtype: str
    spec: PartitionSpec
    shard_shape: tuple[int, ...]
    note: str
    stored_shape: tuple[int, ...]
    bytes_per_device: int = dataclasses.field(init=False)  # set from the shard and the dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes_per_device", payload.raw_bytes_as(math.prod(self.shard_shape), self.dtype))

    @property
    def num_values(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def bytes(self) -> int:
        """The whole array's bytes, once."""
        return payload.raw_bytes_as(self.num_values, self.dtype)

    @property
    def values_per_device(self) -> int:
        return math.prod(self.shard_shape)

    @property
    def spec_text(self) -> str:
        return str(self.spec)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryReport:
    """The training state of a model on a mesh: every array, and exact totals per device."""

    mesh: MeshSpec
    strategy: str
    rules: tuple[Rule, ...]
    training: Training
    arrays: tuple[StateArray, ...]
    # With a ``stage`` axis: each stage's figures, and which stage's device ``arrays`` holds
    # (``dcsim.memory.stages``); None without one.
    pipeline: StageSplit | None = None

    @property
    def num_devices(self) -> int:
        return self.mesh.num_devices

    def part_bytes(self, part: str) -> int:
        """Bytes one device holds of ``part`` (every device holds the same)."""
        return sum(row.bytes_per_device for row in self.arrays if row.part == part)

    @property
    def per_device(self) -> dict[str, int]:
        """``{params_bytes, grads_bytes, master_bytes, optimizer_bytes, total_bytes}`` of a device."""
        parts = {f"{part}_bytes": self.part_bytes(part) for part in PARTS}
        return {**parts, "total_bytes": sum(parts.values())}

    @functools.cached_property
    def total_bytes_per_device(self) -> int:
        return sum(row.bytes_per_device for row in self.arrays)

    @functools.cached_property
    def total_bytes(self) -> int:
        """The state once, without replicas: every array's bytes (of every stage)."""
        if self.pipeline is not None:
            return self.pipeline.total_bytes
        return sum(row.bytes for row in self.arrays)

    def part_total_bytes(self, part: str) -> int:
        return sum(row.bytes for row in self.arrays if row.part == part)

    def part_arrays(self, part: str) -> list[StateArray]:
        return [row for row in self.arrays if row.part == part]

    def part_dtypes(self, part: str) -> list[str]:
        """The dtypes ``part`` is stored in, in order of first use (Adam's moments, then its int32 count)."""
        return list(dict.fromkeys(row.dtype for row in self.arrays if row.part == part))

    @property
    def ideal_bytes_per_device(self) -> Fraction:
        """All state bytes over the devices, exactly: an average, not a layout."""
        return Fraction(self.total_bytes, self.num_devices)

    @property
    def largest(self) -> StateArray:
        """The array that takes the most bytes on a device (the first on a tie)."""
        return max(self.arrays, key=lambda row: row.bytes_per_device)

    def is_even(self, row: StateArray) -> bool:
        """Whether each device holds exactly 1 / devices of ``row`` (of its stage's devices)."""
        devices = self.num_devices if self.pipeline is None else self.pipeline.devices_per_stage
        return row.values_per_device * devices == row.num_values

    @property
    def num_arrays(self) -> int:
        return len(self.arrays)

    def part_layout(self, part: str) -> str:
        """``split`` (over the data axes too), ``whole over data`` (the strategy's split over the
        model-parallel axes alone: the ZeRO stage does not split it) or ``whole`` (on every device)."""
        if part in self.training.shard:
            return "split"
        rows = self.pipeline.arrays if self.pipeline is not None else self.arrays
        return "whole over data" if any(row.spec for row in rows if row.part == part) else "whole"


def over_model_axes(spec: PartitionSpec, strategy: str) -> PartitionSpec:
    """``spec`` with its data axes taken out: what a part the ZeRO stage does not split keeps of the
    strategy's layout (``P()``, whole, under ``fsdp`` and ``replicated``)."""
    if strategy not in MODEL_PARALLEL_STRATEGIES:
        return PartitionSpec()
    entries: list[Any] = []
    for entry in spec:
        kept = tuple(name for name in entry_names(entry) if name in MODEL_PARALLEL_AXES)
        entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    return trimmed(PartitionSpec(*entries))


def _why_not_split(training: Training, part: str) -> str:
    if training.zero is not None:
        return f"ZeRO-{training.zero} does not split the {part}"
    return f"the {part} are not among the parts to shard"


def _unsplit_note(training: Training, part: str, mesh: MeshSpec, spec: PartitionSpec, layout_note: str) -> str:
    """Why a part the setup does not split is laid out as it is: whole on every device, or the
    strategy's split over the model-parallel axes and whole over the data axes."""
    if not spec:
        return f"whole on every device: {_why_not_split(training, part)}"
    return f"{layout_note}; {_whole_over(training, part, mesh, spec)}"


def _whole_over(training: Training, part: str, mesh: MeshSpec, spec: PartitionSpec) -> str:
    """``whole over `data`: ZeRO-0 does not split the grads``: the axes of more than one device that
    ``spec`` (a part the setup does not split) leaves unused, and why."""
    used = {name for entry in spec for name in entry_names(entry)}
    over = ", ".join(f"`{name}`" for name, size in mesh.axes if size > 1 and name not in used)
    if not over:
        return f"no data axis to split it over ({_why_not_split(training, part)})"
    return f"whole over {over}: {_why_not_split(training, part)}"


def compute_memory(
    report: ParamReport,
    mesh: MeshSpec,
    strategy: str,
    rules: Sequence[Rule],
    training: Training,
    *,
    by_stage: bool = True,
    stage_activations: Callable[[tuple[range, ...]], tuple[int, ...]] | None = None,
) -> MemoryReport:
    """Lay ``training``'s state for the model counted as ``report`` out on ``mesh``.

    With a ``stage`` axis (and ``by_stage``), each device holds its own stage's arrays
    (``dcsim.memory.stages``), and the report shows the device of the stage that holds the most:
    ``stage_activations(blocks)`` gives each stage's residuals to weigh with its state (none: the
    state alone). ``by_stage=False`` lays the stage axis out as any data axis (a checkpoint's
    arrays, which every stage saves its part of).

    Raises ValueError (a ``layout.LayoutError`` naming every array) when a part that is split
    cannot be laid out by the strategy on this mesh, as ``dcsim.sharding.layout.compute_layout``
    does; with nothing split the strategy is not consulted.
    """
    if not isinstance(training, Training):
        raise TypeError(f"training must be a dcsim.memory.training.Training, got {type(training).__name__}")
    if by_stage and stages.num_stages(mesh.axes) > 1:
        return _by_stage(report, mesh, strategy, rules, training, stage_activations)
    rules = tuple(rules)
    jax_mesh = abstract_mesh(mesh)
    whole = PartitionSpec()
    if training.sharded_parts or strategy in MODEL_PARALLEL_STRATEGIES:
        laid = layout.compute_layout(report, mesh, strategy, rules)
        specs = {row.path: (row.spec, row.note) for row in laid.arrays}
        # The shape JAX splits: the counted one, or megatron's padded vocabulary and repeated KV heads.
        stored = {row.path: row.stored_shape for row in laid.arrays}
    else:
        layout.check_strategy(mesh, strategy, rules)
        specs = {row.path: (whole, "") for row in report.arrays}
        stored = {}

    def placed(path: str, part: str, shape: tuple[int, ...]) -> tuple[PartitionSpec, str, tuple[int, ...]]:
        """``part``'s spec, note and laid-out shape for the parameter at ``path``: the strategy's
        layout where the setup splits it, that layout over the model-parallel axes alone where not."""
        spec, note = specs[path]
        if part in training.shard:
            return spec, note, stored.get(path, shape)
        kept = over_model_axes(spec, strategy)
        what = "optimizer state" if part == "optimizer" else part
        return kept, _unsplit_note(training, what, mesh, kept, note), stored.get(path, shape) if kept else shape

    shard_shapes: dict[tuple[tuple[int, ...], PartitionSpec], tuple[int, ...]] = {}

    def shard_shape(shape: tuple[int, ...], spec: PartitionSpec) -> tuple[int, ...]:
        key = (shape, spec)
        if key not in shard_shapes:
            shard_shapes[key] = tuple(int(d) for d in NamedSharding(jax_mesh, spec).shard_shape(shape))
        return shard_shapes[key]

    def row(
        path: str,
        part: str,
        shape: tuple[int, ...],
        dtype: str,
        spec: PartitionSpec,
        note: str,
        laid_out: tuple[int, ...] | None = None,
    ) -> StateArray:
        laid_out = shape if laid_out is None else laid_out
        held = shard_shape(laid_out, spec)
        return StateArray(
            path=path,
            part=part,
            shape=shape,
            dtype=dtype,
            spec=spec,
            shard_shape=held,
            note=note,
            stored_shape=laid_out,
        )

    rows: list[StateArray] = []
    for part in ("params", "grads", "master"):
        if part not in training.parts:
            continue
        for array in report.arrays:
            shape = tuple(array.shape)
            spec, note, laid_out = placed(array.path, part, shape)
            rows.append(row(array.path, part, shape, training.dtype_of(part), spec, note, laid_out))
    split = "optimizer" in training.shard
    dtype = training.state_dtype
    by_prefix: dict[str, list[StateArray]] = {}
    for array in report.arrays:
        shape = tuple(array.shape)
        spec, layout_note, laid_out = placed(array.path, "optimizer", shape)
        for entry in state_entries(training.optimizer, dtype, laid_out, spec, mesh.names):
            entry_shape = entry.shape
            if entry.shape == laid_out and same_spec(entry.spec, spec, len(shape)):
                note = f"laid out like its parameter: {layout_note}" if split or spec else layout_note
                entry_shape = shape  # the parameter's own shape, laid out as the parameter is
            elif len(entry.shape) == len(shape) - 1:
                note = (
                    f"{training.optimizer}'s factored moment of a {shape_text(shape)} parameter, laid out as JAX "
                    f"propagates its spec ({spec_text(spec) or 'whole'}) without the reduced dimension"
                    + (
                        ""
                        if split
                        else f"; {_whole_over(training, 'optimizer state', mesh, spec) if spec else layout_note}"
                    )
                )
            else:
                note = f"a {shape_text(entry.shape)} placeholder {training.optimizer} keeps whole on every device"
            path = f"{entry.prefix}/{array.path}"
            by_prefix.setdefault(entry.prefix, []).append(
                row(path, "optimizer", entry_shape, entry.dtype, entry.spec, note, entry.shape)
            )
    for path, shape, dtype in global_entries(training.optimizer):
        rows.append(row(path, "optimizer", shape, dtype, whole, "a step count: one value, whole on every device"))
    for prefix_rows in by_prefix.values():
        rows.extend(prefix_rows)
    return MemoryReport(mesh=mesh, strategy=strategy, rules=rules, training=training, arrays=tuple(rows))


def _by_stage(
    report: ParamReport,
    mesh: MeshSpec,
    strategy: str,
    rules: Sequence[Rule],
    training: Training,
    stage_activations: Callable[[tuple[range, ...]], tuple[int, ...]] | None,
) -> MemoryReport:
    """``compute_memory`` on a mesh with a ``stage`` axis (``dcsim.memory.stages``): every array laid
    out on the mesh with ``stage`` at 1, then each device's share summed over its own stage's."""
    count = stages.num_stages(mesh.axes)
    num_layers = len({index for row in report.arrays if (index := stages.block_index(row.path)) is not None})
    if num_layers == 0:
        raise ValueError(
            f"a `{stages.STAGE_AXIS}` axis splits a model's blocks into pipeline stages, and this model has none "
            f"(no block_N arrays): leave `{stages.STAGE_AXIS}` out of the mesh, or give it size 1"
        )
    blocks = stages.stage_blocks(num_layers, count)
    tied = not any(row.path.startswith("lm_head/") for row in report.arrays)
    within = MeshSpec(tuple((name, 1 if name == stages.STAGE_AXIS else size) for name, size in mesh.axes))
    laid = compute_memory(report, within, strategy, rules, training, by_stage=False)
    members = [stages.stage_of(row.path, blocks, tied) for row in laid.arrays]
    state = tuple(
        sum(row.bytes_per_device for row, held in zip(laid.arrays, members, strict=True) if stage in held)
        for stage in range(count)
    )
    activations = None if stage_activations is None else tuple(stage_activations(blocks))
    chosen = stages.most_loaded(state, activations)
    split = stages.StageSplit(
        stage=chosen,
        blocks=blocks,
        state_bytes=state,
        activation_bytes=activations,
        total_bytes=laid.total_bytes,
        devices_per_stage=mesh.num_devices // count,
        arrays=laid.arrays,
    )
    rows = tuple(row for row, held in zip(laid.arrays, members, strict=True) if chosen in held)
    return MemoryReport(
        mesh=mesh, strategy=strategy, rules=tuple(rules), training=training, arrays=rows, pipeline=split
    )


# --- sweeps: what a device holds on many meshes, by shape ------------------------------------------


def per_device_by_shape(
    shapes: Counter[tuple[int, ...]] | dict[tuple[int, ...], int],
    mesh: MeshSpec,
    strategy: str,
    training: Training,
    splitter: layout.Splitter | None = None,
) -> dict[str, tuple[int, int]]:
    """``{part: (values, bytes)}`` one device holds on ``mesh``, for parameters given as
    ``{shape: how many arrays}``: ``compute_memory``'s figures (the tests compare them mesh by mesh)
    at the cost of a few JAX calls, for sweeps over thousands of meshes.

    Only for strategies that place by shape alone (see ``layout.specs_by_shape``, which raises
    ``LayoutError`` where the strategy cannot place an array).
    """
    splitter = splitter or layout.Splitter(mesh)
    counts = Counter({tuple(shape): count for shape, count in dict(shapes).items()})
    if training.sharded_parts or strategy in MODEL_PARALLEL_STRATEGIES:
        placed = layout.specs_by_shape(list(counts), mesh, strategy, splitter)
    else:
        layout.check_strategy(mesh, strategy, ())
        placed = {}
    totals: dict[str, tuple[int, int]] = {}

    def add(part: str, values: int, dtype: str) -> None:
        held, size = totals.get(part, (0, 0))
        totals[part] = (held + values, size + payload.raw_bytes_as(values, dtype))

    whole = PartitionSpec()
    for shape, count in counts.items():
        spec, values = placed.get(shape, (whole, math.prod(shape)))
        kept = over_model_axes(spec, strategy)
        kept_values = splitter.values(shape, kept)
        for part in ("params", "grads", "master"):
            if part in training.parts:
                held = values if part in training.shard else kept_values
                add(part, held * count, training.dtype_of(part))
        state_spec = spec if "optimizer" in training.shard else kept
        for entry in state_entries(training.optimizer, training.state_dtype, shape, state_spec, mesh.names):
            add("optimizer", splitter.values(entry.shape, entry.spec) * count, entry.dtype)
    for _, shape, dtype in global_entries(training.optimizer):
        add("optimizer", math.prod(shape), dtype)
    return totals
