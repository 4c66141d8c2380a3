"""Training activations from JAX's own autodiff (``dcsim.memory.activations``): per policy and
attention kind, the properties a reader can check (linear in the micro-batch, flash linear in the
sequence and naive not, full < dots < none, the data axis changes nothing), the traced-once figure
against the whole unrolled model's, routed experts against dense ones, the formula by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from conftest import quick_sample
from dcsim.memory import activations as act
from dcsim.model import families, presets
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding.meshes import MeshSpec

SMALL = {"num_layers": 3, "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_dim": 96, "vocab_size": 128}
LLAMA = ModelConfig(preset="llama2-7b", overrides=SMALL)
MOE = ModelConfig(
    preset="mixtral-8x7b",
    overrides={"num_layers": 2, "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "expert_ffn_dim": 96}
    | {"vocab_size": 128},
)
SEQUENCE = 32


def trace(config=LLAMA, mesh=None, param_dtype="bfloat16", **step):
    return act.trace_activations(config, act.Step(**({"sequence": SEQUENCE} | step)), param_dtype, mesh)


def test_full_remat_keeps_each_blocks_input_only():
    report = trace(remat="full")
    # each block keeps its input, (1, 32, 64) in bfloat16: 4,096 bytes
    assert [(row.residuals, row.bytes) for row in report.blocks] == [(1, 1 * SEQUENCE * 64 * 2)] * 3
    (saved,) = report.traced["block_1"]
    assert saved.where == "input" and saved.shape == (1, SEQUENCE, 64) and saved.dtype == "bfloat16"


def test_the_loss_row_is_the_float32_logits():
    report = trace()
    # the (1, 32, 128) logits in float32, with per-token figures (the labels, the log-sum-exp)
    assert any(row.shape == (1, SEQUENCE, 128) and row.dtype == "float32" for row in report.loss_residuals)
    assert report.loss_bytes >= SEQUENCE * 128 * 4
    assert report.bytes_per_device == report.blocks_bytes + report.outside.bytes + report.loss_bytes


@pytest.mark.parametrize("attention", quick_sample(["flash", "naive"], keep=("flash",)))
def test_full_dots_none_in_order(attention):
    figures = {policy: trace(remat=policy, attention=attention).blocks_bytes for policy in act.POLICIES}
    assert figures["full"] < figures["dots"] < figures["none"]
    assert figures["full"] < figures["minimal"] <= figures["dots"]
    assert figures["dots-no-batch"] <= figures["dots"]


@pytest.mark.parametrize("policy", list(act.POLICIES))
@pytest.mark.parametrize("attention", ["flash", "naive"])
def test_linear_in_the_micro_batch(policy, attention):
    one = trace(remat=policy, attention=attention, micro_batch=1)
    three = trace(remat=policy, attention=attention, micro_batch=3)
    assert three.bytes_per_device == 3 * one.bytes_per_device
    assert [row.bytes for row in three.blocks] == [3 * row.bytes for row in one.blocks]


def test_flash_is_linear_in_the_sequence_and_naive_is_not():
    flash = [trace(attention="flash", sequence=s).blocks_bytes for s in (16, 32)]
    naive = [trace(attention="naive", sequence=s).blocks_bytes for s in (16, 32)]
    assert flash[1] == 2 * flash[0]
    assert naive[1] > 2 * naive[0]
    # naive keeps the probabilities, (1, heads, s, s): the difference is quadratic in s
    assert naive[0] > flash[0]


def test_flash_saves_q_k_v_out_and_the_log_sum_exp():
    saved = trace(attention="flash").traced["block_1"]
    inside = [row for row in saved if row.where.split("/")[0] == "attn"]
    shapes = sorted(row.shape for row in inside)
    # q and the output (4 heads), k and v (2 KV heads: grouped, not repeated), the lse (1, 4, 32)
    assert shapes == sorted([(1, 32, 4, 16), (1, 32, 4, 16), (1, 32, 2, 16), (1, 32, 2, 16), (1, 4, 32)])
    assert not any(row.shape[-2:] == (SEQUENCE, SEQUENCE) for row in saved)


def test_naive_saves_the_probabilities():
    saved = trace(attention="naive").traced["block_1"]
    assert any(row.shape == (1, 4, SEQUENCE, SEQUENCE) for row in saved)


def test_the_data_axis_changes_nothing():
    alone = trace().bytes_per_device
    for mesh in ("data=8", "data=4,fsdp=2"):
        axes = tuple((name, int(size)) for name, size in (part.split("=") for part in mesh.split(",")))
        assert trace(mesh=MeshSpec(axes)).bytes_per_device == alone


def test_tensor_and_sequence_parallel_split_what_megatron_splits():
    alone = trace()
    tp = trace(mesh=MeshSpec((("data", 2), ("model", 2))))
    sp = trace(mesh=MeshSpec((("data", 2), ("model", 2))), sequence_parallel=True)
    assert sp.bytes_per_device < tp.bytes_per_device < alone.bytes_per_device
    # every residual of the attention and MLP is halved under tensor parallelism; the stream is not
    half = {r.shape for r in tp.traced["block_1"] if r.where.split("/")[0] in ("attn", "mlp")}
    assert (1, SEQUENCE, 2, 16) in half and (1, SEQUENCE, 48) in half
    assert all(r.bytes_per_device * 2 == r.bytes for r in sp.traced["block_1"] if r.where.endswith("_norm"))


def test_the_traced_once_figure_is_the_whole_unrolled_models():
    """Three blocks traced as two and repeated give exactly the residuals of one vjp of the whole
    unrolled model, its loss included."""
    step = act.Step(sequence=SEQUENCE, attention="naive")
    report = act.trace_activations(LLAMA, step)
    hparams = presets.resolved_hparams(LLAMA)
    module, inputs = families.build_family("decoder", hparams, 1, forward=step.forward)
    params = jax.tree_util.tree_map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, jnp.bfloat16),
        jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)["params"],
    )
    tokens = jax.ShapeDtypeStruct((1, SEQUENCE), jnp.int32)

    def loss(p, ids):
        cast = jax.tree_util.tree_map(lambda leaf: leaf.astype(jnp.bfloat16), p)
        return act.cross_entropy(module.apply({"params": cast}, ids), ids)

    saved = act.saved_shapes(loss, params, tokens, sequence=SEQUENCE, micro_batch=1)
    whole = [row.at(1, SEQUENCE) for row in saved]
    assert sum(row.bytes for row in whole) == report.bytes_per_device


def test_the_count_is_unchanged_by_the_training_forward():
    assert (
        count_params(LLAMA).total_params == count_params(ModelConfig(preset="llama2-7b", overrides=SMALL)).total_params
    )
    hparams, _ = families.traced_hparams("decoder", presets.resolved_hparams(LLAMA))
    plain, inputs = families.build_family("decoder", hparams)
    flash, _ = families.build_family("decoder", hparams, forward=act.Step(sequence=8).forward, sequence=8)
    shapes = jax.tree_util.tree_map(lambda leaf: leaf.shape, jax.eval_shape(plain.init, jax.random.PRNGKey(0), *inputs))
    again = jax.tree_util.tree_map(lambda leaf: leaf.shape, jax.eval_shape(flash.init, jax.random.PRNGKey(0), *inputs))
    assert shapes == again


def test_routed_experts_save_only_the_chosen_ones():
    """Top-2 of 8, dropless: each token's rows through its two experts, not all eight."""
    report = trace(MOE)
    widths = [row for row in report.traced["block_1"] if row.where.startswith("moe/experts") and row.shape[-1] == 96]
    assert widths and all(row.shape[0] == 2 * SEQUENCE for row in widths)  # tokens x top_k rows
    same = {"num_layers": 2, "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_dim": 96, "vocab_size": 128}
    dense = trace(ModelConfig(preset="mistral-7b", overrides=same))
    assert report.blocks_bytes < 2.5 * dense.blocks_bytes


