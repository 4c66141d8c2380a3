"""dcsim's step times against published measurements (docs/time.md): the band (full overlap to no
overlap) must hold the measured figure and the point estimate come within 25% of it. Where dcsim
misses, the test says so (a strict xfail: it fails the day the miss is gone, so that docs/time.md
is updated) and docs/time.md names the assumption behind the miss; no efficiency is tuned to a
check. The pipelined runs (Megatron-LM's 1T on TP8 PP64, Llama 3 405B on TP8 PP16) are timed with a
``stage`` axis and their micro-batches (``dcsim.speed.pipeline``)."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from dcsim.memory import activations as act
from dcsim.memory import training
from dcsim.memory.state import compute_memory
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.serving import catalog
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import estimate
from dcsim.speed.pipeline import Pipeline
from dcsim.speed.serving import SpeedRequest, batch_throughput, decode_speed

# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": its
# configurations table (the 22B model: 48 blocks, hidden 6,144, 64 heads, sequence 2,048, vocabulary
# 51,200 as their GPT runs pad it) and Table 5 (sequence parallelism with selective recompute: 1.10 s a step on 8 A100s,
# TP8, global batch 4).
GPT_22B = ModelConfig(
    preset="gpt2-small",
    overrides={"num_layers": 48, "d_model": 6144, "num_heads": 64, "num_kv_heads": 64, "ffn_dim": 24576}
    | {"vocab_size": 51200, "max_positions": 2048},
)
KORTHIKANTI_22B_SECONDS = 1.10
TP8 = MeshSpec((("model", 8),))
# Their selective recompute keeps everything but the attention core, which it recomputes: dcsim's
# flash attention (the core's s x s never kept; its backward recomputes the scores, counted).
STEP_22B = act.Step(sequence=2048, micro_batch=4, attention="flash", sequence_parallel=True)


def korthikanti_22b():
    report = count_params(GPT_22B)
    # On a mesh of the model axis alone, ZeRO-3's split of every part is Megatron's tensor split.
    memory = compute_memory(report, TP8, "megatron", (), training.Training.stage(3, master_dtype="float32"))
    traced = act.cached_trace(GPT_22B, STEP_22B, "bfloat16", TP8, with_recompute=True)
    return estimate.training_time(GPT_22B, report, memory, traced, catalog.get_accelerator("a100-80gb"))


@pytest.mark.slow
def test_the_22b_model_flops_are_korthikantis_own_formula():
    """Their Appendix: model FLOPs an iteration 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) for B = 4,
    s = 2,048, l = 48, h = 6,144, V = 51,200. dcsim's traced count (the whole model, all devices)
    is within 1% (it counts the norms, GeLU and softmax the formula leaves out)."""
    time = korthikanti_22b()
    b, s, layers, h, v = 4, 2048, 48, 6144, 51200
    formula = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * h * layers))
    assert abs(time.model_flops_per_token * b * s / formula - 1) < 0.01


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="dcsim's point (0.68 s) and band (0.49-0.76 s) are below the measured 1.10 s: Calculon's 0.95 matmul "
    "efficiency on A100 and a memory time that counts only weights, gradients, state and residuals, not the "
    "elementwise kernels' traffic (docs/time.md)",
)
def test_korthikanti_22b_tp8_step_time():
    time = korthikanti_22b()
    assert time.step_seconds_low <= KORTHIKANTI_22B_SECONDS <= time.step_seconds_high
    assert abs(time.step_seconds / KORTHIKANTI_22B_SECONDS - 1) <= 0.25


@pytest.mark.slow
def test_korthikanti_22b_where_dcsim_stands():
    """The miss, pinned: dcsim is optimistic by 1.4 to 2.3 times (the figures docs/time.md gives)."""
    time = korthikanti_22b()
    assert 1.4 < KORTHIKANTI_22B_SECONDS / time.step_seconds_high < 1.5
    assert 1.6 < KORTHIKANTI_22B_SECONDS / time.step_seconds < 1.7
    assert 2.2 < KORTHIKANTI_22B_SECONDS / time.step_seconds_low < 2.3


# NVIDIA TensorRT-LLM performance overview (docs/source/performance/perf-overview.md, v0.x tables):
# Llama 3.1 8B FP8 on one H100 SXM, input 128, output 128: 28,312 output tokens/s.
TRTLLM_TOKENS_PER_SECOND = 28312


def trtllm_8b():
    config = ModelConfig(preset="llama3.1-8b")
    report = count_params(config)
    device = catalog.get_accelerator("h100-sxm")
    base = Serving(mesh=MeshSpec((("data", 1),)), weights="fp8-channel", kv_dtype="fp8", context=256, device="h100-sxm")
    # The batch: as many sequences as the device's memory holds at the full context (serve's answer).
    most = compute_serving(config, base, report).max_concurrency
    served = compute_serving(config, dataclasses.replace(base, concurrency=most), report)
    speed = decode_speed(SpeedRequest(report=served, config=config, params=report, device=device, prompt=128))
    return batch_throughput(speed, served, config, report)


@pytest.mark.xfail(
    strict=True,
    reason="dcsim's 62,276 tokens/s is 2.2x the measured 28,312: FP8 matmuls at Calculon's 0.95, every sequence "
    "of the memory limit in one batch, no scheduler or sampler time (docs/time.md)",
)
def test_trtllm_llama31_8b_fp8_h100_throughput():
    assert abs(trtllm_8b() / TRTLLM_TOKENS_PER_SECOND - 1) <= 0.25


def test_trtllm_where_dcsim_stands():
    assert 2.1 < trtllm_8b() / TRTLLM_TOKENS_PER_SECOND < 2.3


# --- pipelined runs ----------------------------------------------------------------------------------

# The 1T GPT of Megatron-LM: 128 blocks, hidden 25,600, 160 heads, vocabulary 51,200, sequence 2,048
# (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", Table 1's last row; Korthikanti et al. 2022's configurations table has the same model).
GPT_1T = ModelConfig(
    preset="gpt2-small",
    overrides={"num_layers": 128, "d_model": 25600, "num_heads": 160, "num_kv_heads": 160, "ffn_dim": 102400}
    | {"vocab_size": 51200, "max_positions": 2048},
)
# Narayanan et al. 2021, Table 1: the 1T model on 3,072 A100s, TP8 PP64 (so 6 data-parallel
# replicas), batch 3,072, 163 TFLOP/s a GPU counted by their equation (3), which assumes activation
# recomputation: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) an iteration.
NARAYANAN_1T_TFLOPS = 163
NARAYANAN_1T_FLOPS = 96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
NARAYANAN_1T_SECONDS = NARAYANAN_1T_FLOPS / (3072 * NARAYANAN_1T_TFLOPS * 1e12)  # 102.6 s an iteration
# Korthikanti et al. 2022, Table 5: the same 1T model on 512 A100s, TP8 PP64, batch 512, sequence
# parallelism with selective recompute: 71.49 s an iteration.
KORTHIKANTI_1T_SECONDS = 71.49
# Both are timed with micro-batch 1 (Korthikanti et al.'s configurations table; Narayanan et al.'s
# Table 1 gives none) and 1F1B (neither table names the interleaved schedule's chunks a run used),
# so a replica runs batch / replicas micro-batches: 512 in both.
A100 = catalog.get_accelerator("a100-80gb")


@functools.cache
def megatron_1t(run: str):
    """The 1T model's step as dcsim times it: Narayanan et al.'s run (full recompute, no sequence
    parallelism, 6 replicas) or Korthikanti et al.'s (sequence parallel, selective recompute as
    flash attention, as the 22B check models it; one replica). Megatron-LM's data parallelism of
    2021 keeps the state whole on the replicas (ZeRO 0), split over the tensor and pipeline ranks."""
    report = count_params(GPT_1T)
    if run == "narayanan":
        mesh = MeshSpec((("data", 6), ("stage", 64), ("model", 8)))
        step = act.Step(sequence=2048, micro_batch=1, attention="flash", remat="full")
    else:
        mesh = MeshSpec((("stage", 64), ("model", 8)))
        step = act.Step(sequence=2048, micro_batch=1, attention="flash", sequence_parallel=True)
    memory = compute_memory(report, mesh, "megatron", (), training.Training.stage(0, master_dtype="float32"))
    traced = act.cached_trace(GPT_1T, step, "bfloat16", mesh, with_recompute=True)
    return estimate.training_time(GPT_1T, report, memory, traced, A100, schedule=Pipeline(micro_batches=512))


@pytest.mark.slow
def test_the_1t_flops_are_narayanans_equation_3():
    """dcsim's hardware FLOPs (full recompute counted) on the slowest stage's device, times the
    devices, against their equation (3): within 3%. The slowest stage (the last: two blocks and the
    head) does a little more than the average device, and the count has the norms and softmax the
    equation leaves out."""
    time = megatron_1t("narayanan")
    assert time.share.stage == 63 and time.share.num_blocks == 2 and time.share.last
    assert abs(time.flops.hardware * 3072 / NARAYANAN_1T_FLOPS - 1) < 0.03


# Why each Megatron 1T run misses dcsim's band (a strict xfail: a fix that closes the gap is seen).
NARAYANAN_1T_MISS = (
    "dcsim's point (75.5 s) and band (62.1-81.6 s) are below the 102.6 s that Narayanan et al.'s 163 TFLOP/s "
    "a GPU means: Calculon's 0.95 matmul efficiency on A100 (their own throughput is 52% of peak with recompute), "
    "and no elementwise kernels' traffic in the memory time (docs/time.md)"
)
KORTHIKANTI_1T_MISS = (
    "dcsim's point (57.6 s) is within 25% of the measured 71.49 s, but its band (51.5-62.4 s) is below it: "
    "Calculon's 0.95 matmul efficiency on A100 and no elementwise kernels' traffic, as for the 22B (docs/time.md)"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("paper", "measured"),
    [
        pytest.param(paper, seconds, marks=pytest.mark.xfail(strict=True, reason=miss), id=paper)
        for paper, seconds, miss in (
            ("narayanan", NARAYANAN_1T_SECONDS, NARAYANAN_1T_MISS),
            ("korthikanti", KORTHIKANTI_1T_SECONDS, KORTHIKANTI_1T_MISS),
        )
    ],
)
def test_megatron_1t_pipelined_step_time(paper, measured):
    time = megatron_1t(paper)
    assert time.step_seconds_low <= measured <= time.step_seconds_high
    assert abs(time.step_seconds / measured - 1) <= 0.25


@pytest.mark.slow
@pytest.mark.parametrize(
    ("paper", "measured", "floors"),
    [("narayanan", NARAYANAN_1T_SECONDS, (1.2, 1.3, 1.6)), ("korthikanti", KORTHIKANTI_1T_SECONDS, (1.1, 1.2, 1.3))],
)
def test_1t_where_dcsim_stands(paper, measured, floors):
    """The miss, pinned: measured over dcsim's no-overlap, point and full-overlap figures, each in
    the tenth above its floor."""
    time = megatron_1t(paper)
    ratios = (measured / time.step_seconds_high, measured / time.step_seconds, measured / time.step_seconds_low)
    assert all(floor < ratio < floor + 0.1 for floor, ratio in zip(floors, ratios, strict=True)), ratios


@pytest.mark.slow
def test_narayanans_1t_bubble_is_63_of_512():
    assert megatron_1t("narayanan").bubble_fraction == 63 / 512


# The Llama 3 paper (Dubey et al. 2024, "The Llama 3 Herd of Models"), Table 4: 405B on 16,384 H100s,
# TP8 CP1 PP16 DP128, sequence 8,192, 16 sequences a data-parallel group (16M tokens a batch), 400
# TFLOP/s a GPU in BF16 (41% MFU). Section 3.3.2: the first and last stages hold one block fewer
# (126 blocks: 7, fourteen of 8, 7), which is the split serve's rule gives; FSDP shards the
# optimizer state and the gradients, not the parameters (ZeRO-2), gradients accumulated in float32.
LLAMA3_TFLOPS = 400
LLAMA3 = ModelConfig(preset="llama3.1-405b")


@functools.cache
def llama3_405b():
    """The step of Table 4's 16K-GPU row as dcsim times it: micro-batch 1, so 16 micro-batches on 16
    stages; 1F1B (the paper's interleaved schedule has no published chunk count, and 126 blocks do
    not split into equal chunks of 16 stages: 1F1B's bubble is the larger); Megatron-style tensor
    parallelism with sequence parallelism; flash attention, no remat."""
    report = count_params(LLAMA3)
    mesh = MeshSpec((("data", 128), ("stage", 16), ("model", 8)))
    setup = training.Training.stage(2, grad_dtype="float32", master_dtype="float32")
    memory = compute_memory(report, mesh, "megatron", (), setup)
    step = act.Step(sequence=8192, micro_batch=1, attention="flash", sequence_parallel=True)
    traced = act.cached_trace(LLAMA3, step, "bfloat16", mesh, with_recompute=True)
    time = estimate.training_time(
        LLAMA3, report, memory, traced, catalog.get_accelerator("h100-sxm"), schedule=Pipeline(micro_batches=16)
    )
    # The measured step: the step's model FLOPs (dcsim's count, whose 6N matches the paper's 3.8e25
    # FLOPs, docs/time.md) over 16,384 GPUs at the measured 400 TFLOP/s.
    measured = time.model_flops_per_token * time.global_tokens / (16384 * LLAMA3_TFLOPS * 1e12)
    return time, measured


@pytest.mark.slow
def test_llama3_405b_16k_h100_step_time():
    """The band holds the measured step and the point is within 25% of it."""
    time, measured = llama3_405b()
    assert time.global_tokens == 128 * 16 * 8192  # 16M tokens a batch
    assert time.share.stage == 1 and time.share.num_blocks == 8  # a stage of 8 blocks is slowest
    assert time.step_seconds_low <= measured <= time.step_seconds_high
    assert abs(time.step_seconds / measured - 1) <= 0.25


@pytest.mark.slow
def test_llama3_405b_where_dcsim_stands():
    """Pinned, so that docs/time.md's figures move with the code: dcsim's point is 1.18 times the
    measured step (338 against 400 TFLOP/s a GPU), its bubble 15/16 of the ideal time."""
    time, measured = llama3_405b()
    assert 1.15 < time.step_seconds / measured < 1.2
    assert 0.33 < time.mfu < 0.35
    assert time.bubble_fraction == 15 / 16
