"""The training state's tables, built once for every front end: ``memory --format csv`` writes the
arrays' table, the CLI's text shows it, and the Memory page draws it and offers it for download,
so the CLI's CSV and the page's are one file.

Columns are named as the layout's table names them (``dcsim.report.tables.layout_frame``); bytes
are exact ints.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dcsim.memory.state import StateArray
from dcsim.report.memory_records import spec_text
from dcsim.sharding import meshes

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
