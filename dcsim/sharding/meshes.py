"""Meshes and layout rules as a person writes them: ``data=4,model=2`` and ``*/kernel=None,model``.

A ``MeshSpec`` is a mesh's named axes and sizes (``parse_mesh`` reads the text form, ``abstract_mesh``
gives JAX's device-free ``AbstractMesh``); a ``Rule`` pairs a glob on array paths with a SPEC, one
entry per leading dimension: ``None``, a mesh axis, or axes joined by ``+`` (``parse_rule`` reads
``PATTERN=SPEC``; ``spec_text`` writes a ``PartitionSpec`` back in that syntax). Constructors own
the invariants (names, sizes, counts) and parsers guard lengths, so a mesh or a rule set that
arrives in a link is cheap to refuse. ``dcsim.sharding.placement`` places arrays with them, and
words its refusals with the texts here (``shape_text``, ``axes_text``, ``dividing_sizes_text``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from collections.abc import Sequence
from typing import Any

from jax.sharding import AbstractMesh, PartitionSpec

from dcsim.inputs import as_int, number_from_text, show

# Limits. They keep a mesh or a rule set that arrives in a link cheap to parse and to lay out;
# none is a limit of JAX.
MAX_MESH_AXES = 8  # production meshes use up to about 5 (e.g. replica, data, fsdp, seq, model)
MAX_MESH_DEVICES = 1 << 20  # 1,048,576 devices: the same cap as the number of checkpoint shards
MAX_AXIS_NAME_CHARS = 32
MAX_MESH_CHARS = 512
MAX_RULES = 64
MAX_RULE_CHARS = 512
MAX_PATTERN_CHARS = 256
MAX_SPEC_ENTRIES = 16  # dimensions a SPEC may describe
MAX_DIVISORS_LISTED = 16  # axis sizes named in a refusal: a dimension of 720,720 has 240 divisors

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # no nested quantifiers: linear time
_RESERVED_NAMES = frozenset({"None"})  # `None` means "not split" in a SPEC

# One SPEC entry: None (dimension not split) or the mesh axes it is split over, in order.
SpecEntry = tuple[str, ...] | None


def _check_axis_name(name: Any, context: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{context}: a mesh axis name must be text, got {type(name).__name__} {show(name)}")
    if len(name) > MAX_AXIS_NAME_CHARS or not _AXIS_NAME.fullmatch(name) or name in _RESERVED_NAMES:
        raise ValueError(
            f"{context}: a mesh axis name must be a letter or _ followed by letters, digits or _, at most "
            f"{MAX_AXIS_NAME_CHARS} characters, and not `None`; got {show(name)}"
        )
    return name


def _parse_size(text: str, name: str) -> int:
    """A typed positive integer (``"4"``, ``"4.0"``, ``"4e3"``) within the device cap."""
    return _check_size(number_from_text(text), name, shown=text)


def _check_size(value: Any, name: str, shown: Any = None) -> int:
    try:
        return as_int(value, "size", maximum=MAX_MESH_DEVICES, shown=shown)
    except (TypeError, ValueError):
        shown = value if shown is None else shown
        raise ValueError(
            f"mesh axis `{name}` needs a size that is a whole number from 1 to {MAX_MESH_DEVICES:,}, got {show(shown)}"
        ) from None


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """A device mesh's named axes and their sizes, in order, e.g. ``(("data", 4), ("model", 2))``.

    At most ``MAX_MESH_AXES`` axes; names are ASCII identifiers (not ``None``), unique; sizes are
    positive ints whose product, the number of devices, is at most ``MAX_MESH_DEVICES``.
    """

    axes: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if isinstance(self.axes, (str, bytes)) or not isinstance(self.axes, (list, tuple)):
            raise TypeError(f"a mesh must be a sequence of (name, size) pairs, got {type(self.axes).__name__}")
        axes = []
        for pair in self.axes:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise TypeError(f"a mesh axis must be a (name, size) pair, got {show(pair)}")
            name = _check_axis_name(pair[0], "mesh")
            axes.append((name, _check_size(pair[1], name)))
        if not axes:
            raise ValueError("a mesh needs at least one axis, e.g. data=4")
        if len(axes) > MAX_MESH_AXES:
            raise ValueError(f"a mesh may have at most {MAX_MESH_AXES} axes, got {len(axes):,}")
        names = [name for name, _ in axes]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"mesh axis `{name}` is named twice; each axis needs its own name")
        num_devices = math.prod(size for _, size in axes)
        if num_devices > MAX_MESH_DEVICES:
            raise ValueError(
                f"a mesh may have at most {MAX_MESH_DEVICES:,} devices, got {num_devices:,} "
                f"({' x '.join(f'{name}={size:,}' for name, size in axes)})"
            )
        object.__setattr__(self, "axes", tuple(axes))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.axes)

    @property
    def num_devices(self) -> int:
        return math.prod(self.sizes)

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def text(self) -> str:
        """The mesh as ``parse_mesh`` reads it: ``data=4,model=2``."""
        return ",".join(f"{name}={size}" for name, size in self.axes)


def parse_mesh(text: str) -> MeshSpec:
    """A mesh from ``"AXIS=SIZE[,AXIS=SIZE...]"``, e.g. ``"data=4,model=2"`` (spaces allowed)."""
    if not isinstance(text, str):
        raise TypeError(f"a mesh must be text such as 'data=4,model=2', got {type(text).__name__}")
    if len(text) > MAX_MESH_CHARS:
        raise ValueError(f"a mesh may be at most {MAX_MESH_CHARS} characters, got {len(text):,}")
    parts = text.split(",")
    if len(parts) > MAX_MESH_AXES:
        raise ValueError(f"a mesh may have at most {MAX_MESH_AXES} axes, got {len(parts):,} in {show(text)}")
    axes = []
    for part in parts:
        name, equals, size = part.partition("=")
        if not equals or "=" in size or not name.strip():
            raise ValueError(f"each mesh axis must be written AXIS=SIZE, e.g. data=4,model=2; got {show(part.strip())}")
        name = _check_axis_name(name.strip(), f"mesh {show(text)}")
        axes.append((name, _parse_size(size.strip(), name)))
    return MeshSpec(tuple(axes))


def abstract_mesh(mesh: MeshSpec) -> AbstractMesh:
    """JAX's device-free mesh with the same axis names and sizes."""
    return AbstractMesh(mesh.sizes, mesh.names)


