"""Decode mode (``dcsim.model.cache.Decode``): the cache is real. Decoding a sequence one token at
a time through each family's cache gives the logits its full causal forward gives, and the cache's
arrays have the shapes serving reads: (sequences, tokens, KV heads, head_dim) for grouped attention,
the latent and the rotary key for DeepSeek's, a window's tokens for a local block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from dcsim.model import families, schemas
from dcsim.model.cache import CACHE, Decode

SEQUENCE = 6


def _tiny(family: str, **hparams: object) -> dict:
    small = {
        "decoder": {"vocab_size": 50, "d_model": 16, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}
        | {"ffn_dim": 24, "max_positions": 16, "position_embedding": "none", "norm": "rmsnorm", "gated_mlp": True},
        "moe": {"vocab_size": 50, "d_model": 16, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}
        | {"expert_ffn_dim": 8, "num_experts": 4, "ffn_dim": 24, "max_positions": 16},
        "variant": {"vocab_size": 50, "d_model": 16, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}
        | {"ffn_dim": 24, "max_positions": 16},
        "t5": {"vocab_size": 50, "d_model": 16, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4}
        | {"head_dim": 4, "ffn_dim": 24, "relative_buckets": 8},
        "encdec": {"vocab_size": 50, "d_model": 16, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4}
        | {"num_decoder_heads": 2, "ffn_dim": 24, "decoder_ffn_dim": 20, "max_positions": 16, "source_positions": 8},
    }[family]
    return schemas.family_defaults(family) | small | dict(hparams)


def _decoded_logits(family: str, hparams: dict, tokens: jax.Array, decode: Decode, source=None) -> jax.Array:
    module, _ = families.build_family(family, hparams, tokens.shape[0], decode=decode)
    first = tokens[:, :1]
    inputs = (first,) if source is None else (source, first)
    variables = module.init(jax.random.PRNGKey(0), *inputs)
    params = {name: tree for name, tree in variables.items() if name != CACHE}  # params and buffers
    # init ran the first step: start again from an empty cache, as a server does, keeping what init
    # made once (the cross-attention's encoder keys and values, fp8's per-layer scales)
    flat = traverse_util.flatten_dict(variables[CACHE])
    cache = traverse_util.unflatten_dict(
        {
            key: (value if "cross_attn" in key or key[-1].endswith("_scale") else jnp.zeros_like(value))
            for key, value in flat.items()
        }
    )
    # One compiled step, as a server runs it: every step has the same shapes, so it compiles once
    # (run op by op, each step dispatched hundreds of small kernels: a minute for Whisper on 2 cores).
    step_fn = jax.jit(lambda cache, *args: module.apply({**params, CACHE: cache}, *args, mutable=[CACHE]))
    outputs = []
    for position in range(tokens.shape[1]):
        step = tokens[:, position : position + 1]
        args = (step,) if source is None else (source, step)
        logits, mutated = step_fn(cache, *args)
        cache = mutated[CACHE]
        outputs.append(logits[:, 0])
    return jnp.stack(outputs, axis=1), params


def _full_logits(family: str, hparams: dict, params, tokens: jax.Array, source=None) -> jax.Array:
    module, _ = families.build_family(family, hparams, tokens.shape[0])
    args = (tokens,) if source is None else (source, tokens)
    return jax.jit(module.apply)(params, *args)


@pytest.mark.slow  # concrete forwards and decodes, compared value by value
@pytest.mark.parametrize(
    "family, hparams",
    [
        pytest.param("decoder", {}, id="grouped-query"),
        pytest.param("decoder", {"position_embedding": "learned", "norm": "layernorm", "gated_mlp": False}, id="gpt2"),
        pytest.param("decoder", {"num_kv_heads": 1, "qk_norm": True}, id="multi-query-qk-norm"),
        pytest.param("decoder", {"sliding_window": 8, "local_layers": (0,)}, id="window-wider-than-sequence"),
        pytest.param("moe", {"experts_per_token": 2}, id="mixtral-like"),
        pytest.param(
            "moe",
            {"experts_per_token": 2, "norm": "layernorm", "attn_bias": True, "head_bias": True}
            | {"sliding_window": 8, "local_layers": (0, 1)},  # Phi-3.5-MoE's window is its whole context
            id="phimoe-like",
        ),
        pytest.param("moe", {"experts_per_token": 2, "qk_norm": True, "wide_qk_norm": True}, id="olmoe-like"),
        pytest.param(
            "moe",
            {"experts_per_token": 2, "attention_sinks": True, "expert_biases": True, "attn_bias": True}
            | {"sliding_window": 8, "local_layers": (0,)},
            id="gpt-oss-like",
        ),
        pytest.param("moe", {"experts_per_token": 2, "norm": "layernorm_no_bias"}, id="dbrx-like"),
        pytest.param(
            "moe",
            {"attention": "mla", "q_lora_rank": 8, "kv_lora_rank": 6, "qk_nope_head_dim": 4}
            | {"qk_rope_head_dim": 2, "v_head_dim": 4, "experts_per_token": 2},
            id="latent",
        ),
        pytest.param("t5", {}, id="t5"),
        pytest.param("encdec", {}, id="bart"),
        pytest.param(
            "encdec",
            {"audio_bins": 6, "pre_norm": True, "embed_norm": False, "key_bias": False, "logits_bias": False},
            id="whisper",
        ),
        pytest.param("variant", {}, id="variant"),
        pytest.param("variant", {"qk_norm": True, "norm": "rmsnorm"}, id="variant-wide-qk-norm"),
    ],
)
def test_decoding_through_the_cache_gives_the_full_forward(family, hparams):
    h = _tiny(family, **hparams)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, SEQUENCE), 0, 50)
    source = None
    if family in families.ENCODER_DECODERS:  # 5 source tokens, or for Whisper 10 mel frames (5 positions)
        source = jax.random.randint(jax.random.PRNGKey(2), (2, 5), 0, 50)
        if h.get("audio_bins"):
            source = jax.random.normal(jax.random.PRNGKey(2), (2, 10, h["audio_bins"]))
    decode = Decode(context=SEQUENCE, kv_dtype="float32", source_length=5)
    stepped, params = _decoded_logits(family, h, tokens, decode, source)
    full = _full_logits(family, h, params, tokens, source)
    np.testing.assert_allclose(np.asarray(stepped), np.asarray(full), rtol=2e-4, atol=2e-4)


@pytest.mark.slow  # concrete decodes in each cache dtype
@pytest.mark.parametrize(
    "kv_dtype, tolerance",
    # a logit's error against the float32 cache, as a fraction of the largest logit: bfloat16 keeps 8
    # bits of mantissa, int8 8 bits a value scaled per token and head, fp8 (e4m3) 3 bits of mantissa
    [("bfloat16", 0.02), ("int8", 0.05), ("float8_e4m3fn", 0.2)],
)
def test_a_narrow_cache_dtype_decodes_close_to_float32(kv_dtype, tolerance):
    h = _tiny("decoder")
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, SEQUENCE), 0, 50)
    narrow, params = _decoded_logits("decoder", h, tokens, Decode(context=SEQUENCE, kv_dtype=kv_dtype))
    full = np.asarray(_full_logits("decoder", h, params, tokens))
    error = np.abs(np.asarray(narrow) - full)
    assert 0 < error.max() < tolerance * np.abs(full).max()


@pytest.mark.slow  # a concrete decode past the window
def test_a_sliding_window_keeps_only_its_window_and_attends_within_it():
    window = 3
    h = _tiny("decoder", sliding_window=window, local_layers=(0, 1))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (1, SEQUENCE), 0, 50)
    stepped, params = _decoded_logits("decoder", h, tokens, Decode(context=SEQUENCE, kv_dtype="float32"))
    # The ring buffer holds the last `window` tokens, so from then on each step differs from a model
    # that sees every token, and equals a model restarted on the window (no positions: rotary-free).
    full = _full_logits("decoder", h, params, tokens)
    np.testing.assert_allclose(np.asarray(stepped[:, :window]), np.asarray(full[:, :window]), rtol=2e-4, atol=2e-4)
    assert not np.allclose(np.asarray(stepped[:, window:]), np.asarray(full[:, window:]), atol=1e-3)
    module, inputs = families.build_family("decoder", h, 1, decode=Decode(context=SEQUENCE))
    cache = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)[CACHE]
    assert cache["block_0"]["attn"]["cached_key"].shape == (1, window, 2, 4)


def test_full_windows_allocate_every_layer_in_full():
    h = _tiny("decoder", sliding_window=3, local_layers=(0,))
    module, inputs = families.build_family("decoder", h, 2, decode=Decode(context=10, full_windows=True))
    cache = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)[CACHE]
    assert cache["block_0"]["attn"]["cached_key"].shape == (2, 10, 2, 4)


def test_families_without_a_decoder_have_no_decode_mode():
    with pytest.raises(ValueError, match="the bert family has no decoder"):
        families.build_family("bert", schemas.family_defaults("bert"), 1, decode=Decode(context=8))
