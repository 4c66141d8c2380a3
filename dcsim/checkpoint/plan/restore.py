"""A restore onto another mesh: what each new host holds and what it must read, and the refusal of
a restore whose arrays the new layout cannot take.

The checkpoint stores each array in chunks of the slices its writers wrote (``writers``: a shard,
or Orbax's replica-parallel slice of one). A host of the new mesh reads every stored chunk that
overlaps one of its new shards, each chunk once however many of its devices need it, so a new
boundary that cuts a chunk costs a whole chunk: ``bytes_read`` against ``bytes_held`` (its
devices' distinct shards, each once). ``read_amplification`` is the sum of one over the sum of
the other, 1 on the mesh the checkpoint was saved from.

Counted once a kind of array (its new spec, shape, stored chunk and new shard), per host from the
pieces its devices hold, as ``placement`` numbers them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dcsim.checkpoint.plan.placement import Hosts, add_scaled, placement, spec_key
from dcsim.checkpoint.plan.writers import ArrayWrite
from dcsim.memory.state import StateArray
from dcsim.quantities import payload, units
from dcsim.sharding.meshes import shape_text


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestorePlan:
    """Each host of the restore mesh: the distinct bytes its devices hold and the stored bytes it reads."""

    hosts: Hosts
    bytes_held: tuple[int, ...]
    bytes_read: tuple[int, ...]
    casts: tuple[tuple[str, str, str], ...] = ()  # (part, stored dtype, restored dtype), as asked

    @property
    def read_amplification(self) -> Fraction:
        held = sum(self.bytes_held)
        return Fraction(sum(self.bytes_read), held) if held else Fraction(1)

    def cast_text(self) -> str:
        """The casts asked for, in words (empty without one); the bytes stay the checkpoint's."""
        if not self.casts:
            return ""
        each = ", ".join(f"{part} {old} -> {new}" for part, old, new in self.casts)
        return (
            f"cast on restore, as asked with --restore-dtype: {each}; the bytes read and held are the checkpoint's, "
            "as stored (Orbax itself casts to a target's dtype without asking)"
        )

    def record(self) -> dict[str, object]:
        return {
            "hosts": [
                {"host": host, "bytes_read": read, "bytes_held": held}
                for host, (read, held) in enumerate(zip(self.bytes_read, self.bytes_held, strict=True))
            ],
            "read_amplification": float(self.read_amplification),
            "casts": [{"part": part, "from": old, "to": new} for part, old, new in self.casts],
        }


def check_compatible(
    saved: Sequence[ArrayWrite], restored: Sequence[StateArray], *, cast: bool = False
) -> tuple[tuple[str, str, str], ...]:
    """Refuse, before anything is read, a restore whose arrays differ from the checkpoint's: a
    missing or extra array, a shape, a layout that stores a padded shape, or a dtype unless ``cast``
    (asked for with ``--restore-dtype``). Orbax itself casts to whatever dtype a target names, without
    asking; dcsim casts only when asked, so a dtype changed by mistake is caught before a long read.

    Returns the casts made, ``(part, stored dtype, restored dtype)`` once each, in the state's order."""
    stored = {(write.array.part, write.array.path): write.array for write in saved}
    wanted = {(row.part, row.path): row for row in restored}
    missing = sorted(set(wanted) - set(stored))
    extra = sorted(set(stored) - set(wanted))
    if missing:
        lacking = units.many(len(missing), "array")
        raise ValueError(f"the restore asks for {lacking} the checkpoint lacks, first {missing[0][1]}")
    if extra:
        left_out = units.many(len(extra), "array")
        raise ValueError(f"the checkpoint holds {left_out} the restore leaves out, first {extra[0][1]}")
    casts: dict[tuple[str, str, str], None] = {}
    for key, row in wanted.items():
        old = stored[key]
        if old.dtype != row.dtype:
            if not cast:
                raise ValueError(
                    f"{row.path}: the checkpoint holds {old.dtype}, the restore asks {row.dtype} (a cast on restore "
                    "must be asked for explicitly: checkpoint-plan's --restore-dtype; Orbax itself casts to the "
                    "target's dtype without asking)"
                )
            casts[(row.part, old.dtype, row.dtype)] = None
        if old.stored_shape != row.stored_shape:
            raise ValueError(
                f"{row.path}: the checkpoint holds shape {shape_text(old.stored_shape)}, the restore layout "
                f"needs {shape_text(row.stored_shape)} (a padded or repeated layout on one side only)"
            )
    return tuple(casts)