def shape_text(shape: Sequence[int]) -> str:
    """``4x8``, or ``scalar`` for a shape of no dimensions."""
    return "x".join(str(dim) for dim in shape) if shape else "scalar"


def entry_names(entry: Any) -> tuple[str, ...]:
    """The mesh axes of one PartitionSpec entry (``None``, a name, or a tuple of names)."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def axes_text(mesh: MeshSpec, names: Sequence[str]) -> str:
    """``mesh axis `data` (size 4)``, or ``mesh axes `data` x `model` (sizes 4 x 2 = 8)``."""
    if len(names) == 1:
        return f"mesh axis `{names[0]}` (size {mesh.shape[names[0]]:,})"
    sizes = [mesh.shape[name] for name in names]
    return (
        f"mesh axes {' x '.join(f'`{name}`' for name in names)} "
        f"(sizes {' x '.join(f'{size:,}' for size in sizes)} = {math.prod(sizes):,})"
    )


def dividing_sizes_text(size: int, names: Sequence[str]) -> str:
    """Which sizes of the axes ``names`` would split a dimension of ``size`` evenly, in words:
    ``an axis `expert` of size 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60`` (its divisors)."""
    small = [d for d in range(1, math.isqrt(size) + 1) if size % d == 0]
    divisors = sorted({*small, *(size // d for d in small)})
    shown = [f"{d:,}" for d in divisors[:MAX_DIVISORS_LISTED]]
    if len(divisors) > MAX_DIVISORS_LISTED:
        listed = ", ".join(shown) + ", …"
    else:
        listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    if len(names) == 1:
        return f"an axis `{names[0]}` of size {listed}"
    return f"axes {' x '.join(f'`{name}`' for name in names)} whose sizes multiply to {listed}"


def _entry_text(entry: SpecEntry) -> str:
    return "None" if entry is None else "+".join(entry)


def _partition_spec(entries: Sequence[SpecEntry]) -> PartitionSpec:
    return PartitionSpec(*(entry if entry is None or len(entry) > 1 else entry[0] for entry in entries))


def spec_text(spec: PartitionSpec) -> str:
    """A PartitionSpec in the SPEC syntax of rules: ``None,model``, ``data+model``; empty for ``P()``."""
    parts = []
    for entry in spec:
        if entry is None or entry == ():
            parts.append("None")
        elif isinstance(entry, str):
            parts.append(entry)
        else:
            parts.append("+".join(entry))
    return ",".join(parts)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One custom layout rule: arrays whose path matches the glob ``pattern`` get ``spec``.

    Attributes:
      pattern: an ``fnmatch`` glob on the array path (``*/kernel``, ``block_*/mlp/*``).
      spec: one entry per leading dimension: None (not split) or the mesh axes it is split over.
    """

    pattern: str
    spec: tuple[SpecEntry, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise TypeError(f"a rule's pattern must be text, got {type(self.pattern).__name__}")
        if not self.pattern or len(self.pattern) > MAX_PATTERN_CHARS:
            raise ValueError(
                f"a rule's pattern must have 1 to {MAX_PATTERN_CHARS} characters, got {len(self.pattern):,}"
            )
        if not self.pattern.isprintable():
            raise ValueError(f"a rule's pattern must be printable text, got {show(self.pattern)}")
        if isinstance(self.spec, (str, bytes)) or not isinstance(self.spec, (list, tuple)):
            raise TypeError(f"a rule's spec must be a sequence of entries, got {type(self.spec).__name__}")
        if len(self.spec) > MAX_SPEC_ENTRIES:
            raise ValueError(f"a rule's spec may have at most {MAX_SPEC_ENTRIES} entries, got {len(self.spec):,}")
        entries: list[SpecEntry] = []
        used: list[str] = []
        for entry in self.spec:
            if entry is None:
                entries.append(None)
                continue
            names = (entry,) if isinstance(entry, str) else entry
            if not isinstance(names, (list, tuple)) or not names:
                raise TypeError(f"a spec entry must be None or mesh axis names, got {show(entry)}")
            names = tuple(_check_axis_name(name, f"rule {show(self.pattern)}") for name in names)
            for name in names:
                if name in used:
                    raise ValueError(
                        f"rule {show(self.pattern)} uses mesh axis `{name}` twice; "
                        "an axis can split at most one dimension"
                    )
                used.append(name)
            entries.append(names)
        object.__setattr__(self, "spec", tuple(entries))

    @property
    def partition_spec(self) -> PartitionSpec:
        return _partition_spec(self.spec)

    @property
    def text(self) -> str:
        """The rule as ``parse_rule`` reads it: ``*/kernel=None,model``."""
        return f"{self.pattern}={','.join(_entry_text(entry) for entry in self.spec)}"

    def matches(self, path: str) -> bool:
        # fnmatch compiles a glob to a regex whose `*` runs are atomic groups: linear, no
        # catastrophic backtracking, unlike a person's regular expression (see NOTES).
        return fnmatch.fnmatchcase(path, self.pattern)


def parse_rule(text: str) -> Rule:
    """A rule from ``"PATTERN=SPEC"``, e.g. ``"*/kernel=None,model"`` or ``"embed/*=data+model,None"``.

    SPEC entries are separated by ``,``; each is ``None``, an axis name, or names joined by ``+``.
    An empty SPEC (``"*/bias="``) replicates the matched arrays.
    """
    if not isinstance(text, str):
        raise TypeError(f"a rule must be text such as '*/kernel=None,model', got {type(text).__name__}")
    if len(text) > MAX_RULE_CHARS:
        raise ValueError(f"a rule may be at most {MAX_RULE_CHARS} characters, got {len(text):,}")
    if text.count("=") != 1:
        raise ValueError(
            f"a rule must be PATTERN=SPEC with exactly one '=', e.g. '*/kernel=None,model'; got {show(text)}"
        )
    pattern, _, spec = text.partition("=")
    pattern, spec = pattern.strip(), spec.strip()
    if not pattern:
        raise ValueError(f"a rule needs a PATTERN before '=', e.g. '*/kernel=None,model'; got {show(text)}")
    entries: list[SpecEntry] = []
    if spec:
        parts = spec.split(",")
        if len(parts) > MAX_SPEC_ENTRIES:
            raise ValueError(
                f"rule {show(pattern)}: a SPEC may have at most {MAX_SPEC_ENTRIES} entries, got {len(parts):,}"
            )
        for part in parts:
            part = part.strip()
            if part == "None":
                entries.append(None)
                continue
            names = tuple(name.strip() for name in part.split("+"))
            for name in names:
                if name == "None" or not name:
                    raise ValueError(
                        f"rule {show(pattern)}: each SPEC entry must be None, a mesh axis, or axes joined by '+', "
                        f"got {show(part)}"
                    )
            entries.append(names)
    return Rule(pattern, tuple(entries))


def parse_rules(texts: Sequence[str]) -> tuple[Rule, ...]:
    """Rules in order, at most ``MAX_RULES``."""
    if len(texts) > MAX_RULES:
        raise ValueError(f"at most {MAX_RULES} rules are allowed, got {len(texts):,}")
    return tuple(parse_rule(text) for text in texts)
