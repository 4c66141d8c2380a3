"""Write the Hugging Face config.json fixtures of tests/test_hf.py, with transformers' own counts.

Run with an interpreter that has torch, transformers and accelerate (bench/requirements.txt):
    /tmp/hfvenv/bin/python bench/hf_import.py

Each model's published configuration (written out here and in hf_import_models.json: the Hub is
not reachable) is saved as transformers saves it (``config.to_json_string()``, every field a real
config.json has), and the model class is built under ``accelerate.init_empty_weights`` and counted
with ``num_parameters()`` after ``tie_weights()``. The files go to ``tests/data/hf/``, the counts to
``tests/data/hf/counts.json``; ``tests/test_hf.py`` opens every file with ``dcsim.hf`` and requires
dcsim's count to equal transformers'. Prints a Markdown table; bench/README.md records a run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from accelerate import init_empty_weights
from hf_decoders import decoder_sizes
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForSeq2SeqLM,
    AutoModelForSpeechSeq2Seq,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MixtralConfig,
    MixtralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    ViTForImageClassification,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "hf"


def published(cls, config_class, **fields):
    """The class to build and its configuration as the Hub's config.json has it (``architectures``
    names the class)."""
    return cls, config_class(architectures=[cls.__name__], **fields)


def published_models(path: Path):
    """The published configurations in ``path`` (hf_import_models.json), by the file name written:
    each row names its transformers model class and configuration class, and the fields to set."""
    models = {}
    for name, row in json.loads(path.read_text()).items():
        if set(row) != {"class", "config", "fields"}:
            raise ValueError(f"{path.name}: {name!r} must have class, config and fields, got {sorted(row)}")
        models[name] = published(
            getattr(transformers, row["class"]), getattr(transformers, row["config"]), **row["fields"]
        )
    return models


# Published configurations (the models' config.json on the Hub), by the file name written; issue 16
# added Mixture-of-Experts, latent attention, Gemma 2 and 3, Qwen3, Phi-3 and T5.
MODELS = published_models(Path(__file__).resolve().parent / "hf_import_models.json")


# Issue 30: the model types that were refused. Each published configuration as the Hub's config.json
# has it (model_type, then the fields that differ from the class's defaults), by the file name written.
HUB_TYPES = {
    "olmo-7b": ("olmo", {"max_position_embeddings": 2048}),
    "olmo-2-7b": ("olmo2", {"vocab_size": 100352, "max_position_embeddings": 4096, "rope_theta": 500000}),
    "granite-3.0-2b": (
        "granite",
        {**decoder_sizes(49155, 2048, 40, 32, 8, 8192, 4096), "tie_word_embeddings": True}
        | {"embedding_multiplier": 12.0, "logits_scaling": 8.0, "residual_multiplier": 0.22},
    ),
    "command-r-v01": ("cohere", {"max_position_embeddings": 8192, "logit_scale": 0.0625}),
    "command-r7b": ("cohere2", {**decoder_sizes(256000, 4096, 32, 32, 8, 14336, 8192), "sliding_window": 4096}),
    "stablelm-2-1.6b": ("stablelm", {**decoder_sizes(100352, 2048, 24, 32, 32, 5632, 4096), "use_qkv_bias": True}),
    "nemotron-mini-4b": ("nemotron", {**decoder_sizes(256000, 3072, 32, 24, 8, 9216, 4096), "head_dim": 128}),
    "starcoder2-3b": ("starcoder2", {**decoder_sizes(49152, 3072, 30, 24, 2, 12288, 16384), "sliding_window": 4096}),
    "glm-4-9b": ("glm", decoder_sizes(151552, 4096, 40, 32, 2, 13696, 131072)),
    "glm-4-9b-0414": ("glm4", decoder_sizes(151552, 4096, 40, 32, 2, 13696, 32768)),
    "starcoderbase-1b": (
        "gpt_bigcode",
        {"vocab_size": 49152, "n_embd": 2048, "n_layer": 24, "n_head": 16, "n_inner": 8192, "n_positions": 8192},
    ),
    "opt-125m": ("opt", {"max_position_embeddings": 2048}),
    "gpt-j-6b": ("gptj", {}),
    "falcon-7b": ("falcon", {}),
    "falcon-40b": (
        "falcon",
        {"hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128, "num_kv_heads": 8}
        | {"new_decoder_architecture": True, "ffn_hidden_size": None},
    ),
    "bloom-560m": ("bloom", {"hidden_size": 1024, "n_layer": 24, "n_head": 16}),
    "mpt-7b": ("mpt", {"d_model": 4096, "n_heads": 32, "n_layers": 32, "vocab_size": 50432}),
    "phi-2": (
        "phi",
        {"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32, "partial_rotary_factor": 0.4},
    ),
    "roberta-base": ("roberta", {"max_position_embeddings": 514, "type_vocab_size": 1}),
    "xlm-roberta-base": ("xlm-roberta", {"vocab_size": 250002, "max_position_embeddings": 514, "type_vocab_size": 1}),
}
# Issue 30: the encoder-decoders (dcsim/model/zoo/encdec.py), each Hub file's sizes. BART's files name
# BartModel, whose count is the same (the head is tied and final_logits_bias a buffer).
ENCDEC_SIZES = ("encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads")
ENCDEC_SIZES += ("encoder_ffn_dim", "decoder_ffn_dim")


def encdec_sizes(d_model, layers, heads, ffn):
    return {"d_model": d_model} | dict(zip(ENCDEC_SIZES, (layers, layers, heads, heads, ffn, ffn), strict=True))


ENCDEC_TYPES = {
    "bart-base": ("bart", encdec_sizes(768, 6, 12, 3072) | {"add_final_layer_norm": False, "normalize_before": False}),
    "bart-large": (
        "bart",
        encdec_sizes(1024, 12, 16, 4096) | {"add_final_layer_norm": False, "normalize_before": False},
    ),
    "whisper-tiny": ("whisper", encdec_sizes(384, 4, 6, 1536) | {"max_source_positions": 1500, "num_mel_bins": 80}),
    "whisper-base": ("whisper", encdec_sizes(512, 6, 8, 2048) | {"max_source_positions": 1500, "num_mel_bins": 80}),
    "whisper-large-v3": (
        "whisper",
        encdec_sizes(1280, 32, 20, 5120) | {"vocab_size": 51866, "num_mel_bins": 128, "max_target_positions": 448},
    ),
}
# Issue 30, item 8: the presets teams name most (dcsim/model/presets.py), each model's published
# config.json. Llama 3.1's rope_scaling is its published llama3 scaling. Phi-3.5-MoE's longrope
# short_factor and long_factor (64 numbers each, which change no count) are left out, and with them
# its rope_scaling: the preset says rope_scaling true from the published file.
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA31_ROPE |= {"original_max_position_embeddings": 8192}
LLAMA31 = {"rope_theta": 500000.0, "rope_scaling": LLAMA31_ROPE, "tie_word_embeddings": False}
PRESET_MODELS = {
    "llama-3.1-8b": ("llama", decoder_sizes(128256, 4096, 32, 32, 8, 14336, 131072) | LLAMA31),
    "llama-3.1-70b": ("llama", decoder_sizes(128256, 8192, 80, 64, 8, 28672, 131072) | LLAMA31),
    "llama-3.1-405b": ("llama", decoder_sizes(128256, 16384, 126, 128, 8, 53248, 131072) | LLAMA31),
    "qwen2.5-32b": (
        "qwen2",
        decoder_sizes(152064, 5120, 64, 40, 8, 27648, 131072) | {"rope_theta": 1000000.0, "tie_word_embeddings": False},
    ),
    "gemma-2-9b": (
        "gemma2",
        decoder_sizes(256000, 3584, 42, 16, 8, 14336, 8192) | {"head_dim": 256, "sliding_window": 4096},
    ),
    "gemma-2-27b": (
        "gemma2",
        decoder_sizes(256000, 4608, 46, 32, 16, 36864, 8192)
        | {"head_dim": 128, "sliding_window": 4096, "query_pre_attn_scalar": 144},
    ),
    "phi-3.5-moe": (
        "phimoe",
        decoder_sizes(32064, 4096, 32, 32, 8, 6400, 131072)
        | {"num_local_experts": 16, "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True}
        | {"original_max_position_embeddings": 4096, "sliding_window": 131072, "tie_word_embeddings": False},
    ),
}
# Issue 30, item 2: Mixture-of-Experts types as table entries of the moe family.
GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "rope_theta": 150000}
GPT_OSS_ROPE |= {"original_max_position_embeddings": 4096, "truncate": False}
GPT_OSS_MXFP4 = {"quant_method": "mxfp4"}
GPT_OSS_MXFP4 |= {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]
}
GRANITE_MULTIPLIERS = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.015625}
MOE_TYPES = {
    "olmoe-1b-7b-0924": (
        "olmoe",
        decoder_sizes(50304, 2048, 16, 16, 16, 1024, 4096) | {"num_experts": 64, "num_experts_per_tok": 8},
    ),
    **{
        f"granite-3.0-{size}": (
            "granitemoe",
            decoder_sizes(49155, hidden, layers, heads, 8, 512, 4096)
            | {"num_local_experts": experts, "num_experts_per_tok": 8, "tie_word_embeddings": True}
            | {"logits_scaling": 6.0}
            | GRANITE_MULTIPLIERS,
        )
        for size, hidden, layers, heads, experts in (("1b-a400m", 1024, 24, 16, 32), ("3b-a800m", 1536, 32, 24, 40))
    },
    # GLM-4.5-Air and GLM-4.5: sizes, expert width and count, leading dense blocks, QK norm.
    **{
        name: (
            "glm4_moe",
            decoder_sizes(151552, hidden, layers, 96, 8, ffn, 131072)
            | {"head_dim": 128, "moe_intermediate_size": expert_ffn, "n_routed_experts": experts, "n_shared_experts": 1}
            | {"num_experts_per_tok": 8, "first_k_dense_replace": dense, "attention_bias": True, "use_qk_norm": qk_norm}
            | {"partial_rotary_factor": 0.5, "num_nextn_predict_layers": 1, "rope_theta": 1000000},
        )
        for name, hidden, layers, ffn, expert_ffn, experts, dense, qk_norm in (
            ("glm-4.5-air", 4096, 46, 10944, 1408, 128, 1, False),
            ("glm-4.5", 5120, 92, 12288, 1536, 160, 3, True),
        )
    },
    **{
        f"gpt-oss-{size}": (
            "gpt_oss",
            decoder_sizes(201088, 2880, layers, 64, 8, 2880, 131072)
            | {"head_dim": 64, "num_local_experts": experts, "num_experts_per_tok": 4, "sliding_window": 128}
            | {"layer_types": ["sliding_attention", "full_attention"] * (layers // 2), "attention_bias": True}
            | {"rope_scaling": GPT_OSS_ROPE, "swiglu_limit": 7.0, "quantization_config": GPT_OSS_MXFP4},
        )
        for size, layers, experts in (("20b", 24, 32), ("120b", 36, 128))
    },
    "dbrx-base": (
        "dbrx",
        {"d_model": 6144, "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352}
        | {"attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000}}
        | {"ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}},
    ),
    # Not a published file: Granite 3.0 1B-A400M's sizes with a shared expert 1,024 wide, so the
    # shared-expert form is checked at a width other than its class default of 0.
    "granitemoeshared-1b-shared-1024": (
        "granitemoeshared",
        decoder_sizes(49155, 1024, 24, 16, 8, 512, 4096)
        | {"num_local_experts": 32, "num_experts_per_tok": 8, "tie_word_embeddings": True}
        | {"shared_intermediate_size": 1024},
    ),
}
# The state-space models (issue 30), by the file name written.
SSM_TYPES = {
    # state-spaces/mamba-130m-hf and mamba-2.8b-hf (time_step_rank "auto": ceil(hidden / 16)).
    "mamba-130m": ("mamba", {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 24}),
    "mamba-2.8b": ("mamba", {"vocab_size": 50280, "hidden_size": 2560, "num_hidden_layers": 64}),
    # ai21labs/Jamba-v0.1 (its config.json: JambaConfig's defaults, mamba_dt_rank written out as 256).
    "jamba-v0.1": ("jamba", {"mamba_dt_rank": 256}),
    # Not a published file: Jamba-v0.1's layout at small widths and other periods, a Mamba block with
    # experts and one without, an attention block of each kind, biases on the projections only.
    "jamba-v0.1-reduced": (
        "jamba",
        decoder_sizes(65536, 1024, 12, 8, 2, 2048, 262144)
        | {"num_experts": 4, "attn_layer_period": 3, "attn_layer_offset": 1}
        | {"mamba_d_state": 8, "mamba_d_conv": 3, "mamba_proj_bias": True, "mamba_conv_bias": False},
    ),
}
# Issue 30: the vision-language models, each published config.json with its nested text_config and
# vision_config as the Hub has them (Qwen2.5-VL's text fields at the top level, as its Hub file has them).
LLAVA_TEXT = {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
LLAVA_TEXT |= {"max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "vocab_size": 32064}
LLAVA_CLIP = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096, "image_size": 336}
LLAVA_CLIP |= {"num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768}
GEMMA3_TEXT = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34}
GEMMA3_TEXT |= {"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}
GEMMA3_SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304}
GEMMA3_SIGLIP |= {"image_size": 896, "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14}
MISTRAL3_TEXT = {"model_type": "mistral", **decoder_sizes(131072, 5120, 40, 32, 8, 32768, 131072), "head_dim": 128}
MISTRAL3_TEXT |= {"rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": None}
MISTRAL3_PIXTRAL = {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096, "image_size": 1540}
MISTRAL3_PIXTRAL |= {"num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14, "head_dim": 64}
MISTRAL3_PIXTRAL |= {"hidden_act": "silu", "rope_theta": 10000.0}
QWEN25_VL_VISION = {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16}
QWEN25_VL_VISION |= {"in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2}
QWEN25_VL_VISION |= {"spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]}
QWEN25_VL_VISION |= {"tokens_per_second": 2, "temporal_patch_size": 2}
VLM_TYPES = {
    "llava-1.5-7b-hf": (
        "llava",
        {"text_config": LLAVA_TEXT, "vision_config": LLAVA_CLIP, "tie_word_embeddings": False}
        | {"vision_feature_layer": -2, "vision_feature_select_strategy": "default", "image_token_index": 32000},
    ),
    "gemma-3-4b-it": (
        "gemma3",
        {"text_config": GEMMA3_TEXT, "vision_config": GEMMA3_SIGLIP | {"vision_use_head": False}}
        | {"mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000},
    ),
    "mistral-small-3.1-24b-base-2503": (
        "mistral3",
        {"text_config": MISTRAL3_TEXT, "vision_config": MISTRAL3_PIXTRAL, "spatial_merge_size": 2}
        | {"multimodal_projector_bias": False, "vision_feature_layer": -1, "image_token_index": 10},
    ),
    "qwen2.5-vl-7b-instruct": (
        "qwen2_5_vl",
        decoder_sizes(152064, 3584, 28, 28, 4, 18944, 128000)
        | {"max_window_layers": 28, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768}
        | {"tie_word_embeddings": False, "use_sliding_window": False, "vision_config": QWEN25_VL_VISION}
        | {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
    ),
}
VLM_MODEL_TYPES = frozenset(model_type for model_type, _ in VLM_TYPES.values())
# Mistral Small 3.1's Hub file has no top-level tie_word_embeddings, so transformers ties its head
# (Mistral3Config's default) though text_config says untied; the file is written without it, as published.
UNTOLD_TIE = ("mistral-small-3.1-24b-base-2503",)
# Issue 30: Llama 4, whose Hub files are the multimodal Llama4ForConditionalGeneration (a text_config
# and a vision_config), as meta-llama/Llama-4-Scout-17B-16E and meta-llama/Llama-4-Maverick-17B-128E
# publish them; llama4_text (Llama4ForCausalLM) is Scout's text_config alone. The Scout language model
# has experts in every block and a NoPE block every fourth; Maverick alternates dense and MoE blocks.
LLAMA4_VISION = {"hidden_size": 1408, "image_size": 336, "intermediate_size": 5632, "num_attention_heads": 16}
LLAMA4_VISION |= {"num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096}
LLAMA4_VISION |= {"projector_output_dim": 4096, "vision_output_dim": 4096, "vision_feature_layer": -1}
LLAMA4_VISION |= {"multi_modal_projector_bias": False, "rope_parameters": {"rope_type": "default", "rope_theta": 10000}}
LLAMA4_TEXT = {"vocab_size": 202048, "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40}
LLAMA4_TEXT |= {"num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384}
LLAMA4_TEXT |= {"attention_chunk_size": 8192, "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)]}
LLAMA4_TEXT |= {"bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "pad_token_id": 200018}
LLAMA4_TEXT |= {"attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1, "num_experts_per_tok": 1}
LLAMA4_SCOUT = LLAMA4_TEXT | {"num_local_experts": 16, "interleave_moe_layer_step": 1, "use_qk_norm": True}
LLAMA4_SCOUT |= {"max_position_embeddings": 10485760, "moe_layers": list(range(48))}
LLAMA4_SCOUT |= {
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0, "low_freq_factor": 1.0}
    | {"high_freq_factor": 1.0, "original_max_position_embeddings": 8192}
}
LLAMA4_MAVERICK = LLAMA4_TEXT | {"num_local_experts": 128, "interleave_moe_layer_step": 2, "use_qk_norm": False}
LLAMA4_MAVERICK |= {"max_position_embeddings": 1048576, "moe_layers": list(range(1, 48, 2))}
LLAMA4_MAVERICK |= {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
LLAMA4_TOKENS = {"boi_token_index": 200080, "eoi_token_index": 200081, "image_token_index": 200092}
LLAMA4_MODELS = {
    "llama-4-scout-17b-16e": ("llama4", {"text_config": LLAMA4_SCOUT, "vision_config": LLAMA4_VISION} | LLAMA4_TOKENS),
    "llama-4-maverick-17b-128e": (
        "llama4",
        {"text_config": LLAMA4_MAVERICK, "vision_config": LLAMA4_VISION} | LLAMA4_TOKENS,
    ),
    "llama-4-scout-17b-16e-text": ("llama4_text", LLAMA4_SCOUT),
}
LLAMA4_BARE = ("llama4", "llama4_text")
# Every model_type dcsim reads, at its class's defaults (tests/test_hf_modern.py opens each bare), but
# nemotron: transformers 5.24.0 cannot build NemotronConfig() (num_key_value_heads None reaches a //),
# and dbrx: nor DbrxConfig() (its default attn_config has no rope_theta for the rotary embedding).
BARE_TYPES = [
    "gpt2",
    "gpt_neox",
    "llama",
    "mistral",
    "gemma",
    "qwen2",
    "granite",
    "stablelm",
    "starcoder2",
    "glm",
    "glm4",
    "gpt_bigcode",
    "opt",
    "olmo",
    "olmo2",
    "cohere",
    "cohere2",
    "gptj",
    "falcon",
    "bloom",
    "mpt",
    "phi",
    "phimoe",
    "olmoe",
    "granitemoe",
    "granitemoeshared",
    "mamba",
    "jamba",
    "glm4_moe",
    "gpt_oss",
    "bert",
    "roberta",
    "xlm-roberta",
    "vit",
    "bart",
    "whisper",
    *sorted(VLM_MODEL_TYPES),
]
ENCODERS = ("bert", "roberta", "xlm-roberta")
SEQ2SEQ = {"bart": AutoModelForSeq2SeqLM, "whisper": AutoModelForSpeechSeq2Seq}


def hub_model(model_type, fields):
    """The class transformers builds for ``model_type`` (the base model for encoders, as dcsim counts
    them; ViT with its classifier) and its configuration."""
    config = AutoConfig.for_model(model_type, **fields)
    if model_type in ENCODERS:
        return AutoModel, config
    if model_type == "vit":
        return ViTForImageClassification, config
    if model_type in SEQ2SEQ:
        return SEQ2SEQ[model_type], config
    if model_type in VLM_MODEL_TYPES:
        return AutoModelForImageTextToText, config
    if model_type == "llama4":
        return transformers.Llama4ForConditionalGeneration, config
    return AutoModelForCausalLM, config


def build(cls, config):
    with torch.device("meta"), init_empty_weights():
        auto = cls in (AutoModel, AutoModelForCausalLM, AutoModelForImageTextToText, *SEQ2SEQ.values())
        model = cls.from_config(config) if auto else cls(config)
    model.tie_weights()
    return model


UNTIED_T5 = ("flan-t5-base",)
BARE = (
    (MixtralForCausalLM, MixtralConfig),
    (Qwen2MoeForCausalLM, Qwen2MoeConfig),
    (Qwen3ForCausalLM, Qwen3Config),
    (Qwen3MoeForCausalLM, Qwen3MoeConfig),
    (DeepseekV2ForCausalLM, DeepseekV2Config),
    (DeepseekV3ForCausalLM, DeepseekV3Config),
    (Gemma2ForCausalLM, Gemma2Config),
    (Gemma3ForCausalLM, Gemma3TextConfig),
    (Phi3ForCausalLM, Phi3Config),
    (T5ForConditionalGeneration, T5Config),
)


def hub_counts(models) -> dict[str, int]:
    """Write each ``(model_type, fields)`` of ``models`` as transformers saves it; return its counts."""
    counts = {}
    for name, (model_type, fields) in models.items():
        cls, config = hub_model(model_type, fields)
        config.architectures = None
        model = build(cls, config)
        config.architectures = [type(model).__name__]
        counts[name] = model.num_parameters()
        text = config.to_json_string()
        if name in UNTOLD_TIE:
            saved = json.loads(text)
            del saved["tie_word_embeddings"]
            text = json.dumps(saved, indent=2, sort_keys=True) + "\n"
        (OUT / f"{name}.json").write_text(text)
        print(f"| {name} | {model_type} | {type(model).__name__} | {counts[name]:,} | {len(text.encode()):,} |")
    return counts


def only_llama4() -> None:
    """``--llama4``: the Llama 4 files and counts alone, merged into counts.json and defaults.json
    where a whole run puts them (building everything else again takes minutes)."""
    counts = json.loads((OUT / "counts.json").read_text()) | hub_counts(LLAMA4_MODELS)
    (OUT / "counts.json").write_text(json.dumps(counts, indent=2) + "\n")
    defaults = json.loads((OUT / "defaults.json").read_text())
    defaults |= {model_type: build(*hub_model(model_type, {})).num_parameters() for model_type in LLAMA4_BARE}
    (OUT / "defaults.json").write_text(json.dumps(defaults, indent=2) + "\n")
    print("\nbare model_type (class defaults): " + ", ".join(f"{key} {defaults[key]:,}" for key in LLAMA4_BARE))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    counts = {}
    print(f"transformers {transformers.__version__}\n")
    print("| config.json | model_type | transformers class | num_parameters() | file bytes |")
    print("|---|---|---|---|---|")
    for name, (cls, config) in MODELS.items():
        # The meta device too: transformers 5 allocates stacked experts with torch.empty, which
        # init_empty_weights (a hook on registering parameters) sees only after the allocation.
        with torch.device("meta"), init_empty_weights():
            model = cls(config)
        model.tie_weights()
        counts[name] = model.num_parameters()
        text = config.to_json_string()
        if name in UNTIED_T5:
            # transformers 5 always ties T5's lm_head to the shared table (configuration_t5.py: "we tie
            # weights always and force it to be True"), but the file says untied and the published
            # checkpoint stores its own lm_head.weight: dcsim counts that head, vocab x d_model more.
            text = text.replace('"tie_word_embeddings": true', '"tie_word_embeddings": false')
            counts[name] += config.vocab_size * config.d_model
        (OUT / f"{name}.json").write_text(text)
        print(f"| {name} | {config.model_type} | {cls.__name__} | {counts[name]:,} | {len(text.encode()):,} |")
    counts |= hub_counts(HUB_TYPES | PRESET_MODELS | MOE_TYPES | ENCDEC_TYPES | SSM_TYPES | VLM_TYPES | LLAMA4_MODELS)
    (OUT / "counts.json").write_text(json.dumps(counts, indent=2) + "\n")
    # A bare {"model_type": ...}: every field at the configuration class's default, which is what
    # dcsim must take for an absent field (tests/test_hf_modern.py opens each one).
    defaults = {}
    for cls, config_class in BARE:
        config = config_class()
        with torch.device("meta"), init_empty_weights():
            model = cls(config)
        model.tie_weights()
        defaults[config.model_type] = model.num_parameters()
        if config.model_type == "t5" and not config.scale_decoder_outputs:  # see UNTIED_T5
            defaults[config.model_type] += config.vocab_size * config.d_model
    for model_type in BARE_TYPES + list(LLAMA4_BARE):
        defaults[model_type] = build(*hub_model(model_type, {})).num_parameters()
    (OUT / "defaults.json").write_text(json.dumps(defaults, indent=2) + "\n")
    print("\nbare model_type (class defaults): " + ", ".join(f"{key} {value:,}" for key, value in defaults.items()))


if __name__ == "__main__":
    only_llama4() if sys.argv[1:] == ["--llama4"] else main()
