"""Plain tables and records built once and rendered by every front end.

The CLI prints them, the dashboard draws them, and both read the same column names, which are the
JSON keys of the glossary in docs/cli.md. Counts stay Python ints (pandas ``object`` columns would be
needed past 2**63; int64 holds every count a configuration within the limits can reach).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim.model import breakdown
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.report import units
from dcsim.sharding import layout, payload, shares


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


def count_record(config: ModelConfig, report: ParamReport) -> dict[str, Any]:
    """The ``count`` result as one JSON-ready object (keys in the glossary of docs/cli.md)."""
    share = shares.ideal_share(report.total_params, config.num_shards)
    per_shard = payload.bytes_per_shard(report.total_params, config.num_shards, config.dtype)
    return {
        "total_params": report.total_params,
        "num_shards": config.num_shards,
        "ideal_share": share.value,
        "ideal_share_fraction": share.fraction,
        "dtype": config.dtype,
        "bytes_per_shard": float(per_shard),
        "bytes_per_shard_fraction": str(per_shard),
        "raw_float32_bytes": payload.raw_bytes(report.total_params, "float32"),
        "raw_bytes": {row.dtype: row.num_bytes for row in payload.raw_payloads(report.total_params)},
        "raw_bytes_note": payload.NOT_CHECKPOINT_SIZE,
        "other_variables": report.total_other_values,
        "active_params": breakdown.active_params(config, report),
        "config": config.to_dict(),
        "layers": [
            {"path": row.path, "num_arrays": row.num_arrays, "num_params": row.num_params} for row in report.layers
        ],
        "arrays": [
            {
                "path": row.path,
                "module": row.module,
                "kind": row.kind,
                "shape": list(row.shape),
                "dtype": row.dtype,
                "num_params": row.num_values,
            }
            for row in report.arrays
        ],
    }


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


def _number(value: Fraction | None) -> tuple[float | None, str | None]:
    return (None, None) if value is None else (float(value), str(value))


def layout_record(laid: layout.LayoutReport) -> dict[str, Any]:
    """The layout as one JSON-ready object. Exact fractions come as a float plus an exact string
    (``ideal_share`` and ``ideal_share_fraction``), as ``dcsim.report.tables.count_record`` does."""
    share = laid.ideal_share
    gap, gap_fraction = _number(laid.gap)
    ratio, ratio_fraction = _number(laid.gap_ratio)
    replication, replication_fraction = _number(laid.replication_factor)
    return {
        "mesh": [{"name": name, "size": size} for name, size in laid.mesh.axes],
        "mesh_text": laid.mesh.text,
        "strategy": laid.strategy,
        "rules": [rule.text for rule in laid.rules],
        "num_devices": laid.num_devices,
        "total_params": laid.total_params,
        "ideal_share": share.value,
        "ideal_share_fraction": share.fraction,
        "values_per_device": laid.values_per_device,
        "raw_float32_bytes_per_device": laid.raw_float32_bytes_per_device,
        "total_stored_values": laid.total_stored_values,
        "replication_factor": replication,
        "replication_factor_fraction": replication_fraction,
        "gap_values": gap,
        "gap_values_fraction": gap_fraction,
        "gap_ratio": ratio,
        "gap_ratio_fraction": ratio_fraction,
        "num_replicated_fallbacks": laid.num_replicated_fallbacks,
        "replicas_note": layout.REPLICAS_NOT_ON_DISK,
        "arrays": [
            {
                "path": row.path,
                "shape": list(row.shape),
                "dtype": row.dtype,
                "partition_spec": row.partition_spec,
                "shard_shape": list(row.shard_shape),
                "values_per_shard": row.values_per_shard,
                "replication_factor": row.replication_factor,
                "stored_values": row.stored_values,
                "replicated_fallback": row.replicated_fallback,
                "note": row.note,
            }
            for row in laid.arrays
        ],
    }
