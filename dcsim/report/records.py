"""JSON-ready records of a count and a layout, built once for every front end.

The keys are the glossary of docs/cli.md. Apart from ``dcsim.report.tables`` because these need no
pandas: ``count --format json`` and ``layout --format json`` print them without paying its import.
Counts stay Python ints, and an exact fraction comes as a float plus its exact string.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dcsim.model import breakdown
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import payload
from dcsim.sharding import layout, shares


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


def _number(value: Fraction | None) -> tuple[float | None, str | None]:
    return (None, None) if value is None else (float(value), str(value))


def layout_record(laid: layout.LayoutReport) -> dict[str, Any]:
    """The layout as one JSON-ready object. Exact fractions come as a float plus an exact string
    (``ideal_share`` and ``ideal_share_fraction``), as ``count_record`` does."""
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
