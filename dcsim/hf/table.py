"""Every Hugging Face ``model_type`` dcsim opens, as data: one ``ModelType`` an entry.

An entry says which dcsim family builds the model, which config.json fields become which of the
family's hyperparameters (each with the default of transformers' own configuration class for that
type, so a bare ``{"model_type": "llama"}`` is ``LlamaConfig()``), the hyperparameters the model
class hard-codes (its quirks), the fields it refuses by name because no family builds them, and
the few readings a table cannot say (``quirks``: names of functions in ``dcsim.hf.readers``).
Adding a llama-like type is a few lines here and a test with its published count.

Pure data, no JAX: ``dcsim.hf`` refuses an unknown type from this table before any model is built,
and ``tests/test_docs.py`` writes docs/presets.md's table of model types from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


@dataclasses.dataclass(frozen=True)
class Same:
    """A default that is another hyperparameter already read, times ``times`` (GPT-2's ``n_inner``:
    4 x ``n_embd``; ``num_key_value_heads``: as many as the query heads)."""

    name: str
    times: int = 1


@dataclasses.dataclass(frozen=True)
class Size:
    """The integer field ``key`` as the hyperparameter ``name``; ``default`` for an absent field,
    ``null`` for a null one (the default unless given). ``lenient``: taken only when it is a valid
    value, left at the family's default otherwise (a rotary model's length changes no count)."""

    name: str
    key: str
    default: int | Same | None = None
    null: int | Same | None = None
    lenient: bool = False


@dataclasses.dataclass(frozen=True)
class Flag:
    """The boolean field ``key`` (``default`` when absent or null) as the hyperparameters ``names``."""

    key: str
    default: bool
    names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Only:
    """The field ``key`` must be ``wanted`` (``default`` when absent): anything else changes the
    count in a way no family builds, said ``why``."""

    key: str
    wanted: Any
    default: Any
    why: str


@dataclasses.dataclass(frozen=True)
class NoBias:
    """Each of ``keys`` (``attention_bias``, ``mlp_bias``) must be false: biases the family has no
    place for, said ``why``."""

    keys: tuple[str, ...]
    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelType:
    """How one ``model_type``'s config.json is read.

    Attributes:
      family: the dcsim family that builds it.
      model_class: what transformers builds for it (``LlamaForCausalLM``), the class counted.
      sizes: the integer fields, in reading order.
      head_dim: the class's default head width when the file has no ``head_dim`` (None:
        hidden_size / num_attention_heads); ``READ_NO_HEAD_DIM``: the class never reads one.
      tied: the class's default of ``tie_word_embeddings``; None: the family has no output head.
      flags: boolean fields read into hyperparameters.
      fixed: hyperparameters the class hard-codes (biases, norms, the MLP's shape, ...).
      rules: fields refused by name unless at the one value dcsim builds.
      quirks: readings beyond the table, functions of ``dcsim.hf.readers.QUIRKS`` by name.
      counted: what is counted, in words; ``{head}`` is the output head's description and other
        ``{names}`` are filled in by the quirks.
    """

    family: str
    model_class: str
    sizes: tuple[Size, ...]
    head_dim: int | str | None = None
    tied: bool | None = False
    flags: tuple[Flag, ...] = ()
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rules: tuple[Only | NoBias, ...] = ()
    quirks: tuple[str, ...] = ()
    counted: str = "embeddings, blocks, final norm, {head}; rotary positions hold no parameters"

    def quirk_words(self) -> str:
        """What sets this type apart, for the docs' table: the hyperparameters it hard-codes and
        its readings beyond the table."""
        fixed = [name if value is True else f"{name}={value}" for name, value in self.fixed.items() if value]
        flags = [f"{flag.key} -> {'/'.join(flag.names)}" for flag in self.flags]
        tied = ["head tied by default"] if self.tied else []
        return ", ".join(fixed + flags + tied + list(self.quirks))

    def refused(self) -> str:
        """The fields refused unless at the value dcsim builds, for the docs' table."""
        keys = [rule.key for rule in self.rules if isinstance(rule, Only)]
        keys += [key for rule in self.rules if isinstance(rule, NoBias) for key in rule.keys]
        return ", ".join(f"`{key}`" for key in keys)


READ_NO_HEAD_DIM = "not read"

# Sizes most model types publish under the same names; ``_sizes`` gives them the class's defaults.
_SIZE_KEYS = (
    ("d_model", "hidden_size"),
    ("num_layers", "num_hidden_layers"),
    ("num_heads", "num_attention_heads"),
    ("ffn_dim", "intermediate_size"),
)


def _widths(hidden: int, layers: int, heads: int, ffn: int) -> tuple[Size, ...]:
    """hidden_size, num_hidden_layers, num_attention_heads and intermediate_size at these defaults."""
    return tuple(
        Size(name, key, default) for (name, key), default in zip(_SIZE_KEYS, (hidden, layers, heads, ffn), strict=True)
    )


def _sizes(
    vocab: int, hidden: int, layers: int, heads: int, ffn: int, kv: int | None = None, *, positions: bool = False
) -> tuple[Size, ...]:
    """vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size and
    num_key_value_heads at the class's defaults (``kv`` None: as many as the query heads; a null
    field means that too, as transformers reads it). ``positions``: max_position_embeddings too,
    leniently (rotary: it changes no count)."""
    taken = (Size("vocab_size", "vocab_size", vocab), *_widths(hidden, layers, heads, ffn))
    lengths = (Size("max_positions", "max_position_embeddings", lenient=True),) if positions else ()
    kv_heads = Size("num_kv_heads", "num_key_value_heads", Same("num_heads") if kv is None else kv, Same("num_heads"))
    return taken + lengths + (kv_heads,)


_ONE_BIAS = "dcsim's decoder has biases on every projection or on none"
_CROSS = Only("add_cross_attention", False, False, "cross-attention adds weights to every block")
_ROTARY = {"position_embedding": "none"}
_LLAMA = _ROTARY | {"use_bias": False, "norm": "rmsnorm", "gated_mlp": True}
_LEARNED_GPT = {"position_embedding": "learned", "use_bias": True, "norm": "layernorm", "gated_mlp": False}


def _no_projection_biases(family: str) -> NoBias:
    return NoBias(("attention_bias",), f"dcsim's {family} blocks have no biases on the attention projections")


def _experts(experts_key: str, experts: int, top_k: int, ffn_key: str, ffn: int) -> tuple[Size, ...]:
    return (
        Size("num_experts", experts_key, experts),
        Size("experts_per_token", "num_experts_per_tok", top_k),
        Size("expert_ffn_dim", ffn_key, ffn),
    )


def _gpt2_sizes(vocab: int, positions: int, d_model: int, layers: int, heads: int) -> tuple[Size, ...]:
    return (
        Size("vocab_size", "vocab_size", vocab),
        Size("d_model", "n_embd", d_model),
        Size("num_layers", "n_layer", layers),
        Size("num_kv_heads", "n_head", heads),
        Size("num_heads", "n_head", heads),
        Size("ffn_dim", "n_inner", Same("d_model", 4)),
        Size("max_positions", "n_positions", positions),
    )


_BERT_SIZES = (
    Size("vocab_size", "vocab_size", 30_522),
    *_widths(768, 12, 12, 3072),
    Size("max_positions", "max_position_embeddings", 512),
    Size("type_vocab_size", "type_vocab_size", 2),
)
_BERT_RULES = (
    _CROSS,
    Only("position_embedding_type", "absolute", "absolute", "relative position types add a distance table"),
)
_BERT_COUNTED = "embeddings, encoder and pooler; task heads (masked LM, classifiers) are not counted"

_QWEN3_MOE = "dcsim's Qwen3-MoE attention has no biases"
_DEEPSEEK = "dcsim's DeepSeek blocks have no biases on their projections"
_MOE_COUNTED = "embeddings, blocks ({what}), final norm, {head}; rotary positions hold no parameters"

# The variant family's hyperparameters with every quirk off; an entry turns on its own.
_VARIANT: dict[str, Any] = {"position_embedding": "none", "norm": "layernorm", "residual": "sequential"}
_VARIANT |= dict.fromkeys(("attn_bias", "qkv_bias", "mlp_bias", "gated_mlp", "fused_qkv", "qk_norm"), False)
_VARIANT |= {"embed_norm": False, "head_bias": False}
_SWIGLU = _VARIANT | {"norm": "rmsnorm", "gated_mlp": True}
_QKV_ONLY = (
    "embeddings, blocks (biases on query, key and value only), final norm, {head}; rotary positions hold no parameters"
)
_ALIBI = "embeddings, blocks, final norm, {head}; ALiBi positions hold no parameters"

MODEL_TYPES: Mapping[str, ModelType] = MappingProxyType(
    {
        "gpt2": ModelType(
            family="decoder",
            model_class="GPT2LMHeadModel",
            sizes=_gpt2_sizes(50_257, 1024, 768, 12, 12),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_LEARNED_GPT,
            rules=(_CROSS,),
            counted="embeddings, blocks, final norm, {head}",
        ),
        "gpt_neox": ModelType(
            family="decoder",
            model_class="GPTNeoXForCausalLM",
            sizes=(
                *_sizes(50_432, 6144, 44, 64, 24_576, positions=True)[:-1],
                Size("num_kv_heads", "num_attention_heads", 64),
            ),
            head_dim=READ_NO_HEAD_DIM,
            fixed=_ROTARY | {"use_bias": True, "norm": "layernorm", "gated_mlp": False},
            rules=(Only("attention_bias", True, True, f"{_ONE_BIAS}, and GPT-NeoX's MLP always has them"),),
        ),
        "llama": ModelType(
            family="decoder",
            model_class="LlamaForCausalLM",
            sizes=_sizes(32_000, 4096, 32, 32, 11_008, positions=True),
            fixed=_LLAMA,
            quirks=("one_bias",),
        ),
        "mistral": ModelType(
            family="decoder",
            model_class="MistralForCausalLM",
            sizes=_sizes(32_000, 4096, 32, 32, 14_336, 8, positions=True),
            fixed=_LLAMA,
            quirks=("one_bias",),
        ),
        "gemma": ModelType(
            family="decoder",
            model_class="GemmaForCausalLM",
            sizes=_sizes(256_000, 3072, 28, 16, 24_576, 16, positions=True),
            head_dim=256,
            tied=True,
            fixed=_LLAMA,
            quirks=("one_bias",),
        ),
        "qwen2": ModelType(
            family="decoder",
            model_class="Qwen2ForCausalLM",
            sizes=_sizes(151_936, 4096, 32, 32, 22_016, 32, positions=True),
            fixed=_LLAMA | {"qkv_bias": True},
            counted="embeddings, blocks (biases on query, key and value only), final norm, {head}; "
            "rotary positions hold no parameters",
        ),
        "qwen3": ModelType(
            family="decoder",
            model_class="Qwen3ForCausalLM",
            sizes=_sizes(151_936, 4096, 32, 32, 22_016, 32),
            head_dim=128,
            fixed=_LLAMA | {"qk_norm": True},
            rules=(_no_projection_biases("Qwen3"),),
        ),
        "gemma2": ModelType(
            family="decoder",
            model_class="Gemma2ForCausalLM",
            sizes=_sizes(256_000, 2304, 26, 8, 9216, 4),
            head_dim=256,
            tied=True,
            fixed=_LLAMA | {"post_norms": True},
            rules=(_no_projection_biases("Gemma"),),
        ),
        "gemma3_text": ModelType(
            family="decoder",
            model_class="Gemma3ForCausalLM",
            sizes=_sizes(262_208, 2304, 26, 8, 9216, 4),
            head_dim=256,
            tied=True,
            fixed=_LLAMA | {"post_norms": True, "qk_norm": True},
            rules=(_no_projection_biases("Gemma"),),
        ),
        "phi3": ModelType(
            family="decoder",
            model_class="Phi3ForCausalLM",
            sizes=_sizes(32_064, 3072, 32, 32, 8192),
            fixed=_LLAMA | {"fused_projections": True},
        ),
        "mixtral": ModelType(
            family="moe",
            model_class="MixtralForCausalLM",
            sizes=(
                *_sizes(32_000, 4096, 32, 32, 14_336, 8),
                *_experts("num_local_experts", 8, 2, "intermediate_size", 14_336),
            ),
            fixed={"dense_layers": ()},
            counted=_MOE_COUNTED.replace("{what}", "routed experts in every block"),
        ),
        "qwen2_moe": ModelType(
            family="moe",
            model_class="Qwen2MoeForCausalLM",
            sizes=_sizes(151_936, 2048, 24, 16, 5632, 16)
            + _experts("num_experts", 60, 4, "moe_intermediate_size", 1408)
            + (Size("shared_ffn_dim", "shared_expert_intermediate_size", 5632),),
            flags=(Flag("qkv_bias", True, ("qkv_bias",)),),
            fixed={"shared_expert_gate": True},
            quirks=("shared_expert_width", "qwen_dense_layers"),
            counted=_MOE_COUNTED.replace("{what}", "routed experts, a gated shared expert{qkv}"),
        ),
        "qwen3_moe": ModelType(
            family="moe",
            model_class="Qwen3MoeForCausalLM",
            sizes=(
                *_sizes(151_936, 2048, 24, 32, 6144, 4),
                *_experts("num_experts", 128, 8, "moe_intermediate_size", 768),
            ),
            fixed={"qk_norm": True},
            rules=(NoBias(("attention_bias",), _QWEN3_MOE),),
            quirks=("qwen_dense_layers",),
            counted=_MOE_COUNTED.replace("{what}", "routed experts, query and key norms"),
        ),
        "deepseek_v2": ModelType(
            family="moe",
            model_class="DeepseekV2ForCausalLM",
            sizes=_sizes(102_400, 4096, 32, 32, 11_008, 32),
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla"},
            rules=(NoBias(("attention_bias", "mlp_bias"), _DEEPSEEK),),  # V2's MLPs read mlp_bias
            quirks=("deepseek_v2",),
            counted=_MOE_COUNTED.replace("{what}", "latent attention, routed and shared experts{dense}"),
        ),
        "deepseek_v3": ModelType(
            family="moe",
            model_class="DeepseekV3ForCausalLM",
            sizes=_sizes(129_280, 7168, 61, 128, 18_432, 128),
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla", "router_bias": True},
            rules=(NoBias(("attention_bias",), _DEEPSEEK),),  # V3's class ignores mlp_bias
            quirks=("deepseek_v3",),
            counted=_MOE_COUNTED.replace(
                "{what}",
                "latent attention, routed and shared experts{dense}; the router's score-correction bias is a buffer, "
                "not a parameter",
            ),
        ),
        "glm4_moe": ModelType(
            family="moe",
            model_class="Glm4MoeForCausalLM",
            sizes=(
                *_sizes(151_552, 4096, 46, 96, 10_944, 8),
                *_experts("n_routed_experts", 128, 8, "moe_intermediate_size", 1408),
            ),
            flags=(Flag("attention_bias", False, ("qkv_bias",)), Flag("use_qk_norm", False, ("qk_norm",))),
            fixed={"router_bias": True},
            quirks=("glm4_moe",),
            counted=_MOE_COUNTED.replace(
                "{what}",
                "grouped-query attention, routed and shared experts{dense}; the router's score-correction bias is "
                "a buffer, not a parameter",
            ),
        ),
        "gpt_oss": ModelType(
            family="moe",
            model_class="GptOssForCausalLM",
            sizes=(
                *_sizes(201_088, 2880, 36, 64, 2880, 8),
                *_experts("num_local_experts", 128, 4, "intermediate_size", 2880),
            ),
            head_dim=64,
            flags=(Flag("attention_bias", True, ("attn_bias",)),),
            fixed={"dense_layers": (), "attention_sinks": True, "expert_biases": True},
            counted=_MOE_COUNTED.replace(
                "{what}", "attention with biases and a sink logit a head, routed experts and their router with biases"
            ),
        ),
        "dbrx": ModelType(
            family="moe",
            model_class="DbrxForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 32_000),
                Size("d_model", "d_model", 2048),
                Size("num_layers", "n_layers", 24),
                Size("num_heads", "n_heads", 16),
                Size("max_positions", "max_seq_len", lenient=True),
            ),
            head_dim=READ_NO_HEAD_DIM,
            fixed={"dense_layers": (), "norm": "layernorm_no_bias"},
            quirks=("dbrx",),
            counted=_MOE_COUNTED.replace(
                "{what}", "fused query, key and value; LayerNorms without bias; routed experts in every block"
            ),
        ),
        "phimoe": ModelType(
            family="moe",
            model_class="PhimoeForCausalLM",
            sizes=(
                *_sizes(32_064, 4096, 32, 32, 6400, 8),
                *_experts("num_local_experts", 16, 2, "intermediate_size", 6400),
            ),
            flags=(Flag("attention_bias", False, ("attn_bias",)), Flag("lm_head_bias", False, ("head_bias",))),
            fixed={"dense_layers": (), "norm": "layernorm"},
            counted=_MOE_COUNTED.replace("{what}", "LayerNorms with biases, routed experts in every block"),
        ),
        "olmoe": ModelType(
            family="moe",
            model_class="OlmoeForCausalLM",
            sizes=(
                *_sizes(50_304, 2048, 16, 16, 2048),
                *_experts("num_experts", 64, 8, "intermediate_size", 2048),
            ),
            flags=(Flag("attention_bias", False, ("attn_bias",)),),
            fixed={"dense_layers": (), "qk_norm": True, "wide_qk_norm": True},
            counted=_MOE_COUNTED.replace("{what}", "query and key normed over every feature, routed experts"),
        ),
        **{
            model_type: ModelType(
                family="moe",
                model_class=model_class,
                sizes=(
                    *_sizes(32_000, 4096, 32, 32, 11_008),
                    *_experts("num_local_experts", 8, 2, "intermediate_size", 11_008),
                    *shared,
                ),
                flags=(Flag("attention_bias", False, ("attn_bias",)),),
                fixed={"dense_layers": ()},
                counted=_MOE_COUNTED.replace("{what}", what) + "; Granite's multipliers hold no parameters",
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
        "granite": ModelType(
            family="decoder",
            model_class="GraniteForCausalLM",
            sizes=_sizes(32_000, 4096, 32, 32, 11_008, positions=True),
            fixed=_LLAMA,
            quirks=("one_bias",),
            counted="embeddings, blocks, final norm, {head}; Granite's multipliers and rotary positions hold no "
            "parameters",
        ),
        "stablelm": ModelType(
            family="decoder",
            model_class="StableLmForCausalLM",
            sizes=_sizes(50_304, 2560, 32, 32, 6912, positions=True),
            head_dim=READ_NO_HEAD_DIM,
            flags=(Flag("use_qkv_bias", False, ("qkv_bias",)),),
            fixed=_ROTARY | {"use_bias": False, "norm": "layernorm", "gated_mlp": True},
            rules=(
                Only("qk_layernorm", False, False, "a LayerNorm for each query and key head, which no family builds"),
                Only("use_parallel_residual", False, False, "the parallel block has one norm fewer a block"),
            ),
            counted="embeddings, blocks (LayerNorms with biases), final norm, {head}; partial rotary positions hold "
            "no parameters",
        ),
        "nemotron": ModelType(
            family="decoder",
            model_class="NemotronForCausalLM",
            sizes=_sizes(256_000, 6144, 32, 48, 24_576, positions=True),
            fixed=_ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("one_bias",),
            counted="embeddings, blocks (LayerNorm1P: a scale and a bias; squared-ReLU MLP without a gate), final "
            "norm, {head}; partial rotary positions hold no parameters",
        ),
        "starcoder2": ModelType(
            family="decoder",
            model_class="Starcoder2ForCausalLM",
            sizes=_sizes(49_152, 3072, 30, 24, 12_288, 2, positions=True),
            tied=True,
            flags=(Flag("use_bias", True, ("use_bias",)),),
            fixed=_ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("tied_by_default",),
        ),
        "glm": ModelType(
            family="decoder",
            model_class="GlmForCausalLM",
            sizes=_sizes(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            fixed=_LLAMA,
            counted=_QKV_ONLY,
        ),
        "glm4": ModelType(
            family="decoder",
            model_class="Glm4ForCausalLM",
            sizes=_sizes(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            fixed=_LLAMA | {"post_norms": True},
            counted=_QKV_ONLY.replace("only)", "only; four norms a block)"),
        ),
        "gpt_bigcode": ModelType(
            family="decoder",
            model_class="GPTBigCodeForCausalLM",
            sizes=_gpt2_sizes(50_257, 1024, 768, 12, 12),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_LEARNED_GPT,
            rules=(_CROSS,),
            quirks=("multi_query", "tied_by_default"),
            counted="embeddings, blocks (one key/value head when multi_query), final norm, {head}",
        ),
        "opt": ModelType(
            family="decoder",
            model_class="OPTForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 50_272),
                Size("d_model", "hidden_size", 768),
                Size("num_layers", "num_hidden_layers", 12),
                Size("num_heads", "num_attention_heads", 12),
                Size("num_kv_heads", "num_attention_heads", 12),
                Size("ffn_dim", "ffn_dim", 3072),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=(Flag("enable_bias", True, ("use_bias",)),),
            fixed=_LEARNED_GPT,
            rules=(
                Only("do_layer_norm_before", True, True, "OPT-350m's post-norm blocks have no final norm"),
                Only("layer_norm_elementwise_affine", True, True, "norms without parameters are not OPT's"),
            ),
            quirks=("opt_positions",),
            counted="embeddings (a position table 2 rows longer than max_position_embeddings), blocks, final norm, "
            "{head}",
        ),
        "olmo": ModelType(
            family="variant",
            model_class="OlmoForCausalLM",
            sizes=_sizes(50_304, 4096, 32, 32, 11_008),
            flags=(Flag("attention_bias", False, ("attn_bias",)),),
            fixed=_SWIGLU | {"norm": "no_params"},
            counted="embeddings, blocks (LayerNorms without parameters), final norm (none either), {head}; rotary "
            "positions hold no parameters",
        ),
        "olmo2": ModelType(
            family="variant",
            model_class="Olmo2ForCausalLM",
            sizes=_sizes(50_304, 4096, 32, 32, 11_008),
            flags=(Flag("attention_bias", False, ("attn_bias",)),),
            fixed=_SWIGLU | {"residual": "post_norms", "qk_norm": True},
            counted="embeddings, blocks (norms after attention and the MLP, none before; query and key normed over "
            "every feature), final norm, {head}; rotary positions hold no parameters",
        ),
        "cohere": ModelType(
            family="variant",
            model_class="CohereForCausalLM",
            sizes=_sizes(256_000, 8192, 40, 64, 22_528),
            tied=True,
            flags=(Flag("attention_bias", False, ("attn_bias",)), Flag("use_qk_norm", False, ("qk_norm",))),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
            counted="embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; rotary "
            "positions and the logit scale hold no parameters",
        ),
        "cohere2": ModelType(
            family="variant",
            model_class="Cohere2ForCausalLM",
            sizes=_sizes(256_000, 8192, 40, 64, 22_528),
            head_dim=128,
            tied=True,
            flags=(Flag("attention_bias", False, ("attn_bias",)),),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
            counted="embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; sliding "
            "windows, rotary positions and the logit scale hold no parameters",
        ),
        "gptj": ModelType(
            family="variant",
            model_class="GPTJForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 50_400),
                Size("d_model", "n_embd", 4096),
                Size("num_layers", "n_layer", 28),
                Size("num_heads", "n_head", 16),
                Size("num_kv_heads", "n_head", 16),
                Size("ffn_dim", "n_inner", Same("d_model", 4)),
            ),
            head_dim=READ_NO_HEAD_DIM,
            fixed=_VARIANT | {"residual": "parallel", "mlp_bias": True, "head_bias": True},
            counted="embeddings, parallel blocks (biases in the MLP only), final norm, {head} with a bias; partial "
            "rotary positions hold no parameters",
        ),
        "falcon": ModelType(
            family="variant",
            model_class="FalconForCausalLM",
            sizes=(*_sizes(65_024, 4544, 32, 71, 0)[:4], Size("ffn_dim", "ffn_hidden_size", Same("d_model", 4))),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=(Flag("bias", False, ("attn_bias", "mlp_bias")),),
            fixed=_VARIANT | {"fused_qkv": True},
            quirks=("falcon",),
            counted="embeddings, blocks ({blocks}), final norm, {head}; rotary or ALiBi positions hold no parameters",
        ),
        "bloom": ModelType(
            family="variant",
            model_class="BloomForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 250_880),
                Size("d_model", "hidden_size", 64),
                Size("num_layers", "n_layer", 2),
                Size("num_heads", "n_head", 8),
                Size("num_kv_heads", "n_head", 8),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"attn_bias": True, "mlp_bias": True, "fused_qkv": True, "embed_norm": True},
            quirks=("bloom",),
            counted="embeddings and their LayerNorm, blocks, final norm, {head}; ALiBi positions hold no parameters",
        ),
        "mpt": ModelType(
            family="variant",
            model_class="MptForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 50_368),
                Size("d_model", "d_model", 2048),
                Size("num_layers", "n_layers", 24),
                Size("num_heads", "n_heads", 16),
                Size("num_kv_heads", "n_heads", 16),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"norm": "layernorm_no_bias", "fused_qkv": True},
            quirks=("mpt",),
            counted="embeddings, blocks (no biases, LayerNorms without bias), final norm, {head}; ALiBi positions "
            "hold no parameters",
        ),
        "phi": ModelType(
            family="variant",
            model_class="PhiForCausalLM",
            sizes=_sizes(51_200, 2048, 24, 32, 8192),
            fixed=_VARIANT | {"residual": "parallel", "attn_bias": True, "mlp_bias": True, "head_bias": True},
            rules=(Only("qk_layernorm", False, False, "a LayerNorm over each query and key head adds weights"),),
            counted="embeddings, parallel blocks (biases everywhere), final norm, {head} with a bias; partial rotary "
            "positions hold no parameters",
        ),
        "llama4_text": ModelType(
            family="moe",
            model_class="Llama4ForCausalLM",
            sizes=(
                Size("vocab_size", "vocab_size", 202_048),
                *_widths(5120, 48, 40, 16_384)[:3],
                Size("num_kv_heads", "num_key_value_heads", 8, Same("num_heads")),
                Size("ffn_dim", "intermediate_size_mlp", 16_384),
                *_experts("num_local_experts", 16, 1, "intermediate_size", 8192),
                Size("shared_ffn_dim", "intermediate_size", 8192),
            ),
            head_dim=128,
            flags=(Flag("attention_bias", False, ("attn_bias",)),),
            fixed={"shared_expert_gate": False},
            quirks=("llama4_moe_layers",),
            counted=_MOE_COUNTED.replace("{what}", "{blocks}")
            + "; chunked attention, NoPE blocks and the query/key L2 norm hold no parameters",
        ),
        "llama4": ModelType(
            family="llama4",
            model_class="Llama4ForConditionalGeneration",
            sizes=(),
            head_dim=READ_NO_HEAD_DIM,
            tied=None,
            quirks=("llama4_multimodal",),
            counted="vision tower (patch embedding, class and position embeddings, {vision} blocks with biases, "
            "pixel-shuffle adapter), projector, language model ({text}); rotary positions hold no parameters",
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
        "bert": ModelType(
            family="bert",
            model_class="BertModel",
            sizes=_BERT_SIZES,
            head_dim=READ_NO_HEAD_DIM,
            tied=None,
            rules=_BERT_RULES,
            counted=_BERT_COUNTED,
        ),
        "roberta": ModelType(
            family="bert",
            model_class="RobertaModel",
            sizes=(Size("vocab_size", "vocab_size", 50_265), *_BERT_SIZES[1:]),
            head_dim=READ_NO_HEAD_DIM,
            tied=None,
            rules=_BERT_RULES,
            counted=_BERT_COUNTED.replace("embeddings", "embeddings (the position table as long as the file says)"),
        ),
        "xlm-roberta": ModelType(
            family="bert",
            model_class="XLMRobertaModel",
            sizes=_BERT_SIZES,
            head_dim=READ_NO_HEAD_DIM,
            tied=None,
            rules=_BERT_RULES,
            counted=_BERT_COUNTED.replace("embeddings", "embeddings (the position table as long as the file says)"),
        ),
        "vit": ModelType(
            family="vit",
            model_class="ViTForImageClassification",
            sizes=(
                Size("image_size", "image_size", 224),
                Size("patch_size", "patch_size", 16),
                *_widths(768, 12, 12, 3072),
            ),
            head_dim=READ_NO_HEAD_DIM,
            tied=None,
            rules=(
                Only("num_channels", 3, 3, "the patch convolution is counted on 3-channel images"),
                Only("qkv_bias", True, True, "dcsim's ViT has biases on every projection"),
            ),
            quirks=("labels",),
            counted="patch embedding, encoder, final norm, a classifier over {labels} labels",
        ),
    }
)


_MOE_NEAR = "mixtral (moe): routed experts, but not this type's"
# Hub model types dcsim does not read yet: what their blocks hold that no family builds, and the
# nearest type it reads. A refusal names them; docs/presets.md lists the rest as refused.
NOT_YET: Mapping[str, str] = MappingProxyType(
    {
        "mamba": "state-space layers (conv1d, x and dt projections, A_log, D); no family is near",
        "mamba2": "state-space layers (conv1d, x and dt projections, A_log, D); no family is near",
        "jamba": "Mamba layers between attention layers, experts every other layer; no family is near",
        "bart": "an encoder-decoder with learned positions; the nearest is t5 (t5), whose positions differ",
        "mbart": "an encoder-decoder with learned positions; the nearest is t5 (t5), whose positions differ",
        "whisper": "an audio encoder (two convolutions) and a decoder; the nearest is t5 (t5)",
        "llava": "a vision tower, a projector and a language model; open the text_config's model alone",
        "qwen2_5_vl": "a vision tower and merger beside Qwen2; the nearest is qwen2 (decoder), for text",
        "gemma3": "a SigLIP tower and a projector beside Gemma 3; the nearest is gemma3_text (decoder), for text",
        "mistral3": "a Pixtral tower and a projector beside Mistral; the nearest is mistral (decoder), for text",
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


def markdown_table() -> str:
    """docs/presets.md's table of model types, written from ``MODEL_TYPES`` (a test keeps the two equal)."""
    lines = ["| `model_type` | family | counted as | quirks | refused unless as built |", "|---|---|---|---|---|"]
    for model_type, entry in MODEL_TYPES.items():
        quirks = entry.quirk_words() or "none"
        row = f"| `{model_type}` | {entry.family} | `{entry.model_class}` | {quirks} | {entry.refused() or 'none'} |"
        lines.append(row)
    return "\n".join(lines)
