"""The training state's tables, built once for every front end: ``memory --format csv`` writes the
arrays' table, the CLI's text shows it, and the Memory page draws it and offers it for download,
so the CLI's CSV and the page's are one file; the parts' table is the CLI's and the page's "By
part" alike.

Columns are named as the layout's table names them (``dcsim.report.tables.layout_frame``); bytes
are exact ints.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dcsim.memory.state import MemoryReport, StateArray
from dcsim.report.memory_records import spec_text
from dcsim.sharding import meshes

# Each part in words, the same in every table and chart; the last two are the bars' (activations and
# what the budget leaves).
PART_TITLES = {
    "params": "Parameters",
    "grads": "Gradients",
    "master": "Master copy",
    "optimizer": "Optimizer state",
    "activations": "Activations",
    "headroom": "Headroom to the budget",
}
ARRAY_COLUMNS = ("path", "part", "shape", "dtype", "partition_spec", "shard_shape", "bytes_per_device", "note")


def state_arrays_frame(rows: Sequence[StateArray]) -> pd.DataFrame:
    """One row per state array, in the order given: path, part, shape, dtype, partition_spec,
    shard_shape, bytes_per_device (an exact int) and note (why it is laid out so)."""
    return pd.DataFrame(
        {
            "path": [row.path for row in rows],
            "part": [row.part for row in rows],
            "shape": [meshes.shape_text(row.shape) for row in rows],
            "dtype": [row.dtype for row in rows],
            "partition_spec": [spec_text(row) for row in rows],
            "shard_shape": [meshes.shape_text(row.shard_shape) for row in rows],
            "bytes_per_device": pd.array([row.bytes_per_device for row in rows], dtype="int64"),
            "note": [row.note for row in rows],
        },
        columns=list(ARRAY_COLUMNS),
    )


def state_arrays_csv(rows: Sequence[StateArray]) -> str:
    """``state_arrays_frame`` as CSV text: the file ``memory --format csv`` prints and the page downloads."""
    return state_arrays_frame(rows).to_csv(index=False)


def state_parts_frame(memory: MemoryReport) -> pd.DataFrame:
    """One row per part the setup holds: part, title, dtype (the dtypes it is stored in, in the
    engine's order, as the JSON's ``dtypes``; ``none`` when it holds no array), split (``split`` over
    the mesh, ``whole over data`` where only the strategy's model-parallel split applies, or ``whole``
    on every device: ``MemoryReport.part_layout``), num_arrays, total_bytes (the part once, all devices
    together), bytes_per_device (exact ints) and percent_of_device (of what one device holds)."""
    training = memory.training
    device = memory.total_bytes_per_device
    parts = training.parts
    held = [memory.part_bytes(part) for part in parts]
    return pd.DataFrame(
        {
            "part": list(parts),
            "title": [PART_TITLES[part] for part in parts],
            "dtype": [", ".join(memory.part_dtypes(part)) or "none" for part in parts],
            "split": [memory.part_layout(part) for part in parts],
            "num_arrays": pd.array([len(memory.part_arrays(part)) for part in parts], dtype="int64"),
            "total_bytes": pd.array([memory.part_total_bytes(part) for part in parts], dtype="int64"),
            "bytes_per_device": pd.array(held, dtype="int64"),
            "percent_of_device": [100 * size / device if device else 0.0 for size in held],
        }
    )
