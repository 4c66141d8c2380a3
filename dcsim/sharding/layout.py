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

Strategies (``partition_specs``):

- ``replicated``: every device holds every array.
- ``fsdp``: each array is split along one dimension over all mesh axes together (the product of
  their sizes): the largest dimension JAX can split evenly, the first on a tie. An array with no
  such dimension is replicated and flagged.
- ``tensor``: the last dimension is split over the mesh axis named ``model``, replicated over the
  others. A mesh without ``model``, or a last dimension that does not divide, is an error.
- ``custom``: ordered ``PATTERN=SPEC`` rules. PATTERN is a glob (``fnmatch.fnmatchcase``, so ``*``
  also crosses ``/``) on the array path, never a regular expression; SPEC has one entry per
  leading dimension: ``None``, a mesh axis, or axes joined by ``+``. A SPEC shorter than the
  array's rank leaves the remaining dimensions whole (JAX's rule); an empty SPEC replicates. The
  first matching rule wins; unmatched arrays are replicated and flagged.

Counts are Python ints and exact ``Fraction``s end to end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from dcsim.inputs import show
from dcsim.model.count import ArrayRow, ParamReport
from dcsim.sharding import payload, shares
from dcsim.sharding.meshes import MAX_RULES, MeshSpec, Rule, abstract_mesh, spec_text

STRATEGIES = ("replicated", "fsdp", "tensor", "custom")
TENSOR_AXIS = "model"
REPLICAS_NOT_ON_DISK = (
    "replicas in memory are not copies on disk: a checkpoint writes a replicated array once, "
    "so total stored values across the mesh is not a checkpoint size"
)


def shape_text(shape: Sequence[int]) -> str:
    """``4x8``, or ``scalar`` for a shape of no dimensions."""
    return "x".join(str(dim) for dim in shape) if shape else "scalar"


def _axes_text(mesh: MeshSpec, names: Sequence[str]) -> str:
    if len(names) == 1:
        return f"mesh axis `{names[0]}` (size {mesh.shape[names[0]]:,})"
    sizes = [mesh.shape[name] for name in names]
    return (
        f"mesh axes {' x '.join(f'`{name}`' for name in names)} "
        f"(sizes {' x '.join(f'{size:,}' for size in sizes)} = {math.prod(sizes):,})"
    )