def test_mixtral_keeps_between_1_2_and_2_5_times_mistral():
    mixtral = act.trace_activations(ModelConfig(preset="mixtral-8x7b"), act.Step(sequence=4096))
    mistral = act.trace_activations(ModelConfig(preset="mistral-7b"), act.Step(sequence=4096))
    assert 1.2 < mixtral.bytes_per_device / mistral.bytes_per_device < 2.5


def test_capacity_dispatch_keeps_capacity_rows_an_expert():
    report = trace(MOE, capacity_factor=1.0)
    # capacity = ceil(1.0 x 2 x 32 / 8) = 8 rows an expert: (8, 8, 96) expert activations
    assert any(row.shape == (8, 8, 96) for row in report.traced["block_1"])


def test_the_formula_by_hand():
    hparams = {"num_layers": 2, "d_model": 64, "num_heads": 4}
    s, b, h, L, a = 32, 2, 64, 2, 4
    step = act.Step(sequence=s, micro_batch=b, attention="naive")
    assert act.korthikanti_bytes(hparams, step) == s * b * h * L * 34 + 5 * a * s * s * b * L
    assert act.korthikanti_bytes(hparams, act.Step(sequence=s, micro_batch=b)) == 34 * s * b * h * L
    assert act.korthikanti_bytes(hparams, act.Step(sequence=s, micro_batch=b, remat="full")) == 2 * s * b * h * L
    sp = act.Step(sequence=s, micro_batch=b, remat="full", sequence_parallel=True)
    assert act.korthikanti_bytes(hparams, sp, t=4) == 2 * s * b * h * L // 4
    tp = act.Step(sequence=s, micro_batch=b)
    assert act.korthikanti_bytes(hparams, tp, t=4) == s * b * h * L * (10 + 24 // 4)
    assert act.korthikanti_bytes(hparams, act.Step(sequence=s, remat="dots")) is None


@pytest.mark.parametrize(("s", "b", "h", "a"), [(32, 2, 64, 4), (16, 3, 32, 2), (64, 1, 64, 8)])
def test_a_gpt_block_is_korthikanti_without_dropout_plus_what_jax_keeps_beyond_it(s, b, h, a):
    """The oracle for a GPT block (LayerNorm, multi-head attention, GeLU over 4h; no dropout), naive
    attention, no remat, 16-bit compute. Korthikanti et al.'s 34sbh + 5as^2b a block, less its
    dropout terms (the attention mask as^2b and its 2as^2b output, the two sbh masks after attention
    and the MLP), is 32sbh + 2as^2b. JAX's residuals are that, term for term, and these, each named:"""
    config = ModelConfig(
        preset="gpt2-small",
        overrides={"num_layers": 2, "d_model": h, "num_heads": a, "num_kv_heads": a, "ffn_dim": 4 * h}
        | {"vocab_size": 128, "max_positions": 64},
    )
    report = act.trace_activations(config, act.Step(sequence=s, micro_batch=b, attention="naive"), "bfloat16", None)
    sbh, asb = s * b * h, a * s * b
    korthikanti = 32 * sbh + 2 * a * s * s * b
    # Each LayerNorm computes in float32 and keeps three (b, s, h) arrays of it (the input less its
    # mean, the input scaled for the variance's gradient, rsqrt(var) x the scale) where the formula
    # keeps the 16-bit input: 12sbh - 2sbh, twice.
    norms_in_float32 = 2 * (12 * sbh - 2 * sbh)
    # and four float32 values a token from its statistics (two of the reductions, the variance term and
    # its rsqrt), twice.
    norm_statistics = 2 * 4 * 4 * s * b
    # Softmax keeps the unnormalised exp(scores) beside the probabilities (2as^2b), and two 16-bit
    # values a row (the row sum and its square, for the division's gradient).
    softmax_exp = 2 * a * s * s * b
    softmax_row_sums = 2 * 2 * asb
    # GeLU's tanh approximation keeps four (b, s, 4h) 16-bit arrays beside its input and output (its
    # tanh, a constant less an array for tanh's gradient, and two arrays times a constant): 4 x 8sbh.
    gelu_tanh = 4 * 8 * sbh
    extras = norms_in_float32 + norm_statistics + softmax_exp + softmax_row_sums + gelu_tanh
    assert [row.bytes for row in report.blocks] == [korthikanti + extras] * 2

    by_module: dict[str, int] = {}
    for row in report.traced["block_0"]:
        by_module[row.where] = by_module.get(row.where, 0) + row.bytes
    # The formula's terms by module: each norm's 16-bit output is the next projection's input (2sbh);
    # attention keeps q and k (4sbh), v and its output before the out projection (4sbh) and the
    # probabilities (2as^2b); the MLP keeps GeLU's input and output (8sbh each).
    assert by_module == {
        "attn_norm": 2 * sbh + (12 * sbh + 16 * s * b),
        "attn": 8 * sbh + 2 * a * s * s * b + softmax_exp + softmax_row_sums,
        "mlp_norm": 2 * sbh + (12 * sbh + 16 * s * b),
        "mlp": 16 * sbh + gelu_tanh,
    }


def test_the_note_says_why_the_formula_differs():
    note = trace().formula_note
    assert "SwiGLU" in note and "grouped-query" in note and "RMSNorm" in note and "loss" in note


@pytest.mark.parametrize(
    "step, match",
    [
        pytest.param({"sequence": 0}, "`sequence` must be an integer from 1", id="sequence-0"),
        pytest.param({"micro_batch": 0}, "`micro_batch` must be an integer from 1", id="micro-batch-0"),
        pytest.param({"micro_batch": -2}, "`micro_batch` must be an integer from 1", id="micro-batch-negative"),
        pytest.param({"remat": "some"}, "remat policy must be one of none, full", id="policy"),
        pytest.param({"attention": "ring"}, "attention kind must be one of naive, flash", id="attention"),
        pytest.param({"compute_dtype": "int8"}, "compute dtype must be one of", id="dtype"),
        pytest.param({"capacity_factor": 0.0}, "capacity factor must be a number from 0.01", id="capacity"),
    ],
)
def test_a_bad_step_is_refused_by_name(step, match):
    with pytest.raises((ValueError, TypeError), match=match):
        act.Step(**({"sequence": 8} | step))


def test_a_sequence_past_the_positions_is_refused():
    with pytest.raises(ValueError, match=r"at most the model's positions \(max_positions 4,096\)"):
        act.trace_activations(ModelConfig(preset="llama2-7b"), act.Step(sequence=4097))


def test_a_sequence_the_model_axis_does_not_divide_is_refused_under_sequence_parallelism():
    with pytest.raises(ValueError, match=r"model axis \(3\), which must divide it; got a sequence of 32"):
        trace(mesh=MeshSpec((("model", 3),)), sequence_parallel=True)


def test_heads_the_model_axis_does_not_divide_are_refused():
    with pytest.raises(ValueError, match=r"model axis \(3\) must divide the KV heads"):
        trace(mesh=MeshSpec((("model", 3),)))


def test_families_without_a_training_forward_are_refused():
    with pytest.raises(ValueError, match="activations are traced for decoder-only language models"):
        act.trace_activations(ModelConfig(preset="bert-base"), act.Step(sequence=8))
    with pytest.raises(ValueError, match="the Dense stack has no training forward"):
        act.trace_activations(ModelConfig(), act.Step(sequence=8))


def test_llama2_70b_costs_two_blocks():
    report = act.trace_activations(ModelConfig(preset="llama2-70b"), act.Step(sequence=4096))
    assert len(report.blocks) == 80 and set(report.traced) == {"block_0", "block_1"}
    assert len({row.bytes for row in report.blocks[1:]}) == 1


@pytest.mark.slow  # concrete rotations, compiled op by op
def test_rotary_turns_each_pair_by_its_position_alone():
    """RoFormer's property: a rotated query and key's product depends on their distance only, and
    rotation keeps each vector's length; position 0 is the identity."""
    from dcsim.model.layers import rotary

    q, k = jax.random.normal(jax.random.PRNGKey(1), (2, 1, 1, 16))
    turned = [rotary(jnp.stack([q[0]] * 8), jnp.arange(8)), rotary(jnp.stack([k[0]] * 8), jnp.arange(8))]
    dot = jnp.einsum("thd,thd->t", turned[0][:-2], turned[1][2:])  # distance 2, at every start
    assert jnp.allclose(dot, dot[0], atol=1e-4)
    assert jnp.allclose(jnp.linalg.norm(turned[0], axis=-1), jnp.linalg.norm(q[0]), atol=1e-4)
    assert jnp.allclose(rotary(q, jnp.arange(1)), q)


@pytest.mark.slow  # a concrete init and two forwards of Llama 2 7B's two traced blocks
def test_a_rotary_decoder_changes_with_the_order_of_its_tokens():
    """Without a position table the blocks see positions through rotary alone."""
    hparams, _ = families.traced_hparams("decoder", presets.resolved_hparams(LLAMA))
    module, _ = families.build_family("decoder", hparams)
    tokens = jnp.array([[1, 2, 3, 4]])
    params = module.init(jax.random.PRNGKey(0), tokens)
    first = module.apply(params, tokens)[0, -1]
    swapped = module.apply(params, jnp.array([[2, 1, 3, 4]]))[0, -1]
    assert not jnp.allclose(first, swapped)


def test_what_a_policy_recomputes_is_counted_from_the_traced_step():
    """Full remat runs a block's forward again: about a third of its forward and backward (a
    backward costs about two forwards); keeping the projections recomputes little; none nothing."""
    fraction = {
        policy: act.trace_activations(LLAMA, act.Step(sequence=SEQUENCE, remat=policy), with_recompute=True)
        for policy in ("none", "full", "minimal")
    }
    assert fraction["none"].recompute_fraction == 0.0
    assert 0.2 < fraction["full"].recompute_fraction < 0.4
    assert 0 < fraction["minimal"].recompute_fraction < fraction["full"].recompute_fraction
    assert trace(remat="full").recompute_fraction is None  # not asked for


def test_flops_of_a_matmul_by_hand():
    jaxpr = jax.make_jaxpr(lambda a, b: a @ b)(jnp.ones((3, 4)), jnp.ones((4, 5))).jaxpr
    assert act.jaxpr_flops(jaxpr) == 2 * 3 * 4 * 5


@pytest.mark.parametrize(
    "name",
    quick_sample(
        [name for name, row in presets.PRESETS.items() if row.family in families.TRAINING_FORWARDS],
        # sliding windows; routed experts. The whole suite traces every preset (latent attention,
        # shared experts, sinks, the router's bias among them).
        keep=("gemma2-2b", "mixtral-8x7b"),
    ),
)
def test_every_language_model_preset_traces(name):
    """Every decoder and Mixture-of-Experts preset (sliding windows, sinks, latent attention, shared
    experts, DeepSeek-V3's router bias among them): its blocks all counted, full < none."""
    config = ModelConfig(preset=name)
    none = act.trace_activations(config, act.Step(sequence=64))
    full = act.trace_activations(config, act.Step(sequence=64, remat="full"))
    assert len(none.blocks) == presets.resolved_hparams(config)["num_layers"]
    assert 0 < full.bytes_per_device < none.bytes_per_device


# One trace for every sequence: the step traced with a symbolic micro-batch and sequence, its
# residuals' sizes evaluated per step, must give what a trace at those very values gives.
SYMBOLIC_CASES = [
    ("gpt2-small", {"remat": "none"}, "data=1"),
    ("llama2-7b", {"remat": "dots", "attention": "naive"}, "model=2"),
    ("llama2-70b", {"remat": "minimal", "sequence_parallel": True}, "data=8,model=8"),
    ("gemma2-2b", {"remat": "none", "attention": "naive"}, "data=1"),
    ("mixtral-8x7b", {"remat": "dots-no-batch"}, "model=2"),
    ("deepseek-v2-lite", {"remat": "full", "compute_dtype": "float32"}, "model=2"),
]


def _saved(rows):
    return [(row.dtype, row.where, row.bytes, row.bytes_per_device) for row in rows]


@pytest.mark.parametrize(
    ("preset", "step", "mesh"),
    [
        pytest.param(*case, id=case[0], marks=() if case[0] == "gpt2-small" else pytest.mark.slow)
        for case in SYMBOLIC_CASES
    ],
)
def test_one_symbolic_trace_gives_every_sequence_exactly(preset, step, mesh):
    from dcsim.sharding.meshes import parse_mesh

    config, spec = ModelConfig(preset=preset), parse_mesh(mesh)
    t = act.tensor_parallel_size(spec)
    symbolic = act._symbolic_trace(config, act._shapeless(act.Step(sequence=1, **step)), "bfloat16", t, True)
    assert symbolic is not None  # these models trace with a symbolic micro-batch and sequence
    for micro_batch, sequence in ((1, 64), (3, 200)):
        if step.get("sequence_parallel") and sequence % t:
            sequence *= t
        concrete = act._trace_step(
            config,
            act.Step(sequence=sequence, micro_batch=micro_batch, **step),
            "bfloat16",
            t,
            micro_batch,
            sequence,
            True,
        )
        assert symbolic.blocks.keys() == concrete.blocks.keys()
        for path, rows in symbolic.blocks.items():
            at = [row.at(micro_batch, sequence) for row in rows]
            assert _saved(at) == _saved(row.at(micro_batch, sequence) for row in concrete.blocks[path]), path
        for part in ("outside", "loss"):
            at = [row.at(micro_batch, sequence) for row in getattr(symbolic, part)]
            assert _saved(at) == _saved(row.at(micro_batch, sequence) for row in getattr(concrete, part)), part
        # The FLOPs a policy recomputes: the symbolic trace also counts the few operations of the
        # rotary table that a concrete trace folds into constants (a few per token against some
        # 10**8), so the two fractions agree to 1e-8.
        assert symbolic.recompute_at(micro_batch, sequence) == pytest.approx(
            concrete.recompute_at(micro_batch, sequence), rel=0, abs=1e-8
        )


def test_symbolic_sizes_past_int32_are_evaluated_exactly():
    """JAX's own evaluation of a dimension polynomial computes in int32; dcsim's is in Python ints."""
    from jax import export

    b, s = export.symbolic_shape("b, s")
    env = {"b": 65_536, "s": 1 << 20}
    assert act._size(41_152 * b * s * s + 7 * b * s + 5, env) == 41_152 * 65_536 * (1 << 40) + 7 * (1 << 36) + 5
    assert act._size((b * s) // 3 + s % 7, env) == (1 << 36) // 3 + (1 << 20) % 7
    saved = act.Saved(shape=(b * s, 4096), dtype="bfloat16", where="x", held=(b * s, 4096))
    assert saved.at(65_536, 1 << 20).bytes == (1 << 36) * 4096 * 2


def test_a_forward_that_needs_concrete_sizes_is_traced_at_them():
    # GShard capacity sizes each expert's buffer from the token count: no symbolic trace, the step's own values.
    step = act.Step(sequence=SEQUENCE, capacity_factor=1.25)
    assert act._symbolic_trace(MOE, act._shapeless(step), "bfloat16", 1, False) is None
    report = act.trace_activations(MOE, step)
    assert report.bytes_per_device == act.trace_activations(MOE, step, with_recompute=True).bytes_per_device > 0
