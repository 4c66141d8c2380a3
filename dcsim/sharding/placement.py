"""Where one parameter array goes on a mesh under a strategy, by JAX's own sharding rules.

Each array gets a ``PartitionSpec`` and JAX's ``NamedSharding(mesh, spec).shard_shape`` for it on a
device-free ``AbstractMesh``. JAX's refusal (``IndivisibleError``, private, naming an axis index)
is caught and said again in the person's terms: the parameter path, its dimension and size, the
mesh axes and their sizes. ``dcsim.sharding.layout`` lays a whole model out with ``place``.

Strategies (``dcsim.sharding.layout.partition_specs`` gives every array's spec):

- ``replicated``: every device holds every array.
- ``fsdp``: each array is split along one dimension over all mesh axes together (the product of
  their sizes): the largest dimension JAX can split evenly, the first on a tie. An array with no
  such dimension is replicated and flagged.
- ``tensor``: the last dimension is split over the mesh axis named ``model``, replicated over the
  others. A mesh without ``model``, or a last dimension that does not divide, is an error.
- ``megatron``: Megatron-LM's tensor parallelism as vLLM lays weights out
  (``dcsim.sharding.megatron``): attention heads and MLP columns of the first projection of a pair
  split over ``model``, the second projection's inputs (attention ``out``'s heads, the MLP's
  ``down`` rows), the vocabulary over ``model`` padded as vLLM pads it, KV heads repeated up to the
  tensor size when they divide it, routed experts over ``expert`` and their ffn over ``model``;
  everything else replicated. Its placements may split a *stored shape* that differs from the
  counted one (the padded vocabulary, the repeated KV heads): ``Placement.stored_shape``.
- ``custom``: ordered ``PATTERN=SPEC`` rules. PATTERN is a glob (``fnmatch.fnmatchcase``, so ``*``
  also crosses ``/``) on the array path, never a regular expression; SPEC has one entry per
  leading dimension: ``None``, a mesh axis, or axes joined by ``+``. A SPEC shorter than the
  array's rank leaves the remaining dimensions whole (JAX's rule); an empty SPEC replicates. The
  first matching rule wins; unmatched arrays are replicated and flagged.

Experts (expert parallelism). A Mixture-of-Experts block stacks its routed experts in one Flax
module whose last path component is ``experts`` (``block_3/moe/experts``); the first dimension of
its arrays (``gate``, ``up``, ``down``) is the expert dimension, num_experts. On a mesh with an axis
named ``expert``, every built-in strategy splits that dimension over ``expert`` and places the rest
as it would: ``fsdp`` splits the largest other dimension over the remaining axes together (or keeps
it whole when there are none; copied over them and flagged when none divides), ``tensor`` the last
dimension over ``model``, ``replicated`` nothing more. Dense arrays (all the others) are placed as on
any mesh: ``fsdp`` splits them over every axis, ``expert`` included, and ``tensor`` and
``replicated`` copy them over it. So ``expert`` doubles as a data axis for dense weights, as in
MaxText (its rules map the experts' ``exp`` dimension to ``expert`` and list ``expert`` among the
fsdp axes of dense weights) and DeepSpeed-MoE (expert-parallel groups are carved out of the
data-parallel ranks: dense weights stay ZeRO-sharded over all of them, expert weights over the
ranks that hold the same experts). Without an ``expert`` axis an expert array is placed like any
other. Custom rules name ``expert`` as any axis (``*/experts/*=expert,None,model``). A num_experts
that ``expert`` does not divide is refused in those words, with the axis sizes that would divide it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from dcsim.inputs import show
from dcsim.model.count import ArrayRow, is_routed_expert
from dcsim.sharding import megatron
from dcsim.sharding.meshes import (
    MAX_RULES,
    MeshSpec,
    Rule,
    axes_text,
    dividing_sizes_text,
    entry_names,
    shape_text,
    spec_text,
)

STRATEGIES = ("replicated", "fsdp", "tensor", "megatron", "custom")
PATH_STRATEGIES = ("megatron", "custom")  # strategies that place by path, not by shape alone
TENSOR_AXIS = megatron.TENSOR_AXIS  # "model"; one name for every strategy
EXPERT_AXIS = megatron.EXPERT_AXIS  # "expert"
NUM_EXPERTS = "num_experts (dimension 0)"


def is_expert(row: ArrayRow) -> bool:
    """Whether ``row`` is a stacked expert array (``dcsim.model.count.is_routed_expert``), num_experts first."""
    return bool(row.shape) and is_routed_expert(row)


def _shard_shape(
    mesh: MeshSpec,
    jax_mesh: AbstractMesh,
    spec: PartitionSpec,
    row: ArrayRow,
    why: str,
    stored: tuple[int, ...] | None = None,
) -> tuple:
    """JAX's shard shape of ``row`` (or of its ``stored`` shape) under ``spec``, or a ValueError in
    the person's terms."""
    shape = tuple(row.shape) if stored is None else stored
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
                names = entry_names(entry)
                refused = f"{axes_text(mesh, names)} {'does' if len(names) == 1 else 'do'} not divide evenly"
                if index == 0 and is_expert(row):
                    what = f"{NUM_EXPERTS} is {shape[0]:,}, which {refused}"
                    hint = f"; {dividing_sizes_text(shape[0], names)} would divide it"
                else:
                    what, hint = f"its dimension {index} has size {shape[index]:,}, which {refused}", ""
                raise ValueError(
                    f"`{row.path}` (shape {shape_text(shape)}) cannot be split as {why} asks: {what} "
                    f"(JAX splits a dimension only into equal parts){hint}"
                ) from None
        raise ValueError(f"`{row.path}` (shape {shape_text(shape)}): JAX refused {why}: {err}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """Where one array goes: its spec, JAX's shard shape, whether it was copied for want of a
    split, and why.

    ``stored_shape`` is the shape JAX splits when it is not the counted one (None: the same): the
    megatron strategy pads the vocabulary and repeats KV heads as vLLM does, and the note says so.
    ``shard_shape`` is always JAX's split of the shape laid out.
    """

    spec: PartitionSpec
    shard_shape: tuple[int, ...]
    replicated_fallback: bool
    note: str
    stored_shape: tuple[int, ...] | None = None


def check_strategy(mesh: MeshSpec, strategy: str, rules: Sequence[Rule]) -> tuple[Rule, ...]:
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
    if strategy == "megatron" and TENSOR_AXIS not in mesh.names:
        raise ValueError(
            f"the megatron strategy splits heads, MLP columns and the vocabulary over a mesh axis named "
            f"`{TENSOR_AXIS}` (the tensor ranks), and the mesh {mesh.text} has none; add one, e.g. "
            f"{mesh.text},{TENSOR_AXIS}=2"
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
) -> Placement:
    """The whole array on every device (an empty PartitionSpec), chosen or fallen back to."""
    spec = PartitionSpec()
    return Placement(
        spec=spec, shard_shape=_shard_shape(mesh, jax_mesh, spec, row, why), replicated_fallback=fallback, note=note
    )


def _place_expert(row: ArrayRow, mesh: MeshSpec, jax_mesh: AbstractMesh, strategy: str) -> Placement:
    """A stacked expert array on a mesh with ``expert``: num_experts over it, the rest as the strategy says."""
    shape, why, experts = tuple(row.shape), f"the {strategy} strategy", f"{NUM_EXPERTS} over `{EXPERT_AXIS}`"

    def placed(spec: PartitionSpec, note: str, fallback: bool = False) -> Placement:
        shard = _shard_shape(mesh, jax_mesh, spec, row, why)
        return Placement(spec=spec, shard_shape=shard, replicated_fallback=fallback, note=note)

    alone = PartitionSpec(EXPERT_AXIS)
    if strategy == "replicated":
        return placed(alone, f"replicated by the strategy, except {experts}")
    if strategy == "tensor":
        if len(shape) == 1:
            return placed(alone, f"{experts}: its only dimension, none left for `{TENSOR_AXIS}`")
        spec = PartitionSpec(EXPERT_AXIS, *([None] * (len(shape) - 2)), TENSOR_AXIS)
        return placed(spec, f"{experts}, last dimension over `{TENSOR_AXIS}`")
    placed(alone, "")  # refuses a num_experts that `expert` does not divide, in those words
    rest = tuple(name for name in mesh.names if name != EXPERT_AXIS)
    if not rest:
        return placed(alone, f"{experts}; no other mesh axis to split the rest over")
    entry = rest if len(rest) > 1 else rest[0]
    # fsdp's rule on the other dimensions: the largest JAX splits evenly, the first on a tie.
    for index in sorted(range(1, len(shape)), key=lambda i: (-shape[i], i)):
        spec = PartitionSpec(EXPERT_AXIS, *([None] * (index - 1)), entry)
        try:
            shard = tuple(int(dim) for dim in NamedSharding(jax_mesh, spec).shard_shape(shape))
        except ValueError:
            continue
        note = f"{experts}, dimension {index} over {axes_text(mesh, rest)}"
        return Placement(spec=spec, shard_shape=shard, replicated_fallback=False, note=note)
    parts = math.prod(mesh.shape[name] for name in rest)
    reason = f"no dimension but num_experts of {shape_text(shape)} splits evenly into {parts:,} parts"
    return placed(alone, f"replicated over {axes_text(mesh, rest)}: {reason}; {experts}", fallback=True)


def _place_megatron(row: ArrayRow, mesh: MeshSpec, jax_mesh: AbstractMesh, heads: megatron.Heads | None) -> Placement:
    """Megatron's rule for ``row`` (``dcsim.sharding.megatron.split``), split by JAX."""
    rule = megatron.split(row, heads, mesh.shape[TENSOR_AXIS], EXPERT_AXIS in mesh.names)
    spec = PartitionSpec(*rule.entries)
    stored = None if rule.stored_shape == tuple(row.shape) else rule.stored_shape
    shard = _shard_shape(mesh, jax_mesh, spec, row, "the megatron strategy", stored)
    return Placement(spec=spec, shard_shape=shard, replicated_fallback=False, note=rule.note, stored_shape=stored)


def place(
    row: ArrayRow,
    mesh: MeshSpec,
    jax_mesh: AbstractMesh,
    strategy: str,
    rules: tuple[Rule, ...],
    heads: megatron.Heads | None = None,
) -> Placement:
    """Where ``row`` goes under ``strategy``; ``heads`` are its attention module's heads, which the
    megatron strategy needs (``dcsim.sharding.megatron.attention_heads``) and the others ignore."""
    shape = tuple(row.shape)
    if strategy == "megatron":
        return _place_megatron(row, mesh, jax_mesh, heads)
    if strategy != "custom" and EXPERT_AXIS in mesh.names and is_expert(row):
        return _place_expert(row, mesh, jax_mesh, strategy)
    if strategy == "replicated":
        return _replicated(mesh, jax_mesh, row, "replicated", fallback=False, note="replicated by the strategy")
    if strategy == "tensor":
        if not shape:
            raise ValueError(
                f"`{row.path}` is a scalar: the tensor strategy has no last dimension to split over `model`"
            )
        spec = PartitionSpec(*([None] * (len(shape) - 1)), TENSOR_AXIS)
        why = f"the tensor strategy (last dimension over `{TENSOR_AXIS}`)"
        return Placement(
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
            return Placement(
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
            return Placement(spec=spec, shard_shape=shard, replicated_fallback=False, note=f"rule {rule.text}")
    return _replicated(mesh, jax_mesh, row, "replication", fallback=True, note="replicated: no rule matched")