def _entry_names(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _shard_shape(mesh: MeshSpec, jax_mesh: AbstractMesh, spec: PartitionSpec, row: ArrayRow, why: str) -> tuple:
    """JAX's shard shape of ``row`` under ``spec``, or a ValueError in the person's terms."""
    shape = tuple(row.shape)
    sharding = NamedSharding(jax_mesh, spec)
    try:
        sharding.check_compatible_aval(shape)
    except ValueError:
        raise ValueError(
            f"`{row.path}` (shape {shape_text(shape)}) has {len(shape)} dimension{'s' * (len(shape) != 1)} but "
            f"{why} gives {len(spec)} spec entries ({spec_text(spec)})"
        ) from None
    try:
        return tuple(int(dim) for dim in sharding.shard_shape(shape))
    except ValueError as err:
        # JAX names an axis index; find which dimension it refused by asking JAX one at a time.
        for index, entry in enumerate(spec):
            if entry is None:
                continue
            single = PartitionSpec(*([None] * index), entry)
            try:
                NamedSharding(jax_mesh, single).shard_shape(shape)
            except ValueError:
                names = _entry_names(entry)
                verb = "does" if len(names) == 1 else "do"
                raise ValueError(
                    f"`{row.path}` (shape {shape_text(shape)}) cannot be split as {why} asks: its dimension "
                    f"{index} has size {shape[index]:,}, which {_axes_text(mesh, names)} {verb} not divide "
                    "evenly (JAX splits a dimension only into equal parts)"
                ) from None
        raise ValueError(f"`{row.path}` (shape {shape_text(shape)}): JAX refused {why}: {err}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Placement:
    spec: PartitionSpec
    shard_shape: tuple[int, ...]
    replicated_fallback: bool
    note: str


def _check_strategy(mesh: MeshSpec, strategy: str, rules: Sequence[Rule]) -> tuple[Rule, ...]:
    if not isinstance(mesh, MeshSpec):
        raise TypeError(f"a mesh must be a MeshSpec (see parse_mesh), got {type(mesh).__name__}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {show(strategy)}")
    rules = tuple(rules)
    if len(rules) > MAX_RULES:
        raise ValueError(f"at most {MAX_RULES} rules are allowed, got {len(rules):,}")
    for rule in rules:
        if not isinstance(rule, Rule):
            raise TypeError(f"a rule must be a Rule (see parse_rule), got {type(rule).__name__}")
    if strategy == "custom" and not rules:
        raise ValueError("the custom strategy needs at least one PATTERN=SPEC rule, e.g. '*/kernel=None,model'")
    if strategy != "custom" and rules:
        raise ValueError(f"rules apply only to the custom strategy, not {strategy}; drop the rules or use custom")
    if strategy == "tensor" and TENSOR_AXIS not in mesh.names:
        raise ValueError(
            f"the tensor strategy splits each array's last dimension over a mesh axis named `{TENSOR_AXIS}`, "
            f"and the mesh {mesh.text} has none; add one, e.g. {mesh.text},{TENSOR_AXIS}=2"
        )
    for rule in rules:
        for entry in rule.spec:
            for name in entry or ():
                if name not in mesh.names:
                    raise ValueError(
                        f"rule {show(rule.text)} names mesh axis `{name}`, which the mesh {mesh.text} does not have "
                        f"(its axes: {', '.join(mesh.names)})"
                    )
    return rules


def _replicated(
    mesh: MeshSpec, jax_mesh: AbstractMesh, row: ArrayRow, why: str, *, fallback: bool, note: str
) -> _Placement:
    """The whole array on every device (an empty PartitionSpec), chosen or fallen back to."""
    spec = PartitionSpec()
    return _Placement(
        spec=spec, shard_shape=_shard_shape(mesh, jax_mesh, spec, row, why), replicated_fallback=fallback, note=note
    )


def _place(row: ArrayRow, mesh: MeshSpec, jax_mesh: AbstractMesh, strategy: str, rules: tuple[Rule, ...]) -> _Placement:
    shape = tuple(row.shape)
    if strategy == "replicated":
        return _replicated(mesh, jax_mesh, row, "replicated", fallback=False, note="replicated by the strategy")
    if strategy == "tensor":
        if not shape:
            raise ValueError(
                f"`{row.path}` is a scalar: the tensor strategy has no last dimension to split over `model`"
            )
        spec = PartitionSpec(*([None] * (len(shape) - 1)), TENSOR_AXIS)
        why = f"the tensor strategy (last dimension over `{TENSOR_AXIS}`)"
        return _Placement(
            spec=spec,
            shard_shape=_shard_shape(mesh, jax_mesh, spec, row, why),
            replicated_fallback=False,
            note=f"last dimension over `{TENSOR_AXIS}`",
        )
    if strategy == "fsdp":
        everything = mesh.names if len(mesh.names) > 1 else mesh.names[0]
        # Largest dimension first, the first on a tie; JAX decides which ones split evenly.
        for index in sorted(range(len(shape)), key=lambda i: (-shape[i], i)):
            spec = PartitionSpec(*([None] * index), everything)
            try:
                shard = tuple(int(dim) for dim in NamedSharding(jax_mesh, spec).shard_shape(shape))
            except ValueError:
                continue
            return _Placement(
                spec=spec,
                shard_shape=shard,
                replicated_fallback=False,
                note=f"dimension {index} split over all {mesh.num_devices:,} devices",
            )
        reason = (
            "a scalar has no dimension to split"
            if not shape
            else f"no dimension of {shape_text(shape)} splits evenly into {mesh.num_devices:,} parts"
        )
        return _replicated(mesh, jax_mesh, row, "fsdp", fallback=True, note=f"replicated: {reason}")
    for rule in rules:
        if rule.matches(row.path):
            spec = rule.partition_spec
            shard = _shard_shape(mesh, jax_mesh, spec, row, f"rule {show(rule.text)}")
            return _Placement(spec=spec, shard_shape=shard, replicated_fallback=False, note=f"rule {rule.text}")
    return _replicated(mesh, jax_mesh, row, "replication", fallback=True, note="replicated: no rule matched")


def _placements(report: ParamReport, mesh: MeshSpec, strategy: str, rules: Sequence[Rule]) -> list[_Placement]:
    if not isinstance(report, ParamReport):
        raise TypeError(f"a report must be a dcsim.model.count.ParamReport, got {type(report).__name__}")
    checked = _check_strategy(mesh, strategy, rules)
    jax_mesh = abstract_mesh(mesh)
    placements, problems = [], []
    for row in report.arrays:
        try:
            placements.append(_place(row, mesh, jax_mesh, strategy, checked))
        except ValueError as err:
            problems.append((row.path, str(err)))
    if problems:
        raise LayoutError(problems)
    return placements


def shard_values_by_shape(
    shapes: Sequence[tuple[int, ...]], mesh: MeshSpec, strategy: str
) -> dict[tuple[int, ...], int]:
    """The values one device holds of an array of each distinct shape, as ``compute_layout``
    gives every array of that shape, for sweeps over thousands of meshes.

    Only for strategies whose placement depends on the shape alone (``replicated``, ``fsdp``,
    ``tensor``; ``custom`` rules match paths). The strategy's rule is ``_place``'s, and JAX makes
    every split: ``NamedSharding.shard_shape`` is asked once per distinct dimension size and mesh
    entry (it splits each dimension on its own, so a shape's shard shape is its dimensions' answers
    side by side). A size the entry's devices do not divide is not asked about: JAX splits only into
    equal parts, and its refusal (an exception with a message) is the costly path. llama2-70b's 723
    arrays have six distinct dimension sizes, so a mesh costs a few JAX calls instead of hundreds.
    The tests compare the result with ``compute_layout`` array by array. Raises ``LayoutError``
    naming each shape that
    cannot be placed, as ``compute_layout`` would.
    """
    if strategy == "custom":
        raise ValueError("custom rules match array paths, so a layout by shape alone cannot apply them")
    _check_strategy(mesh, strategy, ())
    jax_mesh = abstract_mesh(mesh)
    everything = mesh.names if len(mesh.names) > 1 else mesh.names[0]
    answers: dict[tuple[int, Any], int | None] = {}
    shardings: dict[Any, NamedSharding] = {}

    def split(size: int, entry: Any) -> int | None:
        """JAX's size of a dimension of ``size`` split over ``entry``, or None if it refuses."""
        key = (size, entry)
        if key not in answers:
            if size % math.prod(mesh.shape[name] for name in _entry_names(entry)):
                # JAX splits a dimension only into equal parts: it would refuse this one. Not asking
                # saves the costly refusal (an exception with its message); every split made is JAX's.
                answers[key] = None
                return None
            if entry not in shardings:
                shardings[entry] = NamedSharding(jax_mesh, PartitionSpec(entry))
            try:
                answers[key] = int(shardings[entry].shard_shape((size,))[0])
            except ValueError:
                answers[key] = None
        return answers[key]

    values: dict[tuple[int, ...], int] = {}
    problems = []
    for shape in dict.fromkeys(tuple(shape) for shape in shapes):
        total = math.prod(shape)
        if strategy == "replicated":
            values[shape] = total
        elif strategy == "fsdp":  # _place's rule: the largest dimension JAX splits, the first on a tie
            values[shape] = total
            for index in sorted(range(len(shape)), key=lambda i: (-shape[i], i)):
                part = split(shape[index], everything)
                if part is not None:
                    values[shape] = total // shape[index] * part
                    break
        else:  # tensor: the last dimension over `model`, copied over every other axis
            part = split(shape[-1], TENSOR_AXIS) if shape else None
            if part is None:
                path = f"an array of shape {shape_text(shape)}"
                why = (
                    "a scalar has no last dimension to split"
                    if not shape
                    else f"its last dimension has size {shape[-1]:,}, which {_axes_text(mesh, (TENSOR_AXIS,))} "
                    "does not divide evenly"
                )
                problems.append((path, f"`{path}` cannot be split as the tensor strategy asks: {why}"))
                continue
            values[shape] = total // shape[-1] * part
    if problems:
        raise LayoutError(problems)
    return values


class LayoutError(ValueError):
    """Arrays the requested layout cannot place on the mesh.

    ``problems`` lists every one as ``(path, message)``, in array order, so a table can flag each
    row; the error's own text is the first message, and how many more there are, on one line.
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
      shard_shape: the shape each device holds (JAX's ``shard_shape``).
      values_per_shard: values each device holds of this array.
      replication_factor: copies of each value across the mesh (1 = not replicated): the product
        of the mesh axes the spec leaves unused.
      stored_values: values_per_shard x number of devices.
      replicated_fallback: True when the strategy had to replicate the array (fsdp found no
        dimension to split; no custom rule matched).
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
    note: str

    @property
    def partition_spec(self) -> str:
        """The spec as JAX writes it: ``P(None, 'model')``, ``P()`` when replicated."""
        return str(self.spec)

    @property
    def rule_spec(self) -> str:
        """The spec in rule syntax (``None,model``; empty when replicated), ready for a rule."""
        return spec_text(self.spec)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutReport:
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
    def total_params(self) -> int:
        return sum(row.num_values for row in self.arrays)

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
                note=placement.note,
            )
        )
    return LayoutReport(mesh=mesh, strategy=strategy, rules=tuple(rules), arrays=tuple(rows))
