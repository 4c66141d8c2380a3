"""The hyperparameters of the zoo's families (``dcsim.model.zoo``), appended to
``dcsim.model.schemas.FAMILY_SCHEMAS``. Pure Python, like that table: no JAX, no Flax."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from dcsim.model.hparams import SERVING_HPARAMS, HParam, bool_param, choice_param, int_param

MAX_WIDTH = 1 << 16
MAX_VOCAB = 1 << 20
MAX_BLOCKS = 256
MAX_HEADS = 1024

VARIANT = "variant"
ENCDEC = "encdec"
MAX_POSITIONS = 1 << 20
LLAMA4 = "llama4"
NORMS = ("layernorm", "layernorm_no_bias", "rmsnorm", "no_params")
RESIDUALS = ("sequential", "parallel", "parallel_two_norms", "post_norms")
MAMBA = "mamba"
JAMBA = "jamba"

MAX_EXPERTS = 1024  # as dcsim.model.schemas's
# A Mamba mixer's hyperparameters (Mamba-130M's and Jamba's alike, but dt_rank: ceil(d_model / 16)).
_MIXER = (
    int_param("inner_dim", 1536, "the mixer's inner width (expand x d_model): conv and state channels", 1, MAX_VOCAB),
    int_param("state_size", 16, "the state each inner channel keeps (d_state)", 1, 4096),
    int_param("conv_kernel", 4, "the depthwise causal convolution's width (d_conv)", 1, 64),
    int_param("dt_rank", 48, "the rank of the time-step projection (dt_proj's input)", 1, MAX_WIDTH),
    bool_param("use_bias", False, "biases on the mixer's in_proj and out_proj"),
    bool_param("conv_bias", True, "a bias on the depthwise convolution"),
)

_HIDDEN = "width of the residual stream (hidden size)"


def _token_model(vocab: int, d_model: int, layers: int, blocks: str, width: str = _HIDDEN) -> tuple[HParam, ...]:
    """A token model's vocabulary, width and depth at these defaults; ``blocks`` (and ``width``)
    say what its num_layers (and d_model) count."""
    return (
        int_param("vocab_size", vocab, "tokens in the vocabulary: rows of the token embedding", 1, MAX_VOCAB),
        int_param("d_model", d_model, width, 1, MAX_WIDTH),
        int_param("num_layers", layers, blocks, 1, MAX_BLOCKS),
    )


def _tied(default: bool) -> HParam:
    return bool_param("tied_embeddings", default, "the output projection reuses the token embedding")


# Defaults: Phi-2 (2,779,683,840 parameters).
ZOO_SCHEMAS: Mapping[str, tuple[HParam, ...]] = MappingProxyType(
    {
        VARIANT: (
            *_token_model(51_200, 2560, 32, "number of transformer blocks"),
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
            _tied(False),
            bool_param("head_bias", True, "a bias on the untied output projection (GPT-J, Phi)"),
            *SERVING_HPARAMS,
        ),
        # Defaults: BART-base (facebook/bart-base, 139,420,416 parameters).
        ENCDEC: (
            *_token_model(50_265, 768, 6, "encoder blocks", width="width of the residual stream of both stacks"),
            int_param("num_decoder_layers", 6, "decoder blocks (each with self- and cross-attention)", 1, MAX_BLOCKS),
            int_param("num_heads", 12, "the encoder's attention heads; must divide d_model", 1, MAX_HEADS),
            int_param("num_decoder_heads", 12, "the decoder's attention heads; must divide d_model", 1, MAX_HEADS),
            int_param("ffn_dim", 3072, "hidden width of each encoder block's MLP", 1, MAX_VOCAB),
            int_param("decoder_ffn_dim", 3072, "hidden width of each decoder block's MLP", 1, MAX_VOCAB),
            int_param("max_positions", 1024, "the decoder's positions (rows before the offset)", 1, MAX_POSITIONS),
            int_param("source_positions", 1024, "the encoder's positions (tokens or audio frames)", 1, MAX_POSITIONS),
            int_param("position_offset", 2, "rows a position table has beyond its positions (BART's 2)", 0, 2),
            int_param("audio_bins", 0, "mel bins two convolutions read (Whisper; 0: the token table)", 0, MAX_WIDTH),
            bool_param("pre_norm", False, "pre-norm blocks and a final norm a stack (Whisper); else post-norm (BART)"),
            bool_param("embed_norm", True, "a LayerNorm after each stack's embeddings (BART's layernorm_embedding)"),
            bool_param("key_bias", True, "a bias on the key projections (Whisper's k_proj has none)"),
            _tied(True),
            bool_param("logits_bias", True, "BART's final_logits_bias: a buffer beside the logits, not a parameter"),
        ),
        # Defaults: Mamba-130M (state-spaces/mamba-130m-hf, 129,135,360 parameters).
        MAMBA: (
            *_token_model(50_280, 768, 24, "number of Mamba blocks"),
            *_MIXER,
            _tied(True),
        ),
        # Defaults: Jamba-v0.1 (ai21labs/Jamba-v0.1, 51,570,323,456 parameters).
        JAMBA: (
            *_token_model(65_536, 4096, 32, "number of blocks, Mamba and attention together"),
            int_param("num_heads", 32, "attention heads (query heads) of the attention blocks", 1, MAX_HEADS),
            int_param("num_kv_heads", 8, "key/value heads (grouped-query attention); divide num_heads", 1, MAX_HEADS),
            int_param("ffn_dim", 14_336, "hidden width of each MLP and of each routed expert", 1, MAX_VOCAB),
            int_param("attn_period", 8, "one block in this many is attention, the rest Mamba", 1, MAX_BLOCKS),
            int_param("attn_offset", 4, "the first attention block (below attn_period)", 0, MAX_BLOCKS - 1),
            int_param("num_experts", 16, "routed experts of a Mixture-of-Experts block", 1, MAX_EXPERTS),
            int_param("experts_per_token", 2, "routed experts each token is sent to (top-k)", 1, MAX_EXPERTS),
            int_param("expert_period", 2, "one block in this many has experts, the rest a dense MLP", 1, MAX_BLOCKS),
            int_param("expert_offset", 1, "the first block with experts (below expert_period)", 0, MAX_BLOCKS - 1),
            *_MIXER,
            _tied(False),
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
        ENCDEC: "encoder-decoder transformer with learned positions (BART) or an audio encoder (Whisper): a token "
        "table shared by the stacks and the head, LayerNorms and biases, cross-attention in every decoder block",
        MAMBA: "Mamba state-space model: blocks of an RMSNorm and a selective-scan mixer (in_proj, depthwise conv1d, "
        "x_proj, dt_proj, A_log, D, out_proj); serves from a fixed conv and SSM state a sequence, not a KV cache",
        JAMBA: "Jamba hybrid: Mamba mixers (with RMSNorms on dt, B and C) and grouped-query attention blocks "
        "interleaved, a dense MLP or routed experts after each; attention keeps a KV cache, Mamba a state",
        MULTIMODAL: "vision-language model (LLaVA, Gemma 3, Mistral 3, Qwen2.5-VL): a vision tower, a projector and "
        "a decoder language model",
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


def _check_jamba(hparams: Mapping[str, Any]) -> None:
    """Jamba's offsets below their periods, as ``JambaConfig`` requires, and top-k within its experts."""
    for kind in ("attn", "expert"):
        offset, period = hparams[f"{kind}_offset"], hparams[f"{kind}_period"]
        if offset >= period:
            raise ValueError(f"`{kind}_offset` ({offset:,}) must be below `{kind}_period` ({period:,})")
    experts, top_k = hparams["num_experts"], hparams["experts_per_token"]
    if experts > 1 and top_k > experts:
        raise ValueError(f"`experts_per_token` ({top_k:,}) must be at most `num_experts` ({experts:,})")


