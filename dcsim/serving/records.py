"""A serving report as JSON: the ``serve`` command's output and the Serving page's download, one
builder for both. Keys are in docs/cli.md; every byte figure is an exact int."""

from __future__ import annotations

from typing import Any

from dcsim.serving.cache import LayerCache
from dcsim.serving.engine import ServingReport
from dcsim.serving.request import reserve_text
from dcsim.serving.search import MeshSearch
from dcsim.sharding.meshes import spec_text


def layer_groups(layers: tuple[LayerCache, ...]) -> list[list[LayerCache]]:
    """Consecutive layers that cache alike (kind, window, tokens, bytes a token), together: Llama 2
    70B's 80 layers are one row, Gemma 2's alternate."""
    groups: list[list[LayerCache]] = []
    for layer in layers:
        key = (layer.kind, layer.window, layer.tokens, layer.bytes_per_token, layer.state_bytes)
        last = groups[-1][0] if groups else None
        if last is not None and (last.kind, last.window, last.tokens, last.bytes_per_token, last.state_bytes) == key:
            groups[-1].append(layer)
        else:
            groups.append([layer])
    return groups


def layer_records(report: ServingReport) -> list[dict[str, Any]]:
    return [
        {
            "path": layer.path,
            "kind": layer.kind,
            "window": layer.window or None,
            "tokens": layer.tokens,
            "bytes_per_token": layer.bytes_per_token,
        }
        | ({"state_bytes_per_sequence": layer.state_bytes} if layer.kind == "state" else {})
        for layer in report.layers
    ]


def search_record(found: MeshSearch) -> dict[str, Any]:
    answer = found.answer
    return {
        "mesh": None if answer is None else answer.mesh.text,
        "num_devices": None if answer is None else answer.num_devices,
        "tried": [
            {
                "mesh": item.mesh.text,
                "num_devices": item.num_devices,
                "serves": item.serves,
                "total_bytes_per_device": item.total_bytes_per_device,
                "max_concurrency": item.max_concurrency,
                "reason": item.reason or None,
            }
            for item in found.tried
        ],
    }


def serving_record(report: ServingReport, found: MeshSearch | None = None) -> dict[str, Any]:
    """The report as one JSON-ready object."""
    serving = report.serving
    return {
        "mesh": serving.mesh.text,
        "num_devices": serving.mesh.num_devices,
        "strategy": serving.strategy,
        "rules": [rule.text for rule in serving.rules],
        "total_params": report.total_params,
        "context": serving.context,
        "concurrency": serving.concurrency,
        "source_length": report.source_length,
        "sequences_per_replica": serving.sequences_per_replica,
        "num_replicas": serving.num_replicas,
        "kv_dtype": serving.kv_dtype,
        "full_windows": serving.full_windows,
        "kv_bytes_per_token": report.kv_bytes_per_token,
        "kv_bytes_per_sequence": report.kv_bytes_per_sequence,
        "kv_bytes_per_device": report.kv_bytes_per_device,
        "weights_format": serving.weights,
        "weights_options": serving.weight_format.to_dict(),
        "bits_per_weight": round(float(report.table.bits_per_weight), 4),
        "weights_notes": list(report.table.notes),
        "weights_bytes": report.weights_bytes,
        "weights_bytes_per_device": report.weights_bytes_per_device,
        "other_bytes_per_device": report.other_bytes_per_device,
        "total_bytes_per_device": report.total_bytes_per_device,
        "device": serving.device,
        "budget_bytes": report.budget_bytes,
        "reserve": reserve_text(serving.reserve),
        "usable_bytes": report.usable_bytes,
        "fits": report.fits,
        "max_concurrency": report.max_concurrency,
        "max_concurrency_in_16_token_blocks": report.max_concurrency_in_blocks,
        "max_context": report.max_context,
        "max_context_limited_by": report.max_context_limited_by,
        "max_positions": report.max_positions,
        "kv_tokens_per_replica": report.kv_tokens_per_replica,
        "has_cache": report.has_cache,
        "busiest_stage": report.busiest.stage,
        "layers": layer_records(report),
        "cache_arrays": [
            {
                "path": item.array.path,
                "shape": list(item.array.shape),
                "dtype": item.array.dtype,
                "spec": spec_text(item.spec),
                "shard_shape": list(item.shard_shape),
                "bytes_per_device": item.bytes_per_device,
                "stage": item.stage,
            }
            for item in report.cache
        ],
        "weights_arrays": weights_arrays(report),
        "notes": list(report.notes),
        "smallest_mesh": None if found is None else search_record(found),
    }


def weights_arrays(report: ServingReport) -> list[dict[str, Any]]:
    """Each weight array in the format: its tensors, shape, dtypes, bytes and one device's bytes."""
    held = report.weights_on_device_by_path
    out = []
    for array in report.table.arrays:
        record = array.to_dict()
        record.pop("parts")
        record["bytes_per_device"] = held[array.path]
        out.append(record)
    return out