def _union_cells(boxes: set[tuple[tuple[int, int], ...]]) -> int:
    """Cells in the union of integer boxes (inclusive bounds a dimension)."""
    first = next(iter(boxes))
    if len(boxes) == 1 or not first:
        return math.prod(hi - lo + 1 for lo, hi in first)
    cuts = sorted({box[0][0] for box in boxes} | {box[0][1] + 1 for box in boxes})
    total = 0
    for start, stop in itertools.pairwise(cuts):
        inside = {box[1:] for box in boxes if box[0][0] <= start and box[0][1] >= stop - 1}
        if inside:
            total += (stop - start) * _union_cells(inside)
    return total


def _chunks_per_host(
    hosts: Hosts, spec: Iterable[Any], shape: tuple[int, ...], chunk: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Each host's distinct new shards and the stored chunks they overlap."""
    where = placement(hosts.mesh, spec, len(shape))
    held = hosts.distinct_shards(where)
    if not shape:
        return held, held.copy()
    widths = [size // pieces for size, pieces in zip(shape, where.pieces, strict=True)]
    if all(width % size == 0 for width, size in zip(widths, chunk, strict=True)):
        # every new boundary is a chunk boundary: distinct shards read distinct chunks, each whole
        return held, held * math.prod(width // size for width, size in zip(widths, chunk, strict=True))
    low = np.stack([where.piece[d] * widths[d] // chunk[d] for d in range(len(shape))])
    high = np.stack([((where.piece[d] + 1) * widths[d] - 1) // chunk[d] for d in range(len(shape))])
    boxes = np.concatenate([low, high]).T  # a row a device: lows then highs
    ndim = len(shape)
    reads = np.zeros(hosts.num_hosts, dtype=np.int64)
    per = hosts.devices_per_host
    cache: dict[bytes, int] = {}
    for host in range(hosts.num_hosts):
        rows = np.unique(boxes[host * per : (host + 1) * per], axis=0)
        if len(rows) == 1:
            reads[host] = math.prod(int(hi - lo + 1) for lo, hi in zip(rows[0][:ndim], rows[0][ndim:], strict=True))
            continue
        offset = rows[:, :ndim].min(axis=0)
        key = (rows - np.concatenate([offset, offset])).tobytes()  # the count is the same moved anywhere
        if key not in cache:
            cache[key] = _union_cells(
                {tuple(zip(row[:ndim].tolist(), row[ndim:].tolist(), strict=True)) for row in rows}
            )
        reads[host] = cache[key]
    return held, reads


def plan_restore(
    saved: Sequence[ArrayWrite], restored: Sequence[StateArray], hosts: Hosts, *, cast: bool = False
) -> RestorePlan:
    """What each host of ``hosts`` (the restore mesh) holds and reads of a checkpoint written as ``saved``.

    ``cast``: a dtype the checkpoint does not hold is asked for (``check_compatible``). Bytes held and
    read are the checkpoint's, in the dtype stored: a cast changes what the devices hold afterwards,
    not what is read, and the read amplification stays the cost of the new boundaries alone."""
    casts = check_compatible(saved, restored, cast=cast)
    chunks = {(write.array.part, write.array.path): write.chunk_shape for write in saved}
    dtypes = {(write.array.part, write.array.path): write.array.dtype for write in saved}
    held = np.zeros(hosts.num_hosts, dtype=np.int64)
    read = np.zeros(hosts.num_hosts, dtype=np.int64)
    kinds: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = {}
    for row in restored:
        chunk = chunks[(row.part, row.path)]
        key = (spec_key(row.spec), row.stored_shape, chunk)
        if key not in kinds:
            kinds[key] = _chunks_per_host(hosts, row.spec, row.stored_shape, chunk)
        shards, pieces = kinds[key]
        dtype = dtypes[(row.part, row.path)]
        add_scaled(held, shards, payload.raw_bytes_as(math.prod(row.shard_shape), dtype))
        add_scaled(read, pieces, payload.raw_bytes_as(math.prod(chunk), dtype))
    return RestorePlan(
        hosts=hosts,
        bytes_held=tuple(int(size) for size in held.tolist()),
        bytes_read=tuple(int(size) for size in read.tolist()),
        casts=casts,
    )
