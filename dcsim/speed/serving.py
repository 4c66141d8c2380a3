"""A serving replica's speed: a decode step's time, tokens a second per sequence and per device, the
inter-token latency and the time to the first token. Estimates, from ``serve``'s exact bytes.

- **Decode step**: each device of a replica reads, every step, the weights it holds (in their
  format's stored bytes: ``ServingReport.weights_bytes_per_device``) and each of its sequences'
  caches at the context (``kv_bytes_per_device``), and runs 2N FLOPs a sequence (N the parameters a
  token multiplies by, ``dcsim.memory.flops.matmul_params``) plus the attention over the context
  (4 x blocks x context x heads x head size), over its tensor rank's share. Its time is
  max(bytes / (HBM bandwidth x efficiency), FLOPs / (peak x matmul efficiency)), plus the
  tensor-parallel all-reduces (two a block and the embedding's one, of the replica's sequences x
  d_model in bfloat16), each a latency a ring step plus its bytes over the scale-up link: a small
  all-reduce is latency, not bandwidth. Pipeline stages run one after the other: the step is the
  stages times the busiest stage's (no overlap of micro-batches across stages is assumed).
- **Matmul dtype**: the FP8 formats run in FP8 where the device has an FP8 peak; every other format
  is dequantized to bfloat16 for its matmuls (its weights still read at their stored bytes).
- **Time to first token**: the prompt's prefill, compute-bound: its FLOPs (2N a token and the causal
  attention, 2 x blocks x prompt x heads x head size a token) over the peak x the efficiency of its
  matmuls, or the weights' read if longer, plus its all-reduces. Chunked prefill, and decode steps
  that share a batch with a prefill, are out of scope: a prompt is prefilled alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.memory import flops as flop_rules
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.serving.catalog import Accelerator
from dcsim.serving.engine import ServingReport
from dcsim.speed import DECODE, system, unfit_clause
from dcsim.speed.collectives import ring_bytes

FP8_FORMATS = ("fp8", "fp8-block", "fp8-channel", "fp8-tensor")
ALL_REDUCE_ITEMSIZE = 2  # bfloat16 activations
LEAVES_OUT = (
    "chunked prefill and batching prefills with decodes",
    "the sampler and the scheduler's own time",
    "kernel launch gaps",
)


class PromptTooLong(ValueError):
    """A prompt that fills the context: its first token would have no room. ``longest`` is the
    longest prompt the context takes, for a face to offer."""

    def __init__(self, prompt: int, context: int):
        self.longest = context - 1
        verb = "leaves" if prompt == 1 else "leave"
        super().__init__(
            f"{units.many(prompt, 'token')} {verb} no room for a token in a context of {units.many(context, 'token')} "
            f"a sequence; the prompt must be shorter than the context (at most {units.many(self.longest, 'token')})"
        )


def check_prompt(prompt: int, context: int) -> int:
    """``prompt`` when its first token fits in ``context`` after it; ``PromptTooLong`` otherwise."""
    if prompt >= context:
        raise PromptTooLong(prompt, context)
    return prompt


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeedRequest:
    """What a replica's speed is asked for: ``serve``'s answer for the model (``report``: its mesh,
    weights, context and cache bytes), the model and its count, the device, the prompt whose first
    token is timed (shorter than the context: ``check_prompt``), and the devices a host (which
    all-reduces stay on the scale-up links)."""

    report: ServingReport
    config: ModelConfig
    params: ParamReport
    device: Accelerator
    prompt: int
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST

    def __post_init__(self) -> None:
        check_prompt(self.prompt, self.report.serving.context)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeSpeed:
    """A replica's decode step and prefill on ``device`` (module docstring)."""

    device: Accelerator
    matmul_dtype: str
    sequences_per_replica: int
    devices_per_replica: int
    bytes_read_per_device: int
    flops_per_device: int
    memory_seconds: float
    compute_seconds: float
    comm_seconds: float
    decode_step_seconds: float
    prompt: int
    prefill_flops_per_device: int
    time_to_first_token_seconds: float
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST
    over_bytes: int | None = None  # the request's setup is over the device's memory by this much

    @property
    def tokens_per_second_per_sequence(self) -> float:
        return 1 / self.decode_step_seconds

    @property
    def tokens_per_second_per_device(self) -> float:
        return self.sequences_per_replica / self.decode_step_seconds / self.devices_per_replica

    @property
    def text(self) -> str:
        return (
            f"decode (estimate) on {self.device.name}, matmuls in {self.matmul_dtype}: a step "
            f"{1000 * self.decode_step_seconds:.3g} ms "
            f"(memory {1000 * self.memory_seconds:.3g}, compute {1000 * self.compute_seconds:.3g}, all-reduces "
            f"{1000 * self.comm_seconds:.3g}), {self.tokens_per_second_per_sequence:,.1f} tokens/s a sequence, "
            f"{self.tokens_per_second_per_device:,.0f} a device; first token after {self.prompt:,} prompt tokens "
            f"{1000 * self.time_to_first_token_seconds:.3g} ms; leaves out {', '.join(LEAVES_OUT)}"
            + ("" if self.over_bytes is None else f"; {self.unfit(self.device.name)}")
        )

    def unfit(self, device: str) -> str:
        """The clause the speed carries when its setup does not fit (``over_bytes``), naming the
        device as ``device`` (the command line's name, a page's title); "" where it fits."""
        if self.over_bytes is None:
            return ""
        return unfit_clause(device, self.over_bytes, DECODE)


