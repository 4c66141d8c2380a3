"""What ``memory`` found, and its JSON record, built once: the command line prints the record, and
its text (``dcsim.cli.memory_text``) reads the same result.

The keys are those of docs/cli.md. Bytes are exact ints; the ideal share, when not whole, is a float
with its exact fraction beside it. No pandas: ``memory --format json`` prints it without paying its
import.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.memory import search
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import MemoryReport, StateArray, trimmed

# The most-loaded device under JAX's even splits, said once for the record and the text.
EVERY_DEVICE_ALIKE = (
    "the most-loaded device is any device: under JAX's even splits every device of a mesh holds shards "
    "of the same shapes"
)


def stage_alike(memory: MemoryReport) -> str:
    """Which device the figures are, said once for the record and the text: with a ``stage`` axis,
    a device of the stage that holds the most (``dcsim.memory.stages``)."""
    split = memory.pipeline
    if split is None:
        return EVERY_DEVICE_ALIKE
    return (
        f"a device of {split.text}, the stage whose devices hold the most: each stage's devices hold its own "
        "blocks' arrays, and under JAX's even splits every device of a stage holds shards of the same shapes"
    )


def stages_record(memory: MemoryReport) -> dict[str, Any] | None:
    """Each stage's figures, or None without a ``stage`` axis."""
    split = memory.pipeline
    if split is None:
        return None
    return {
        "stage": split.stage,
        "num_stages": split.num_stages,
        "devices_per_stage": split.devices_per_stage,
        "stages": [
            {
                "stage": stage,
                "blocks": [members[0], members[-1]],
                "state_bytes_per_device": split.state_bytes[stage],
                "activations_bytes_per_device": None
                if split.activation_bytes is None
                else split.activation_bytes[stage],
            }
            for stage, members in enumerate(split.blocks)
        ],
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """What ``memory`` found: the state laid out, and what the flags asked for beside it.

    Attributes:
      memory: the training state on the mesh.
      footprint: one device's state, the step's activations and the total (``dcsim.memory.report``).
      total_params: the model's parameter count.
      fit: with --budget, the smallest mesh that fits.
      verified: with --verify, XLA's figure for the state (``dcsim.memory.verify``).
      traced: with --sequence, the step's activations (``dcsim.memory.activations``).
      stepped: with both, XLA's compiled training step (``dcsim.memory.verify_step``).
      verdict: with --budget, the asked mesh's answer and the remedies tried (``dcsim.memory.remedies``).
    """

    memory: MemoryReport
    footprint: TrainingReport
    total_params: int
    fit: search.Fit | None = None
    verified: Any = None
    traced: Any = None
    stepped: Any = None
    verdict: Any = None


def uneven_arrays(memory: MemoryReport) -> list[StateArray]:
    """The arrays of the split parts of which a device holds more than 1 / devices (the layout could
    not split them evenly, or the optimizer keeps them whole), most bytes a device first. The parts
    left whole are whole by choice and are not listed."""
    split = memory.training.shard
    rows = (row for row in memory.arrays if row.part in split and not memory.is_even(row))
    return sorted(rows, key=lambda row: -row.bytes_per_device)


def spec_text(row: StateArray) -> str:
    """The row's PartitionSpec as JAX writes it, trailing Nones dropped (``state.trimmed``)."""
    return str(trimmed(row.spec))


def _array_record(row: StateArray) -> dict[str, Any]:
    return {
        "path": row.path,
        "part": row.part,
        "shape": list(row.shape),
        "dtype": row.dtype,
        "spec": spec_text(row),
        "bytes_per_device": row.bytes_per_device,
    }


def memory_record(result: MemoryResult) -> dict[str, Any]:
    """The ``memory`` result as one JSON-ready object (keys in docs/cli.md)."""
    memory, activations, verified = result.memory, result.traced, result.verified
    setup = memory.training
    ideal = memory.ideal_bytes_per_device
    largest = memory.largest
    uneven = uneven_arrays(memory)
    record: dict[str, Any] = {
        "num_devices": memory.num_devices,
        "zero": setup.zero,
        "shard": list(setup.sharded_parts),
        "optimizer": setup.optimizer,
        "per_device": result.footprint.per_device_record(),
        "ideal_total_bytes_per_device": ideal.numerator if ideal.denominator == 1 else float(ideal),
        "ideal_total_bytes_per_device_fraction": str(ideal),
        "total_bytes": memory.total_bytes,
        "mesh": memory.mesh.text,
        "mesh_axes": [{"name": name, "size": size} for name, size in memory.mesh.axes],
        "strategy": memory.strategy,
        "rules": [rule.text for rule in memory.rules],
        "param_dtype": setup.param_dtype,
        "grad_dtype": setup.grads_dtype,
        "master_dtype": setup.master_dtype,
        "optimizer_dtype": setup.state_dtype,
        "total_params": result.total_params,
        "num_arrays": memory.num_arrays,
        "parts": {
            part: {
                "dtypes": memory.part_dtypes(part),
                "split": part in setup.shard,
                "num_arrays": len(memory.part_arrays(part)),
                "total_bytes": memory.part_total_bytes(part),
                "bytes_per_device": memory.part_bytes(part),
            }
            for part in setup.parts
        },
        "largest": {
            **_array_record(largest),
            "shard_shape": list(largest.shard_shape),
            "even": memory.is_even(largest),
            "note": largest.note,
        },
        "num_uneven_arrays": len(uneven),
        "uneven_bytes_per_device": sum(row.bytes_per_device for row in uneven),
        "every_device_alike": stage_alike(memory),
        "arrays": [_array_record(row) for row in memory.arrays],
    }
    if memory.pipeline is not None:
        record["pipeline"] = stages_record(memory)
    if activations is not None:
        from dcsim.memory.activations import activations_record

        record["activations"] = activations_record(activations)
    if verified is not None:
        from dcsim.memory import verify  # loaded only for --verify

        record["xla"] = {
            **verify.verify_record(verified),
            "output_bytes_per_device": verified.output_bytes_per_device,
            "matches": verified.matches,
            "seconds": round(verified.seconds, 3),
        }
        if result.stepped is not None:
            from dcsim.memory import verify_step

            record["xla"] |= verify_step.step_record(result.stepped)
    if result.fit is not None:
        record["budget"] = search.fit_record(result.fit)
    if result.verdict is not None:
        record["verdict"] = result.verdict.record()
    record["footprint"] = result.footprint.record()
    return record
