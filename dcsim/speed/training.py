"""A training step's time on an accelerator, with its bounds, and what a run of many steps costs.

Three times, each an estimate from exact counts:

- **compute**: the step's hardware FLOPs on a device (``dcsim.memory.flops``, recompute included)
  over the dense peak in the compute dtype x the efficiency Calculon gives the step's typical
  matmul (a block's MLP input projection on one device: 2 x tokens x d_model x its width);
- **memory**: the bytes a device moves through HBM at least (the weights it computes with, read in
  the forward and again in the backward, a third time under full remat; the gradients written; the
  activations written and read back; the optimizer's state read and written) over HBM bandwidth x
  Calculon's efficiency for a block's share of them;
- **communication**: each collective (``dcsim.speed.collectives``): a latency a ring step plus its
  bytes over the link of its axes (scale-up inside a host, scale-out across hosts) x that link's
  efficiency (``dcsim.speed.system``).

The answer is three figures: the **roofline** (the largest of the three at 100% and no latency:
the physical limit), **full overlap** (the largest of the three), **no overlap** (their sum). The
point estimate lies between the last two by a stated rule: compute and memory overlap; tensor and
expert parallelism's collectives (and ZeRO-1/2's gather after the update) are exposed; the data
axes' collectives hide behind compute of their own phase (FSDP's forward gathers behind the
forward, its backward gathers and the gradients' reduction behind the backward), and only what
exceeds that compute shows. MFU is an output: the model's FLOPs a token x the tokens a second a
device, over its peak.

With pipeline stages and micro-batches (``dcsim.speed.pipeline``), the three times are the slowest
stage's device's for the step's ``m`` micro-batches: its FLOPs and bytes a micro-batch, ``m`` times,
and its state read and written once. The gradients' reduction (once a step) hides behind the last
micro-batch's backward only, beside that micro-batch's own FSDP gathers. The schedule then adds
its bubble, ``(p - 1) / (v m)`` of the ideal time (Narayanan et al. 2021, sections 2.2.1-2.2.2), to
each figure: the roofline, both ends of the band and the point estimate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dcsim.memory.flops import StepFlops
from dcsim.memory.step import Step
from dcsim.memory.training import Training
from dcsim.model.count import ParamReport, is_routed_expert
from dcsim.serving.catalog import Accelerator
from dcsim.sharding.megatron import EXPERT_AXIS, TENSOR_AXIS
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import system
from dcsim.speed.collectives import Collective, comm_record
from dcsim.speed.pipeline import STAGE_AXIS, Pipeline, StageShare

LEAVES_OUT = (
    "kernel launch gaps and stragglers",
    "the optimizer's and the norms' elementwise passes beyond one read and write of the state",
    "network congestion across hosts",
)
# What a pipelined step's figures leave out besides (docs/time.md).
PIPELINE_LEAVES_OUT = (
    "whether the residuals of a stage's micro-batches in flight fit its memory (the memory figures say; the time "
    "runs the step as given)",
    "the schedule's warm-up imbalance between stages beyond the slowest stage's pace",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """A run of ``tokens`` tokens: its steps, wall-clock seconds, device-hours and cost."""

    tokens: int
    steps: int
    seconds: float
    device_hours: float
    price_per_device_hour: float | None

    @property
    def cost(self) -> float | None:
        return None if self.price_per_device_hour is None else self.device_hours * self.price_per_device_hour


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTime:
    """One training step's time on a device of the mesh (module docstring).

    Attributes:
      device: the catalog row.
      flops: the device's step FLOPs by part.
      model_flops_per_token: the whole model's forward and backward FLOPs a token.
      global_tokens: the tokens of one step over every replica.
      num_devices: the mesh's devices.
      hbm_bytes: the bytes the device moves through HBM at least.
      collectives: every collective of the step.
      peak_flops, matmul_flops, matmul_efficiency: the dense peak, the typical matmul's FLOPs and
        Calculon's efficiency for it.
      hbm_efficiency: Calculon's for a block's share of the bytes.
      compute_seconds, memory_seconds, comm_seconds: the three times.
      exposed_comm_seconds: what the step waits for of the communication under the rule.
      roofline_seconds, step_seconds_low, step_seconds_high, step_seconds: the limit, the band and
        the point estimate, each with the pipeline's bubble.
      pipeline: the micro-batches and the schedule; num_stages: the mesh's ``stage`` axis (1: none).
      share: the slowest stage's share (the whole model without stages).
      bubble_fraction: the bubble over the ideal time, (p - 1) / (v m); bubble_seconds: the point
        estimate's bubble.
    """

    device: Accelerator
    flops: StepFlops
    model_flops_per_token: int
    global_tokens: int
    num_devices: int
    hbm_bytes: int
    collectives: tuple[Collective, ...]
    peak_flops: int
    matmul_flops: int
    matmul_efficiency: float
    hbm_efficiency: float
    compute_seconds: float
    memory_seconds: float
    comm_seconds: float
    exposed_comm_seconds: float
    roofline_seconds: float
    step_seconds_low: float
    step_seconds_high: float
    step_seconds: float
    run: Run | None = None
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST
    pipeline: Pipeline = dataclasses.field(default_factory=Pipeline)
    num_stages: int = 1
    share: StageShare | None = None
    bubble_fraction: float = 0.0
    bubble_seconds: float = 0.0

    @property
    def leaves_out(self) -> tuple[str, ...]:
        return LEAVES_OUT + (PIPELINE_LEAVES_OUT if self.num_stages > 1 else ())

    @property
    def tokens_per_second(self) -> float:
        return self.global_tokens / self.step_seconds

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the model's FLOPs a step, a device's share, over its peak."""
        return self.model_flops_per_token * self.global_tokens / self.num_devices / self.step_seconds / self.peak_flops

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: the device's own step FLOPs (recompute included) over its peak."""
        return self.flops.hardware / self.step_seconds / self.peak_flops

    @property
    def pipeline_text(self) -> str:
        """The stages and the schedule in words ("" without stages or accumulation)."""
        if self.num_stages == 1 and self.pipeline.micro_batches == 1:
            return ""
        text = f"{self.pipeline.micro_batches:,} micro-batches a step"
        if self.num_stages > 1 and self.share is not None:
            blocks = self.share.blocks
            text += (
                f" on {self.num_stages:,} stages, {self.pipeline.schedule}"
                + (f" with {self.pipeline.virtual_stages} virtual stages" if self.pipeline.virtual_stages > 1 else "")
                + f"; slowest stage {self.share.stage} (blocks {blocks.start}-{blocks.stop - 1}"
                + (", the embedding" if self.share.first else "")
                + (", the head and loss" if self.share.last else "")
                + f"); bubble {100 * self.bubble_fraction:.3g}% of the ideal time ({self.bubble_seconds:.3g} s)"
            )
        return text

    @property
    def text(self) -> str:
        """One line: the point estimate, its band and what it leaves out."""
        staged = f"; {self.pipeline_text}" if self.pipeline_text else ""
        return (
            f"step time (estimate) {self.step_seconds:.3g} s on {self.device.name}: band {self.step_seconds_low:.3g}"
            f"-{self.step_seconds_high:.3g} s (full overlap to none), roofline {self.roofline_seconds:.3g} s; "
            f"MFU {100 * self.mfu:.1f}%{staged}; leaves out {', '.join(self.leaves_out)}"
        )


