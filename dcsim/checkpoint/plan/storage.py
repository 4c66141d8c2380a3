"""How long a save takes: a storage model with a small catalog, every figure with its source.

An estimate, never a measurement: each writing host writes its bytes at the bandwidth it gets
(its own, or its share of the storage's aggregate when that is smaller: the aggregate over the
hosts that write), plus a cost a file. The save ends when the slowest host ends. The model leaves
out metadata round trips, contention inside a host, compression and the storage's own caching.
Catalog rows are data in ``storage.json`` beside this module; figures a person types are used as
typed. The accelerators' host links (for an async save's blocking copy) and the platform JAX
names for them (which picks Orbax's default policy) are rows of the same file.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from types import MappingProxyType

import numpy as np

from dcsim import shipped
from dcsim.checkpoint.plan.writers import host_files
from dcsim.inputs import show

MAX_BANDWIDTH_CHARS = 32
FLAT_WITHIN = 0.10  # a curve is flat from the first host count within 10% of its last time


@dataclasses.dataclass(frozen=True, kw_only=True)
class Storage:
    """One storage: a host's write bandwidth, the aggregate (None: no shared limit), a file's cost
    (low and high, microseconds) and the source of each figure."""

    name: str
    title: str
    host_bytes_per_s: int
    aggregate_bytes_per_s: int | None = None
    file_micros: int = 0
    file_micros_high: int = 0
    source: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostLink:
    device: str
    platform: str
    bytes_per_s: int
    source: str


_DATA = shipped.load(__file__, "storage.json")
STORAGES = MappingProxyType(
    {row.name: row for row in shipped.as_rows(Storage, _DATA["storage"], "dcsim/checkpoint/plan/storage.json")}
)
HOST_LINKS = MappingProxyType(
    {row.device: row for row in shipped.as_rows(HostLink, _DATA["host_links"], "dcsim/checkpoint/plan/storage.json")}
)
STORAGE_NAMES = tuple(STORAGES)
DEFAULT_STORAGE = "parallel-fs"

_UNITS = {"b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_BANDWIDTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:(k|m|g|t|ki|mi|gi|ti)?(b)(?:/s|ps))\s*$", re.IGNORECASE)


def get_storage(name: object, field: str = "--storage") -> Storage:
    if not isinstance(name, str) or name not in STORAGES:
        raise ValueError(f"{field} must be one of {', '.join(STORAGE_NAMES)}, got {show(name)}")
    return STORAGES[name]


def parse_bandwidth(text: object, field: str) -> int:
    """``25GB/s``, ``200Gb/s`` (bits), ``5.3 GiB/s`` as bytes a second, an exact int above 0."""
    if not isinstance(text, str) or len(text) > MAX_BANDWIDTH_CHARS:
        raise ValueError(f"{field} must be a bandwidth such as 25GB/s or 200Gb/s, got {show(text)}")
    found = _BANDWIDTH.match(text)
    if not found:
        raise ValueError(f"{field} must be a bandwidth such as 25GB/s, 200Gb/s or 5.3GiB/s, got {show(text)}")
    number, prefix, unit = found.groups()
    whole, _, decimals = number.partition(".")
    scale = _UNITS[(prefix or "b").lower()]
    value = (int(whole + decimals) * scale) // (10 ** len(decimals))
    if unit == "b":  # B is bytes, b bits
        value //= 8
    if value <= 0:
        raise ValueError(f"{field} must be above 0 bytes a second, got {show(text)}")
    return value


def typed_storage(base: Storage, write: int | None, aggregate: int | None) -> Storage:
    """``base`` with the figures a person typed, used as typed and said so in the source."""
    if write is None and aggregate is None:
        return base
    typed = []
    if write is not None:
        typed.append(f"a host's write bandwidth {write:,} B/s as typed")
    if aggregate is not None:
        typed.append(f"the aggregate {aggregate:,} B/s as typed")
    return dataclasses.replace(
        base,
        host_bytes_per_s=base.host_bytes_per_s if write is None else write,
        aggregate_bytes_per_s=base.aggregate_bytes_per_s if aggregate is None else aggregate,
        source=f"{'; '.join(typed)}; the rest from {base.name}: {base.source}",
    )


def default_policy(device: str | None) -> tuple[str, str]:
    """Orbax 0.12.8's default for the device's platform, and why."""
    link = HOST_LINKS.get(device or "")
    platform = link.platform if link else ("tpu" if (device or "").startswith("tpu") else "cpu")
    if platform in ("cuda", "gpu"):
        return "single-replica", f"Orbax's default when JAX_PLATFORMS names {platform} ({device})"
    return "replica-parallel", f"Orbax's default off CUDA GPUs (JAX_PLATFORMS={platform})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SaveTime:
    """A save's time, an estimate: the slowest host's, with the file cost's low and high."""

    seconds: float
    seconds_high: float
    per_host_bytes_per_s: float
    limit: str
    writing_hosts: int
    slowest_host: int


def save_time(host_bytes: Sequence[int], storage: Storage) -> SaveTime:
    files = host_files(host_bytes)
    writing = sum(1 for size in host_bytes if size)
    own = storage.host_bytes_per_s
    share = storage.aggregate_bytes_per_s / writing if storage.aggregate_bytes_per_s and writing else math.inf
    rate = min(own, share)
    limit = "the storage's aggregate bandwidth" if share < own else "each host's own bandwidth"
    times = [size / rate + count * storage.file_micros / 1e6 for size, count in zip(host_bytes, files, strict=True)]
    slowest = max(range(len(times)), key=times.__getitem__)
    high = host_bytes[slowest] / rate + files[slowest] * storage.file_micros_high / 1e6
    return SaveTime(
        seconds=times[slowest],
        seconds_high=high,
        per_host_bytes_per_s=rate,
        limit=limit,
        writing_hosts=writing,
        slowest_host=slowest,
    )


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    hosts: int
    seconds: float
    writing_hosts: int
    max_host_bytes: int
    limit: str


def speedup_curve(device_bytes: np.ndarray, num_hosts: int, storage: Storage) -> tuple[CurvePoint, ...]:
    """The save time for the same layout grouped into 1 to ``num_hosts`` hosts (each count that
    divides the devices: doublings and ``num_hosts``)."""
    devices = len(device_bytes)
    counts = sorted(
        {2**k for k in range(num_hosts.bit_length()) if devices % 2**k == 0 and 2**k <= num_hosts} | {num_hosts}
    )
    points = []
    for count in counts:
        sums = np.add.reduceat(device_bytes, np.arange(0, devices, devices // count))
        host_bytes = [int(size) for size in sums.tolist()]
        time = save_time(host_bytes, storage)
        writing = time.writing_hosts
        limit = f"only {writing:,} of {count:,} hosts write" if writing < count else time.limit
        points.append(CurvePoint(count, time.seconds, writing, max(host_bytes), limit))
    return tuple(points)


def flattens_at(curve: Sequence[CurvePoint]) -> CurvePoint:
    """The first point within ``FLAT_WITHIN`` of the last point's time; the last point's ``limit``
    is what holds the curve there (the aggregate, or the hosts that write nothing)."""
    last = curve[-1].seconds
    return next(point for point in curve if point.seconds <= last * (1 + FLAT_WITHIN))
