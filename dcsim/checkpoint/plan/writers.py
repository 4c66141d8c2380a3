"""Who writes which byte of a checkpoint: Orbax's two rules and PyTorch DCP's deduplication,
summed per host, with the files each host writes.

- ``single-replica``: a shard is written by its copy with ``replica_id == 0``
  (``ArrayHandler(use_replica_parallel=False)``, Orbax's default when ``JAX_PLATFORMS`` names gpu
  or cuda).
- ``replica-parallel``: Orbax's ``replica_slices.get_replica_slices``, ported in ``slice_rule``: with
  R copies (at most ``max_replicas``), the first dimension of the shard that R divides is cut in R
  slices and copy r writes slice r; with no such dimension, an empty shard, a single copy, or a
  slice under ``min_slice_bytes``, single-replica. Orbax's default off GPUs.
- ``dcp``: PyTorch Distributed Checkpoint's ``dedup_save_plans``: each item held by several ranks
  (a device is a rank) goes to the rank with the fewest bytes so far, the lowest on a tie. DCP
  takes items rank 0's first; dcsim takes them array by array (every copy of one array at once),
  so on a tie between arrays its choice of rank can differ from DCP's, never its rule.

Files follow OCDBT as the pinned Orbax writes it: each process writes its own
``ocdbt.process_<i>/`` folder (a ``manifest.ocdbt`` and data files of at most
``OCDBT_TARGET_FILE_BYTES``) and its ``array_metadatas/process_<i>`` file; process 0 adds the
checkpoint's own files (``_METADATA``, ``_CHECKPOINT_METADATA``, ``_sharding``, the top-level
``manifest.ocdbt`` and the merged index in ``d/``). A count of files is a lower bound: tensorstore
may flush a process's data into more files than the target size asks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from dcsim.checkpoint.plan.placement import Hosts, add_scaled, placement, spec_key
from dcsim.inputs import show
from dcsim.memory.state import StateArray
from dcsim.quantities import payload
from dcsim.sharding.meshes import MeshSpec

POLICIES = ("single-replica", "replica-parallel", "dcp")
POLICY_HELP = {
    "single-replica": "each shard's copy with replica_id 0 writes it (Orbax, use_replica_parallel=False)",
    "replica-parallel": "each shard's copies write a slice each (Orbax's replica_slices rule)",
    "dcp": "each replicated item to the rank with the fewest bytes so far (PyTorch DCP's dedup)",
}
# orbax/checkpoint/_src/serialization/tensorstore_utils.py: _DEFAULT_OCDBT_TARGET_DATA_FILE_SIZE
# (tests/test_plan.py reads the pinned Orbax's constant).
OCDBT_TARGET_FILE_BYTES = 2**31
PROCESS_FILES = 2  # a process's manifest.ocdbt and its array_metadatas/process_<i>
PRIMARY_FILES = 5  # process 0's _METADATA, _CHECKPOINT_METADATA, _sharding, manifest.ocdbt, d/ index


def check_policy(value: object, field: str = "--policy") -> str:
    if not isinstance(value, str) or value not in POLICIES:
        raise ValueError(f"{field} must be one of {', '.join(POLICIES)}, got {show(value)}")
    return value


@dataclasses.dataclass(frozen=True)
class Slice:
    """Orbax's replica-parallel cut of one shard: the dimension cut, the slice each writing copy
    holds and how many copies write."""

    axis: int
    local_shape: tuple[int, ...]
    writers: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceLimits:
    """The replica-parallel rule's two limits, as Orbax's ``ArrayHandler`` takes them
    (``min_slice_bytes_for_replica_parallel``, ``max_replicas_for_replica_parallel``): a slice under
    ``min_slice_bytes`` falls back to single-replica, and at most ``max_replicas`` copies write.
    None: no limit, Orbax's default."""

    min_slice_bytes: int | None = None
    max_replicas: int | None = None


NO_LIMITS = SliceLimits()