def comm_seconds(row: Collective, device: Accelerator, at_full: bool = False) -> float:
    """A collective's time: a latency a ring step and a call, and its bytes over its link x the link's
    efficiency; ``at_full``: bytes over the link alone (the roofline)."""
    if row.inside_host:
        bandwidth = device.speed("scale_up_bytes_per_second")
        efficiency, latency = system.SCALE_UP_EFFICIENCY, system.SCALE_UP_LATENCY_SECONDS
    else:
        bandwidth = device.speed("scale_out_bytes_per_second")
        efficiency, latency = system.SCALE_OUT_EFFICIENCY, system.SCALE_OUT_LATENCY_SECONDS
    if at_full:
        return row.bytes / bandwidth
    return row.count * row.ring_steps * latency + row.bytes / (bandwidth * efficiency)


def typical_matmul_flops(hparams: dict[str, Any], step: Step, t: int) -> int:
    """A block's MLP input projection on one device: 2 x tokens x d_model x its width over t (a
    routed expert's width and its share of the tokens' copies for a MoE block)."""
    tokens = step.micro_batch * step.sequence
    d = int(hparams["d_model"])
    if hparams.get("num_experts"):
        rows = tokens * int(hparams["experts_per_token"]) // int(hparams["num_experts"])
        return 2 * max(rows, 1) * d * int(hparams["expert_ffn_dim"]) // t
    return 2 * tokens * d * int(hparams.get("ffn_dim") or 4 * d) // t