# The zoo's rules that tie hyperparameters together, a family (see ``schemas.check_hparams``).
_RULES: Mapping[str, Callable[[Mapping[str, Any]], None]] = MappingProxyType({JAMBA: _check_jamba})


def check(family: str, hparams: Mapping[str, Any]) -> None:
    """The zoo's rules that tie hyperparameters together (see ``schemas.check_hparams``)."""
    rule = _RULES.get(family)
    if rule is not None:
        rule(hparams)


def _variant_hidden(hparams: Mapping[str, Any]) -> set[str]:
    unused = {"max_positions"} if hparams["position_embedding"] == "none" else set()
    unused |= {"qkv_bias"} if hparams["attn_bias"] else set()
    return unused | ({"head_bias"} if hparams["tied_embeddings"] else set())


def _llama4_hidden(hparams: Mapping[str, Any]) -> set[str]:
    """The moe family's latent-attention sizes and kinds Llama 4 does not build."""
    return {"attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}


def hidden(family: str, hparams: Mapping[str, Any]) -> set[str]:
    """The zoo's hyperparameters that change no count of this model (see ``schemas.applicable``)."""
    unused = _UNUSED.get(family)
    return set() if unused is None else unused(hparams)


def _multimodal_hidden(hparams: Mapping[str, Any]) -> set[str]:
    tower, projector = hparams["vision_tower"], hparams["projector"]
    unused = set() if tower in ("clip", "siglip") else {"image_size"}
    unused |= set() if tower == "qwen2_5_vl" else {"temporal_patch_size"}
    unused |= set() if tower == "siglip" else {"vision_head"}
    unused |= set() if projector in ("mlp", "merger_mlp") else {"projector_bias", "feature_layers"}
    return unused | (set() if projector in ("merger_mlp", "qwen_merger") else {"merge_size"})


# The zoo's hyperparameters that change no count, a family (see ``schemas.applicable``).
_UNUSED: Mapping[str, Callable[[Mapping[str, Any]], set[str]]] = MappingProxyType(
    {MULTIMODAL: _multimodal_hidden, LLAMA4: _llama4_hidden, VARIANT: _variant_hidden}
)
