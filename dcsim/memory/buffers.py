"""The largest buffers of a compiled XLA program, read from its optimised HLO text.

XLA's memory analysis gives one temporary figure; when dcsim's estimate is far below it, the
question is what XLA keeps. ``compiled.as_text()`` (a public API that also works for a program read
back from the compilation cache) is the module after optimisation: every instruction of the entry
computation with its shape, in the order it runs. Each instruction that makes an array is a buffer
XLA assigns; bitcasts, tuples, their elements and parameters only name one made elsewhere or passed
in. The largest of them name the difference: the float32 logits, a gathered batch, or an attention's
``[batch, heads, s, s]`` scores that a flash kernel would never make.

It is a list of the largest buffers the program makes, not of those alive at its peak: XLA reuses
memory between buffers whose lives do not overlap.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

# Bytes a value of each XLA element type; sub-byte types (s4, u4, f4) are left out (never large here).
ELEMENT_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3": 1,
    "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1,
    "f8e4m3b11fnuz": 1,
    "f8e3m4": 1,
    "f8e8m0fnu": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}
# Instructions that make no buffer of their own: they name another, or an argument.
ALIASING_OPS = frozenset({"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all"})
LARGEST = 5  # buffers a check reports

# An instruction's line in HLO text: ``ROOT %name = `` and the rest (its shape, operation and
# operands), which each reader parses its own way (``dcsim.memory.hlo_collectives`` reads the same lines).
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_ARRAY = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[0-9,]*)\](?:\{[^}]*\})?\s+(?P<op>[a-z][a-z0-9\-]*)\(")
_SOURCE = re.compile(r'op_name="(?P<source>[^"]*)"')


@dataclasses.dataclass(frozen=True, kw_only=True)
class XlaBuffer:
    """One array a compiled program makes: the instruction's name, its shape and element type,
    its bytes, the HLO operation and the JAX operation it came from (``op_name``, "" if none)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    op: str
    source: str

    @property
    def text(self) -> str:
        """The shape as XLA writes it, ``f32[2,1024,50257]``."""
        return f"{self.dtype}[{','.join(str(size) for size in self.shape)}]"


def _entry_lines(hlo_text: str) -> list[str]:
    lines = hlo_text.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("ENTRY ")]
    if not starts:
        return []
    body = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("}"):
            break
        body.append(line)
    return body


def program_buffers(hlo_text: str) -> list[XlaBuffer]:
    """Every array the entry computation of ``hlo_text`` (optimised HLO, as ``compiled.as_text()``
    gives it) makes, in program order; tuple-shaped results and aliasing instructions left out."""
    found = []
    for line in _entry_lines(hlo_text):
        head = INSTRUCTION.match(line)
        match = None if head is None else _ARRAY.match(head["rest"])
        if head is None or match is None or match["op"] in ALIASING_OPS or match["dtype"] not in ELEMENT_BYTES:
            continue
        shape = tuple(int(size) for size in match["dims"].split(",") if size)
        source = _SOURCE.search(line)
        found.append(
            XlaBuffer(
                name=head["name"],
                shape=shape,
                dtype=match["dtype"],
                bytes=math.prod(shape) * ELEMENT_BYTES[match["dtype"]],
                op=match["op"],
                source="" if source is None else source["source"],
            )
        )
    return found


def largest_buffers(hlo_text: str, limit: int = LARGEST) -> list[XlaBuffer]:
    """The ``limit`` largest arrays ``program_buffers`` finds, largest first (ties in program order)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"`limit` must be a non-negative integer, got {limit!r}")
    return sorted(program_buffers(hlo_text), key=lambda buffer: -buffer.bytes)[:limit]


def buffer_record(buffer: XlaBuffer) -> dict[str, Any]:
    """A buffer as JSON: exact bytes, the shape as a list."""
    return {
        "name": buffer.name,
        "shape": list(buffer.shape),
        "dtype": buffer.dtype,
        "bytes": buffer.bytes,
        "op": buffer.op,
        "source": buffer.source,
    }


def buffer_from_record(record: Any) -> XlaBuffer:
    """``buffer_record``'s inverse; ValueError naming what is wrong with a record that is not one."""
    fields = {"name": str, "shape": list, "dtype": str, "bytes": int, "op": str, "source": str}
    if not isinstance(record, dict) or set(record) != set(fields):
        raise ValueError(f"a buffer record has the keys {', '.join(fields)}, got {record!r}")
    for key, kind in fields.items():
        if not isinstance(record[key], kind) or isinstance(record[key], bool):
            raise ValueError(f"a buffer record's {key} must be a {kind.__name__}, got {record[key]!r}")
    shape = record["shape"]
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape):
        raise ValueError(f"a buffer record's shape must be non-negative integers, got {shape!r}")
    return XlaBuffer(
        name=record["name"],
        shape=tuple(shape),
        dtype=record["dtype"],
        bytes=record["bytes"],
        op=record["op"],
        source=record["source"],
    )