def hbm_bytes(
    report: ParamReport,
    mesh: MeshSpec,
    setup: Training,
    step: Step,
    activation_bytes: int,
    state_bytes: int,
    *,
    share: StageShare | None = None,
    micro_batches: int = 1,
) -> int:
    """The bytes a device moves through HBM at least in one step (module docstring): for each
    micro-batch the weights of its stage (``share``; the whole model without) read, their gradients
    written and the micro-batch's residuals (``activation_bytes``) written and read back; once a
    step the state read and written."""
    sizes = dict(mesh.axes)
    t, e = sizes.get(TENSOR_AXIS, 1), sizes.get(EXPERT_AXIS, 1)
    if share is None:
        experts = sum(row.num_values for row in report.arrays if is_routed_expert(row))
        dense = report.total_params - experts
    else:
        dense, experts = share.dense_values, share.expert_values
    values = dense // t + experts // (t * e)
    reads = 3 if step.remat == "full" else 2
    param = int(np.dtype(setup.param_dtype).itemsize)
    grad = int(np.dtype(setup.grads_dtype).itemsize)
    per_micro_batch = reads * values * param + values * grad + 2 * activation_bytes
    return micro_batches * per_micro_batch + 2 * state_bytes


def step_time(
    *,
    device: Accelerator,
    flops: StepFlops,
    model_flops_per_token: int,
    hparams: dict[str, Any],
    step: Step,
    mesh: MeshSpec,
    collectives: tuple[Collective, ...],
    hbm: int,
    tokens: int | None = None,
    price: float | None = None,
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST,
    pipeline: Pipeline | None = None,
    share: StageShare | None = None,
) -> StepTime:
    """The step's time under the rule of the module docstring; with ``tokens``, the run's.
    ``flops`` are a device's for one micro-batch (its stage's, ``share``, with stages), ``hbm`` and
    ``collectives`` the device's for the whole step (``hbm_bytes``, ``training_collectives``)."""
    pipeline = pipeline or Pipeline()
    m = pipeline.micro_batches
    sizes = dict(mesh.axes)
    t, stages = sizes.get(TENSOR_AXIS, 1), sizes.get(STAGE_AXIS, 1)
    flops = dataclasses.replace(
        flops,
        forward=m * flops.forward,
        backward=m * flops.backward,
        recompute=m * flops.recompute,
        tokens=m * flops.tokens,
    )
    peak = device.peak_flops(step.compute_dtype)
    matmul = typical_matmul_flops(hparams, step, t)
    matmul_eff = system.matmul_efficiency(matmul)
    compute = flops.hardware / (peak * matmul_eff)
    bandwidth = device.speed("hbm_bytes_per_second")
    blocks = share.num_blocks if share is not None else int(hparams["num_layers"])
    hbm_eff = system.hbm_efficiency(hbm // max(blocks * m, 1))
    memory = hbm / (bandwidth * hbm_eff)
    times = [comm_seconds(row, device) for row in collectives]
    comm = sum(times)
    forward_share = flops.forward / flops.hardware if flops.hardware else 0.0
    hidden = {"forward": 0.0, "backward": 0.0, "once": 0.0}
    exposed = 0.0
    for row, seconds in zip(collectives, times, strict=True):
        if row.exposed:
            exposed += seconds
        else:
            hidden["once" if row.per_step else row.phase] += seconds
    backward = compute * (1 - forward_share)  # the step's backward compute, m micro-batches
    overflow = max(0.0, hidden["forward"] - compute * forward_share)
    # Each micro-batch's backward hides its own gathers; the last also hides the once-a-step reduction.
    overflow += max(0.0, hidden["backward"] * (m - 1) / m - backward * (m - 1) / m)
    overflow += max(0.0, hidden["backward"] / m + hidden["once"] - backward / m)
    ideal = max(compute, memory) + exposed + overflow
    bubble = float(pipeline.bubble_fraction(stages))
    point = ideal * (1 + bubble)
    roofline = (1 + bubble) * max(
        flops.hardware / peak, hbm / bandwidth, sum(comm_seconds(row, device, at_full=True) for row in collectives)
    )
    replicas = mesh.num_devices // (t * stages)
    global_tokens = replicas * step.micro_batch * step.sequence * m
    run = None
    if tokens is not None:
        steps = -(-tokens // global_tokens)
        seconds = steps * point
        run = Run(
            tokens=tokens,
            steps=steps,
            seconds=seconds,
            device_hours=seconds * mesh.num_devices / 3600,
            price_per_device_hour=price,
        )
    return StepTime(
        device=device,
        flops=flops,
        model_flops_per_token=model_flops_per_token,
        global_tokens=global_tokens,
        num_devices=mesh.num_devices,
        hbm_bytes=hbm,
        collectives=collectives,
        peak_flops=peak,
        matmul_flops=matmul,
        matmul_efficiency=matmul_eff,
        hbm_efficiency=hbm_eff,
        compute_seconds=compute,
        memory_seconds=memory,
        comm_seconds=comm,
        exposed_comm_seconds=ideal - max(compute, memory),
        roofline_seconds=roofline,
        step_seconds_low=(1 + bubble) * max(compute, memory, comm),
        step_seconds_high=(1 + bubble) * (compute + memory + comm),
        step_seconds=point,
        run=run,
        devices_per_host=devices_per_host,
        pipeline=pipeline,
        num_stages=stages,
        share=share,
        bubble_fraction=bubble,
        bubble_seconds=point - ideal,
    )


def time_record(time: StepTime) -> dict[str, Any]:
    """The ``time`` JSON object of ``memory`` (keys in docs/time.md)."""
    record: dict[str, Any] = {
        "estimate": True,
        "device": time.device.name,
        "devices_per_host": time.devices_per_host,
        "flops_per_step_per_device": time.flops.hardware,
        "model_flops_per_step_per_device": time.flops.model,
        "forward_flops_per_step_per_device": time.flops.forward,
        "backward_flops_per_step_per_device": time.flops.backward,
        "recompute_flops_per_step_per_device": time.flops.recompute,
        "model_flops_per_token": time.model_flops_per_token,
        "tokens_per_step": time.global_tokens,
        "hbm_bytes_per_device": time.hbm_bytes,
        "comm_bytes_per_device": comm_record(time.collectives),
        "peak_flops_per_second": time.peak_flops,
        "matmul_efficiency": time.matmul_efficiency,
        "hbm_efficiency": time.hbm_efficiency,
        "compute_seconds": system.json_seconds(time.compute_seconds),
        "memory_seconds": system.json_seconds(time.memory_seconds),
        "comm_seconds": system.json_seconds(time.comm_seconds),
        "exposed_comm_seconds": system.json_seconds(time.exposed_comm_seconds),
        "step_seconds": system.json_seconds(time.step_seconds),
        "step_seconds_low": system.json_seconds(time.step_seconds_low),
        "step_seconds_high": system.json_seconds(time.step_seconds_high),
        "roofline_seconds": system.json_seconds(time.roofline_seconds),
        "mfu": round(time.mfu, 4),
        "hfu": round(time.hfu, 4),
        "tokens_per_second": system.json_seconds(time.tokens_per_second),
        "micro_batches": time.pipeline.micro_batches,
        "stages": time.num_stages,
        "schedule": time.pipeline.schedule,
        "virtual_stages": time.pipeline.virtual_stages,
        "bubble_fraction": round(time.bubble_fraction, 6),
        "bubble_seconds": system.json_seconds(time.bubble_seconds),
        "leaves_out": list(time.leaves_out),
    }
    if time.num_stages > 1 and time.share is not None:
        record["slowest_stage"] = {
            "stage": time.share.stage,
            "first_block": time.share.blocks.start,
            "blocks": time.share.num_blocks,
            "embedding": time.share.first,
            "head": time.share.last,
            "hardware_flops_per_micro_batch_by_stage": list(time.share.stage_flops),
            "activation_bytes_per_micro_batch": time.share.activation_bytes,
            "state_bytes": time.share.state_bytes,
        }
    if time.run is not None:
        record |= {
            "tokens": time.run.tokens,
            "steps": time.run.steps,
            "run_seconds": system.json_seconds(time.run.seconds),
            "run_days": system.json_seconds(time.run.seconds / 86400),
            "device_hours": system.json_seconds(time.run.device_hours),
            "price_per_device_hour": time.run.price_per_device_hour,
            "cost": None if time.run.cost is None else system.json_seconds(time.run.cost),
        }
    return record
