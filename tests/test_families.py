"""The families of issue 16: Mixture-of-Experts (with grouped-query or latent attention), Gemma 2 and
3, Qwen3, Phi-3 and T5, as real Flax modules; counting them traces a few blocks and equals the full
init; the parameters a token uses; and the rules that tie their hyperparameters together."""

import pytest

from dcsim.model import breakdown, families, modules, presets, schemas
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_module, count_params

# Presets cut to a few blocks, so the full unrolled init stays quick, with the dense blocks placed to
# make several runs of each kind (DeepSeek: dense, MoE, dense, dense, MoE...).
FULL_INIT = {
    "deepseek-v3": {"num_layers": 7, "dense_layers": (0, 2, 3)},
    "deepseek-v2-lite": {"num_layers": 4},
    "qwen1.5-moe-a2.7b": {"num_layers": 5, "dense_layers": (1, 3)},
    "qwen3-30b-a3b": {"num_layers": 7, "dense_layers": (1, 3, 5)},  # alternating, as decoder_sparse_step 2
    "mixtral-8x7b": {"num_layers": 3},
    "t5-small": {"num_layers": 4, "num_decoder_layers": 3},
    "flan-t5-base": {"num_layers": 3, "num_decoder_layers": 1},
    "gemma3-1b": {"num_layers": 3},
    "gemma2-2b": {"num_layers": 3},
    "phi3-mini": {"num_layers": 3},
    "qwen3-8b": {"num_layers": 3},
}


@pytest.mark.parametrize("preset", list(FULL_INIT), ids=list(FULL_INIT))
def test_counting_traces_a_few_blocks_and_equals_the_full_init(preset):
    # At most two blocks of each kind are traced, wherever they sit; every other block's rows are
    # its kind's, renamed, and must be exactly what initialising every block gives.
    config = ModelConfig(preset=preset, overrides=FULL_INIT[preset])
    module, inputs = modules.build(config)
    assert count_params(config) == count_module(module, *inputs)


def _shapes(preset: str) -> dict[str, tuple[int, ...]]:
    return {row.path: row.shape for row in count_params(ModelConfig(preset=preset)).arrays}


def test_an_alternating_pattern_traces_four_blocks_whatever_the_depth():
    config = ModelConfig(preset="qwen3-30b-a3b", overrides={"num_layers": 256, "dense_layers": tuple(range(0, 256, 2))})
    hparams, runs = families.traced_hparams("moe", presets.resolved_hparams(config))
    assert hparams["built_layers"] == (0, 1, 2, 3)
    assert [len(run.members) for run in runs] == [128, 128]


def test_deepseek_v3_latent_attention_and_experts_by_hand():
    shapes = _shapes("deepseek-v3")
    # Latent attention: d_model 7,168, 128 heads, q rank 1,536, kv rank 512, nope 128, rope 64, v 128.
    assert shapes["block_3/attn/query_down/kernel"] == (7168, 1536)
    assert shapes["block_3/attn/query_norm/scale"] == (1536,)
    assert shapes["block_3/attn/query_up/kernel"] == (1536, 128, 128 + 64)
    assert shapes["block_3/attn/kv_down/kernel"] == (7168, 512 + 64)
    assert shapes["block_3/attn/kv_norm/scale"] == (512,)
    assert shapes["block_3/attn/kv_up/kernel"] == (512, 128, 128 + 128)
    assert shapes["block_3/attn/out/kernel"] == (128, 128, 7168)
    # Blocks 0-2 are dense (first_k_dense_replace 3); from block 3 on, 256 routed experts and a shared one.
    assert shapes["block_2/mlp/gate/kernel"] == (7168, 18_432)
    assert "block_2/moe/router/kernel" not in shapes
    assert shapes["block_60/moe/router/kernel"] == (7168, 256)
    assert shapes["block_60/moe/experts/gate"] == (256, 7168, 2048)
    assert shapes["block_60/moe/experts/down"] == (256, 2048, 7168)
    assert shapes["block_60/moe/shared/up/kernel"] == (7168, 2048)
    assert "block_61/attn_norm/scale" not in shapes


def test_deepseek_v3_router_bias_is_a_buffer_not_a_parameter():
    report = count_params(ModelConfig(preset="deepseek-v3"))
    assert {row.collection for row in report.other} == {"buffers"}
    assert report.total_other_values == 58 * 256  # one per expert in each of the 58 MoE blocks
    assert report.total_params == 671_026_404_352


def test_qwen_moe_has_a_gated_shared_expert_and_query_key_value_biases():
    shapes = _shapes("qwen1.5-moe-a2.7b")
    assert shapes["block_0/moe/experts/up"] == (60, 2048, 1408)
    assert shapes["block_0/moe/shared/gate/kernel"] == (2048, 5632)
    assert shapes["block_0/moe/shared_gate/kernel"] == (2048, 1)
    assert shapes["block_0/attn/query/bias"] == (16, 128)
    assert "block_0/attn/out/bias" not in shapes


def test_gemma_qwen3_and_phi3_blocks():
    gemma3 = _shapes("gemma3-1b")
    assert {path for path in gemma3 if path.startswith("block_0/") and "norm" in path} == {
        "block_0/attn_norm/scale",
        "block_0/attn_post_norm/scale",
        "block_0/mlp_norm/scale",
        "block_0/mlp_post_norm/scale",
        "block_0/attn/query_norm/scale",
        "block_0/attn/key_norm/scale",
    }
    assert gemma3["block_0/attn/key_norm/scale"] == (256,)  # over each head, head_dim wide
    assert "lm_head/kernel" not in gemma3  # tied
    phi3 = _shapes("phi3-mini")
    assert phi3["block_0/attn/qkv/kernel"] == (3072, 32 + 2 * 32, 96)
    assert phi3["block_0/mlp/gate_up/kernel"] == (3072, 2 * 8192)
    assert "block_0/attn/query/kernel" not in phi3


