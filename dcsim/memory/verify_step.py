"""XLA's compiled training step beside dcsim's state + activations (``memory --sequence S --verify``).

A child process (``dcsim.memory.verify_step_child``) builds the whole step (loss, ``value_and_grad``
under the remat policy, the optax update) on virtual CPU devices with the state's shardings from
dcsim's layout and the batch's, donates the state, and reads ``memory_analysis()``. XLA's peak a
device is argument + output + temporary - aliased bytes (donated outputs reuse their arguments).

This is a CPU compile: XLA's CPU buffer assignment keeps transients of the backward pass that are
not residuals (the float32 logits' gradient, each layer's temporaries) and rematerialises
differently from TPU and GPU compiles, so dcsim's figure is expected at about half of it or more on
small models, not equal. Bounded in devices, model size and time like the state's check.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.memory import buffers, hlo_collectives, verify
from dcsim.memory.state import MemoryReport
from dcsim.sharding.wire import mesh_json, spec_json

CHILD_MODULE = "dcsim.memory.verify_step_child"
JOB_NAME = "XLA training-step check"
# The step compiles the unrolled model, fast for small ones only: GPT-2 small (124M) over 2
# devices compiles in about 10 s here; a 7B model's 32 blocks took minutes.
MAX_STEP_PARAMS = 400_000_000
MAX_STEP_DEVICES = 64
MAX_STEP_TOKENS = 65_536  # sequence x micro-batch a replica
# XLA's memory analysis of a device, as the child answers it (``workers.memory_analysis``) and as
# ``StepVerified`` keeps it.
ANALYSIS_BYTES = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepVerified:
    """XLA's memory analysis of one device for the compiled step."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    dcsim_bytes: int  # dcsim's state + activations a device
    seconds: float
    # the largest arrays the compiled step makes (``dcsim.memory.buffers``), largest first: what
    # XLA keeps that dcsim does not count shows here first
    largest_buffers: tuple[buffers.XlaBuffer, ...] = ()
    # ``cost_analysis()``'s FLOPs of one device's program (the optimizer's update included), and the
    # collectives of its optimised HLO on the mesh's axes (``dcsim.memory.hlo_collectives``)
    flops: int | None = None
    dcsim_flops: int | None = None  # dcsim's hardware FLOPs of the same step on a device, when counted
    collectives: tuple[hlo_collectives.HloCollective, ...] = ()

    @property
    def peak_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes

    @property
    def ratio(self) -> float:
        """dcsim's state + activations over XLA's CPU peak."""
        return self.dcsim_bytes / self.peak_bytes if self.peak_bytes else 0.0


def check_step_verifiable(memory: MemoryReport, total_params: int, step: Any) -> None:
    """Refuse, before a child starts, a step too large to compile here; ValueError naming the bound."""
    if memory.num_devices > MAX_STEP_DEVICES:
        raise ValueError(
            f"XLA's training-step check runs on at most {MAX_STEP_DEVICES} virtual CPU devices, got a mesh of "
            f"{memory.num_devices:,} ({memory.mesh.text})"
        )
    if total_params > MAX_STEP_PARAMS:
        raise ValueError(
            f"XLA's training-step check compiles the whole unrolled step, for models of at most "
            f"{MAX_STEP_PARAMS:,} parameters; this one has {total_params:,} (the state's check, without "
            "--sequence, has no such bound)"
        )
    tokens = step.sequence * step.micro_batch
    if tokens > MAX_STEP_TOKENS:
        raise ValueError(
            f"XLA's training-step check compiles at most {MAX_STEP_TOKENS:,} tokens a replica (sequence x "
            f"micro-batch), got {tokens:,}"
        )


