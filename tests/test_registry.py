"""The family registry's answers, with values a reader can check against the model cards."""

import pytest

from dcsim.model import families, presets, registry, schemas
from dcsim.model.config import ModelConfig


def answers(preset: str) -> tuple[registry.Family, dict]:
    config = ModelConfig(preset=preset)
    return registry.family_of(config), presets.resolved_hparams(config)


def test_every_family_has_one_object_in_the_schemas_order():
    assert registry.names(lambda family: True) == schemas.FAMILIES
    assert registry.get(None) is registry.DENSE_STACK
    assert all(registry.get(family.name) is family for family in registry.FAMILIES)


def test_an_unknown_family_is_refused_with_the_known_ones_listed():
    with pytest.raises(ValueError, match=r"unknown family 'gpt5'; families: mlp, decoder, moe, t5, bert, "):
        registry.get("gpt5")


def test_the_name_sets_are_derived_from_the_answers():
    assert families.TRAINING_FORWARDS == ("decoder", "moe")
    assert families.DECODING_FAMILIES == ("decoder", "moe", "t5", "variant", "encdec", "mamba", "jamba", "multimodal")
    assert families.ENCODER_DECODERS == ("t5", "encdec")
    assert list(families.UNSERVED_FAMILIES) == ["llama4"]
    assert "text_config" in registry.get("llama4").unserved


def test_llama2_70b_has_8_kv_heads_for_64_query_heads_and_4096_rotary_positions():
    family, h = answers("llama2-70b")
    assert family.name == "decoder" and family.decodes and family.trains
    assert family.kv_heads(h) == (64, 8)
    assert family.max_positions(h) == 4096
    assert family.rotary(h) and not family.latent(h)
    assert family.naming_scheme(h, ()) == "llama"


def test_gpt2_has_a_learned_table_of_1024_positions_and_gpt2_names():
    family, h = answers("gpt2-small")
    assert family.kv_heads(h) == (12, 12)
    assert family.max_positions(h) == 1024 and not family.rotary(h)
    assert family.naming_scheme(h, ()) == "gpt2"


def test_t5_is_an_encoder_decoder_with_relative_positions():
    family, h = answers("t5-small")
    assert family.encoder_decoder and family.relative_positions and family.decodes and not family.trains
    assert family.max_positions(h) is None  # any length
    assert family.kv_heads(h) == (8, 8)  # every head caches
    assert family.naming_scheme(h, ()) == "dcsim"


def test_deepseek_v3_caches_a_latent_vector_not_kv_heads():
    family, h = answers("deepseek-v3")
    assert family.latent(h) and family.kv_heads(h) == (128, None)
    assert family.trains_experts
    # Its first 3 blocks are dense, and it has shared experts: three widths split over the model axis.
    assert [name for name, _ in family.tensor_widths(h)] == ["ffn_dim", "expert_ffn_dim", "shared_ffn_dim"]
    assert family.naming_scheme(h, ["block_0/attn/kv_down/kernel"]) == "llama"


def test_mixtral_splits_only_its_experts_and_keeps_mixtral_names():
    family, h = answers("mixtral-8x7b")
    assert family.kv_heads(h) == (32, 8)
    assert [name for name, _ in family.tensor_widths(h)] == ["expert_ffn_dim"]
    assert family.naming_scheme(h, ["block_0/moe/experts/up"]) == "mixtral"
    assert family.serving_notes == ("Routed experts cache nothing: the cache is the attention's alone",)
    assert family.without_blocks({"num_layers": 32, "dense_layers": (0,), "local_layers": (1,)}) == {
        "num_layers": 0,
        "dense_layers": (),
        "local_layers": (),
    }


@pytest.mark.parametrize(
    ("name", "weight_formats", "convolutions"),
    [
        pytest.param(None, False, False, id="dense-stack"),
        pytest.param("vit", False, True, id="vit"),
        pytest.param("resnet", False, True, id="resnet"),
        pytest.param("multimodal", True, True, id="multimodal"),
        pytest.param("decoder", True, False, id="decoder"),
    ],
)
def test_which_families_take_a_weight_format(name, weight_formats, convolutions):
    family = registry.get(name)
    assert (family.weight_formats, family.convolutions) == (weight_formats, convolutions)


def test_the_dense_stack_neither_decodes_nor_trains():
    dense = registry.DENSE_STACK
    assert not dense.decodes and not dense.trains and dense.kv_heads({}) is None
    assert dense.max_positions({"max_positions": 8}) is None


def test_every_family_has_a_row_of_builders_with_a_decode_mode_where_it_decodes():
    """The registry and the Flax side agree: a family the registry names has its builders, and one
    it says decodes has a decode mode (and no other: Llama 4 has none, so is not served)."""
    rows = families._BUILDS
    assert tuple(rows) == schemas.FAMILIES
    assert tuple(name for name, row in rows.items() if row.decode is not None) == families.DECODING_FAMILIES
