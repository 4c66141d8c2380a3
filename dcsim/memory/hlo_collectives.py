"""The collectives in XLA's optimised HLO text, each mapped back to the mesh axes its replica groups
span: what ``--verify`` shows beside dcsim's own list (``dcsim.speed.collectives``).

A line such as ``%all-reduce.3 = f32[2,1024,768]{2,1,0} all-reduce(...), replica_groups=[2,2]<=[2,2]T(1,0)``
gives the kind, the result's shapes and the groups: an explicit ``{{0,1},{2,3}}`` or XLA's iota form
``[groups,size]<=[dims]T(perm)`` (``iota(prod(dims)).reshape(dims).transpose(perm).reshape(groups,
size)``). A device's id is its index in the mesh with the last axis fastest, so the axes whose
index varies inside a group are the collective's. Async pairs (``all-gather-start`` and
``-done``) count once, at their start. Python and NumPy, no JAX.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from dcsim.memory.buffers import INSTRUCTION

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_OP = re.compile(
    r"(?P<type>.+?)\s+(?P<op>all-gather|reduce-scatter|all-reduce|all-to-all|collective-permute)(?P<start>-start)?\("
)
_SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_EXPLICIT = re.compile(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}")
_MESH = re.compile(
    r"replica_groups=mesh\[(?P<axes>[^\]]*)\](?:,\s*device_ids=\(\[(?P<shape>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?\))?"
    r"\s*\{(?P<over>[^}]*)\}"
)
_PAIRS = re.compile(r"source_target_pairs=\{(\{\d+,\d+\}(?:,\{\d+,\d+\})*)\}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HloCollective:
    """One collective of the compiled program: its kind, the mesh axes it spans and its result's
    shapes (``f32[2,1024,768]``; a combined all-reduce has several)."""

    kind: str
    axis: str
    shapes: tuple[str, ...]


def _mesh_groups(match: re.Match[str]) -> list[list[int]]:
    """XLA's mesh form: ``mesh['axis_0'=2,'axis_1'=2], device_ids=([2,2]T(1,0)) {'axis_0'}``: the
    devices laid on the named axes (through the permutation where given), grouped along ``over``."""
    named = re.findall(r"'([^']+)'=(\d+)", match.group("axes"))
    dims = [int(size) for _, size in named]
    total = math.prod(dims)
    devices = np.arange(total)
    if match.group("shape"):
        shape = [int(dim) for dim in match.group("shape").split(",")]
        perm = [int(p) for p in match.group("perm").split(",")] if match.group("perm") else list(range(len(shape)))
        devices = devices.reshape(shape).transpose(perm)
    devices = devices.reshape(dims)
    over = set(re.findall(r"'([^']+)'", match.group("over")))
    inner = [index for index, (name, _) in enumerate(named) if name in over]
    outer = [index for index in range(len(named)) if index not in inner]
    size = math.prod(dims[index] for index in inner)
    return devices.transpose(outer + inner).reshape(total // size, size).tolist()


def _groups(line: str, num_devices: int) -> list[list[int]]:
    mesh = _MESH.search(line)
    if mesh:
        return _mesh_groups(mesh)
    iota = _IOTA.search(line)
    if iota:
        groups, size = int(iota.group(1)), int(iota.group(2))
        dims = [int(dim) for dim in iota.group(3).split(",")]
        perm = [int(p) for p in iota.group(4).split(",")] if iota.group(4) else list(range(len(dims)))
        order = np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(groups * size).tolist()
        return [order[index * size : (index + 1) * size] for index in range(groups)]
    explicit = _EXPLICIT.search(line)
    if explicit:
        return [[int(x) for x in group.split(",") if x] for group in re.findall(r"\{([\d,]*)\}", explicit.group(1))]
    pairs = _PAIRS.search(line)
    if pairs:
        return [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)\}", pairs.group(1))]
    return [list(range(num_devices))]


def axes_of(group: Sequence[int], axes: Sequence[tuple[str, int]]) -> str:
    """The mesh axes whose index varies among the devices ``group`` (comma-joined, in mesh order)."""
    sizes = [size for _, size in axes]

    def coords(device: int) -> list[int]:
        out = []
        for size in reversed(sizes):
            out.append(device % size)
            device //= size
        return out[::-1]

    seen = [coords(device) for device in group]
    varying = [name for index, (name, _) in enumerate(axes) if len({c[index] for c in seen}) > 1]
    return ",".join(varying)


def collectives(hlo_text: str, axes: Sequence[tuple[str, int]]) -> tuple[HloCollective, ...]:
    """Every collective in ``hlo_text`` (the program's optimised HLO) on a mesh of ``axes``."""
    num_devices = math.prod(size for _, size in axes)
    found = []
    for line in hlo_text.splitlines():
        head = INSTRUCTION.match(line)
        match = None if head is None else _OP.match(head["rest"])
        if not match:
            continue
        groups = _groups(line, num_devices)
        shapes = tuple(f"{dtype}[{dims}]" for dtype, dims in _SHAPE.findall(match.group("type")))
        if match.group("start") and match.group("op") in ("all-gather", "collective-permute") and len(shapes) > 1:
            shapes = shapes[-1:]  # an async start's tuple holds its operand, then its result
        found.append(HloCollective(kind=match.group("op"), axis=axes_of(groups[0], axes), shapes=shapes))
    return tuple(found)


def collective_record(collective: HloCollective) -> dict[str, Any]:
    return {"kind": collective.kind, "axis": collective.axis, "shapes": list(collective.shapes)}


def collective_from_record(record: Any) -> HloCollective:
    if not isinstance(record, dict) or not isinstance(record.get("shapes"), list):
        raise ValueError(f"a collective record, got {record!r}")
    return HloCollective(kind=str(record["kind"]), axis=str(record["axis"]), shapes=tuple(map(str, record["shapes"])))