def step_request(memory: MemoryReport, config_json: str, step: Any) -> dict[str, Any]:
    training = memory.training
    specs: dict[str, dict[str, Any]] = {"params": {}, "master": {}}
    for row in memory.arrays:
        if row.part in specs:
            specs[row.part][row.path] = spec_json(row.spec)
    return {
        "config": config_json,
        "step": dataclasses.asdict(step),
        "training": {
            "optimizer": training.optimizer,
            "param_dtype": training.param_dtype,
            "grad_dtype": training.grad_dtype,
            "master_dtype": training.master_dtype,
        },
        "mesh": mesh_json(memory.mesh),
        "specs": specs,
        "optimizer_split": "optimizer" in training.shard,
    }


def verify_step(
    memory: MemoryReport,
    config_json: str,
    step: Any,
    activations_bytes: int,
    timeout_seconds: float | None = None,
    dcsim_flops: int | None = None,
) -> StepVerified:
    """Compile the training step in a child and read XLA's bytes a device; raises ValueError (a
    bound) or ``verify.VerifyFailed`` (the child failed or overran)."""
    result, elapsed = verify.run_check(
        CHILD_MODULE, JOB_NAME, step_request(memory, config_json, step), memory.num_devices, timeout_seconds
    )
    parts = {name: result.get(name) for name in ANALYSIS_BYTES}
    sizes = {name: value for name, value in parts.items() if isinstance(value, int)}
    if len(sizes) != len(parts):
        raise verify.VerifyFailed(f"the {JOB_NAME} answered {result!r}, not XLA's memory analysis")
    records = result.get("largest_buffers")
    try:
        if not isinstance(records, list):
            raise ValueError(f"a list of buffers, got {records!r}")
        largest = tuple(buffers.buffer_from_record(record) for record in records)
    except ValueError as err:
        raise verify.VerifyFailed(f"the {JOB_NAME} answered no largest buffers XLA assigns: {err}") from None
    flops = result.get("flops")
    try:
        found = tuple(hlo_collectives.collective_from_record(record) for record in result.get("collectives") or [])
    except ValueError as err:
        raise verify.VerifyFailed(f"the {JOB_NAME} answered no collectives: {err}") from None
    return StepVerified(
        **sizes,
        largest_buffers=largest,
        flops=flops if isinstance(flops, int) and flops >= 0 else None,
        dcsim_flops=dcsim_flops,
        collectives=found,
        dcsim_bytes=memory.total_bytes_per_device + activations_bytes,
        seconds=elapsed,
    )


def step_record(verified: StepVerified) -> dict[str, Any]:
    """The step check's keys beside the state check's under ``xla``: XLA's peak and its four parts a
    device, each as ``step_<figure>_per_device``, then dcsim's ratio to the peak and the largest
    buffers the compiled step makes (``step_largest_buffers``: name, shape, dtype, bytes, op and
    the JAX operation it came from)."""
    sizes = dataclasses.asdict(verified)
    figures = {"peak_bytes": verified.peak_bytes} | {name: sizes[name] for name in ANALYSIS_BYTES}
    return {f"step_{name}_per_device": value for name, value in figures.items()} | {
        "ratio": round(verified.ratio, 4),
        "step_seconds": round(verified.seconds, 3),
        "step_compile": "CPU (virtual devices): buffer assignment and rematerialisation differ on TPU and GPU",
        "step_largest_buffers": [buffers.buffer_record(buffer) for buffer in verified.largest_buffers],
        "step_flops_per_device": verified.flops,
        "dcsim_flops_per_device": verified.dcsim_flops,
        "step_collectives": collective_counts(verified.collectives),
    }


def collective_counts(found: tuple[hlo_collectives.HloCollective, ...]) -> list[dict[str, Any]]:
    """XLA's collectives by kind, axis and shapes, with how many ops have them, most first."""
    counted: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for row in found:
        key = (row.kind, row.axis, row.shapes)
        counted[key] = counted.get(key, 0) + 1
    ordered = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return [{"kind": k, "axis": a, "shapes": list(s), "ops": n} for (k, a, s), n in ordered]
