"""The hyperparameters of the zoo's families (``dcsim.model.zoo``), appended to
``dcsim.model.schemas.FAMILY_SCHEMAS``. Pure Python, like that table: no JAX, no Flax."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.model.hparams import SERVING_HPARAMS, HParam, bool_param, choice_param, int_param

MAX_WIDTH = 1 << 16
MAX_VOCAB = 1 << 20
MAX_BLOCKS = 256
MAX_HEADS = 1024

VARIANT = "variant"
LLAMA4 = "llama4"
NORMS = ("layernorm", "layernorm_no_bias", "rmsnorm", "no_params")
RESIDUALS = ("sequential", "parallel", "parallel_two_norms", "post_norms")

# Defaults: Phi-2 (2,779,683,840 parameters).
ZOO_SCHEMAS: Mapping[str, tuple[HParam, ...]] = MappingProxyType(
    {
        VARIANT: (
            int_param("vocab_size", 51_200, "tokens in the vocabulary: rows of the token embedding", 1, MAX_VOCAB),
            int_param("d_model", 2560, "width of the residual stream (hidden size)", 1, MAX_WIDTH),
            int_param("num_layers", 32, "number of transformer blocks", 1, MAX_BLOCKS),
            int_param(
                "num_heads", 32, "attention heads (query heads); divide d_model unless head_dim is set", 1, MAX_HEADS
            ),
            int_param(
                "num_kv_heads", 32, "key/value heads (grouped-query attention); must divide num_heads", 1, MAX_HEADS
            ),
            int_param("head_dim", 0, "width of each attention head; 0 for d_model / num_heads", 0, 4096),
            int_param("ffn_dim", 10_240, "hidden width of each block's MLP", 1, MAX_VOCAB),
            choice_param(
                "position_embedding",
                "none",
                "learned: a position table; none: rotary, ALiBi or other parameter-free positions",
                ("learned", "none"),
            ),
            int_param("max_positions", 2048, "longest sequence: rows of a learned position table", 1, MAX_VOCAB),
            choice_param(
                "norm",
                "layernorm",
                "layernorm (scale and bias), layernorm_no_bias (a scale: Cohere, MPT), rmsnorm (a scale), "
                "no_params (OLMo's LayerNorm without scale or bias)",
                NORMS,
            ),
            choice_param(
                "residual",
                "parallel",
                "sequential: a norm before attention and one before the MLP; parallel: attention and MLP on one "
                "norm's output, added together (GPT-J, Phi, Falcon-7B, Cohere); parallel_two_norms: each its own "
                "norm (Falcon-40B); post_norms: a norm after each sublayer, none before (OLMo 2)",
                RESIDUALS,
            ),
            bool_param("attn_bias", True, "biases on query, key, value and the output projection"),
            bool_param("qkv_bias", False, "biases on query, key and value only (StableLM, GLM)"),
            bool_param("mlp_bias", True, "biases in the MLP's projections"),
            bool_param("gated_mlp", False, "gated MLP (SwiGLU: gate, up and down projections) instead of up and down"),
            bool_param("fused_qkv", False, "one qkv projection (Falcon, BLOOM, MPT): the same count in one array"),
            bool_param(
                "qk_norm", False, "a norm over every query and every key feature, heads x head_dim scales (OLMo 2)"
            ),
            bool_param("embed_norm", False, "a LayerNorm after the token embedding (BLOOM)"),
            bool_param("tied_embeddings", False, "the output projection reuses the token embedding"),
            bool_param("head_bias", True, "a bias on the untied output projection (GPT-J, Phi)"),
            *SERVING_HPARAMS,
        ),
    }
)

ZOO_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        VARIANT: "decoder-only transformer with the variants the Hub's models use (OLMo, OLMo 2, Cohere, GPT-J, "
        "Falcon, BLOOM, MPT, Phi): norm kinds, parallel blocks, per-projection biases, embedding norm, head bias",
        LLAMA4: "Llama 4 (Scout, Maverick): a vision tower, its pixel-shuffle adapter and projector, beside the moe "
        "family's language model (dense and MoE blocks interleaved, routed experts with a shared expert)",
    }
)

# Llama 4's vision tower, adapter and projector; the language model's hyperparameters are the moe
# family's, put before these by ``with_llama4``. Defaults: Llama 4 Scout's and Maverick's tower.
_VISION_ROWS = (  # name, default, what it sizes, largest allowed
    ("vision_d_model", 1408, "width of the vision tower's residual stream", MAX_WIDTH),
    ("vision_layers", 34, "the vision tower's blocks (LayerNorms, attention and MLP with biases)", MAX_BLOCKS),
    ("vision_heads", 16, "the vision tower's attention heads, each vision_d_model // vision_heads wide", MAX_HEADS),
    ("vision_ffn_dim", 5632, "the vision blocks' MLP width, and the adapter's input width", MAX_VOCAB),
    ("image_size", 336, "image height and width in pixels: the position table has a row a patch", 4096),
    ("patch_size", 14, "patch height and width in pixels (the patch embedding's kernel)", 4096),
    ("num_channels", 3, "image channels the patch embedding reads", 64),
    ("projector_input_dim", 4096, "the adapter's hidden width (fc1's output)", MAX_VOCAB),
    ("projector_output_dim", 4096, "the adapter's output width (fc2's input and output)", MAX_VOCAB),
    ("vision_output_dim", 4096, "the projector's input width (it outputs d_model)", MAX_VOCAB),
)
LLAMA4_VISION: tuple[HParam, ...] = tuple(
    int_param(name, default, text, 1, largest) for name, default, text, largest in _VISION_ROWS
)


def with_llama4(table: Mapping[str, tuple[HParam, ...]]) -> dict[str, tuple[HParam, ...]]:
    """``table`` (``dcsim.model.schemas``' families) with the llama4 family: the moe family's
    hyperparameters, then the vision ones (a table given, not imported: that module imports this one)."""
    return {**table, LLAMA4: (*table["moe"], *LLAMA4_VISION)}


def hidden(family: str, hparams: Mapping[str, Any]) -> set[str]:
    """The zoo's hyperparameters that change no count of this model (see ``schemas.applicable``)."""
    if family == LLAMA4:  # the moe family's latent-attention sizes and kinds Llama 4 does not build
        return {"attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}
    if family != VARIANT:
        return set()
    unused = {"max_positions"} if hparams["position_embedding"] == "none" else set()
    unused |= {"qkv_bias"} if hparams["attn_bias"] else set()
    return unused | ({"head_bias"} if hparams["tied_embeddings"] else set())
