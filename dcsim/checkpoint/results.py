"""What a checkpoint measurement found: its files, their kinds and sizes, the totals, and, for a
group of processes, what each process held, wrote and spent.

``dcsim.checkpoint.measurement`` and ``dcsim.checkpoint.multiprocess`` build these from their
children's results; ``dcsim.checkpoint.records`` turns them into what the front ends show.
"""

from __future__ import annotations

import dataclasses
import re

from dcsim.model.config import ModelConfig

FILE_KINDS = ("array data", "index", "metadata", "commit marker")


def file_kind(path: str) -> str:
    """What a file of an Orbax OCDBT checkpoint holds, from its path inside the checkpoint.

    ``ocdbt.process_N/d/*`` hold the array chunks (with the B-tree nodes that index them, which
    OCDBT writes beside them), ``manifest.ocdbt`` files and the top-level ``d/`` the merged index,
    ``commit_success.txt`` marks a finished save, and the rest (``_METADATA``, ``_sharding``,
    ``_CHECKPOINT_METADATA``, ``array_metadatas/``) describe the tree, dtypes and shardings.
    """
    parts = path.split("/")
    if len(parts) >= 3 and parts[0].startswith("ocdbt.process_") and parts[1] == "d":
        return "array data"
    if parts[-1] == "manifest.ocdbt" or parts[0] == "d":
        return "index"
    if parts[-1] == "commit_success.txt":
        return "commit marker"
    return "metadata"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointFile:
    """One file the checkpoint wrote: its path inside the checkpoint, what it holds, its size."""

    path: str
    kind: str
    num_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileGroup:
    """The files of one kind, counted and added up."""

    kind: str
    num_files: int
    num_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFigures:
    """What a measurement spent and whether it came back, as a whole run or one process of a group
    reports it (the attributes are described where they are used)."""

    init_seconds: float
    save_seconds: float
    restore_seconds: float
    restore_verified: bool
    baseline_rss_bytes: int
    peak_rss_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointReport(RunFigures):
    """What a real Orbax checkpoint of the configured model wrote, and whether it came back.

    Attributes:
      config: the configuration measured.
      total_params: values in its ``params`` collection (the arrays saved), exact.
      dtype: the storage dtype the arrays were saved in.
      strategy: the sharding strategy; mesh: its mesh as ``axis=size,...``; num_devices: devices.
      partition_specs: ``(path, spec)`` per array, the spec in ``dcsim.sharding.meshes.spec_text`` form
        (empty: replicated).
      raw_payload_bytes: the arrays' bytes in the storage dtype (values x bytes per value).
      raw_float32_bytes: the same values in float32, the dashboard's headline estimate.
      device_bytes: the bytes all devices held together (a replicated array counts on each).
      disk_bytes: the bytes of every file the checkpoint wrote.
      num_files, largest_file_bytes: how many files, and the largest one's size.
      files: every file, sorted by path.
      init_seconds, save_seconds, restore_seconds: the concrete initialisation, the save until
        it was committed, the restore until every array was ready.
      compilation_cache: whether XLA's persistent compilation cache served the init program:
        ``hit`` (read back, not compiled), ``miss`` (compiled) or ``off`` (no cache; see
        ``dcsim.runtime.workers.compilation_cache_env``). A hit is why the same measurement is faster again.
      restore_verified: every restored array equals the saved one bit for bit, on the same
        sharding.
      baseline_rss_bytes: the child's peak resident memory after its imports, before any work.
      peak_rss_bytes: the child's peak resident memory over the whole measurement.
      peak_rss_before_stage: ``(stage, bytes)``: the peak so far as each of ``STAGES`` began,
        so the page can show where the memory went (the concrete init, before ``saving``).
      jax_version, orbax_version: the versions that produced these figures.
    """

    config: ModelConfig
    total_params: int
    dtype: str
    strategy: str
    mesh: str
    num_devices: int
    partition_specs: tuple[tuple[str, str], ...]
    raw_payload_bytes: int
    raw_float32_bytes: int
    device_bytes: int
    disk_bytes: int
    num_files: int
    largest_file_bytes: int
    files: tuple[CheckpointFile, ...]
    peak_rss_before_stage: tuple[tuple[str, int], ...]
    jax_version: str
    orbax_version: str
    compilation_cache: str = "off"

    @property
    def num_device_shards(self) -> int:
        """Array pieces the devices held: one per array per device (a replica is a piece too)."""
        return len(self.partition_specs) * self.num_devices

    @property
    def peak_growth_bytes(self) -> int:
        """How far the child's memory grew over its idle baseline."""
        return self.peak_rss_bytes - self.baseline_rss_bytes

    @property
    def file_groups(self) -> tuple[FileGroup, ...]:
        """Files per kind, in ``FILE_KINDS`` order; kinds with no file are left out."""
        groups = []
        for kind in FILE_KINDS:
            sizes = [file.num_bytes for file in self.files if file.kind == kind]
            if sizes:
                groups.append(FileGroup(kind=kind, num_files=len(sizes), num_bytes=sum(sizes)))
        return tuple(groups)


