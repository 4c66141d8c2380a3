"""This machine's disk, probed: how fast it writes and what a file costs, measured here.

``checkpoint --processes-sweep`` saves real checkpoints into the temporary folder; the plan's
storage model (``dcsim.checkpoint.plan.storage``) predicts a save's time from a write bandwidth and
a cost a file. To compare the two, this module measures both where the sweep saves: one file of
``num_bytes`` written in 1 MiB blocks of random bytes and ``fsync``-ed (tensorstore's file store
syncs what it writes by default: its ``file_io_sync`` resource), and ``PROBE_FILES`` small files
each created, written, synced and closed. Each is tried ``PROBE_TRIES`` times; the fastest and the
slowest try bound the prediction, since this machine's load moves between tries. The probe's own
folder is always removed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

PROBE_TRIES = 3
PROBE_FILES = 8
# What one try writes: about what the sweep's one process saves, at least a block and at most
# 64 MiB (a quarter of a second on a slow SSD), so the probe stays small beside the sweep.
MIN_PROBE_BYTES = 2**20
MAX_PROBE_BYTES = 64 * 2**20
_BLOCK_BYTES = 2**20
_SMALL_FILE_BYTES = 512  # a manifest's size: what a file's cost is measured with


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiskProbe:
    """Each try's write bandwidth (bytes a second, of ``num_bytes`` synced) and cost a file
    (microseconds, of a small file created, synced and closed), measured in ``folder``."""

    folder: str
    num_bytes: int
    bytes_per_s: tuple[int, ...]
    file_micros: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.bytes_per_s or len(self.bytes_per_s) != len(self.file_micros):
            raise ValueError("a disk probe needs one bandwidth and one file cost a try")
        if min(self.bytes_per_s) < 1 or min(self.file_micros) < 0:
            raise ValueError(f"a disk probe's figures must be positive, got {self.bytes_per_s}, {self.file_micros}")

    def record(self) -> dict[str, object]:
        return {
            "folder": self.folder,
            "num_bytes": self.num_bytes,
            "bytes_per_s": list(self.bytes_per_s),
            "file_micros": list(self.file_micros),
        }


def probe_bytes(payload_bytes: int) -> int:
    """What one try writes for a checkpoint of ``payload_bytes``: within the probe's bounds."""
    return max(MIN_PROBE_BYTES, min(MAX_PROBE_BYTES, int(payload_bytes)))


def probe_disk(num_bytes: int, folder: str | None = None) -> DiskProbe:
    """Measure the disk under ``folder`` (the temporary folder the sweep saves into, unless given)."""
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 1:
        raise ValueError(f"a disk probe writes a positive whole number of bytes, got {num_bytes!r}")
    base = tempfile.gettempdir() if folder is None else folder
    root = Path(tempfile.mkdtemp(prefix="dcsim-disk-probe-", dir=base))
    block = os.urandom(_BLOCK_BYTES)
    rates, costs = [], []
    try:
        for attempt in range(PROBE_TRIES):
            rates.append(_write_rate(root / f"data_{attempt}", num_bytes, block))
            costs.append(_file_micros(root, attempt, block[:_SMALL_FILE_BYTES]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return DiskProbe(folder=base, num_bytes=num_bytes, bytes_per_s=tuple(rates), file_micros=tuple(costs))


def _write_rate(path: Path, num_bytes: int, block: bytes) -> int:
    started = time.perf_counter()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = num_bytes
        while left:
            left -= os.write(descriptor, block[: min(left, len(block))])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    seconds = time.perf_counter() - started
    path.unlink()
    return max(1, round(num_bytes / seconds)) if seconds > 0 else num_bytes


def _file_micros(root: Path, attempt: int, content: bytes) -> int:
    started = time.perf_counter()
    for index in range(PROBE_FILES):
        descriptor = os.open(root / f"small_{attempt}_{index}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(descriptor, content)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    return round((time.perf_counter() - started) * 1e6 / PROBE_FILES)
