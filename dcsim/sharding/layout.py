"""Real shard layouts: what each device of a mesh holds, by JAX's own sharding rules.

An ideal share (total / devices) is an average; it cannot say whether an even split exists, how
many values a device stores, or what is replicated. This module asks JAX: a
``jax.sharding.AbstractMesh`` (axis names and sizes, no devices needed), one ``PartitionSpec`` per
parameter array, and ``NamedSharding(mesh, spec).shard_shape(shape)`` for each. Divisibility and
replication are whatever JAX says: an uneven split is whatever JAX refuses, and the copies of an
array are the mesh axes its spec leaves unused (``NamedSharding.replicated_axes``). JAX's refusal
(``IndivisibleError``, private, naming an axis index) is caught and said again in the person's
terms: the parameter path, its dimension and size, the mesh axes and their sizes.

Under JAX's rules every device of a mesh holds shards of the same shapes, so one device's values
times the number of devices is what the whole mesh stores. Replicas in memory are not copies on
disk: a checkpoint writes a replicated array once.

The strategies, and how they treat the stacked arrays of Mixture-of-Experts blocks on a mesh with
an ``expert`` axis, are ``dcsim.sharding.placement``'s: one array at a time. This module lays a
whole model out with them and adds up what each device holds.

Counts are Python ints and exact ``Fraction``s end to end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from jax.sharding import NamedSharding, PartitionSpec

from dcsim.model.count import ParamReport
from dcsim.model.moe import EXPERTS as EXPERTS_MODULE
from dcsim.model.totals import ArrayTotals
from dcsim.quantities import payload
from dcsim.sharding import megatron, shares
from dcsim.sharding.meshes import MeshSpec, Rule, abstract_mesh, axes_text, entry_names, spec_text
from dcsim.sharding.meshes import shape_text as shape_text
from dcsim.sharding.placement import EXPERT_AXIS as EXPERT_AXIS
from dcsim.sharding.placement import NUM_EXPERTS, Placement, check_strategy, place
from dcsim.sharding.placement import STRATEGIES as STRATEGIES
from dcsim.sharding.placement import TENSOR_AXIS as TENSOR_AXIS
from dcsim.sharding.placement import is_expert as is_expert

REPLICAS_NOT_ON_DISK = (
    "replicas in memory are not copies on disk: a checkpoint writes a replicated array once, "
    "so total stored values across the mesh is not a checkpoint size"
)


def _placements(report: ParamReport, mesh: MeshSpec, strategy: str, rules: Sequence[Rule]) -> list[Placement]:
    if not isinstance(report, ParamReport):
        raise TypeError(f"a report must be a dcsim.model.count.ParamReport, got {type(report).__name__}")
    checked = check_strategy(mesh, strategy, rules)
    jax_mesh = abstract_mesh(mesh)
    # Megatron splits by heads, which only the shapes of an attention module's kernels tell.
    heads = megatron.attention_heads(report) if strategy == "megatron" else {}
    placements, problems = [], []
    for row in report.arrays:
        module = megatron.attention_module(row) if heads else None
        try:
            placements.append(place(row, mesh, jax_mesh, strategy, checked, heads.get(module) if module else None))
        except ValueError as err:
            problems.append((row.path, str(err)))
    if problems:
        if heads:  # the heads decide whether a tensor size can serve the model at all: say them first
            attention = {row.path for row in report.arrays if megatron.attention_module(row)}
            problems.sort(key=lambda problem: problem[0] not in attention)
        raise LayoutError(problems)
    return placements


class Splitter:
    """JAX's shard sizes on one mesh, asked once per distinct (dimension size, mesh entry).

    ``split(size, entry)`` is the size of a dimension of ``size`` split over ``entry`` (an axis
    name, a tuple of names, or None), or None when JAX would refuse: JAX splits a dimension only
    into equal parts, so a size the entry's devices do not divide is not asked about (the refusal,
    an exception with its message, is the costly path). Every split made is JAX's
    ``NamedSharding.shard_shape``, which splits each dimension on its own, so a shape's shard shape
    is its dimensions' answers side by side (``values``). Sweeps over thousands of meshes use it:
    llama2-70b's 723 arrays have six distinct dimension sizes, so a mesh costs a few JAX calls.
    """

    def __init__(self, mesh: MeshSpec) -> None:
        self.mesh = mesh
        self.jax_mesh = abstract_mesh(mesh)
        self._answers: dict[tuple[int, Any], int | None] = {}
        self._shardings: dict[Any, NamedSharding] = {}

    def split(self, size: int, entry: Any) -> int | None:
        if entry is None:
            return size
        key = (size, entry)
        if key not in self._answers:
            if size % math.prod(self.mesh.shape[name] for name in entry_names(entry)):
                self._answers[key] = None
                return None
            if entry not in self._shardings:
                self._shardings[entry] = NamedSharding(self.jax_mesh, PartitionSpec(entry))
            try:
                self._answers[key] = int(self._shardings[entry].shard_shape((size,))[0])
            except ValueError:
                self._answers[key] = None
        return self._answers[key]

    def values(self, shape: tuple[int, ...], spec: PartitionSpec) -> int:
        """Values one device holds of an array of ``shape`` under ``spec`` (which must divide it)."""
        total = 1
        for index, size in enumerate(shape):
            part = self.split(size, spec[index] if index < len(spec) else None)
            if part is None:
                raise ValueError(f"{spec_text(spec)} does not divide {shape_text(shape)} on the mesh {self.mesh.text}")
            total *= part
        return total


def specs_by_shape(
    shapes: Sequence[tuple[int, ...]], mesh: MeshSpec, strategy: str, splitter: Splitter | None = None
) -> dict[tuple[int, ...], tuple[PartitionSpec, int]]:
    """The PartitionSpec, and the values one device holds, of an array of each distinct shape, as
    ``compute_layout`` gives every array of that shape, for sweeps over thousands of meshes.

    Only for strategies whose placement depends on the shape alone (``replicated``, ``fsdp``,
    ``tensor``; ``custom`` rules match paths, and ``megatron`` tells a query from an MLP's up
    projection by path: both are refused with a ValueError). The strategy's rule is
    ``placement.place``'s, and JAX makes every split (``Splitter``). The tests compare the result
    with ``compute_layout`` array by array. Raises ``LayoutError`` naming each shape that cannot be
    placed, as ``compute_layout`` would.

    A mesh with an ``expert`` axis is refused (ValueError): it splits expert arrays apart from
    dense ones, which shapes cannot tell. On any other mesh expert arrays are placed like dense
    ones, so the budget's one-axis meshes (``data=N``, ``model=N``) get ``compute_layout``'s numbers.
    """
    if strategy == "custom":
        raise ValueError("custom rules match array paths, so a layout by shape alone cannot apply them")
    if strategy == "megatron":
        raise ValueError(
            "the megatron strategy places each array by what its layer does (its path: a query is split on its "
            "heads, an MLP's down projection on its inputs), so a layout by shape alone cannot apply it; lay the "
            "model out with compute_layout"
        )
    check_strategy(mesh, strategy, ())
    if EXPERT_AXIS in mesh.names:
        raise ValueError(
            f"the mesh {mesh.text} has an `{EXPERT_AXIS}` axis, which splits expert arrays apart from dense "
            "arrays of the same shape; a layout by shape alone cannot tell them apart, so lay the model out "
            "with compute_layout"
        )
    splitter = splitter or Splitter(mesh)
    everything = mesh.names if len(mesh.names) > 1 else mesh.names[0]
    placed: dict[tuple[int, ...], tuple[PartitionSpec, int]] = {}
    problems = []
    for shape in dict.fromkeys(tuple(shape) for shape in shapes):
        total = math.prod(shape)
        if strategy == "replicated":
            placed[shape] = (PartitionSpec(), total)
        elif strategy == "fsdp":  # placement.place's rule: the largest dimension JAX splits, the first on a tie
            placed[shape] = (PartitionSpec(), total)
            for index in sorted(range(len(shape)), key=lambda i: (-shape[i], i)):
                part = splitter.split(shape[index], everything)
                if part is not None:
                    placed[shape] = (PartitionSpec(*([None] * index), everything), total // shape[index] * part)
                    break
        else:  # tensor: the last dimension over `model`, copied over every other axis
            part = splitter.split(shape[-1], TENSOR_AXIS) if shape else None
            if part is None:
                path = f"an array of shape {shape_text(shape)}"
                why = (
                    "a scalar has no last dimension to split"
                    if not shape
                    else f"its last dimension has size {shape[-1]:,}, which {axes_text(mesh, (TENSOR_AXIS,))} "
                    "does not divide evenly"
                )
                problems.append((path, f"`{path}` cannot be split as the tensor strategy asks: {why}"))
                continue
            placed[shape] = (PartitionSpec(*([None] * (len(shape) - 1)), TENSOR_AXIS), total // shape[-1] * part)
    if problems:
        raise LayoutError(problems)
    return placed


def shard_values_by_shape(
    shapes: Sequence[tuple[int, ...]], mesh: MeshSpec, strategy: str
) -> dict[tuple[int, ...], int]:
    """The values one device holds of an array of each distinct shape (``specs_by_shape``)."""
    return {shape: values for shape, (_, values) in specs_by_shape(shapes, mesh, strategy).items()}


class LayoutError(ValueError):
    """Arrays the requested layout cannot place on the mesh.

    ``problems`` lists every one as ``(path, message)``, in array order (megatron: attention
    arrays first, since the heads decide whether a tensor size can serve the model), so a table can
    flag each row; the error's own text is the first message, and how many more there are, on one line.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0][1]
        more = [path for path, _ in self.problems[1:]]
        if more:
            shown = ", ".join(f"`{path}`" for path in more[:3]) + (", ..." if len(more) > 3 else "")
            first += f"; {len(more):,} more array{'s' * (len(more) != 1)} cannot be placed either ({shown})"
        super().__init__(first)