def slice_rule(
    shard_shape: Sequence[int], dtype: str, num_replicas: int, limits: SliceLimits = NO_LIMITS
) -> Slice | None:
    """``replica_slices.calculate_replica_parallel_axis_and_local_shape`` and the minimum-bytes
    check of ``get_replica_slices``, on a shard's shape: None where Orbax falls back to a single
    replica."""
    max_replicas = limits.max_replicas
    count = num_replicas if max_replicas is None else min(num_replicas, max_replicas)
    if math.prod(shard_shape) == 0 or count <= 1:
        return None
    axis = next((index for index, size in enumerate(shard_shape) if size % count == 0), None)
    if axis is None:
        return None
    local = tuple(size // count if index == axis else size for index, size in enumerate(shard_shape))
    if payload.raw_bytes_as(math.prod(local), dtype) < (limits.min_slice_bytes or 0):
        return None
    return Slice(axis, local, count)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayWrite:
    """How one array is written: its shards and copies, and what each writing copy writes.

    Attributes:
      array: the state array (memory's row).
      num_shards, num_replicas: distinct shards and the copies of each.
      shard_bytes: one shard's bytes.
      cut: Orbax's replica-parallel slice, or None (each shard written whole by one copy).
      chunk_shape: the stored chunk (the slice, or the shard).
    """

    array: StateArray
    num_shards: int
    num_replicas: int
    shard_bytes: int
    cut: Slice | None
    chunk_shape: tuple[int, ...]

    @property
    def written_bytes(self) -> int:
        """Bytes written of the array, once: its shards, each once."""
        return self.shard_bytes * self.num_shards


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Writes:
    """Every array's writing under one policy, and the bytes each device writes: the same for any
    grouping of devices into hosts (``host_bytes`` sums them per host)."""

    policy: str
    arrays: tuple[ArrayWrite, ...]
    device_bytes: np.ndarray

    def host_bytes(self, hosts: Hosts) -> tuple[int, ...]:
        sums = np.add.reduceat(self.device_bytes, np.arange(0, hosts.mesh.num_devices, hosts.devices_per_host))
        return tuple(int(size) for size in sums.tolist())

    @property
    def max_device_bytes(self) -> int:
        return int(self.device_bytes.max())


def host_files(host_bytes: Sequence[int]) -> tuple[int, ...]:
    """Each host's files under OCDBT (a lower bound, see the module's docstring)."""
    return tuple(
        -(-size // OCDBT_TARGET_FILE_BYTES) + PROCESS_FILES + (PRIMARY_FILES if host == 0 else 0)
        for host, size in enumerate(host_bytes)
    )


def shard_bytes(array: StateArray) -> int:
    return payload.raw_bytes_as(math.prod(array.shard_shape), array.dtype)


def plan_writes(arrays: Sequence[StateArray], mesh: MeshSpec, policy: str, limits: SliceLimits = NO_LIMITS) -> Writes:
    """Each array's writers under ``policy`` (replica-parallel within ``limits``) and each device's
    bytes. The devices are numbered once
    a distinct spec (``placement``); an array adds only its shard's bytes to its spec's total, and
    each spec's writers take that total at the end."""
    check_policy(policy)
    per_device = np.zeros(mesh.num_devices, dtype=np.int64)
    # (spec, rank, copies writing) -> bytes each writer writes
    totals: dict[tuple[tuple[tuple[str, ...], ...], int, int], int] = {}
    wheres = {}
    writes = []
    for array in arrays:
        where = placement(mesh, array.spec, len(array.stored_shape))
        size = shard_bytes(array)
        cut = None
        if policy == "replica-parallel":
            cut = slice_rule(array.shard_shape, array.dtype, where.num_replicas, limits)
        writes.append(
            ArrayWrite(
                array=array,
                num_shards=where.num_shards,
                num_replicas=where.num_replicas,
                shard_bytes=size,
                cut=cut,
                chunk_shape=cut.local_shape if cut else array.shard_shape,
            )
        )
        if policy == "dcp":
            if where.num_replicas == 1:
                per_device += size
            else:  # DCP's dedup: each shard to the copy holding the fewest bytes so far
                groups = where.by_shard
                chosen = groups[np.arange(where.num_shards), per_device[groups].argmin(axis=1)]
                per_device[chosen] += size
            continue
        copies = cut.writers if cut else 1
        each = payload.raw_bytes_as(math.prod(cut.local_shape), array.dtype) if cut else size
        key = (spec_key(array.spec), len(array.stored_shape), copies)
        wheres[key] = where
        totals[key] = totals.get(key, 0) + each
    for key, each in totals.items():
        add_scaled(per_device, (wheres[key].replica < key[2]).astype(np.int64), each)
    return Writes(policy=policy, arrays=tuple(writes), device_bytes=per_device)
