"""Every Hugging Face ``model_type`` dcsim opens, as data: one ``ModelType`` an entry.

An entry, in the language of ``dcsim.hf.language``, says which dcsim family builds the model, which
config.json fields become which of the family's hyperparameters (each with the default of
transformers' own configuration class for that type, so a bare ``{"model_type": "llama"}`` is
``LlamaConfig()``), the hyperparameters the model class hard-codes (its quirks), the fields it
refuses by name because no family builds them, and the few readings a table cannot say (``quirks``:
names of functions in ``dcsim.hf.readers``). Each is written with its family's constructor
(``dcsim.hf.kinds``); the vision-language entries are in ``dcsim.hf.vision_types``. Adding a
llama-like type is a few lines here and a test with its published count.

Pure data, no JAX: ``dcsim.hf`` refuses an unknown type from this table before any model is built,
and ``tests/test_hf.py`` checks docs/presets.md's table of model types against ``dcsim.hf.markdown``'s,
written from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.hf.kinds import (
    LEARNED_GPT,
    ONE_BIAS,
    ROTARY,
    bert,
    decoder,
    encdec_sizes,
    experts,
    headless,
    learned_gpt,
    llama,
    mixer_biases,
    moe,
    named_sizes,
    no_projection_biases,
    one_heads_field,
    sizes_at,
    variant,
    widths,
)
from dcsim.hf.language import READ_NO_HEAD_DIM, Flag, ModelType, NoBias, Only, Same, Size
from dcsim.hf.vision_types import CHANNELS, TOWERS, VISION_LANGUAGE

_BERT_SIZES = (
    Size("vocab_size", "vocab_size", 30_522),
    *widths(768, 12, 12, 3072),
    Size("max_positions", "max_position_embeddings", 512),
    Size("type_vocab_size", "type_vocab_size", 2),
)
_BERT_COUNTED = "embeddings, encoder and pooler; task heads (masked LM, classifiers) are not counted"

# The encdec family's switches off (audio_bins is read: 0 unless the file has mel bins); BART and Whisper turn on
# their own.
_ENCDEC = {"position_offset": 0, "pre_norm": False, "embed_norm": False}
_ENCDEC |= {"logits_bias": False}
_MBART = (
    "transformers' BART class ignores it and builds post-norm blocks without final norms, so an mBART-style "
    "checkpoint's norms would not be counted"
)

_QWEN3_MOE = "dcsim's Qwen3-MoE attention has no biases"
_DEEPSEEK = "dcsim's DeepSeek blocks have no biases on their projections"

# The variant family's hyperparameters with every quirk off; an entry turns on its own.
_VARIANT: dict[str, Any] = {"position_embedding": "none", "norm": "layernorm", "residual": "sequential"}
_VARIANT |= dict.fromkeys(("attn_bias", "qkv_bias", "mlp_bias", "gated_mlp", "fused_qkv", "qk_norm"), False)
_VARIANT |= {"embed_norm": False, "head_bias": False}
_SWIGLU = _VARIANT | {"norm": "rmsnorm", "gated_mlp": True}
_QKV_ONLY = (
    "embeddings, blocks (biases on query, key and value only), final norm, {head}; rotary positions hold no parameters"
)

_ATTN_BIAS = Flag("attention_bias", False, ("attn_bias",))
_EVERY_BLOCK = {"dense_layers": ()}  # routed experts in every block, none dense
_ROBERTA_COUNTED = _BERT_COUNTED.replace("embeddings", "embeddings (the position table as long as the file says)")


_OLMO = variant(
    "OlmoForCausalLM",
    sizes_at(50_304, 4096, 32, 32, 11_008),
    "embeddings, blocks (LayerNorms without parameters), final norm (none either), {head}; rotary "
    "positions hold no parameters",
    flags=(_ATTN_BIAS,),
    fixed=_SWIGLU | {"norm": "no_params"},
)


MODEL_TYPES: Mapping[str, ModelType] = MappingProxyType(
    {
        "gpt2": learned_gpt("GPT2LMHeadModel", counted="embeddings, blocks, final norm, {head}"),
        "gpt_neox": decoder(
            "GPTNeoXForCausalLM",
            (
                *sizes_at(50_432, 6144, 44, 64, 24_576, positions=True)[:-1],
                Size("num_kv_heads", "num_attention_heads", 64),
            ),
            head_dim=READ_NO_HEAD_DIM,
            fixed=ROTARY | {"use_bias": True, "norm": "layernorm", "gated_mlp": False},
            rules=(Only("attention_bias", True, True, f"{ONE_BIAS}, and GPT-NeoX's MLP always has them"),),
        ),
        "llama": llama(
            "LlamaForCausalLM", sizes_at(32_000, 4096, 32, 32, 11_008, positions=True), quirks=("one_bias",)
        ),
        "mistral": llama(
            "MistralForCausalLM", sizes_at(32_000, 4096, 32, 32, 14_336, 8, positions=True), quirks=("one_bias",)
        ),
        "gemma": llama(
            "GemmaForCausalLM",
            sizes_at(256_000, 3072, 28, 16, 24_576, 16, positions=True),
            head_dim=256,
            tied=True,
            quirks=("one_bias",),
        ),
        "qwen2": llama(
            "Qwen2ForCausalLM",
            sizes_at(151_936, 4096, 32, 32, 22_016, 32, positions=True),
            fixed={"qkv_bias": True},
            counted=_QKV_ONLY,
        ),
        "qwen3": llama(
            "Qwen3ForCausalLM",
            sizes_at(151_936, 4096, 32, 32, 22_016, 32),
            head_dim=128,
            fixed={"qk_norm": True},
            rules=(no_projection_biases("Qwen3"),),
        ),
        **{  # Gemma 2's blocks, and Gemma 3's: the same with query and key norms
            model_type: llama(
                model_class,
                sizes_at(vocab, 2304, 26, 8, 9216, 4),
                head_dim=256,
                tied=True,
                fixed={"post_norms": True} | qk_norm,
                rules=(no_projection_biases("Gemma"),),
            )
            for model_type, model_class, vocab, qk_norm in (
                ("gemma2", "Gemma2ForCausalLM", 256_000, {}),
                ("gemma3_text", "Gemma3ForCausalLM", 262_208, {"qk_norm": True}),
            )
        },
        "phi3": llama("Phi3ForCausalLM", sizes_at(32_064, 3072, 32, 32, 8192), fixed={"fused_projections": True}),
        "mixtral": moe(
            "MixtralForCausalLM",
            (
                *sizes_at(32_000, 4096, 32, 32, 14_336, 8),
                *experts("num_local_experts", 8, 2, "intermediate_size", 14_336),
            ),
            "routed experts in every block",
            fixed=_EVERY_BLOCK,
        ),
        "qwen2_moe": moe(
            "Qwen2MoeForCausalLM",
            sizes_at(151_936, 2048, 24, 16, 5632, 16)
            + experts("num_experts", 60, 4, "moe_intermediate_size", 1408)
            + (Size("shared_ffn_dim", "shared_expert_intermediate_size", 5632),),
            "routed experts, a gated shared expert{qkv}",
            flags=(Flag("qkv_bias", True, ("qkv_bias",)),),
            fixed={"shared_expert_gate": True},
            quirks=("shared_expert_width", "qwen_dense_layers"),
        ),
        "qwen3_moe": moe(
            "Qwen3MoeForCausalLM",
            (*sizes_at(151_936, 2048, 24, 32, 6144, 4), *experts("num_experts", 128, 8, "moe_intermediate_size", 768)),
            "routed experts, query and key norms",
            fixed={"qk_norm": True},
            rules=(NoBias(("attention_bias",), _QWEN3_MOE),),
            quirks=("qwen_dense_layers",),
        ),
        "deepseek_v2": moe(
            "DeepseekV2ForCausalLM",
            sizes_at(102_400, 4096, 32, 32, 11_008, 32),
            "latent attention, routed and shared experts{dense}",
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla"},
            rules=(NoBias(("attention_bias", "mlp_bias"), _DEEPSEEK),),  # V2's MLPs read mlp_bias
            quirks=("deepseek_v2",),
        ),
        "deepseek_v3": moe(
            "DeepseekV3ForCausalLM",
            sizes_at(129_280, 7168, 61, 128, 18_432, 128),
            "latent attention, routed and shared experts{dense}; the router's score-correction bias is a buffer, "
            "not a parameter",
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla", "router_bias": True},
            rules=(NoBias(("attention_bias",), _DEEPSEEK),),  # V3's class ignores mlp_bias
            quirks=("deepseek_v3",),
        ),
        "glm4_moe": moe(
            "Glm4MoeForCausalLM",
            (
                *sizes_at(151_552, 4096, 46, 96, 10_944, 8),
                *experts("n_routed_experts", 128, 8, "moe_intermediate_size", 1408),
            ),
            "grouped-query attention, routed and shared experts{dense}; the router's score-correction bias is "
            "a buffer, not a parameter",
            flags=(Flag("attention_bias", False, ("qkv_bias",)), Flag("use_qk_norm", False, ("qk_norm",))),
            fixed={"router_bias": True},
            quirks=("glm4_moe",),
        ),
        "gpt_oss": moe(
            "GptOssForCausalLM",
            (
                *sizes_at(201_088, 2880, 36, 64, 2880, 8),
                *experts("num_local_experts", 128, 4, "intermediate_size", 2880),
            ),
            "attention with biases and a sink logit a head, routed experts and their router with biases",
            head_dim=64,
            flags=(Flag("attention_bias", True, ("attn_bias",)),),
            fixed=_EVERY_BLOCK | {"attention_sinks": True, "expert_biases": True},
        ),
        "dbrx": moe(
            "DbrxForCausalLM",
            (
                *one_heads_field(32_000, ("d_model", "n_layers", "n_heads"), 2048, 24, 16)[:4],  # kv: the dbrx quirk
                Size("max_positions", "max_seq_len", lenient=True),
            ),
            "fused query, key and value; LayerNorms without bias; routed experts in every block",
            head_dim=READ_NO_HEAD_DIM,
            fixed=_EVERY_BLOCK | {"norm": "layernorm_no_bias"},
            quirks=("dbrx",),
        ),
        "phimoe": moe(
            "PhimoeForCausalLM",
            (*sizes_at(32_064, 4096, 32, 32, 6400, 8), *experts("num_local_experts", 16, 2, "intermediate_size", 6400)),
            "LayerNorms with biases, routed experts in every block",
            flags=(_ATTN_BIAS, Flag("lm_head_bias", False, ("head_bias",))),
            fixed=_EVERY_BLOCK | {"norm": "layernorm"},
        ),
        "olmoe": moe(
            "OlmoeForCausalLM",
            (*sizes_at(50_304, 2048, 16, 16, 2048), *experts("num_experts", 64, 8, "intermediate_size", 2048)),
            "query and key normed over every feature, routed experts",
            flags=(_ATTN_BIAS,),
            fixed=_EVERY_BLOCK | {"qk_norm": True, "wide_qk_norm": True},
        ),
        **{
            model_type: moe(
                model_class,
                (
                    *sizes_at(32_000, 4096, 32, 32, 11_008),
                    *experts("num_local_experts", 8, 2, "intermediate_size", 11_008),
                    *shared,
                ),
                what,
                aside="; Granite's multipliers hold no parameters",
                flags=(_ATTN_BIAS,),
                fixed=_EVERY_BLOCK,
            )
            for model_type, model_class, shared, what in (
                ("granitemoe", "GraniteMoeForCausalLM", (), "routed experts in every block"),
                (
                    "granitemoeshared",
                    "GraniteMoeSharedForCausalLM",
                    (Size("shared_ffn_dim", "shared_intermediate_size", 0),),
                    "routed experts and a shared expert (none at shared_intermediate_size 0)",
                ),
            )
        },
        "granite": llama(
            "GraniteForCausalLM",
            sizes_at(32_000, 4096, 32, 32, 11_008, positions=True),
            quirks=("one_bias",),
            counted="embeddings, blocks, final norm, {head}; Granite's multipliers and rotary positions hold no "
            "parameters",
        ),
        "stablelm": decoder(
            "StableLmForCausalLM",
            sizes_at(50_304, 2560, 32, 32, 6912, positions=True),
            head_dim=READ_NO_HEAD_DIM,
            flags=(Flag("use_qkv_bias", False, ("qkv_bias",)),),
            fixed=ROTARY | {"use_bias": False, "norm": "layernorm", "gated_mlp": True},
            rules=(
                Only("qk_layernorm", False, False, "a LayerNorm for each query and key head, which no family builds"),
                Only("use_parallel_residual", False, False, "the parallel block has one norm fewer a block"),
            ),
            counted="embeddings, blocks (LayerNorms with biases), final norm, {head}; partial rotary positions hold "
            "no parameters",
        ),
        "nemotron": decoder(
            "NemotronForCausalLM",
            sizes_at(256_000, 6144, 32, 48, 24_576, positions=True),
            fixed=ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("one_bias",),
            counted="embeddings, blocks (LayerNorm1P: a scale and a bias; squared-ReLU MLP without a gate), final "
            "norm, {head}; partial rotary positions hold no parameters",
        ),
        "starcoder2": decoder(
            "Starcoder2ForCausalLM",
            sizes_at(49_152, 3072, 30, 24, 12_288, 2, positions=True),
            tied=True,
            flags=(Flag("use_bias", True, ("use_bias",)),),
            fixed=ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("tied_by_default",),
        ),
        "glm": llama(
            "GlmForCausalLM",
            sizes_at(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            counted=_QKV_ONLY,
        ),
        "glm4": llama(
            "Glm4ForCausalLM",
            sizes_at(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            fixed={"post_norms": True},
            counted=_QKV_ONLY.replace("only)", "only; four norms a block)"),
        ),
        "gpt_bigcode": learned_gpt(
            "GPTBigCodeForCausalLM",
            quirks=("multi_query", "tied_by_default"),
            counted="embeddings, blocks (one key/value head when multi_query), final norm, {head}",
        ),
        "opt": decoder(
            "OPTForCausalLM",
            (
                *one_heads_field(50_272, ("hidden_size", "num_hidden_layers", "num_attention_heads"), 768, 12, 12),
                Size("ffn_dim", "ffn_dim", 3072),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=(Flag("enable_bias", True, ("use_bias",)),),
            fixed=LEARNED_GPT,
            rules=(
                Only("do_layer_norm_before", True, True, "OPT-350m's post-norm blocks have no final norm"),
                Only("layer_norm_elementwise_affine", True, True, "norms without parameters are not OPT's"),
            ),
            quirks=("opt_positions",),
            counted="embeddings (a position table 2 rows longer than max_position_embeddings), blocks, final norm, "
            "{head}",
        ),
        "olmo": _OLMO,
        # OLMo 2 reads as OLMo does (Olmo2Config's sizes default as OlmoConfig's, attention_bias too);
        # its blocks differ.
        "olmo2": dataclasses.replace(
            _OLMO,
            model_class="Olmo2ForCausalLM",
            counted="embeddings, blocks (norms after attention and the MLP, none before; query and key normed over "
            "every feature), final norm, {head}; rotary positions hold no parameters",
            fixed=_SWIGLU | {"residual": "post_norms", "qk_norm": True},
        ),
        "cohere": variant(
            "CohereForCausalLM",
            sizes_at(256_000, 8192, 40, 64, 22_528),
            "embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; rotary "
            "positions and the logit scale hold no parameters",
            tied=True,
            flags=(_ATTN_BIAS, Flag("use_qk_norm", False, ("qk_norm",))),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
        ),
        "cohere2": variant(
            "Cohere2ForCausalLM",
            sizes_at(256_000, 8192, 40, 64, 22_528),
            "embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; sliding "
            "windows, rotary positions and the logit scale hold no parameters",
            head_dim=128,
            tied=True,
            flags=(_ATTN_BIAS,),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
        ),
        "gptj": variant(
            "GPTJForCausalLM",
            (
                *one_heads_field(50_400, ("n_embd", "n_layer", "n_head"), 4096, 28, 16),
                Size("ffn_dim", "n_inner", Same("d_model", 4)),
            ),
            "embeddings, parallel blocks (biases in the MLP only), final norm, {head} with a bias; partial "
            "rotary positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            fixed=_VARIANT | {"residual": "parallel", "mlp_bias": True, "head_bias": True},
        ),
        "falcon": variant(
            "FalconForCausalLM",
            (*sizes_at(65_024, 4544, 32, 71, 0)[:4], Size("ffn_dim", "ffn_hidden_size", Same("d_model", 4))),
            "embeddings, blocks ({blocks}), final norm, {head}; rotary or ALiBi positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=(Flag("bias", False, ("attn_bias", "mlp_bias")),),
            fixed=_VARIANT | {"fused_qkv": True},
            quirks=("falcon",),
        ),
        "bloom": variant(
            "BloomForCausalLM",
            one_heads_field(250_880, ("hidden_size", "n_layer", "n_head"), 64, 2, 8),
            "embeddings and their LayerNorm, blocks, final norm, {head}; ALiBi positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"attn_bias": True, "mlp_bias": True, "fused_qkv": True, "embed_norm": True},
            quirks=("bloom",),
        ),
        "mpt": variant(
            "MptForCausalLM",
            one_heads_field(50_368, ("d_model", "n_layers", "n_heads"), 2048, 24, 16),
            "embeddings, blocks (no biases, LayerNorms without bias), final norm, {head}; ALiBi positions "
            "hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"norm": "layernorm_no_bias", "fused_qkv": True},
            quirks=("mpt",),
        ),
        "phi": variant(
            "PhiForCausalLM",
            sizes_at(51_200, 2048, 24, 32, 8192),
            "embeddings, parallel blocks (biases everywhere), final norm, {head} with a bias; partial rotary "
            "positions hold no parameters",
            fixed=_VARIANT | {"residual": "parallel", "attn_bias": True, "mlp_bias": True, "head_bias": True},
            rules=(Only("qk_layernorm", False, False, "a LayerNorm over each query and key head adds weights"),),
        ),
        "mamba": ModelType(
            family="mamba",
            model_class="MambaForCausalLM",
            sizes=named_sizes("mamba"),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=mixer_biases("use_bias", "use_conv_bias"),
            counted="embeddings, blocks (an RMSNorm and a Mamba mixer each), final norm, {head}; no positions",
            quirks=("mamba",),
        ),
        "jamba": ModelType(
            family="jamba",
            model_class="JambaForCausalLM",
            sizes=(
                *sizes_at(65_536, 4096, 32, 32, 14_336, 8),
                *named_sizes("jamba"),
            ),
            head_dim=READ_NO_HEAD_DIM,
            flags=mixer_biases("mamba_proj_bias", "mamba_conv_bias"),
            rules=(Only("head_dim", None, None, "Jamba's heads are hidden_size / num_attention_heads wide"),),
            quirks=("jamba",),
            counted="embeddings, blocks (Mamba mixers with norms on dt, B and C, or grouped-query attention; a "
            "dense MLP or routed experts), final norm, {head}; no positions",
        ),
        "llama4_text": moe(
            "Llama4ForCausalLM",
            (
                Size("vocab_size", "vocab_size", 202_048),
                *widths(5120, 48, 40, 16_384)[:3],
                Size("num_kv_heads", "num_key_value_heads", 8, Same("num_heads")),
                Size("ffn_dim", "intermediate_size_mlp", 16_384),
                *experts("num_local_experts", 16, 1, "intermediate_size", 8192),
                Size("shared_ffn_dim", "intermediate_size", 8192),
            ),
            "{blocks}",
            aside="; chunked attention, NoPE blocks and the query/key L2 norm hold no parameters",
            head_dim=128,
            flags=(_ATTN_BIAS,),
            fixed={"shared_expert_gate": False},
            quirks=("llama4_moe_layers",),
        ),
        "llama4": headless(
            "llama4",
            "Llama4ForConditionalGeneration",
            (),
            "vision tower (patch embedding, class and position embeddings, {vision} blocks with biases, "
            "pixel-shuffle adapter), projector, language model ({text}); rotary positions hold no parameters",
            quirks=("llama4_multimodal",),
        ),
        "t5": ModelType(
            family="t5",
            model_class="T5ForConditionalGeneration",
            sizes=(
                Size("vocab_size", "vocab_size", 32_128),
                Size("d_model", "d_model", 512),
                Size("head_dim", "d_kv", 64),
                Size("ffn_dim", "d_ff", 2048),
                Size("num_layers", "num_layers", 6),
                Size("num_decoder_layers", "num_decoder_layers", Same("num_layers")),
                Size("num_heads", "num_heads", 8),
                Size("relative_buckets", "relative_attention_num_buckets", 32),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            quirks=("t5_projection",),
            counted="shared embedding, encoder and decoder stacks (relative position bias in each first block), {head}",
        ),
        "bart": ModelType(
            family="encdec",
            model_class="BartForConditionalGeneration",
            sizes=encdec_sizes(
                50_265, 1024, 12, 16, 4096, ("max_position_embeddings", 1024), ("max_position_embeddings", 1024)
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_ENCDEC | {"position_offset": 2, "embed_norm": True, "logits_bias": True},
            rules=(
                Only("add_final_layer_norm", False, False, _MBART),
                Only("normalize_before", False, False, _MBART),
                Only(
                    "tie_word_embeddings",
                    True,
                    True,
                    "untied, transformers 5.24.0 gives each stack and the head a table of its own beside the shared "
                    "one (four), which dcsim does not build",
                ),
            ),
            counted="shared embedding (the encoder's, the decoder's and the head's), learned positions in each stack "
            "(max_position_embeddings + 2 rows), an embedding LayerNorm in each, post-norm encoder and decoder "
            "blocks with cross-attention, {head}; final_logits_bias is a buffer, not a parameter",
        ),
        "whisper": ModelType(
            family="encdec",
            model_class="WhisperForConditionalGeneration",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            sizes=(
                *encdec_sizes(51_865, 384, 4, 6, 1536, ("max_target_positions", 448), ("max_source_positions", 1500)),
                Size("audio_bins", "num_mel_bins", 80),
            ),
            fixed=_ENCDEC | {"pre_norm": True, "key_bias": False},
            counted="two convolutions over the mel bins, the encoder's sinusoidal positions (max_source_positions "
            "rows: frozen, but a parameter that num_parameters() counts and the checkpoint stores), learned decoder "
            "positions, pre-norm encoder and decoder blocks (no bias on the keys) with cross-attention and a final "
            "norm each, {head}",
        ),
        "bert": bert("BertModel", _BERT_SIZES, _BERT_COUNTED),
        "roberta": bert("RobertaModel", (Size("vocab_size", "vocab_size", 50_265), *_BERT_SIZES[1:]), _ROBERTA_COUNTED),
        "xlm-roberta": bert("XLMRobertaModel", _BERT_SIZES, _ROBERTA_COUNTED),
        "vit": headless(
            "vit",
            "ViTForImageClassification",
            (Size("image_size", "image_size", 224), Size("patch_size", "patch_size", 16), *widths(768, 12, 12, 3072)),
            "patch embedding, encoder, final norm, a classifier over {labels} labels",
            rules=(CHANNELS, Only("qkv_bias", True, True, "dcsim's ViT has biases on every projection")),
            quirks=("labels",),
        ),
        **VISION_LANGUAGE,
    }
)


# The configurations a vision-language model nests that are no model type of their own.

# The configurations a vision-language model nests that are no model type of their own: the towers,
# and Qwen2.5-VL's language model, Qwen2's blocks at Qwen2_5_VLTextConfig's defaults (the 72B's).
PARTS: Mapping[str, ModelType] = MappingProxyType(
    {
        **TOWERS,
        "qwen2_5_vl_text": dataclasses.replace(
            MODEL_TYPES["qwen2"],
            model_class="Qwen2_5_VLTextModel",
            sizes=sizes_at(152_064, 8192, 80, 64, 29_568, 8, positions=True),
        ),
    }
)


# Hub model types dcsim does not read yet: what their blocks hold that no family builds, and the
# nearest type it reads. A refusal names them; docs/presets.md lists the rest as refused.
NOT_YET: Mapping[str, str] = MappingProxyType(
    {
        "mbart": "pre-norm blocks and a final norm a stack; the nearest is bart (encdec), whose blocks are post-norm",
        "mamba2": "Mamba-2's mixer (heads, groups, a gated norm, no x_proj or dt_proj); the nearest is mamba (mamba)",
    }
)


def nearest(model_type: str) -> str:
    """What to say of a type dcsim does not read: what ``NOT_YET`` knows of it, else the supported
    type closest in spelling, with its family (``the nearest it reads is llama (decoder)``)."""
    import difflib

    if model_type in NOT_YET:
        return NOT_YET[model_type]
    close = difflib.get_close_matches(model_type.lower(), list(MODEL_TYPES), n=1, cutoff=0.75)
    return f"the nearest it reads is {close[0]} ({MODEL_TYPES[close[0]].family})" if close else ""
