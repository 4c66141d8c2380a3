"""What the front ends show of a checkpoint measurement: why its size differs from the raw payload
(read off the measurement itself), its JSON record, and its tables, for one process and for a group.

pandas is imported by the frames alone: the single-process measurement's record and its two
tables (``sizes_columns``, ``file_groups_columns``) need none, so ``python -m dcsim checkpoint``
does not pay its import (about half a second) on its way to the child.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from dcsim.checkpoint.results import (
    MAX_OVERHEAD_BYTES,
    CheckpointReport,
    FileGroup,
    MultiprocessReport,
    file_place,
    file_process,
)
from dcsim.quantities import units

if TYPE_CHECKING:
    import pandas as pd

MULTIHOST_NOTE = (
    "What this means for a real multi-host save: each host writes only the shards its devices hold, "
    "into its own ocdbt.process_N folder, at the same time as the others, and process 0 commits the "
    "checkpoint once every host has finished; the files follow the processes, not the device shards. "
    "What it cannot show: the network and storage bandwidth of a real cluster. Here every process "
    "runs on this one machine, shares its disk and its CPU cores (more processes than cores compete "
    "for the same CPUs), and talks to the others over loopback, so save times here show the "
    "coordination cost, not how a cluster's save would scale."
)


def explain(report: CheckpointReport, compressed: bool = True) -> tuple[str, ...]:
    """Why the checkpoint's size differs from the raw payload, each reason read off this measurement
    (``compressed``: saved with Orbax's default zstd; false for a group saved under a policy)."""
    groups = {group.kind: group for group in report.file_groups}
    data = groups.get("array data", FileGroup(kind="array data", num_files=0, num_bytes=0))
    rest = report.disk_bytes - data.num_bytes
    held = (
        f"the array data files hold {data.num_bytes:,} bytes for a raw payload of {report.raw_payload_bytes:,} "
        f"({_percent(data.num_bytes, report.raw_payload_bytes)})"
    )
    lines = [
        f"Compression: {held}; Orbax's OCDBT format compresses chunks (zstd), and freshly initialised random "
        "values compress little."
        if compressed
        else f"Compression: off for this save, so {held}: the chunks' raw bytes and the B-tree nodes that index them.",
        f"Metadata: {report.num_files - data.num_files} more files ({rest:,} bytes) describe the tree, dtypes "
        "and shardings, index the data and mark the save as committed.",
        f"File layout: the {units.many(report.num_devices, 'device')} held {report.num_device_shards} array shards; "
        f"the checkpoint wrote {report.num_files} files, {data.num_files} of them array data: OCDBT packs chunks "
        "into a few files per process, not one file per device shard.",
    ]
    if report.device_bytes > report.raw_payload_bytes:
        lines.append(
            f"Replicas: the devices held {report.device_bytes:,} bytes together, "
            f"{report.device_bytes / report.raw_payload_bytes:.2f}x the payload, because the {report.strategy} "
            "layout keeps some values on several devices; the checkpoint writes each value once."
        )
    if report.dtype != "float32":
        lines.append(
            f"Storage dtype: saved as {report.dtype}, {report.raw_payload_bytes:,} raw bytes against "
            f"{report.raw_float32_bytes:,} in float32."
        )
    return tuple(lines)


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}% of it" if whole else "no payload"


# The record's keys before the files, in its order: each the report's attribute of the same name,
# the (key, value) pairs written as JSON objects.
_RECORD_FIELDS = (
    "total_params",
    "dtype",
    "strategy",
    "mesh",
    "num_devices",
    "partition_specs",
    "raw_payload_bytes",
    "raw_float32_bytes",
    "device_bytes",
    "disk_bytes",
    "num_files",
    "largest_file_bytes",
    "init_seconds",
    "save_seconds",
    "restore_seconds",
    "restore_verified",
    "compilation_cache",
    "baseline_rss_bytes",
    "peak_rss_bytes",
    "peak_rss_before_stage",
)
_RECORD_PAIRS = ("partition_specs", "peak_rss_before_stage")


def checkpoint_record(report: CheckpointReport, compressed: bool = True) -> dict[str, Any]:
    """The measurement as one JSON-ready object (keys in docs/checkpoint.md)."""
    record = {name: getattr(report, name) for name in _RECORD_FIELDS}
    record |= {name: dict(record[name]) for name in _RECORD_PAIRS}  # in place: the order stays
    return record | {
        "file_groups": [dataclasses.asdict(group) for group in report.file_groups],
        "files": [dataclasses.asdict(file) for file in report.files],
        "explanation": list(explain(report, compressed)),
        "versions": {"jax": report.jax_version, "orbax-checkpoint": report.orbax_version},
        "config": report.config.to_dict(),
    }