def partition_specs(
    report: ParamReport, mesh: MeshSpec, strategy: str, rules: Sequence[Rule] = ()
) -> dict[str, PartitionSpec]:
    """The PartitionSpec of every parameter array, keyed by ``ArrayRow.path``.

    Raises ValueError, in the person's terms, when the strategy cannot lay the model out on this
    mesh: a plain ValueError for the request as a whole (e.g. ``tensor`` on a mesh without
    ``model``), a ``LayoutError`` listing every array it cannot place (e.g. a last dimension that
    ``model`` does not divide).
    """
    placements = _placements(report, mesh, strategy, rules)
    return {row.path: placement.spec for row, placement in zip(report.arrays, placements, strict=True)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayLayout:
    """Where one parameter array lives on the mesh.

    Attributes:
      path, shape, dtype, num_values: the array, as counted.
      spec: its PartitionSpec (``partition_spec`` is its text, ``rule_spec`` the rule syntax).
      stored_shape: the shape laid out: ``shape``, unless the strategy lays out a padded or
        repeated array (megatron's padded vocabulary and repeated KV heads; the note says why).
      shard_shape: the shape each device holds (JAX's ``shard_shape`` of ``stored_shape``).
      values_per_shard: values each device holds of this array.
      replication_factor: copies of each value across the mesh (1 = not replicated): the product
        of the mesh axes the spec leaves unused.
      stored_values: values_per_shard x number of devices.
      replicated_fallback: True when the strategy had to replicate the array (fsdp found no
        dimension to split; no custom rule matched).
      expert: True for a stacked expert array (``placement.is_expert``: num_experts is dimension 0).
      note: why the array is laid out so.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    num_values: int
    spec: PartitionSpec
    shard_shape: tuple[int, ...]
    values_per_shard: int
    replication_factor: int
    stored_values: int
    replicated_fallback: bool
    expert: bool
    note: str
    stored_shape: tuple[int, ...]

    @property
    def partition_spec(self) -> str:
        """The spec as JAX writes it: ``P(None, 'model')``, ``P()`` when replicated."""
        return str(self.spec)

    @property
    def rule_spec(self) -> str:
        """The spec in rule syntax (``None,model``; empty when replicated), ready for a rule."""
        return spec_text(self.spec)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutReport(ArrayTotals):
    """A model laid out on a mesh: per-array rows and exact totals.

    ``ideal_share`` is total / devices; ``values_per_device`` is what each device really holds.
    """

    mesh: MeshSpec
    strategy: str
    rules: tuple[Rule, ...]
    arrays: tuple[ArrayLayout, ...]

    @property
    def num_devices(self) -> int:
        return self.mesh.num_devices

    @property
    def values_per_device(self) -> int:
        return sum(row.values_per_shard for row in self.arrays)

    @property
    def raw_float32_bytes_per_device(self) -> int:
        return payload.raw_bytes(self.values_per_device, "float32")

    @property
    def total_stored_values(self) -> int:
        return self.values_per_device * self.num_devices

    @property
    def ideal_share(self) -> shares.IdealShare:
        return shares.ideal_share(self.total_params, self.num_devices)

    @property
    def replication_factor(self) -> Fraction | None:
        """Stored values over total values (1 = nothing replicated); None for an empty model."""
        return Fraction(self.total_stored_values, self.total_params) if self.total_params else None

    @property
    def gap(self) -> Fraction:
        """Values per device minus the ideal share, exactly (0 when the layout is ideal)."""
        return self.values_per_device - self.ideal_share.exact

    @property
    def gap_ratio(self) -> Fraction | None:
        """Values per device over the ideal share (1 when ideal); equal to the replication factor."""
        ideal = self.ideal_share.exact
        return Fraction(self.values_per_device) / ideal if ideal else None

    @property
    def num_replicated_fallbacks(self) -> int:
        return sum(row.replicated_fallback for row in self.arrays)

    @property
    def num_expert_arrays(self) -> int:
        return sum(row.expert for row in self.arrays)


def num_expert_arrays(report: ParamReport) -> int:
    """How many of the model's arrays are stacked expert arrays (``placement.is_expert``)."""
    return sum(is_expert(row) for row in report.arrays)


def experts_note(mesh: MeshSpec, num_experts: int) -> str | None:
    """What the mesh's ``expert`` axis does to a model with ``num_experts`` expert arrays, as a
    sentence the page and the command line both show; None for a mesh without one."""
    if EXPERT_AXIS not in mesh.names:
        return None
    axis = axes_text(mesh, (EXPERT_AXIS,))
    if not num_experts:
        return (
            f"This model has no experts (no arrays under a module named `{EXPERTS_MODULE}`), so {axis} acts as "
            "one more data axis: fsdp splits arrays over it with the other axes, tensor and replicated copy "
            "every array over it."
        )
    return (
        f"{num_experts:,} expert array{'s' * (num_experts != 1)} (under modules named `{EXPERTS_MODULE}`): "
        f"the built-in strategies split their {NUM_EXPERTS} over {axis}. For dense arrays `{EXPERT_AXIS}` is "
        "one more data axis: fsdp splits them over it with the other axes, tensor and replicated copy them "
        f"over it. Custom rules name `{EXPERT_AXIS}` like any other axis."
    )


def compute_layout(report: ParamReport, mesh: MeshSpec, strategy: str, rules: Sequence[Rule] = ()) -> LayoutReport:
    """Lay every parameter array of ``report`` out on ``mesh`` with JAX; see ``partition_specs``."""
    placements = _placements(report, mesh, strategy, rules)
    jax_mesh = abstract_mesh(mesh)
    rows = []
    for row, placement in zip(report.arrays, placements, strict=True):
        unused = NamedSharding(jax_mesh, placement.spec).replicated_axes
        replication = math.prod(mesh.shape[name] for name in unused)
        values = math.prod(placement.shard_shape)
        rows.append(
            ArrayLayout(
                path=row.path,
                shape=tuple(row.shape),
                dtype=row.dtype,
                num_values=row.num_values,
                spec=placement.spec,
                shard_shape=placement.shard_shape,
                values_per_shard=values,
                replication_factor=replication,
                stored_values=values * mesh.num_devices,
                replicated_fallback=placement.replicated_fallback,
                expert=is_expert(row),
                note=placement.note,
                stored_shape=tuple(row.shape) if placement.stored_shape is None else placement.stored_shape,
            )
        )
    return LayoutReport(mesh=mesh, strategy=strategy, rules=tuple(rules), arrays=tuple(rows))
