"""Where each shard of an array lives, from its sharding's structure: the shard and the replica
every device holds, the host of every device, and the per-host sums the plan needs.

JAX's ``NamedSharding`` places device ``d`` of a mesh (flat, row-major over the axes, as
``mesh.devices.flat`` orders them) at coordinates ``c``: along a dimension split over axes
``(a1, a2)`` it holds piece ``c[a1] * size(a2) + c[a2]``, and the devices that hold the same
piece differ only along the axes the spec does not name. JAX numbers those copies in device
order (``replica_id``), so a copy's number is its coordinates on the unnamed axes, row-major.
This module computes those numbers for all devices at once with numpy, once a distinct
``(mesh, spec)`` (a model of thousands of arrays has a handful), and the per-host sums once a
distinct question: llama3.1-405b's state on 16,384 devices costs what a small model's does.
``tests/children/real_mesh.py`` checks the numbering against JAX's own ``replica_id`` on real arrays.

Hosts take the mesh's devices in order, ``devices_per_host`` each, as ``jax.make_mesh`` orders
devices by process: host ``h`` holds devices ``h * n`` to ``h * n + n - 1``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from dcsim.inputs import show
from dcsim.sharding.meshes import MeshSpec, entry_names

DEFAULT_DEVICES_PER_HOST = 8  # an HGX/DGX node's GPUs; a TPU v4/v5p host has 4 chips
MAX_CACHED = 32  # distinct (mesh, spec, rank); a model has a handful, and 65,536 devices take about 2.5 MB each


def check_devices_per_host(value: Any, mesh: MeshSpec, field: str = "--devices-per-host") -> int:
    """``value`` as a host's device count that divides ``mesh``'s devices; a message naming the
    field, the rule and the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} must be a positive whole number of devices a host, got {show(value)}")
    if mesh.num_devices % value:
        raise ValueError(
            f"{field} must divide the mesh's {mesh.num_devices:,} devices so every host holds the same "
            f"number, got {value:,} (the mesh {mesh_text(mesh)} leaves {mesh.num_devices % value:,} over)"
        )
    return value


def mesh_text(mesh: MeshSpec) -> str:
    return ",".join(f"{name}={size}" for name, size in mesh.axes)


@dataclasses.dataclass(frozen=True, eq=False)
class Placement:
    """One spec on one mesh, every device at once.

    Attributes:
      pieces: how many pieces each dimension is cut into.
      piece: ``(ndim, devices)``: the piece of each dimension each device holds.
      shard: each device's shard, numbered row-major over ``pieces``.
      replica: each device's copy number of its shard (JAX's ``replica_id``).
      num_replicas: the copies of every shard.
    """

    pieces: tuple[int, ...]
    piece: np.ndarray
    shard: np.ndarray
    replica: np.ndarray
    num_replicas: int

    @property
    def num_shards(self) -> int:
        return math.prod(self.pieces)

    @functools.cached_property
    def by_shard(self) -> np.ndarray:
        """``(shards, replicas)``: the devices holding each shard, copies in order."""
        order = np.lexsort((self.replica, self.shard))
        return order.reshape(self.num_shards, self.num_replicas)


def spec_key(spec: Iterable[Any]) -> tuple[tuple[str, ...], ...]:
    return tuple(entry_names(entry) for entry in spec)


def placement(mesh: MeshSpec, spec: Iterable[Any], ndim: int) -> Placement:
    """Every device's piece, shard and copy of an ``ndim``-dimensional array laid out as ``spec``."""
    return _placement(mesh.axes, spec_key(spec), ndim)


@functools.lru_cache(maxsize=MAX_CACHED)
def _placement(axes: tuple[tuple[str, int], ...], spec: tuple[tuple[str, ...], ...], ndim: int) -> Placement:
    names = [name for name, _ in axes]
    sizes = [size for _, size in axes]
    coords = np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1)
    entries = list(spec) + [()] * (ndim - len(spec))
    pieces, piece_rows = [], []
    for entry in entries:
        index = np.zeros(coords.shape[1], dtype=np.int64)
        count = 1
        for name in entry:
            axis = names.index(name)
            index = index * sizes[axis] + coords[axis]
            count *= sizes[axis]
        pieces.append(count)
        piece_rows.append(index)
    shard = np.zeros(coords.shape[1], dtype=np.int64)
    for count, index in zip(pieces, piece_rows, strict=True):
        shard = shard * count + index
    used = {name for entry in entries for name in entry}
    replica = np.zeros(coords.shape[1], dtype=np.int64)
    num_replicas = 1
    for axis, name in enumerate(names):
        if name not in used:
            replica = replica * sizes[axis] + coords[axis]
            num_replicas *= sizes[axis]
    piece = np.stack(piece_rows) if piece_rows else np.zeros((0, coords.shape[1]), dtype=np.int64)
    return Placement(tuple(pieces), piece, shard, replica, num_replicas)


@dataclasses.dataclass(frozen=True)
class Hosts:
    """A mesh's devices grouped into hosts in mesh order."""

    mesh: MeshSpec
    devices_per_host: int

    def __post_init__(self) -> None:
        check_devices_per_host(self.devices_per_host, self.mesh)

    @property
    def num_hosts(self) -> int:
        return self.mesh.num_devices // self.devices_per_host

    @functools.cached_property
    def host(self) -> np.ndarray:
        """Each device's host."""
        return np.arange(self.mesh.num_devices, dtype=np.int64) // self.devices_per_host

    def count(self, devices: np.ndarray) -> np.ndarray:
        """How many of ``devices`` (a boolean mask) each host has."""
        return np.bincount(self.host[devices], minlength=self.num_hosts)

    def distinct_shards(self, where: Placement) -> np.ndarray:
        """Each host's distinct shards (copies on one host counted once)."""
        pairs = np.unique(where.shard * self.num_hosts + self.host)
        return np.bincount(pairs % self.num_hosts, minlength=self.num_hosts)

    def only_copies(self, where: Placement) -> tuple[np.ndarray, int]:
        """Each host's shards held on no other host, and the fewest hosts that hold any one shard."""
        pairs = np.unique(where.shard * self.num_hosts + self.host)
        holders = np.bincount(pairs // self.num_hosts, minlength=where.num_shards)
        alone = holders[pairs // self.num_hosts] == 1
        return np.bincount(pairs[alone] % self.num_hosts, minlength=self.num_hosts), int(holders.min())


def add_scaled(total: np.ndarray, counts: np.ndarray, each: int) -> None:
    """``total += counts * each`` in int64, refusing rather than wrapping (bytes far past any
    checkpoint: 2**62 is 4.6 EB)."""
    if each and int(counts.max(initial=0)) > (2**62) // each:
        raise ValueError(f"a host's bytes pass 2**62 ({each:,} bytes x {int(counts.max()):,}): too large to plan")
    total += counts * each
