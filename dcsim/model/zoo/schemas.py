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

# The multimodal family: the decoder family's hyperparameters for its language model (appended by
# dcsim.model.schemas, which owns them), then these for its vision tower and projector. Defaults:
# LLaVA 1.5's CLIP ViT-L/14 at 336 pixels and its two-layer projector.
MULTIMODAL = "multimodal"
VISION_TOWERS = ("clip", "siglip", "pixtral", "qwen2_5_vl")
PROJECTORS = ("mlp", "merger_mlp", "soft_embedding", "qwen_merger")
MAX_IMAGE = 4096
VISION_HPARAMS: tuple[HParam, ...] = (
    choice_param(
        "vision_tower",
        "clip",
        "clip: class token, position table, pre- and post-norm (LLaVA); siglip: position table, post-norm "
        "(Gemma 3); pixtral: RMSNorm, gated MLP, 2D rotary (Mistral 3); qwen2_5_vl: a 3D patch convolution, "
        "RMSNorm, gated MLP with biases",
        VISION_TOWERS,
    ),
    int_param("vision_d_model", 1024, "width of the vision tower", 1, MAX_WIDTH),
    int_param("vision_layers", 24, "blocks of the vision tower", 1, MAX_BLOCKS),
    int_param("vision_heads", 16, "attention heads of the vision tower; must divide vision_d_model", 1, MAX_HEADS),
    int_param("vision_ffn_dim", 4096, "hidden width of each vision block's MLP", 1, MAX_VOCAB),
    int_param(
        "image_size", 336, "image height and width in pixels: the position table's patches (clip, siglip)", 1, MAX_IMAGE
    ),
    int_param("patch_size", 14, "patch height and width in pixels; must divide image_size", 1, MAX_IMAGE),
    int_param("temporal_patch_size", 2, "frames a patch spans (qwen2_5_vl's 3D convolution)", 1, 64),
    bool_param("vision_head", False, "SigLIP's attention-pooling head (a probe, attention, norm and MLP)"),
    choice_param(
        "projector",
        "mlp",
        "mlp: two Dense layers (LLaVA); merger_mlp: a norm, a patch merger and two Dense layers (Mistral 3); "
        "soft_embedding: a norm and a projection (Gemma 3); qwen_merger: a norm over merged patches, two Dense "
        "layers (Qwen2.5-VL)",
        PROJECTORS,
    ),
    bool_param("projector_bias", True, "biases on the projector's Dense layers (mlp, merger_mlp)"),
    int_param("feature_layers", 1, "vision layers whose outputs the projector reads, side by side", 1, MAX_BLOCKS),
    int_param("merge_size", 2, "patches merged along each side (merger_mlp, qwen_merger)", 1, 64),
    int_param("projector_out", 0, "width the projector outputs; 0 for the language model's d_model", 0, MAX_WIDTH),
)
VISION_NAMES = frozenset(spec.name for spec in VISION_HPARAMS)

ZOO_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        VARIANT: "decoder-only transformer with the variants the Hub's models use (OLMo, OLMo 2, Cohere, GPT-J, "
        "Falcon, BLOOM, MPT, Phi): norm kinds, parallel blocks, per-projection biases, embedding norm, head bias",
        MULTIMODAL: "vision-language model (LLaVA, Gemma 3, Mistral 3, Qwen2.5-VL): a vision tower, a projector and "
        "a decoder language model",
    }
)


def hidden(family: str, hparams: Mapping[str, Any]) -> set[str]:
    """The zoo's hyperparameters that change no count of this model (see ``schemas.applicable``)."""
    if family == MULTIMODAL:
        return _multimodal_hidden(hparams)
    if family != VARIANT:
        return set()
    unused = {"max_positions"} if hparams["position_embedding"] == "none" else set()
    unused |= {"qkv_bias"} if hparams["attn_bias"] else set()
    return unused | ({"head_bias"} if hparams["tied_embeddings"] else set())


def _multimodal_hidden(hparams: Mapping[str, Any]) -> set[str]:
    tower, projector = hparams["vision_tower"], hparams["projector"]
    unused = set() if tower in ("clip", "siglip") else {"image_size"}
    unused |= set() if tower == "qwen2_5_vl" else {"temporal_patch_size"}
    unused |= set() if tower == "siglip" else {"vision_head"}
    unused |= set() if projector in ("mlp", "merger_mlp") else {"projector_bias", "feature_layers"}
    return unused | (set() if projector in ("merger_mlp", "qwen_merger") else {"merge_size"})
