"""The cache specs (``dcsim.model.cache``): what each kind says of its bytes by hand, and what the
modules that make a cache emit while they are initialised in decode mode."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dcsim.model import families, presets
from dcsim.model.cache import (
    CachedArray,
    CrossAttentionSpec,
    Decode,
    FullAttentionSpec,
    LatentAttentionSpec,
    SlidingWindowSpec,
    StateSpec,
    collect_specs,
    emit,
)
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_module
from dcsim.model.layers import Attention


def keys_and_values(sequences: int, tokens: int, heads: int, head_dim: int, dtype: str = "bfloat16"):
    shape = (sequences, tokens, heads, head_dim)
    return tuple(CachedArray(name=name, shape=shape, dtype=dtype, head_axis=2) for name in ("k", "v"))


def test_full_attention_holds_every_token_of_the_context():
    # Llama 2 70B's layer: 8 KV heads of 128, keys and values, 2 bytes: 8 x 128 x 2 x 2 = 4,096 a token
    spec = FullAttentionSpec(arrays=keys_and_values(4, 4096, 8, 128))
    assert spec.kind == "full" and spec.tokens == 4096
    assert spec.bytes_per_token == 4096
    assert spec.max_memory_bytes(4096) == 4096 * 4096 == 16_777_216
    assert spec.max_memory_bytes(100, full_windows=True) == 409_600


def test_a_sliding_window_holds_at_most_its_window_unless_windows_are_full():
    # Gemma 2 2B's local layer: 4 KV heads of 256, window 4,096: 4 x 256 x 2 x 2 = 4,096 bytes a token
    spec = SlidingWindowSpec(arrays=keys_and_values(1, 4096, 4, 256), window=4096)
    assert spec.bytes_per_token == 4096
    assert spec.tokens_at(8192) == 4096 and spec.tokens_at(1000) == 1000
    assert spec.max_memory_bytes(8192) == 4096 * 4096 == 16_777_216
    assert spec.max_memory_bytes(8192, full_windows=True) == 8192 * 4096 == 33_554_432


def test_the_latent_is_whole_and_its_scales_a_layer_are_fixed():
    # DeepSeek-V3's layer in fp8: latent 512 and rotary key 64, one byte each: 576 a token; the two
    # float32 scales a layer grow with nothing
    arrays = (
        CachedArray(name="latent", shape=(2, 10, 512), dtype="float8_e4m3fn"),
        CachedArray(name="latent_scale", shape=(), dtype="float32", sequence_axis=None, token_axis=None),
        CachedArray(name="rope", shape=(2, 10, 64), dtype="float8_e4m3fn"),
        CachedArray(name="rope_scale", shape=(), dtype="float32", sequence_axis=None, token_axis=None),
    )
    spec = LatentAttentionSpec(arrays=arrays)
    assert spec.bytes_per_token == 576 and spec.state_bytes == 0
    assert all(array.head_axis is None for array in spec.arrays)
    assert not spec.array("latent_scale").per_sequence and spec.array("missing") is None
    assert spec.max_memory_bytes(1000) == 576_000


def test_a_cross_attention_holds_the_encoders_tokens_whatever_the_context():
    # T5-small's cross-attention over 512 encoder tokens: 8 heads of 64, keys and values: 2,048 a token
    spec = CrossAttentionSpec(arrays=keys_and_values(2, 512, 8, 64))
    assert not spec.follows_context
    assert spec.tokens_at(1) == spec.tokens_at(100_000) == 512
    assert spec.max_memory_bytes(7) == 512 * 2048 == 1_048_576


def test_a_state_is_a_fixed_size_a_sequence():
    # mamba-130m's mixer: conv state 1,536 x 4 and SSM state 1,536 x 16, bfloat16: 12,288 + 49,152
    arrays = (
        CachedArray(name="conv", shape=(3, 1536, 4), dtype="bfloat16", token_axis=None),
        CachedArray(name="ssm", shape=(3, 1536, 16), dtype="bfloat16", token_axis=None),
    )
    spec = StateSpec(arrays=arrays)
    assert spec.bytes_per_token == 0 and spec.tokens == 0
    assert spec.state_bytes == 61_440
    assert spec.max_memory_bytes(1) == spec.max_memory_bytes(1_000_000) == 61_440


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: CachedArray(name="k", shape=(2, 3), dtype="bfloat16", head_axis=2), "distinct axes of the shape"),
        (lambda: CachedArray(name="k", shape=(2, 3, 4), dtype="bfloat16", head_axis=1), "distinct axes"),
        (lambda: CachedArray(name="k", shape=(2, 3), dtype="bfloat16", sequence_axis=None), "needs a sequence axis"),
        (lambda: SlidingWindowSpec(arrays=(), window=0), "a window of at least one token, got 0"),
    ],
    ids=["head-axis-past-the-shape", "token-and-head-axis-alike", "tokens-without-sequences", "no-window"],
)
def test_a_spec_that_cannot_describe_its_arrays_is_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_attention_emits_its_spec_from_the_variables_it_made():
    decode = Decode(context=6, kv_dtype="int8")
    layer = Attention(num_heads=4, num_kv_heads=2, decode=decode, window=4, causal=True)
    with collect_specs() as specs:
        report = count_module(layer, jnp.ones((3, 1, 16)))
    assert list(specs) == [""]  # the module at the root: its path is empty
    spec = specs[""]
    assert isinstance(spec, SlidingWindowSpec) and spec.window == 4
    made = {row.kind: (row.shape, row.dtype) for row in report.other}
    for array in spec.arrays:
        assert made[array.name] == (array.shape, array.dtype)
    assert {array.name for array in spec.arrays} == set(made) - {"cache_index"}
    # int8: a byte a value and a float32 scale a token and head: 2 (K, V) x 2 heads x (4 + 4) = 32
    assert spec.bytes_per_token == 32 and spec.tokens == 4
    assert spec.array("cached_key").head_axis == 2 and spec.array("key_scale").head_axis == 2


def test_emitting_outside_a_collection_is_a_no_op():
    layer = Attention(num_heads=2, num_kv_heads=2, decode=Decode(context=2))
    variables = jax.eval_shape(lambda: layer.init(jax.random.PRNGKey(0), jnp.ones((1, 1, 4))))
    assert "cache" in variables
    with collect_specs() as specs:
        pass
    emit(layer, FullAttentionSpec(arrays=()))  # unbound and uncollected: nothing to record
    assert specs == {}


SMALL = {"num_layers": 3, "d_model": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_dim": 96, "vocab_size": 128}


@pytest.mark.parametrize(
    "config, kinds",
    [
        pytest.param(
            ModelConfig(preset="t5-small", overrides={"num_layers": 1, "num_decoder_layers": 2}),
            ["full", "cross"] * 2,
            id="t5-self-and-cross",
        ),
        pytest.param(
            ModelConfig(preset="llama2-7b", overrides=SMALL | {"sliding_window": 8, "local_layers": (0, 2)}),
            ["sliding", "full", "sliding"],
            id="local-and-global",
        ),
    ],
)
def test_each_family_module_emits_a_spec_a_caching_layer(config, kinds):
    hparams = presets.resolved_hparams(config)
    module, inputs = families.build_family(config.family, hparams, 2, decode=Decode(context=16, source_length=5))
    with collect_specs() as specs:
        count_module(module, *inputs)
    assert [spec.kind for spec in specs.values()] == kinds
    assert [spec.tokens for spec in specs.values()] == [
        5 if kind == "cross" else 8 if kind == "sliding" else 16 for kind in kinds
    ]