def _frame(columns: dict[str, Any], counts: Collection[str] = ()) -> pd.DataFrame:
    """``columns`` as a frame, the ``counts`` columns as int64."""
    import pandas as pd

    return pd.DataFrame(
        {name: pd.array(values, dtype="int64") if name in counts else values for name, values in columns.items()}
    )


# The count columns of ``sizes_columns`` and ``file_groups_columns``: int64 in their frames.
SIZES_COUNTS = frozenset({"num_bytes"})
FILE_GROUPS_COUNTS = frozenset({"num_files", "num_bytes"})


def sizes_columns(report: CheckpointReport) -> dict[str, list[Any]]:
    """The measured sizes beside the raw estimates: one row per figure, in bytes (no pandas)."""
    rows = [
        ("raw_float32_bytes", report.raw_float32_bytes, "estimate: values x 4 bytes"),
        ("raw_payload_bytes", report.raw_payload_bytes, f"estimate: values x bytes per {report.dtype} value"),
        (
            "device_bytes",
            report.device_bytes,
            f"held by {units.many(report.num_devices, 'device')} together, replicas included",
        ),
        ("disk_bytes", report.disk_bytes, f"measured: {report.num_files} files on disk"),
        ("largest_file_bytes", report.largest_file_bytes, "measured: the largest file"),
    ]
    return {
        "figure": [name for name, _, _ in rows],
        "num_bytes": [value for _, value, _ in rows],
        "what": [what for _, _, what in rows],
    }


def sizes_frame(report: CheckpointReport) -> pd.DataFrame:
    """``sizes_columns`` as a frame."""
    return _frame(sizes_columns(report), SIZES_COUNTS)


def file_groups_columns(report: CheckpointReport) -> dict[str, list[Any]]:
    """The files summarised by kind: how many and how many bytes (no pandas)."""
    groups = report.file_groups
    return {
        "kind": [group.kind for group in groups],
        "num_files": [group.num_files for group in groups],
        "num_bytes": [group.num_bytes for group in groups],
    }


def file_groups_frame(report: CheckpointReport) -> pd.DataFrame:
    """``file_groups_columns`` as a frame."""
    return _frame(file_groups_columns(report), FILE_GROUPS_COUNTS)


def files_frame(report: CheckpointReport) -> pd.DataFrame:
    """Every file the checkpoint wrote: path inside it, kind, size."""
    return _frame(
        {
            "path": [file.path for file in report.files],
            "kind": [file.kind for file in report.files],
            "num_bytes": [file.num_bytes for file in report.files],
        },
        ("num_bytes",),
    )


def processes_frame(report: MultiprocessReport) -> pd.DataFrame:
    """One row per process: devices, bytes held, files and bytes written, times, peak memory."""
    rows = report.processes
    return _frame(
        {
            "process": [row.process_id for row in rows],
            "num_devices": [row.num_devices for row in rows],
            "device_bytes": [row.device_bytes for row in rows],
            "num_files": [row.num_files for row in rows],
            "num_bytes": [row.num_bytes for row in rows],
            "save_seconds": [row.save_seconds for row in rows],
            "restore_seconds": [row.restore_seconds for row in rows],
            "peak_rss_bytes": [row.peak_rss_bytes for row in rows],
            "restore_verified": [row.restore_verified for row in rows],
        }
        | _predicted_columns(report),
        ("process", "num_devices", "device_bytes", "num_files", "num_bytes", "peak_rss_bytes", *_PREDICTED),
    )


_PREDICTED = ("predicted_bytes", "chunk_bytes")


def _predicted_columns(report: MultiprocessReport) -> dict[str, list[Any]]:
    """Each process's predicted and stored chunk bytes, for a group saved under a policy."""
    if report.policy is None:
        return {}
    return {name: [getattr(row, name) for row in report.processes] for name in _PREDICTED}


def file_places_frame(report: MultiprocessReport) -> pd.DataFrame:
    """The files grouped by where they sit (each ``ocdbt.process_<id>/``, ``array_metadatas/``,
    the top level) and by the process that wrote them."""
    groups: dict[tuple[int, str], list[int]] = {}
    for file in report.checkpoint.files:
        groups.setdefault((file_process(file.path), file_place(file.path)), []).append(file.num_bytes)
    order = {"array_metadatas/": 1, "top level": 2}  # each process's own ocdbt folder first
    keys = sorted(groups, key=lambda key: (key[0], order.get(key[1], 0), key[1]))
    return _frame(
        {
            "process": [process for process, _ in keys],
            "place": [place for _, place in keys],
            "num_files": [len(groups[key]) for key in keys],
            "num_bytes": [sum(groups[key]) for key in keys],
        },
        ("process", "num_files", "num_bytes"),
    )


