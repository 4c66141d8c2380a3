"""What a lost host costs, under two tiers.

- ``persistent``: the checkpoint on shared storage. Each host wrote its part there, so a host that
  dies takes no checkpoint data with it; only the storage itself can lose it.
- ``local``: each host keeps its own addressable shards, replicas included, in a folder of its own,
  as Orbax's emergency checkpointing does (``replica_id=None``, ``use_replica_parallel=False``,
  ``primary_host=None``). A shard survives a host's loss only where another host holds a copy, so
  a host loses the shards whose every copy sits on its own devices, and the fewest hosts whose
  loss loses data are the fewest hosts holding any one shard.

Counted once a distinct spec on the save mesh (``placement``), per array only its shard's bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dcsim.checkpoint.plan.placement import Hosts, add_scaled, placement, spec_key
from dcsim.checkpoint.plan.writers import ArrayWrite

TIERS = ("persistent", "local")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Loss:
    """Each host's bytes whose every copy dies with it, and the fewest hosts whose loss loses data
    (None: no number of hosts, only the storage).

    ``arrays_lost`` counts each host's arrays that lose a shard with it; ``paths_lost(host)`` names
    them. ``alone``: each array's name (``part/path``, in the state's order) and each host's shards
    of it held on no other host (one numpy row shared by the arrays of one layout).
    """

    tier: str
    bytes_lost: tuple[int, ...]
    arrays_lost: tuple[int, ...]
    min_hosts_to_lose_data: int | None
    alone: tuple[tuple[str, np.ndarray], ...] = ()

    def paths_lost(self, host: int) -> tuple[str, ...]:
        """The arrays (``part/path``) a shard of which dies with ``host``."""
        return tuple(name for name, shards in self.alone if shards[host])

    def lost_groups(self) -> tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]:
        """The hosts that lose something, grouped by the arrays they lose: ``(hosts, paths)``, in the
        order of each group's first host. Arrays of one layout share one row of ``alone``, so a host's
        losses are read off a few rows, not off every array: 2,048 hosts that each lose a shard of
        every array are one group, not 2,048 copies of the same list."""
        rows: dict[int, np.ndarray] = {}
        for _, shards in self.alone:
            rows.setdefault(id(shards), shards)
        if not rows:
            return ()
        layouts = list(rows)
        held_alone = np.stack([rows[layout] > 0 for layout in layouts])  # layouts x hosts
        by_pattern: dict[bytes, list[int]] = {}
        for host in np.flatnonzero(held_alone.any(axis=0)).tolist():
            by_pattern.setdefault(held_alone[:, host].tobytes(), []).append(int(host))
        groups = []
        for hosts in by_pattern.values():
            lost = {layouts[index] for index in np.flatnonzero(held_alone[:, hosts[0]]).tolist()}
            groups.append((tuple(hosts), tuple(name for name, shards in self.alone if id(shards) in lost)))
        return tuple(groups)

    def record(self) -> dict[str, object]:
        """Each host's bytes and count of arrays lost, and (``arrays_lost``) the arrays themselves, once a
        group of hosts that lose the same ones; a host in no group loses nothing."""
        return {
            "hosts": [
                {"host": host, "bytes_lost": size, "arrays_lost": count}
                for host, (size, count) in enumerate(zip(self.bytes_lost, self.arrays_lost, strict=True))
            ],
            "arrays_lost": [{"hosts": list(hosts), "paths": list(paths)} for hosts, paths in self.lost_groups()],
            "min_hosts_to_lose_data": self.min_hosts_to_lose_data,
        }


def persistent_loss(hosts: Hosts) -> Loss:
    zeros = (0,) * hosts.num_hosts
    return Loss(tier="persistent", bytes_lost=zeros, arrays_lost=zeros, min_hosts_to_lose_data=None)


def local_loss(saved: Sequence[ArrayWrite], hosts: Hosts) -> Loss:
    lost = np.zeros(hosts.num_hosts, dtype=np.int64)
    arrays = np.zeros(hosts.num_hosts, dtype=np.int64)
    kinds: dict[tuple[object, int], tuple[np.ndarray, int]] = {}
    fewest = None
    alone_by_array = []
    for write in saved:
        row = write.array
        key = (spec_key(row.spec), len(row.stored_shape))
        if key not in kinds:
            kinds[key] = hosts.only_copies(placement(hosts.mesh, row.spec, len(row.stored_shape)))
        alone, holders = kinds[key]
        add_scaled(lost, alone, write.shard_bytes)
        arrays += alone > 0
        alone_by_array.append((f"{row.part}/{row.path}", alone))
        fewest = holders if fewest is None else min(fewest, holders)
    return Loss(
        tier="local",
        bytes_lost=tuple(int(size) for size in lost.tolist()),
        arrays_lost=tuple(int(count) for count in arrays.tolist()),
        min_hosts_to_lose_data=fewest,
        alone=tuple(alone_by_array),
    )