def test_t5_relative_bias_in_each_stacks_first_block_and_a_shared_table():
    shapes = _shapes("t5-small")
    bias = sorted(path for path in shapes if "relative_bias" in path)
    assert bias == ["decoder/block_0/relative_bias/embedding", "encoder/block_0/relative_bias/embedding"]
    assert shapes["encoder/block_0/relative_bias/embedding"] == (32, 8)
    assert shapes["decoder/block_5/cross_attn/key/kernel"] == (512, 8, 64)
    assert "encoder/block_5/cross_attn/key/kernel" not in shapes
    assert shapes["embed/token/embedding"] == (32_128, 512) and "lm_head/kernel" not in shapes
    flan = _shapes("flan-t5-base")
    assert flan["lm_head/kernel"] == (768, 32_128)  # untied
    assert flan["encoder/block_0/mlp/gate/kernel"] == (768, 2048)  # gated-GELU: wi_0, wi_1, wo


def test_t5_stacks_group_as_blocks_and_norms():
    frame = breakdown.breakdown_frame(count_params(ModelConfig(preset="t5-small")))
    groups = dict(zip(frame["group"], frame["num_params"], strict=True))
    assert groups["embeddings"] == 32_128 * 512
    assert groups["norms"] == 2 * 512  # the two stacks' final norms
    assert set(groups) == {"embeddings", "blocks", "norms"}


@pytest.mark.parametrize(
    ("preset", "active"),
    [
        ("mixtral-8x7b", 12_879_925_248),  # Mistral's "12.9B active"
        ("qwen1.5-moe-a2.7b", 2_689_173_504),  # "A2.7B"
        ("qwen3-30b-a3b", 3_353_032_704),  # "A3B"
        ("deepseek-v3", 37_552_282_624),  # "37B activated"
    ],
)
def test_active_parameters_per_token(preset, active):
    config = ModelConfig(preset=preset)
    report = count_params(config)
    hparams = presets.resolved_hparams(config)
    experts, top_k = hparams["num_experts"], hparams["experts_per_token"]
    d_model, ffn = hparams["d_model"], hparams["expert_ffn_dim"]
    moe_blocks = hparams["num_layers"] - len(hparams["dense_layers"])
    # By hand: every routed expert a token does not use is 3 x d_model x expert_ffn_dim.
    assert report.total_params - (experts - top_k) * 3 * d_model * ffn * moe_blocks == active
    assert breakdown.active_params(config, report) == active


def test_a_model_without_experts_has_no_active_count():
    config = ModelConfig(preset="llama2-7b")
    assert breakdown.active_params(config, count_params(config)) is None
    assert "experts_per_token" in breakdown.ACTIVE_DEFINITION and "stored" in breakdown.ACTIVE_DEFINITION


@pytest.mark.parametrize(
    ("preset", "overrides", "message"),
    [
        ("mixtral-8x7b", {"num_experts": 0}, r"`num_experts` must be an integer from 1 to 1,024, got 0"),
        (
            "mixtral-8x7b",
            {"experts_per_token": 9},
            r"`experts_per_token` \(9\) must be at most `num_experts` \(8\).*allowed: 1 to 8",
        ),
        ("deepseek-v3", {"kv_lora_rank": 0}, r"`kv_lora_rank` must be an integer from 1 to"),
        ("deepseek-v3", {"q_lora_rank": -1}, r"`q_lora_rank` must be an integer from 0 to"),
        (
            "qwen1.5-moe-a2.7b",
            {"num_heads": 3, "num_kv_heads": 3},
            r"`num_heads` \(3\) must divide `d_model` \(2,048\).*\(or set head_dim",
        ),
        ("deepseek-v3", {"num_layers": 2}, r"`dense_layers` names block 2, but the model has 2 blocks"),
        ("deepseek-v3", {"dense_layers": (2, 1)}, r"`dense_layers` must list each block once, in increasing order"),
        ("t5-small", {"head_dim": 0}, r"`head_dim` must be an integer from 1 to 4,096, got 0"),
    ],
)
def test_bad_hyperparameters_name_the_field_and_the_rule(preset, overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(preset=preset, overrides=overrides)


def test_latent_attention_heads_need_not_divide_d_model():
    config = ModelConfig(preset="deepseek-v2-lite", overrides={"num_heads": 3, "num_layers": 2})
    assert count_params(config).total_params > 0


def test_an_empty_dense_layer_list_is_written_as_nothing():
    spec = schemas.hparam("moe", "dense_layers", "moe")
    assert spec.parse("") == () and spec.parse("0,1,2") == (0, 1, 2)
    assert "a list of 0 to 256 integers" in spec.rule()


def test_forms_show_only_what_changes_the_count():
    gqa = schemas.applicable("moe", presets.PRESETS["mixtral-8x7b"].hparams)
    assert "kv_lora_rank" not in gqa and "ffn_dim" not in gqa and "shared_expert_gate" not in gqa
    mla = schemas.applicable("moe", presets.PRESETS["deepseek-v3"].hparams)
    assert {"kv_lora_rank", "q_lora_rank", "ffn_dim", "dense_layers"} <= set(mla) and "num_kv_heads" not in mla