def sweep_frame(reports: Sequence[MultiprocessReport]) -> pd.DataFrame:
    """One row per process count: the group's totals and the largest per-process figures."""
    return _frame(
        {
            "num_processes": [r.num_processes for r in reports],
            "devices_per_process": [r.devices_per_process for r in reports],
            "num_files": [r.checkpoint.num_files for r in reports],
            "disk_bytes": [r.checkpoint.disk_bytes for r in reports],
            "raw_payload_bytes": [r.checkpoint.raw_payload_bytes for r in reports],
            "save_seconds": [r.checkpoint.save_seconds for r in reports],
            "restore_seconds": [r.checkpoint.restore_seconds for r in reports],
            "max_process_bytes": [max(p.num_bytes for p in r.processes) for r in reports],
            "max_peak_rss_bytes": [max(p.peak_rss_bytes for p in r.processes) for r in reports],
            "total_peak_rss_bytes": [r.total_peak_rss_bytes for r in reports],
            "restore_verified": [r.checkpoint.restore_verified for r in reports],
        },
        (
            "num_processes",
            "devices_per_process",
            "num_files",
            "disk_bytes",
            "raw_payload_bytes",
            "max_process_bytes",
            "max_peak_rss_bytes",
            "total_peak_rss_bytes",
        ),
    )


def sweep_processes_frame(reports: Sequence[MultiprocessReport]) -> pd.DataFrame:
    """One row per process of every run: the run's P, the process, its bytes, memory and times."""
    rows = [(r.num_processes, p) for r in reports for p in r.processes]
    return _frame(
        {
            "num_processes": [count for count, _ in rows],
            "process": [p.process_id for _, p in rows],
            "num_bytes": [p.num_bytes for _, p in rows],
            "peak_rss_bytes": [p.peak_rss_bytes for _, p in rows],
            "save_seconds": [p.save_seconds for _, p in rows],
            "restore_seconds": [p.restore_seconds for _, p in rows],
        }
        | ({name: [getattr(p, name) for _, p in rows] for name in _PREDICTED} if reports[0].policy else {}),
        ("num_processes", "process", "num_bytes", "peak_rss_bytes", *_PREDICTED),
    )


def explain_processes(report: MultiprocessReport) -> tuple[str, ...]:
    """What the group did, read off this measurement: who wrote what, the time, the memory."""
    places = file_places_frame(report)
    own = places[places["place"].str.startswith("ocdbt.process_")]
    top = places[places["place"] == "top level"]
    heaviest = max(report.processes, key=lambda p: p.num_bytes)
    lightest = min(report.processes, key=lambda p: p.num_bytes)
    processes, cores = (
        units.many(report.num_processes, "process", "processes"),
        units.many(report.cpu_count, "CPU core"),
    )
    lines = [
        f"Files: {units.many(len(own), 'ocdbt.process_* folder')} for {processes}: each process with "
        "shards to write wrote its own (their data and index), every process its own array_metadatas/process_N; "
        "process 0 also wrote "
        f"the {int(top['num_files'].sum())} top-level files ({int(top['num_bytes'].sum()):,} bytes: tree metadata, "
        "merged index, commit marker) once every process had finished.",
        f"Bytes per process: process {heaviest.process_id} wrote the most ({heaviest.num_bytes:,} bytes), process "
        f"{lightest.process_id} the least ({lightest.num_bytes:,} bytes); a process writes only shards it holds, "
        f"and each value is written once, so the group wrote {report.checkpoint.disk_bytes:,} bytes for a raw "
        f"payload of {report.checkpoint.raw_payload_bytes:,}, as one process would.",
        f"Time: the group's save took {report.checkpoint.save_seconds:.2f} s from the first process starting to the "
        f"last finishing, its restore {report.checkpoint.restore_seconds:.2f} s; {processes} "
        f"shared this machine's {cores} (load average {report.load_average:.2f}).",
        f"Memory: each process peaked at up to {units.bytes_exact(max(p.peak_rss_bytes for p in report.processes))}, "
        f"{units.bytes_exact(report.total_peak_rss_bytes)} together; each pays its own interpreter, JAX and Orbax "
        f"(about {units.bytes_exact(min(p.baseline_rss_bytes for p in report.processes))} before any work).",
    ]
    data = {int(row.process): int(row.num_bytes) for row in own.itertuples()}
    split = bool(data) and max(data.values()) < 0.75 * sum(data.values())
    if report.num_processes > 1 and report.checkpoint.strategy == "replicated" and split:
        lines.insert(
            2,
            "Replicas: every process held every array whole, yet none wrote all of it: Orbax split the "
            "writing of each replicated array among the processes holding copies ("
            + ", ".join(f"process {process} {size:,} bytes" for process, size in sorted(data.items()))
            + " of array data).",
        )
    return tuple(lines)