def _all_reduces(count: int, array: int, group: int, device: Accelerator, inside: bool) -> float:
    """``count`` all-reduces of ``array`` bytes over ``group`` devices: a latency a ring step, and
    the bytes over the scale-up link (``inside`` a host) or the scale-out network."""
    if group == 1:
        return 0.0
    if inside:
        link, efficiency, latency = (
            "scale_up_bytes_per_second",
            system.SCALE_UP_EFFICIENCY,
            system.SCALE_UP_LATENCY_SECONDS,
        )
    else:
        link, efficiency, latency = (
            "scale_out_bytes_per_second",
            system.SCALE_OUT_EFFICIENCY,
            system.SCALE_OUT_LATENCY_SECONDS,
        )
    moved = count * ring_bytes("all-reduce", array, group) / (device.speed(link) * efficiency)
    return count * 2 * (group - 1) * latency + moved


def _token_shape(config: ModelConfig, params: ParamReport) -> tuple[int, int, int, int, int]:
    """What one token's FLOPs are counted from: N, the parameters it multiplies by
    (``flop_rules.matmul_params``), the blocks, the attention's width (heads x head size), d_model
    and the MLP's width (an expert's for MoE; 4 x d_model where the family names none)."""
    hparams = system.transformer_hparams(config)
    d = int(hparams["d_model"])
    width = int(hparams["num_heads"]) * int(hparams.get("head_dim") or d // hparams["num_heads"])
    ffn = int(hparams.get("ffn_dim") or hparams.get("expert_ffn_dim") or 4 * d)
    return flop_rules.matmul_params(config, params), int(hparams["num_layers"]), width, d, ffn


def decode_speed(request: SpeedRequest, sequences: int | None = None) -> DecodeSpeed:
    """The decode step and the time to first token of the request's replica on its device; with
    ``sequences``, of a replica decoding that many at the report's context instead (the busiest
    device's cache is then ``sequences`` times one sequence's, exactly as the engine holds it)."""
    report, config, params, device = request.report, request.config, request.params, request.device
    prompt, devices_per_host = request.prompt, request.devices_per_host
    serving = report.serving
    inside = "model" not in serving.mesh.names or system.inside_host(serving.mesh.axes, ["model"], devices_per_host)
    n, layers, width, d, ffn = _token_shape(config, params)
    sizes = dict(serving.mesh.axes)
    t, stages = sizes.get("model", 1), sizes.get("stage", 1)
    fmt = getattr(serving.weights, "name", serving.weights)
    matmul_dtype = "bfloat16"
    if fmt in FP8_FORMATS and device.fp8_flops_per_second is not None:
        matmul_dtype = "float8"
    peak = device.peak_flops(matmul_dtype)
    kv_bytes = report.kv_bytes_per_device
    asked = sequences is None  # the report's own concurrency, whose fit the report knows
    if sequences is None:
        sequences = serving.sequences_per_replica
    else:
        kv_bytes = sequences * report.busiest.kv_bytes_per_sequence(serving.context, serving.full_windows)
    per_token = 2 * n + 4 * layers * serving.context * width
    flops = sequences * per_token // (t * stages)
    bytes_read = report.weights_bytes_per_device + kv_bytes
    hbm = device.speed("hbm_bytes_per_second")
    memory = bytes_read / (hbm * system.hbm_efficiency(report.weights_bytes_per_device // max(layers // stages, 1)))
    compute = flops / (peak * system.matmul_efficiency(2 * sequences * d * ffn // t))
    comm = _all_reduces((2 * layers) // stages + 1, sequences * d * ALL_REDUCE_ITEMSIZE, t, device, inside)
    step = stages * (max(memory, compute) + comm)
    prefill = prompt * (2 * n + 2 * layers * prompt * width) // t
    prefill_compute = prefill / (peak * system.matmul_efficiency(2 * prompt * d * ffn // t))
    prefill_memory = report.weights_bytes_per_device * stages / (hbm * system.HBM_EFFICIENCY[0][1])
    ttft = max(prefill_compute, prefill_memory) + _all_reduces(
        2 * layers + 1, prompt * d * ALL_REDUCE_ITEMSIZE, t, device, inside
    )
    return DecodeSpeed(
        device=device,
        matmul_dtype=matmul_dtype,
        sequences_per_replica=sequences,
        devices_per_replica=t * stages,
        bytes_read_per_device=bytes_read,
        flops_per_device=flops,
        memory_seconds=memory,
        compute_seconds=compute,
        comm_seconds=comm,
        decode_step_seconds=step,
        prompt=prompt,
        prefill_flops_per_device=prefill,
        time_to_first_token_seconds=ttft,
        devices_per_host=devices_per_host,
        over_bytes=report.over_bytes if asked else None,
    )


def speed_record(speed: DecodeSpeed) -> dict[str, Any]:
    """The ``time`` JSON object of ``serve`` (keys in docs/time.md)."""
    return {
        "estimate": True,
        "device": speed.device.name,
        "devices_per_host": speed.devices_per_host,
        "matmul_dtype": speed.matmul_dtype,
        "bytes_read_per_device": speed.bytes_read_per_device,
        "flops_per_device": speed.flops_per_device,
        "memory_seconds": system.json_seconds(speed.memory_seconds),
        "compute_seconds": system.json_seconds(speed.compute_seconds),
        "comm_seconds": system.json_seconds(speed.comm_seconds),
        "decode_step_seconds": system.json_seconds(speed.decode_step_seconds),
        "inter_token_latency_seconds": system.json_seconds(speed.decode_step_seconds),
        "tokens_per_second_per_sequence": system.json_seconds(speed.tokens_per_second_per_sequence),
        "tokens_per_second_per_device": system.json_seconds(speed.tokens_per_second_per_device),
        "prompt": speed.prompt,
        "time_to_first_token_seconds": system.json_seconds(speed.time_to_first_token_seconds),
        "leaves_out": list(LEAVES_OUT),
    }


def batch_throughput(speed: DecodeSpeed, report: ServingReport, config: ModelConfig, params: ParamReport) -> float:
    """Output tokens a second a device for a benchmark that prefills every sequence of the replica
    together (``speed.prompt`` tokens each), then decodes them together until each has as many
    output tokens as the context leaves (context - prompt): the batch's prefill, compute-bound
    (or the weights' read, if longer), then that many decode steps at the full context (an upper
    bound on each step's cache read). No in-flight batching: the replica waits for its whole batch."""
    serving = report.serving
    t = dict(serving.mesh.axes).get("model", 1)
    n, layers, width, d, ffn = _token_shape(config, params)
    tokens = speed.sequences_per_replica * speed.prompt
    flops = tokens * (2 * n + 2 * layers * speed.prompt * width) // t
    peak = speed.device.peak_flops(speed.matmul_dtype)
    compute = flops / (peak * system.matmul_efficiency(2 * tokens * d * ffn // t))
    weights = report.weights_bytes_per_device / (
        speed.device.speed("hbm_bytes_per_second") * system.HBM_EFFICIENCY[0][1]
    )
    output = serving.context - check_prompt(speed.prompt, serving.context)
    seconds = max(compute, weights) + output * speed.decode_step_seconds
    return speed.sequences_per_replica * output / seconds / speed.devices_per_replica


@dataclasses.dataclass(frozen=True, kw_only=True)
class CurvePoint:
    """A replica decoding ``sequences`` at once: each sequence's tokens a second (one over the
    inter-token latency) against each device's."""

    concurrency: int
    inter_token_latency_seconds: float
    tokens_per_second_per_sequence: float
    tokens_per_second_per_device: float


def speed_curve(request: SpeedRequest) -> list[CurvePoint]:
    """Throughput against latency over the concurrency: doubling from one sequence a replica up to
    the most the budget holds at the context (``ServingReport.max_concurrency``), that most
    included; the concurrency is the whole mesh's (replicas x a replica's). Empty without a budget
    or a cache."""
    most = request.report.max_concurrency
    replicas = request.report.serving.num_replicas
    if not most or most < replicas:
        return []
    top = most // replicas
    counts, count = {top}, 1
    while count < top:
        counts.add(count)
        count *= 2
    points = []
    for each in sorted(counts):
        speed = decode_speed(request, sequences=each)
        points.append(
            CurvePoint(
                concurrency=each * replicas,
                inter_token_latency_seconds=system.json_seconds(speed.decode_step_seconds),
                tokens_per_second_per_sequence=system.json_seconds(speed.tokens_per_second_per_sequence),
                tokens_per_second_per_device=system.json_seconds(speed.tokens_per_second_per_device),
            )
        )
    return points
