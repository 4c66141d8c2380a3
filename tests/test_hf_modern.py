"""The config.json model types of issue 16 (Mixtral, Qwen-MoE, Qwen3 and Qwen3-MoE, DeepSeek-V2 and
V3, Gemma 2 and 3, Phi-3, T5): absent fields take transformers' class defaults, fields transformers
ignores are noted, and what no family builds is refused by name.

tests/data/hf/defaults.json holds transformers' count of each class at its defaults (a bare
``{"model_type": ...}``), written by bench/hf_import.py like the files and counts.json.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import quick_sample
from dcsim import hf
from dcsim.model import presets, schemas
from dcsim.model.count import count_params

DATA = Path(__file__).parent / "data" / "hf"
DEFAULTS = json.loads((DATA / "defaults.json").read_text())


def opened(name: str, **changes):
    data = json.loads((DATA / f"{name}.json").read_text())
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return hf.from_hf_config(data)


@pytest.mark.parametrize(
    # The quick loop opens one of each kind (decoder, MoE, latent, encoder, encoder-decoder, state space,
    # vision-language); the whole suite every model type.
    "model_type",
    quick_sample(sorted(DEFAULTS), keep=("llama", "mixtral", "deepseek_v3", "bert", "t5", "mamba", "llava")),
)
def test_a_bare_model_type_is_the_class_defaults(model_type):
    imported = hf.from_hf_config({"model_type": model_type})
    assert count_params(imported.config).total_params == DEFAULTS[model_type]


def test_absent_fields_take_the_class_defaults_not_dcsims():
    # DeepSeek-V3's class defaults are DeepSeek-V3 itself: drop every size and the count stays.
    sizes = ("vocab_size", "hidden_size", "n_routed_experts", "first_k_dense_replace", "n_shared_experts")
    imported = opened("deepseek-v3", **dict.fromkeys(sizes, ...))
    assert count_params(imported.config).total_params == 671_026_404_352
    # Qwen3's heads are 128 wide by default, whatever hidden_size / num_attention_heads says.
    qwen3 = opened("qwen3-0.6b", head_dim=...)  # 1,024 / 16 = 64, but the class default is 128
    assert count_params(qwen3.config).total_params == 596_049_920


def test_fields_transformers_ignores_are_noted_not_refused():
    imported = opened("deepseek-v3")
    assert "num_nextn_predict_layers is 1" in imported.message()
    assert "not part of transformers' model, nor of this count" in imported.message()
    assert "score-correction bias is a buffer" in imported.message()
    frequency = opened("deepseek-v2-lite", moe_layer_freq=2)
    assert "moe_layer_freq is 2; transformers' class ignores it" in frequency.message()
    assert count_params(frequency.config).total_params == 15_706_484_224


def test_qwen_moe_dense_blocks_follow_mlp_only_layers_and_the_sparse_step():
    d_model, experts, expert_ffn, shared_ffn, ffn = 2048, 60, 1408, 5632, 5632
    moe_block_mlp = d_model * experts + 3 * experts * d_model * expert_ffn + 3 * d_model * shared_ffn + d_model
    dense_block_mlp = 3 * d_model * ffn
    base = 14_315_784_192
    only = opened("qwen1.5-moe-a2.7b", mlp_only_layers=[0, 5])
    assert count_params(only.config).total_params == base - 2 * (moe_block_mlp - dense_block_mlp)
    step = opened("qwen1.5-moe-a2.7b", decoder_sparse_step=2)  # blocks 1, 3, ..., 23 keep their experts
    assert count_params(step.config).total_params == base - 12 * (moe_block_mlp - dense_block_mlp)


def test_a_field_only_another_version_reads_is_not_refused():
    # DeepSeek-V3's class never reads mlp_bias (V2's does): transformers counts the same, so does dcsim.
    assert count_params(opened("deepseek-v3", mlp_bias=True).config).total_params == 671_026_404_352


def test_an_untied_t5_counts_its_own_head_and_says_transformers_does_not():
    imported = opened("flan-t5-base")
    assert count_params(imported.config).total_params == 247_577_856
    assert "transformers 5 ties T5's head" in imported.message()


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("qwen3-8b", {"attention_bias": True}, r"`attention_bias` is true; dcsim's Qwen3 blocks have no biases"),
        ("gemma-2-2b", {"attention_bias": True}, r"`attention_bias` is true; dcsim's Gemma blocks"),
        ("deepseek-v3", {"attention_bias": True}, r"`attention_bias` is true; dcsim's DeepSeek blocks have no biases"),
        ("deepseek-v2-lite", {"mlp_bias": True}, r"`mlp_bias` is true; dcsim's DeepSeek blocks have no biases"),
        ("qwen1.5-moe-a2.7b", {"shared_expert_intermediate_size": 0}, r"`shared_expert_intermediate_size` is 0"),
        ("qwen3-30b-a3b", {"attention_bias": True}, r"`attention_bias` is true"),
        ("mixtral-8x7b", {"num_local_experts": 0}, r"`num_local_experts` must be an integer from 1 to 1,024, got 0"),
        (
            "mixtral-8x7b",
            {"num_experts_per_tok": 9},
            r"`experts_per_token` \(9\) must be at most `num_experts` \(8\).*experts_per_token is num_experts_per_tok",
        ),
        ("deepseek-v3", {"kv_lora_rank": 0}, r"`kv_lora_rank` must be an integer from 1"),
        ("qwen1.5-moe-a2.7b", {"mlp_only_layers": "0,1"}, r"`mlp_only_layers` must be a list of block numbers"),
        ("t5-small", {"feed_forward_proj": "gated-gelu-x"}, r"`feed_forward_proj` must be an activation"),
        ("t5-small", {"d_kv": 0}, r"`d_kv` must be an integer from 1"),
    ],
)
def test_what_no_family_builds_is_refused_by_name(name, changes, message):
    with pytest.raises((TypeError, ValueError), match=message):
        opened(name, **changes)


# Each preset of issue 16 and the config.json transformers wrote for the same model.
PRESET_FILES = {
    "gemma-7b": "gemma-7b",
    "gemma2-2b": "gemma-2-2b",
    "gemma3-1b": "gemma-3-1b",
    "qwen2.5-72b": "qwen2.5-72b",
    "qwen3-8b": "qwen3-8b",
    "phi3-mini": "phi-3-mini-4k",
    "mixtral-8x7b": "mixtral-8x7b",
    "qwen1.5-moe-a2.7b": "qwen1.5-moe-a2.7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "deepseek-v3": "deepseek-v3",
    "t5-small": "t5-small",
    "t5-large": "t5-large",
    "flan-t5-base": "flan-t5-base",
    # issue 30
    "mistral-7b": "mistral-7b",
    "llama3.1-8b": "llama-3.1-8b",
    "llama3.1-70b": "llama-3.1-70b",
    "llama3.1-405b": "llama-3.1-405b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen2.5-32b": "qwen2.5-32b",
    "gemma2-9b": "gemma-2-9b",
    "gemma2-27b": "gemma-2-27b",
    "phi3.5-moe": "phi-3.5-moe",
    "llama4-scout": "llama-4-scout-17b-16e",
    "llama4-maverick": "llama-4-maverick-17b-128e",
}
COUNTS = json.loads((DATA / "counts.json").read_text())


@pytest.mark.parametrize(
    "preset", quick_sample(sorted(PRESET_FILES), keep=("llama3.1-8b", "gemma2-2b", "deepseek-v2-lite", "t5-small"))
)
def test_each_new_preset_is_its_config_json(preset):
    imported = opened(PRESET_FILES[preset])
    row = presets.PRESETS[preset]
    opened_hparams = presets.resolved_hparams(imported.config)
    shown = schemas.applicable(row.family, row.hparams)  # what changes the count; the rest is unused
    assert {name: opened_hparams[name] for name in shown} == {name: row.hparams[name] for name in shown}
    assert row.reference_params == COUNTS[PRESET_FILES[preset]] == count_params(imported.config).total_params


# The serving fields each new preset publishes, as its config.json gives them; Phi-3.5-MoE's
# fixture leaves out its longrope factor lists (bench/hf_import.py), so its rope_scaling is the
# preset's own, from the published file.
SERVING = ("max_positions", "sliding_window", "local_layers", "rope_scaling")
SERVED = {
    "mistral-7b": (32_768, 4096, tuple(range(32)), False),
    "llama3.1-8b": (131_072, 0, (), True),
    "llama3.1-70b": (131_072, 0, (), True),
    "llama3.1-405b": (131_072, 0, (), True),
    "qwen2.5-7b": (131_072, 0, (), False),
    "qwen2.5-32b": (131_072, 0, (), False),
    "gemma2-9b": (8192, 4096, tuple(range(0, 42, 2)), False),
    "gemma2-27b": (8192, 4096, tuple(range(0, 46, 2)), False),
    "phi3.5-moe": (131_072, 131_072, tuple(range(32)), True),
}


@pytest.mark.parametrize("preset", sorted(SERVED))
def test_each_new_preset_serves_as_its_config_json_says(preset):
    row = presets.PRESETS[preset]
    assert tuple(row.hparams[name] for name in SERVING) == SERVED[preset]
    opened_hparams = presets.resolved_hparams(opened(PRESET_FILES[preset]).config)
    compared = SERVING[:3] if preset == "phi3.5-moe" else SERVING
    assert {name: opened_hparams[name] for name in compared} == {name: row.hparams[name] for name in compared}


def test_phimoe_counts_its_biases_and_layernorms_by_hand():
    d_model, kv_width, vocab, layers = 4096, 8 * 128, 32_064, 32
    biases = layers * (2 * d_model + 2 * kv_width) + vocab  # query and output, key and value; the head's
    plain = opened("phi-3.5-moe", attention_bias=False, lm_head_bias=False)  # its LayerNorms keep their biases
    assert count_params(plain.config).total_params == 41_873_153_344 - biases == 41_872_793_600
    with pytest.raises(ValueError, match=r"`head_bias` is true but `tied_embeddings` is true too"):
        opened("phi-3.5-moe", tie_word_embeddings=True)


def test_glm4_moe_is_deepseeks_layout_under_grouped_attention_with_its_buffer_apart():
    imported = opened("glm-4.5-air")
    report = count_params(imported.config)
    assert report.total_params == COUNTS["glm-4.5-air"] == 106_852_245_504
    # e_score_correction_bias: one value an expert, in each of the 45 blocks with experts; not a parameter
    assert report.total_other_values == 45 * 128
    assert "num_nextn_predict_layers is 1" in imported.message() and "the first 1 dense" in imported.message()
    # no head_dim: hidden_size // num_attention_heads, rounded down as transformers' class does
    bare = hf.from_hf_config({"model_type": "glm4_moe"})
    assert presets.resolved_hparams(bare.config)["head_dim"] == 4096 // 96 == 42
    assert count_params(bare.config).total_params == DEFAULTS["glm4_moe"]


def test_gpt_oss_counts_sinks_and_expert_biases_unquantized_with_alternating_windows():
    imported = opened("gpt-oss-20b")
    report = count_params(imported.config)
    assert report.total_params == COUNTS["gpt-oss-20b"] == 20_914_757_184
    layers, heads, experts, width, ffn = 24, 64, 32, 2880, 2880
    sinks = layers * heads
    expert_biases = layers * (experts * (2 * ffn + width) + experts)  # gate and up, down; the router's
    config = imported.config
    changed = dict(config.overrides) | {"attention_sinks": False, "expert_biases": False}
    plain = dataclasses.replace(config, overrides=tuple(changed.items()))
    assert count_params(plain).total_params == 20_914_757_184 - sinks - expert_biases
    assert "counted unquantized" in imported.message()
    served = presets.resolved_hparams(imported.config)
    assert (served["sliding_window"], served["local_layers"]) == (128, tuple(range(0, 24, 2)))


def test_dbrx_reads_its_nested_sizes_and_says_where_they_came_from():
    imported = opened("dbrx-base")
    report = count_params(imported.config)
    assert report.total_params == COUNTS["dbrx-base"] == 131_596_523_520
    hparams = presets.resolved_hparams(imported.config)
    assert (hparams["num_kv_heads"], hparams["num_experts"], hparams["experts_per_token"]) == (8, 16, 4)
    assert hparams["norm"] == "layernorm_no_bias" and hparams["max_positions"] == 32_768
    with pytest.raises(TypeError, match=r"`ffn_config` must be a JSON object of sizes"):
        opened("dbrx-base", ffn_config=[16])
    with pytest.raises(ValueError, match=r"`experts_per_token` \(17\) must be at most.*ffn_config.moe_top_k"):
        opened("dbrx-base", ffn_config={"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 17})
