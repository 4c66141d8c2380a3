"""dcsim's step times against published measurements (docs/time.md): the band (full overlap to no
overlap) must hold the measured figure and the point estimate come within 25% of it. Where dcsim
misses, the test says so (a strict xfail: it fails the day the miss is gone, so that docs/time.md
is updated) and docs/time.md names the assumption behind the miss; no efficiency is tuned to a
check. The checks a pipeline schedule needs (Korthikanti's 1T on TP8 PP64, Llama 3 405B on PP16)
wait for training stages."""

from __future__ import annotations

import dataclasses

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