POLICY_HANDLER = {"single-replica": "use_replica_parallel=False", "replica-parallel": "use_replica_parallel=True"}


def prediction_lines(report: MultiprocessReport) -> tuple[str, ...]:
    """The plan's prediction beside what each process stored, for a group saved under a policy;
    nothing without one. The figures here are the arrays' bytes: the same on every run."""
    if report.policy is None:
        return ()
    verdict = {True: "matches", False: "DOES NOT MATCH", None: "not made"}[report.prediction_matches]
    lines = [
        f"policy             {report.policy} (Orbax ArrayHandler {POLICY_HANDLER[report.policy]}), zstd off",
        f"prediction         {verdict}: each process's array bytes, predicted before the save, against the "
        "chunks it stored",
    ]
    for process in report.processes:
        label = f"process {process.process_id}"
        lines.append(f"  {label:<17}predicted {process.predicted_bytes:,} · stored {process.chunk_bytes:,}")
    return (*lines, "")


def explain_prediction(report: MultiprocessReport) -> tuple[str, ...]:
    """How the prediction was made and checked, and what each process's files add beyond its arrays."""
    if report.policy is None or report.prediction_matches is None:
        return ()
    places: dict[tuple[int, str], int] = {}
    for file in report.checkpoint.files:
        key = (file_process(file.path), file_place(file.path))
        places[key] = places.get(key, 0) + file.num_bytes
    added = []
    for process in report.processes:
        own = places.get((process.process_id, f"ocdbt.process_{process.process_id}/"), 0)
        folder = f"ocdbt.process_{process.process_id}/"
        parts = [
            f"its {folder} {own - (process.chunk_bytes or 0):+,} beyond its chunks (manifest, B-tree nodes with the "
            "zarr metadata)"
            if (process.process_id, folder) in places
            else f"no {folder}: nothing to write",
            f"array_metadatas {places.get((process.process_id, 'array_metadatas/'), 0):,}",
        ]
        if (process.process_id, "top level") in places:
            parts.append(f"the top-level files {places[(process.process_id, 'top level')]:,}")
        added.append(f"process {process.process_id} {process.overhead_bytes:+,} bytes ({', '.join(parts)})")
    return (
        f"Prediction: before any process started, the plan's writers (checkpoint-plan's engine, policy "
        f"{report.policy}) laid the parameters out as memory does and summed each device's written bytes per "
        f"process, the mesh's devices taken {report.devices_per_process} a process in mesh order. After the save "
        "each process read back the chunks in its own OCDBT database through tensorstore (zstd off: a chunk's "
        "bytes are its values' raw bytes) and the two were compared to the byte.",
        "Beyond the arrays, each process's files add: "
        + "; ".join(added)
        + f". The check allows at most {MAX_OVERHEAD_BYTES:,} bytes a process either way; OCDBT keeps chunks of "
        "at most 1,024 bytes inline in its B-tree nodes, which it compresses with zstd, so a small zero-filled "
        "chunk can take fewer file bytes than its own.",
    )


def multiprocess_record(report: MultiprocessReport) -> dict[str, Any]:
    """The group measurement as one JSON-ready object: the single-process record for the totals,
    plus the processes, the files by place and the machine (keys in docs/checkpoint.md)."""
    return {
        **checkpoint_record(report.checkpoint, compressed=report.policy is None),
        "num_processes": report.num_processes,
        "devices_per_process": report.devices_per_process,
        "save_wall_seconds": report.checkpoint.save_seconds,
        "restore_wall_seconds": report.checkpoint.restore_seconds,
        "total_peak_rss_bytes": report.total_peak_rss_bytes,
        "policy": report.policy,
        "compression": "zstd" if report.policy is None else "off",
        "prediction_matches": report.prediction_matches,
        "processes": [
            dataclasses.asdict(process) | {"overhead_bytes": process.overhead_bytes} for process in report.processes
        ],
        "prediction_explanation": list(explain_prediction(report)),
        "file_places": file_places_frame(report).to_dict(orient="records"),
        "process_explanation": list(explain_processes(report)),
        "multihost_note": MULTIHOST_NOTE,
        "cpu_count": report.cpu_count,
        "load_average": report.load_average,
    }