# How far a process's files may stand from its predicted arrays for the prediction to count as
# matched: they add its OCDBT manifest and B-tree nodes (with the zarr metadata), its array metadata
# and (process 0) the checkpoint's top-level files, a few KiB for the small models measured here;
# OCDBT keeps chunks of at most 1,024 bytes inline in its nodes, which it compresses (zstd), so a
# small zero-filled chunk may take fewer file bytes than its own.
MAX_OVERHEAD_BYTES = 64 * 2**10


_OWN_FOLDER = re.compile(r"^(?:ocdbt\.process_(\d+)(?:/|$)|array_metadatas/process_(\d+)$)")


def file_process(path: str) -> int:
    """The process that wrote a file of the checkpoint, from its path.

    Orbax gives each process its own ``ocdbt.process_<id>/`` folder (its shards' data and index)
    and ``array_metadatas/process_<id>``; everything else (the tree metadata, the merged index,
    the commit marker) is written by process 0, which commits the save.
    """
    match = _OWN_FOLDER.match(path)
    if match is None:
        return 0
    return int(match.group(1) or match.group(2))


def file_place(path: str) -> str:
    """Where a file sits: its ``ocdbt.process_<id>`` folder, ``array_metadatas``, or the top level."""
    first = path.split("/")[0]
    if first.startswith("ocdbt.process_") or first == "array_metadatas":
        return first + "/"
    return "top level"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessReport(RunFigures):
    """What one process of the group held, wrote and spent.

    Attributes:
      process_id: its ``jax.process_index()``; process 0 runs the coordinator and commits.
      num_devices: the virtual CPU devices it held (N/P).
      device_bytes: the bytes its devices held (its shards, replicas included).
      num_files, num_bytes: the files it wrote (by ``file_process``) and their bytes.
      chunk_bytes: with a policy (zstd off), the array chunks stored in its own OCDBT database, read
        back through tensorstore; None without one.
      predicted_bytes: the array bytes the plan's engine said it would write, before it saved;
        None without a policy.
      init_seconds, save_seconds, restore_seconds: its own concrete init, save until committed
        (Orbax waits for every process before it commits) and restore.
      restore_verified: its shards came back bit for bit.
      baseline_rss_bytes, peak_rss_bytes: its peak resident memory (``VmHWM``) once connected,
        before any work, and over the whole measurement.
    """

    process_id: int
    num_devices: int
    device_bytes: int
    num_files: int
    num_bytes: int
    chunk_bytes: int | None = None
    predicted_bytes: int | None = None

    @property
    def overhead_bytes(self) -> int | None:
        """What its files add beyond the predicted arrays (index, zarr and array metadata, and
        process 0's top-level files); None without a prediction."""
        return None if self.predicted_bytes is None else self.num_bytes - self.predicted_bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiprocessReport:
    """A checkpoint saved by a group of processes: the totals, each process, and the machine.

    Attributes:
      checkpoint: the group's totals in the single-process report's form: every file, disk
        bytes, the raw payload, ``save_seconds``/``restore_seconds`` as the group's wall time
        (first process starting to last finishing), ``restore_verified`` on every process, and
        the peak memory of the process that peaked highest.
      num_processes: P.
      processes: one ``ProcessReport`` per process, by process id.
      cpu_count, load_average: this machine's cores and its 1-minute load average when the
        group finished: the processes share these cores.
      policy: the Orbax policy the save used (``single-replica`` or ``replica-parallel``, set on
        its ``ArrayHandler``, zstd off), or None for Orbax's defaults (zstd on).
    """

    checkpoint: CheckpointReport
    num_processes: int
    processes: tuple[ProcessReport, ...]
    cpu_count: int
    load_average: float
    policy: str | None = None

    @property
    def prediction_matches(self) -> bool | None:
        """Every process stored exactly the chunk bytes predicted for it, and its files differ from
        them by at most ``MAX_OVERHEAD_BYTES``; None when nothing was predicted."""
        if any(process.predicted_bytes is None for process in self.processes):
            return None
        return all(
            process.chunk_bytes == process.predicted_bytes and abs(process.overhead_bytes or 0) <= MAX_OVERHEAD_BYTES
            for process in self.processes
        )

    @property
    def devices_per_process(self) -> int:
        return self.checkpoint.num_devices // self.num_processes

    @property
    def total_peak_rss_bytes(self) -> int:
        """The processes' peaks added up: at most this much memory was in use at once."""
        return sum(process.peak_rss_bytes for process in self.processes)
