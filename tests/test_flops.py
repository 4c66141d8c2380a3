"""A training step's FLOPs from the traced step (``dcsim.memory.flops`` and the trace in
``dcsim.memory.activations``): XLA's own count of the compiled step, PaLM's formula by hand, the
Llama 3 paper's 6ND, and the properties of forward, backward and recompute."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dcsim.memory import activations as act
from dcsim.memory import flops
from dcsim.model import families, presets
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.model.forward import Forward
from dcsim.sharding.meshes import MeshSpec

# Matmul-bound enough that the elementwise work, which XLA and the jaxpr count alike but not
# identically (XLA puts exp, log and rsqrt under "transcendentals"), stays well under 2%.
WIDE = ModelConfig(
    preset="llama2-7b",
    overrides={"num_layers": 2, "d_model": 512, "num_heads": 8, "num_kv_heads": 8, "ffn_dim": 1376, "vocab_size": 2048},
)


def step_flops(config, mesh=None, **step):
    traced = act.trace_activations(config, act.Step(**step), "float32", mesh, with_recompute=True)
    return traced.flops


@pytest.mark.slow
def test_xla_cost_analysis_of_the_compiled_step_agrees_within_two_percent():
    """XLA counts a ``while``/``scan`` body once, so it is given the model unrolled (dcsim's families
    build their blocks unrolled); dcsim traces one block of each set alike and counts it once a
    block. Naive attention: the flash backward is a ``scan`` over key blocks, whose body XLA counts
    once (docs/time.md: 2.6% lower at this size)."""
    counted = step_flops(WIDE, sequence=256, micro_batch=2, attention="naive")
    hparams = presets.resolved_hparams(WIDE)
    module, inputs = families.build_family("decoder", hparams, 1, forward=Forward(attention="naive"))
    params = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)["params"]
    tokens = jax.ShapeDtypeStruct((2, 256), jnp.int32)

    def loss(p, ids):
        return act.cross_entropy(module.apply({"params": p}, ids), ids)

    xla = jax.jit(jax.grad(loss)).lower(params, tokens).compile().cost_analysis()["flops"]
    assert counted.recompute == 0
    assert abs(counted.model / xla - 1) < 0.02, (counted.model, xla)


def test_palm_formula_by_hand_and_the_traced_count_beside_it():
    """GPT-2 small: N = 124,439,808 - 50,257 x 768 (token table) - 1,024 x 768 (positions) + 50,257
    x 768 (the tied head multiplies by the token table) = 123,653,376; PaLM's 6N + 12 L h s at 1,024
    tokens = 741,920,256 + 12 x 12 x 768 x 1,024 = 855,166,464 a token. The traced step with naive
    attention (which, as PaLM's term, multiplies the whole s x s) comes within 1% of it."""
    config = ModelConfig(preset="gpt2-small")
    report = count_params(config)
    n = flops.matmul_params(config, report)
    assert n == 123_653_376
    hparams = presets.resolved_hparams(config)
    assert flops.palm_flops_per_token(n, hparams, 1024) == 855_166_464
    assert flops.kaplan_flops_per_token(n, hparams, 1024) == 6 * n + 6 * 12 * 1024 * 768
    assert flops.decode_flops_per_token(n) == 247_306_752
    traced = step_flops(config, sequence=1024, attention="naive")
    assert abs(traced.model / traced.tokens / 855_166_464 - 1) < 0.01


def test_six_n_d_reproduces_llama_3_405b_pretraining_compute():
    """The Llama 3 Herd of Models paper (Dubey et al. 2024, section 3.2.1): 405B trained with
    3.8 x 10^25 FLOPs on 15.6T tokens. N without the input embedding's gather (the untied output
    head kept): 403,752,042,496. PaLM's attention term at 8,192 tokens adds 12 L h s / 6N = 8.4%."""
    config = ModelConfig(preset="llama3.1-405b")
    n = flops.matmul_params(config, count_params(config))
    assert n == 405_853_388_800 - 128_256 * 16_384
    total = flops.six_n_d(n, 15_600_000_000_000)
    assert round(total / 1e25, 1) == 3.8
    hparams = presets.resolved_hparams(config)
    attention = flops.palm_flops_per_token(n, hparams, 8192) - 6 * n
    assert round(attention / (6 * n), 3) == 0.084


def test_backward_is_about_twice_the_forward_and_no_remat_recomputes_nothing():
    counted = step_flops(WIDE, sequence=64, attention="naive")
    assert counted.recompute == 0 and counted.hardware == counted.model
    assert 1.9 < counted.backward / counted.forward < 2.1


def test_full_remat_recomputes_part_of_the_forward_and_keeping_projections_less():
    """Full remat runs each block's forward again in the backward, less what no gradient reads (the
    block's last projections); minimal keeps the projections and recomputes only the elementwise
    work and attention. The model FLOPs (MFU's) do not change with the policy."""
    plain = step_flops(WIDE, sequence=64)
    full = step_flops(WIDE, sequence=64, remat="full")
    minimal = step_flops(WIDE, sequence=64, remat="minimal")
    assert full.model == plain.model == minimal.model
    assert 0 < minimal.recompute < full.recompute < full.forward


def test_a_tensor_parallel_rank_runs_about_half_the_step_at_two():
    """Each rank runs half the heads and widths and half the vocabulary; the norms and the loss's
    per-token work stay whole on each, so slightly more than half."""
    whole = step_flops(WIDE, sequence=64)
    rank = step_flops(WIDE, MeshSpec((("model", 2),)), sequence=64)
    assert rank.tensor_parallel == 2
    assert 0.5 < rank.model / whole.model < 0.51


def test_linear_in_the_micro_batch_but_for_the_work_a_position_does_once():
    """RoPE's angles (a position's sines and cosines) are computed once a sequence position, whatever
    the micro-batch: the only work not four times over at four sequences."""
    one, four = step_flops(WIDE, sequence=64), step_flops(WIDE, sequence=64, micro_batch=4)
    assert four.tokens == 4 * one.tokens
    assert 0 < 4 * one.model - four.model < 1e-5 * four.model


def test_step_flops_refuses_what_is_not_a_count():
    with pytest.raises(ValueError, match="`forward` must be a non-negative int"):
        flops.StepFlops(forward=1.5, backward=0, recompute=0, tokens=1, tensor_parallel=1)
