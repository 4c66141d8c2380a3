"""Plain tables built once and rendered by every front end (the JSON records are in
``dcsim.report.records``, which needs no pandas).

The CLI prints them, the dashboard draws them, and both read the same column names, which are the
JSON keys of the glossary in docs/cli.md. Counts stay Python ints (pandas ``object`` columns would be
needed past 2**63; int64 holds every count a configuration within the limits can reach).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dcsim.model.count import ParamReport
from dcsim.quantities import payload, units
from dcsim.sharding import layout, shares


def arrays_frame(report: ParamReport) -> pd.DataFrame:
    """One row per parameter array: path, module, kind, shape, dtype, num_params."""
    return pd.DataFrame(
        {
            "path": [row.path for row in report.arrays],
            "module": [row.module for row in report.arrays],
            "kind": [row.kind for row in report.arrays],
            "shape": ["x".join(str(dim) for dim in row.shape) for row in report.arrays],
            "dtype": [row.dtype for row in report.arrays],
            "num_params": pd.array([row.num_values for row in report.arrays], dtype="int64"),
        }
    )


def layers_frame(report: ParamReport) -> pd.DataFrame:
    """One row per module owning parameters, with its share of the total in percent."""
    total = report.total_params
    layers = report.layers
    return pd.DataFrame(
        {
            "path": [row.path for row in layers],
            "num_arrays": pd.array([row.num_arrays for row in layers], dtype="int64"),
            "num_params": pd.array([row.num_params for row in layers], dtype="int64"),
            "percent_of_total": [100 * row.num_params / total if total else 0.0 for row in layers],
        }
    )


def payload_frame(num_values: int) -> pd.DataFrame:
    """The raw payload of ``num_values`` in every dtype dcsim knows, float32 first."""
    rows = payload.raw_payloads(num_values)
    return pd.DataFrame(
        {
            "dtype": [row.dtype for row in rows],
            "bytes_per_value": pd.array([row.bytes_per_value for row in rows], dtype="int64"),
            "raw_bytes": pd.array([row.num_bytes for row in rows], dtype="int64"),
        }
    )


def share_sweep_frame(total_params: int, num_shards: int, up_to: int = 4096, dtype: str = "float32") -> pd.DataFrame:
    """The ideal share at every power of two up to ``up_to`` and at ``num_shards`` itself.

    ``ideal_share`` is the nearest float (for charts); ``ideal_share_text`` is exact, e.g.
    ``6.666666666666667 (20/3)``; ``values_at_most`` is what the fullest shard of the most even
    split of a flat vector would hold (the share rounded up): no shard holds a fraction.
    ``bytes_per_shard_text`` is the share's raw bytes in ``dtype``, exact (``dtype`` names it).
    """
    counts = sorted({*shares.powers_of_two(up_to), num_shards})
    rows = shares.sweep(total_params, counts)
    return pd.DataFrame(
        {
            "num_shards": pd.array(counts, dtype="int64"),
            "ideal_share": [row.value for row in rows],
            "ideal_share_text": [units.share(row.exact) for row in rows],
            "ideal_share_fraction": [row.fraction for row in rows],
            "values_at_most": pd.array([row.values_at_most for row in rows], dtype="int64"),
            "dtype": dtype,
            "bytes_per_shard_text": [
                units.bytes_share(payload.bytes_per_shard(total_params, count, dtype)) for count in counts
            ],
        }
    )


def layer_bytes_frame(report: ParamReport) -> pd.DataFrame:
    """Raw payload bytes of each layer in every dtype of ``payload.RAW_DTYPES``, float32 first."""
    return bytes_frame(layers_frame(report))


def bytes_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Raw payload bytes in every dtype of ``payload.RAW_DTYPES`` for each row of a frame with
    ``path`` and ``num_params`` (per layer, or per module at some depth)."""
    frame = pd.DataFrame({"path": list(rows["path"])})
    for dtype in payload.RAW_DTYPES:
        frame[dtype] = pd.array([payload.raw_bytes(int(count), dtype) for count in rows["num_params"]], dtype="int64")
    frame["float32_text"] = frame["float32"].map(units.bytes_exact)
    return frame


_INT64_MAX = 2**63 - 1


def _ints(values: list[int]) -> Any:
    # int64 while every count fits (always, within dcsim's limits); exact Python ints otherwise.
    if all(-_INT64_MAX <= value <= _INT64_MAX for value in values):
        return pd.array(values, dtype="int64")
    return pd.array(values, dtype=object)


def layout_frame(laid: layout.LayoutReport) -> pd.DataFrame:
    """One row per parameter array: path, shape, dtype, partition_spec, shard_shape,
    values_per_shard, replication_factor, stored_values, replicated_fallback, note."""
    rows = laid.arrays
    return pd.DataFrame(
        {
            "path": [row.path for row in rows],
            "shape": [layout.shape_text(row.shape) for row in rows],
            "dtype": [row.dtype for row in rows],
            "partition_spec": [row.partition_spec for row in rows],
            "shard_shape": [layout.shape_text(row.shard_shape) for row in rows],
            "values_per_shard": _ints([row.values_per_shard for row in rows]),
            "replication_factor": _ints([row.replication_factor for row in rows]),
            "stored_values": _ints([row.stored_values for row in rows]),
            "replicated_fallback": [row.replicated_fallback for row in rows],
            "note": [row.note for row in rows],
        }
    )
