"""Every Hugging Face ``model_type`` dcsim opens, as data: one ``ModelType`` an entry.

An entry says which dcsim family builds the model, which config.json fields become which of the
family's hyperparameters (each with the default of transformers' own configuration class for that
type, so a bare ``{"model_type": "llama"}`` is ``LlamaConfig()``), the hyperparameters the model
class hard-codes (its quirks), the fields it refuses by name because no family builds them, and
the few readings a table cannot say (``quirks``: names of functions in ``dcsim.hf.readers``).
Adding a llama-like type is a few lines here and a test with its published count. Tables of fields
read as they are (Mamba's sizes, Jamba's layout, Llama 4's vision tower) are in ``sizes.json``.

Pure data, no JAX: ``dcsim.hf`` refuses an unknown type from this table before any model is built,
and ``tests/test_docs.py`` writes docs/presets.md's table of model types from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim import shipped
from dcsim.inputs import reject_unknown, show


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
class Nested:
    """How a vision-language model's ``text_config`` and ``vision_config`` are read, as its
    transformers configuration class reads them.

    Attributes:
      text_type, vision_type: the entry (of ``MODEL_TYPES`` or ``PARTS``) each part is read by when
        it names no ``model_type``, or always, unless ``text_auto`` / ``vision_auto`` (the class
        resolves the part by its ``model_type``, as ``AutoConfig`` does).
      text, vision: the part's fields when the file has no such part (the class's ``init_kwargs``);
        a part the file has takes its own class's defaults instead.
      top_level_text: the text fields may sit at the top level (Qwen2.5-VL's Hub files).
      tied: the class's default of the top-level ``tie_word_embeddings``, which decides the head;
        ``tie_from_text``: a ``text_config`` that ties ties it too (LLaVA, Qwen2.5-VL).
    """

    text_type: str
    vision_type: str
    text_auto: bool = True
    vision_auto: bool = True
    text: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vision: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    top_level_text: bool = False
    tied: bool = True
    tie_from_text: bool = False

    def words(self) -> list[str]:
        """How the parts are read, for the docs' table."""
        text_key = "text_config (or the top level)" if self.top_level_text else "text_config"
        return [
            _read_as(text_key, self.text_type, self.text_auto),
            _read_as("vision_config", self.vision_type, self.vision_auto),
        ]


def _read_as(key: str, kind: str, auto: bool) -> str:
    return f"{key} as its model_type (default {kind})" if auto else f"{key} as {kind}"


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
      nested: a vision-language model's parts, read by the ``vision_language`` quirk.
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
    nested: Nested | None = None

    def quirk_words(self) -> str:
        """What sets this type apart, for the docs' table: the hyperparameters it hard-codes and
        its readings beyond the table."""
        fixed = [name if value is True else f"{name}={value}" for name, value in self.fixed.items() if value]
        flags = [f"{flag.key} -> {'/'.join(flag.names)}" for flag in self.flags]
        tied = ["head tied by default"] if self.tied or (self.nested and self.nested.tied) else []
        parts = self.nested.words() if self.nested else []
        return ", ".join(fixed + flags + tied + parts + list(self.quirks))

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


def _encdec_sizes(
    vocab: int, d_model: int, layers: int, heads: int, ffn: int, target: tuple[str, int], source: tuple[str, int]
) -> tuple[Size, ...]:
    """An encoder-decoder's sizes under BART's and Whisper's names (``encoder_layers``,
    ``decoder_attention_heads``, ...), each stack at the same defaults; ``target`` and ``source``:
    the field and default of the decoder's and the encoder's positions."""
    stacks: tuple[tuple[str, str, int], ...] = (
        ("num_layers", "encoder_layers", layers),
        ("num_decoder_layers", "decoder_layers", layers),
        ("num_heads", "encoder_attention_heads", heads),
        ("num_decoder_heads", "decoder_attention_heads", heads),
        ("ffn_dim", "encoder_ffn_dim", ffn),
        ("decoder_ffn_dim", "decoder_ffn_dim", ffn),
    )
    return (
        Size("vocab_size", "vocab_size", vocab),
        Size("d_model", "d_model", d_model),
        *(Size(name, key, default) for name, key, default in stacks),
        Size("max_positions", *target),
        Size("source_positions", *source),
    )


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
_MOE_COUNTED = "embeddings, blocks ({what}), final norm, {head}; rotary positions hold no parameters"

# The variant family's hyperparameters with every quirk off; an entry turns on its own.
_VARIANT: dict[str, Any] = {"position_embedding": "none", "norm": "layernorm", "residual": "sequential"}
_VARIANT |= dict.fromkeys(("attn_bias", "qkv_bias", "mlp_bias", "gated_mlp", "fused_qkv", "qk_norm"), False)
_VARIANT |= {"embed_norm": False, "head_bias": False}
_SWIGLU = _VARIANT | {"norm": "rmsnorm", "gated_mlp": True}
_QKV_ONLY = (
    "embeddings, blocks (biases on query, key and value only), final norm, {head}; rotary positions hold no parameters"
)


# Tables of config.json fields read as they are, a row a field: [the hyperparameter, the field, the
# default of transformers' configuration class]. ``mamba``: MambaConfig's sizes; ``jamba``: Jamba's
# layout (one attention block in attn_period, experts in one block of expert_period) and mixer;
# ``llama4_vision``: Llama4VisionConfig's (``dcsim.hf.llama4``). JSON, as the start-up path reads it.
_SIZE_TABLES = shipped.load(__file__, "sizes.json")
reject_unknown(_SIZE_TABLES, ("mamba", "jamba", "llama4_vision"), "sizes.json")


def size_table(key: str) -> tuple[tuple[str, str, int], ...]:
    """``sizes.json``'s table ``key``: (hyperparameter, config.json field, the class's default) rows."""
    rows = _SIZE_TABLES.get(key)
    if not isinstance(rows, list):
        raise TypeError(f"dcsim/hf/sizes.json must hold an array `{key}`, got {show(rows)}")
    for index, row in enumerate(rows):
        if not (isinstance(row, list) and [type(item) for item in row] == [str, str, int]):
            raise TypeError(f"dcsim/hf/sizes.json `{key}` row {index} must be [name, field, default], got {show(row)}")
    return tuple((name, field, default) for name, field, default in rows)


def _named(key: str) -> tuple[Size, ...]:
    """A ``Size`` of each (hyperparameter, field, default) of ``sizes.json``'s table ``key``."""
    return tuple(Size(name, field, default) for name, field, default in size_table(key))


def _mixer_biases(projections: str, conv: str) -> tuple[Flag, ...]:
    """A Mamba mixer's two bias switches: on in_proj and out_proj (off by default), on the conv (on)."""
    return Flag(projections, False, ("use_bias",)), Flag(conv, True, ("conv_bias",))


_ALIBI = "embeddings, blocks, final norm, {head}; ALiBi positions hold no parameters"

# Vision-language models (issue 30): a vision tower and a projector read from ``vision_config`` by
# an entry of ``PARTS``, a language model read from ``text_config`` by its own type's entry.
_CHANNELS = Only("num_channels", 3, 3, "the patch convolution is counted on 3-channel images")
_VISION = "multimodal"
_VLM_COUNTED = "the vision tower ({vision}), the projector ({projector}) and the language model ({text}), {head}"


_WIDTH_KEYS = tuple(key for _, key in _SIZE_KEYS)


def _vision_sizes(
    hidden: int,
    layers: int,
    heads: int,
    ffn: int,
    patch: int,
    keys: tuple[str, ...] = _WIDTH_KEYS,
) -> tuple[Size, ...]:
    """A vision config's widths (under ``keys``: by default as ``_widths`` names them) at these
    defaults, as the tower's, and its patch size."""
    names = ("vision_d_model", "vision_layers", "vision_heads", "vision_ffn_dim")
    sizes = (
        Size(name, key, default) for name, key, default in zip(names, keys, (hidden, layers, heads, ffn), strict=True)
    )
    return (*sizes, Size("patch_size", "patch_size", patch))


def _headless(family: str, model_class: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
    """An entry whose model has no output head of its own (an encoder, a vision tower, a model of
    parts), so no head width or tie is read."""
    return ModelType(
        family=family,
        model_class=model_class,
        sizes=sizes,
        head_dim=READ_NO_HEAD_DIM,
        tied=None,
        counted=counted,
        **more,
    )


def _tower(model_class: str, tower: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
    """A vision_config's entry: ``tower`` of the multimodal family, on 3-channel images."""
    more.setdefault("rules", (_CHANNELS,))
    fixed = {"vision_tower": tower} | more.pop("fixed", {})
    return _headless(_VISION, model_class, sizes, counted, fixed=fixed, **more)


def _vision_language(model_class: str, nested: Nested, projector: str | None, **more: Any) -> ModelType:
    """A vision-language model's entry: its parts read by the ``vision_language`` quirk."""
    return _headless(
        _VISION,
        model_class,
        more.pop("sizes", ()),
        _VLM_COUNTED + more.pop("aside", ""),
        fixed={"projector": projector} if projector else {},
        quirks=("vision_language",),
        nested=nested,
        **more,
    )


_LLAVA_CLIP = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16}
_LLAVA_CLIP |= {"image_size": 336, "patch_size": 14}
_MISTRAL_SMALL: dict[str, int | None] = {
    "hidden_size": 5120,
    "intermediate_size": 32_768,
    "num_hidden_layers": 40,
    "head_dim": 128,
}
_MISTRAL_SMALL |= {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 131_072}
_MISTRAL_SMALL |= {"max_position_embeddings": 131_072, "sliding_window": None}
_PIXTRAL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16}
_PIXTRAL |= {"image_size": 1540, "patch_size": 14}
_QWEN25_VL = Nested(text_type="qwen2_5_vl_text", vision_type="qwen2_5_vl_vision", text_auto=False, vision_auto=False)
_QWEN25_VL = dataclasses.replace(_QWEN25_VL, top_level_text=True, tied=False, tie_from_text=True)
VISION_LANGUAGE: Mapping[str, ModelType] = MappingProxyType(
    {
        "llava": _vision_language(
            "LlavaForConditionalGeneration",
            Nested(
                text_type="llama", vision_type="clip_vision_model", vision=_LLAVA_CLIP, tied=False, tie_from_text=True
            ),
            "mlp",
            flags=(Flag("multimodal_projector_bias", True, ("projector_bias",)),),
        ),
        "gemma3": _vision_language(
            "Gemma3ForConditionalGeneration",
            Nested(text_type="gemma3_text", vision_type="siglip_vision_model", text_auto=False),
            "soft_embedding",
            aside="; the average pooling to mm_tokens_per_image holds no parameters",
        ),
        "mistral3": _vision_language(
            "Mistral3ForConditionalGeneration",
            Nested(text_type="mistral", vision_type="pixtral", text=_MISTRAL_SMALL, vision=_PIXTRAL),
            "merger_mlp",
            sizes=(Size("merge_size", "spatial_merge_size", 2),),
            flags=(Flag("multimodal_projector_bias", False, ("projector_bias",)),),
        ),
        "qwen2_5_vl": _vision_language(
            "Qwen2_5_VLForConditionalGeneration",
            _QWEN25_VL,
            None,
        ),
    }
)

# One constructor a family: an entry below says only what sets its type apart.
_ATTN_BIAS = Flag("attention_bias", False, ("attn_bias",))
_EVERY_BLOCK = {"dense_layers": ()}  # routed experts in every block, none dense
_ROBERTA_COUNTED = _BERT_COUNTED.replace("embeddings", "embeddings (the position table as long as the file says)")


def _decoder(model_class: str, sizes: tuple[Size, ...], **more: Any) -> ModelType:
    """An entry of the decoder family."""
    return ModelType(family="decoder", model_class=model_class, sizes=sizes, **more)


def _llama(model_class: str, sizes: tuple[Size, ...], **more: Any) -> ModelType:
    """A decoder with Llama's blocks (rotary positions, RMSNorms, a SwiGLU MLP, no biases), and
    the entry's ``fixed`` on top."""
    return _decoder(model_class, sizes, fixed=_LLAMA | more.pop("fixed", {}), **more)


def _learned_gpt(model_class: str, **more: Any) -> ModelType:
    """A decoder with GPT-2's blocks (learned positions, biases, LayerNorms, a plain MLP), read
    under GPT-2's names at GPT-2 small's defaults, its head tied by default."""
    return _decoder(
        model_class,
        _gpt2_sizes(50_257, 1024, 768, 12, 12),
        head_dim=READ_NO_HEAD_DIM,
        tied=True,
        fixed=_LEARNED_GPT,
        rules=(_CROSS,),
        **more,
    )


def _moe(model_class: str, sizes: tuple[Size, ...], what: str, *, aside: str = "", **more: Any) -> ModelType:
    """An entry of the moe family; ``what`` its blocks hold, said as ``_MOE_COUNTED`` says it."""
    counted = _MOE_COUNTED.replace("{what}", what) + aside
    return ModelType(family="moe", model_class=model_class, sizes=sizes, counted=counted, **more)


def _variant(model_class: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
    """An entry of the variant family (its ``fixed`` switches the family's quirks on)."""
    return ModelType(family="variant", model_class=model_class, sizes=sizes, counted=counted, **more)


def _bert(model_class: str, sizes: tuple[Size, ...], counted: str) -> ModelType:
    """An encoder of the bert family, read by BERT's rules."""
    return _headless("bert", model_class, sizes, counted, rules=_BERT_RULES)


def _one_heads_field(vocab: int, keys: tuple[str, str, str], d_model: int, layers: int, heads: int) -> tuple[Size, ...]:
    """vocab_size, then the width, the depth and the heads under ``keys`` at these defaults, the
    key/value heads read from the heads' field too (the class has no grouped-query attention)."""
    width, depth, heads_key = keys
    return (
        Size("vocab_size", "vocab_size", vocab),
        Size("d_model", width, d_model),
        Size("num_layers", depth, layers),
        Size("num_heads", heads_key, heads),
        Size("num_kv_heads", heads_key, heads),
    )


_OLMO = _variant(
    "OlmoForCausalLM",
    _sizes(50_304, 4096, 32, 32, 11_008),
    "embeddings, blocks (LayerNorms without parameters), final norm (none either), {head}; rotary "
    "positions hold no parameters",
    flags=(_ATTN_BIAS,),
    fixed=_SWIGLU | {"norm": "no_params"},
)


MODEL_TYPES: Mapping[str, ModelType] = MappingProxyType(
    {
        "gpt2": _learned_gpt("GPT2LMHeadModel", counted="embeddings, blocks, final norm, {head}"),
        "gpt_neox": _decoder(
            "GPTNeoXForCausalLM",
            (
                *_sizes(50_432, 6144, 44, 64, 24_576, positions=True)[:-1],
                Size("num_kv_heads", "num_attention_heads", 64),
            ),
            head_dim=READ_NO_HEAD_DIM,
            fixed=_ROTARY | {"use_bias": True, "norm": "layernorm", "gated_mlp": False},
            rules=(Only("attention_bias", True, True, f"{_ONE_BIAS}, and GPT-NeoX's MLP always has them"),),
        ),
        "llama": _llama("LlamaForCausalLM", _sizes(32_000, 4096, 32, 32, 11_008, positions=True), quirks=("one_bias",)),
        "mistral": _llama(
            "MistralForCausalLM", _sizes(32_000, 4096, 32, 32, 14_336, 8, positions=True), quirks=("one_bias",)
        ),
        "gemma": _llama(
            "GemmaForCausalLM",
            _sizes(256_000, 3072, 28, 16, 24_576, 16, positions=True),
            head_dim=256,
            tied=True,
            quirks=("one_bias",),
        ),
        "qwen2": _llama(
            "Qwen2ForCausalLM",
            _sizes(151_936, 4096, 32, 32, 22_016, 32, positions=True),
            fixed={"qkv_bias": True},
            counted=_QKV_ONLY,
        ),
        "qwen3": _llama(
            "Qwen3ForCausalLM",
            _sizes(151_936, 4096, 32, 32, 22_016, 32),
            head_dim=128,
            fixed={"qk_norm": True},
            rules=(_no_projection_biases("Qwen3"),),
        ),
        **{  # Gemma 2's blocks, and Gemma 3's: the same with query and key norms
            model_type: _llama(
                model_class,
                _sizes(vocab, 2304, 26, 8, 9216, 4),
                head_dim=256,
                tied=True,
                fixed={"post_norms": True} | qk_norm,
                rules=(_no_projection_biases("Gemma"),),
            )
            for model_type, model_class, vocab, qk_norm in (
                ("gemma2", "Gemma2ForCausalLM", 256_000, {}),
                ("gemma3_text", "Gemma3ForCausalLM", 262_208, {"qk_norm": True}),
            )
        },
        "phi3": _llama("Phi3ForCausalLM", _sizes(32_064, 3072, 32, 32, 8192), fixed={"fused_projections": True}),
        "mixtral": _moe(
            "MixtralForCausalLM",
            (
                *_sizes(32_000, 4096, 32, 32, 14_336, 8),
                *_experts("num_local_experts", 8, 2, "intermediate_size", 14_336),
            ),
            "routed experts in every block",
            fixed=_EVERY_BLOCK,
        ),
        "qwen2_moe": _moe(
            "Qwen2MoeForCausalLM",
            _sizes(151_936, 2048, 24, 16, 5632, 16)
            + _experts("num_experts", 60, 4, "moe_intermediate_size", 1408)
            + (Size("shared_ffn_dim", "shared_expert_intermediate_size", 5632),),
            "routed experts, a gated shared expert{qkv}",
            flags=(Flag("qkv_bias", True, ("qkv_bias",)),),
            fixed={"shared_expert_gate": True},
            quirks=("shared_expert_width", "qwen_dense_layers"),
        ),
        "qwen3_moe": _moe(
            "Qwen3MoeForCausalLM",
            (*_sizes(151_936, 2048, 24, 32, 6144, 4), *_experts("num_experts", 128, 8, "moe_intermediate_size", 768)),
            "routed experts, query and key norms",
            fixed={"qk_norm": True},
            rules=(NoBias(("attention_bias",), _QWEN3_MOE),),
            quirks=("qwen_dense_layers",),
        ),
        "deepseek_v2": _moe(
            "DeepseekV2ForCausalLM",
            _sizes(102_400, 4096, 32, 32, 11_008, 32),
            "latent attention, routed and shared experts{dense}",
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla"},
            rules=(NoBias(("attention_bias", "mlp_bias"), _DEEPSEEK),),  # V2's MLPs read mlp_bias
            quirks=("deepseek_v2",),
        ),
        "deepseek_v3": _moe(
            "DeepseekV3ForCausalLM",
            _sizes(129_280, 7168, 61, 128, 18_432, 128),
            "latent attention, routed and shared experts{dense}; the router's score-correction bias is a buffer, "
            "not a parameter",
            head_dim=READ_NO_HEAD_DIM,
            fixed={"attention": "mla", "router_bias": True},
            rules=(NoBias(("attention_bias",), _DEEPSEEK),),  # V3's class ignores mlp_bias
            quirks=("deepseek_v3",),
        ),
        "glm4_moe": _moe(
            "Glm4MoeForCausalLM",
            (
                *_sizes(151_552, 4096, 46, 96, 10_944, 8),
                *_experts("n_routed_experts", 128, 8, "moe_intermediate_size", 1408),
            ),
            "grouped-query attention, routed and shared experts{dense}; the router's score-correction bias is "
            "a buffer, not a parameter",
            flags=(Flag("attention_bias", False, ("qkv_bias",)), Flag("use_qk_norm", False, ("qk_norm",))),
            fixed={"router_bias": True},
            quirks=("glm4_moe",),
        ),
        "gpt_oss": _moe(
            "GptOssForCausalLM",
            (
                *_sizes(201_088, 2880, 36, 64, 2880, 8),
                *_experts("num_local_experts", 128, 4, "intermediate_size", 2880),
            ),
            "attention with biases and a sink logit a head, routed experts and their router with biases",
            head_dim=64,
            flags=(Flag("attention_bias", True, ("attn_bias",)),),
            fixed=_EVERY_BLOCK | {"attention_sinks": True, "expert_biases": True},
        ),
        "dbrx": _moe(
            "DbrxForCausalLM",
            (
                *_one_heads_field(32_000, ("d_model", "n_layers", "n_heads"), 2048, 24, 16)[:4],  # kv: the dbrx quirk
                Size("max_positions", "max_seq_len", lenient=True),
            ),
            "fused query, key and value; LayerNorms without bias; routed experts in every block",
            head_dim=READ_NO_HEAD_DIM,
            fixed=_EVERY_BLOCK | {"norm": "layernorm_no_bias"},
            quirks=("dbrx",),
        ),
        "phimoe": _moe(
            "PhimoeForCausalLM",
            (*_sizes(32_064, 4096, 32, 32, 6400, 8), *_experts("num_local_experts", 16, 2, "intermediate_size", 6400)),
            "LayerNorms with biases, routed experts in every block",
            flags=(_ATTN_BIAS, Flag("lm_head_bias", False, ("head_bias",))),
            fixed=_EVERY_BLOCK | {"norm": "layernorm"},
        ),
        "olmoe": _moe(
            "OlmoeForCausalLM",
            (*_sizes(50_304, 2048, 16, 16, 2048), *_experts("num_experts", 64, 8, "intermediate_size", 2048)),
            "query and key normed over every feature, routed experts",
            flags=(_ATTN_BIAS,),
            fixed=_EVERY_BLOCK | {"qk_norm": True, "wide_qk_norm": True},
        ),
        **{
            model_type: _moe(
                model_class,
                (
                    *_sizes(32_000, 4096, 32, 32, 11_008),
                    *_experts("num_local_experts", 8, 2, "intermediate_size", 11_008),
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
        "granite": _llama(
            "GraniteForCausalLM",
            _sizes(32_000, 4096, 32, 32, 11_008, positions=True),
            quirks=("one_bias",),
            counted="embeddings, blocks, final norm, {head}; Granite's multipliers and rotary positions hold no "
            "parameters",
        ),
        "stablelm": _decoder(
            "StableLmForCausalLM",
            _sizes(50_304, 2560, 32, 32, 6912, positions=True),
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
        "nemotron": _decoder(
            "NemotronForCausalLM",
            _sizes(256_000, 6144, 32, 48, 24_576, positions=True),
            fixed=_ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("one_bias",),
            counted="embeddings, blocks (LayerNorm1P: a scale and a bias; squared-ReLU MLP without a gate), final "
            "norm, {head}; partial rotary positions hold no parameters",
        ),
        "starcoder2": _decoder(
            "Starcoder2ForCausalLM",
            _sizes(49_152, 3072, 30, 24, 12_288, 2, positions=True),
            tied=True,
            flags=(Flag("use_bias", True, ("use_bias",)),),
            fixed=_ROTARY | {"norm": "layernorm", "gated_mlp": False},
            quirks=("tied_by_default",),
        ),
        "glm": _llama(
            "GlmForCausalLM",
            _sizes(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            counted=_QKV_ONLY,
        ),
        "glm4": _llama(
            "Glm4ForCausalLM",
            _sizes(151_552, 4096, 40, 32, 13_696, 2, positions=True),
            head_dim=128,
            flags=(Flag("attention_bias", True, ("qkv_bias",)),),
            fixed={"post_norms": True},
            counted=_QKV_ONLY.replace("only)", "only; four norms a block)"),
        ),
        "gpt_bigcode": _learned_gpt(
            "GPTBigCodeForCausalLM",
            quirks=("multi_query", "tied_by_default"),
            counted="embeddings, blocks (one key/value head when multi_query), final norm, {head}",
        ),
        "opt": _decoder(
            "OPTForCausalLM",
            (
                *_one_heads_field(50_272, ("hidden_size", "num_hidden_layers", "num_attention_heads"), 768, 12, 12),
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
        "cohere": _variant(
            "CohereForCausalLM",
            _sizes(256_000, 8192, 40, 64, 22_528),
            "embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; rotary "
            "positions and the logit scale hold no parameters",
            tied=True,
            flags=(_ATTN_BIAS, Flag("use_qk_norm", False, ("qk_norm",))),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
        ),
        "cohere2": _variant(
            "Cohere2ForCausalLM",
            _sizes(256_000, 8192, 40, 64, 22_528),
            "embeddings, parallel blocks (one LayerNorm without bias each), final norm, {head}; sliding "
            "windows, rotary positions and the logit scale hold no parameters",
            head_dim=128,
            tied=True,
            flags=(_ATTN_BIAS,),
            fixed=_SWIGLU | {"norm": "layernorm_no_bias", "residual": "parallel"},
        ),
        "gptj": _variant(
            "GPTJForCausalLM",
            (
                *_one_heads_field(50_400, ("n_embd", "n_layer", "n_head"), 4096, 28, 16),
                Size("ffn_dim", "n_inner", Same("d_model", 4)),
            ),
            "embeddings, parallel blocks (biases in the MLP only), final norm, {head} with a bias; partial "
            "rotary positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            fixed=_VARIANT | {"residual": "parallel", "mlp_bias": True, "head_bias": True},
        ),
        "falcon": _variant(
            "FalconForCausalLM",
            (*_sizes(65_024, 4544, 32, 71, 0)[:4], Size("ffn_dim", "ffn_hidden_size", Same("d_model", 4))),
            "embeddings, blocks ({blocks}), final norm, {head}; rotary or ALiBi positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=(Flag("bias", False, ("attn_bias", "mlp_bias")),),
            fixed=_VARIANT | {"fused_qkv": True},
            quirks=("falcon",),
        ),
        "bloom": _variant(
            "BloomForCausalLM",
            _one_heads_field(250_880, ("hidden_size", "n_layer", "n_head"), 64, 2, 8),
            "embeddings and their LayerNorm, blocks, final norm, {head}; ALiBi positions hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"attn_bias": True, "mlp_bias": True, "fused_qkv": True, "embed_norm": True},
            quirks=("bloom",),
        ),
        "mpt": _variant(
            "MptForCausalLM",
            _one_heads_field(50_368, ("d_model", "n_layers", "n_heads"), 2048, 24, 16),
            "embeddings, blocks (no biases, LayerNorms without bias), final norm, {head}; ALiBi positions "
            "hold no parameters",
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            fixed=_VARIANT | {"norm": "layernorm_no_bias", "fused_qkv": True},
            quirks=("mpt",),
        ),
        "phi": _variant(
            "PhiForCausalLM",
            _sizes(51_200, 2048, 24, 32, 8192),
            "embeddings, parallel blocks (biases everywhere), final norm, {head} with a bias; partial rotary "
            "positions hold no parameters",
            fixed=_VARIANT | {"residual": "parallel", "attn_bias": True, "mlp_bias": True, "head_bias": True},
            rules=(Only("qk_layernorm", False, False, "a LayerNorm over each query and key head adds weights"),),
        ),
        "mamba": ModelType(
            family="mamba",
            model_class="MambaForCausalLM",
            sizes=_named("mamba"),
            head_dim=READ_NO_HEAD_DIM,
            tied=True,
            flags=_mixer_biases("use_bias", "use_conv_bias"),
            counted="embeddings, blocks (an RMSNorm and a Mamba mixer each), final norm, {head}; no positions",
            quirks=("mamba",),
        ),
        "jamba": ModelType(
            family="jamba",
            model_class="JambaForCausalLM",
            sizes=(
                *_sizes(65_536, 4096, 32, 32, 14_336, 8),
                *_named("jamba"),
            ),
            head_dim=READ_NO_HEAD_DIM,
            flags=_mixer_biases("mamba_proj_bias", "mamba_conv_bias"),
            rules=(Only("head_dim", None, None, "Jamba's heads are hidden_size / num_attention_heads wide"),),
            quirks=("jamba",),
            counted="embeddings, blocks (Mamba mixers with norms on dt, B and C, or grouped-query attention; a "
            "dense MLP or routed experts), final norm, {head}; no positions",
        ),
        "llama4_text": _moe(
            "Llama4ForCausalLM",
            (
                Size("vocab_size", "vocab_size", 202_048),
                *_widths(5120, 48, 40, 16_384)[:3],
                Size("num_kv_heads", "num_key_value_heads", 8, Same("num_heads")),
                Size("ffn_dim", "intermediate_size_mlp", 16_384),
                *_experts("num_local_experts", 16, 1, "intermediate_size", 8192),
                Size("shared_ffn_dim", "intermediate_size", 8192),
            ),
            "{blocks}",
            aside="; chunked attention, NoPE blocks and the query/key L2 norm hold no parameters",
            head_dim=128,
            flags=(_ATTN_BIAS,),
            fixed={"shared_expert_gate": False},
            quirks=("llama4_moe_layers",),
        ),
        "llama4": _headless(
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
            sizes=_encdec_sizes(
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
                *_encdec_sizes(51_865, 384, 4, 6, 1536, ("max_target_positions", 448), ("max_source_positions", 1500)),
                Size("audio_bins", "num_mel_bins", 80),
            ),
            fixed=_ENCDEC | {"pre_norm": True, "key_bias": False},
            counted="two convolutions over the mel bins, the encoder's sinusoidal positions (max_source_positions "
            "rows: frozen, but a parameter that num_parameters() counts and the checkpoint stores), learned decoder "
            "positions, pre-norm encoder and decoder blocks (no bias on the keys) with cross-attention and a final "
            "norm each, {head}",
        ),
        "bert": _bert("BertModel", _BERT_SIZES, _BERT_COUNTED),
        "roberta": _bert(
            "RobertaModel", (Size("vocab_size", "vocab_size", 50_265), *_BERT_SIZES[1:]), _ROBERTA_COUNTED
        ),
        "xlm-roberta": _bert("XLMRobertaModel", _BERT_SIZES, _ROBERTA_COUNTED),
        "vit": _headless(
            "vit",
            "ViTForImageClassification",
            (Size("image_size", "image_size", 224), Size("patch_size", "patch_size", 16), *_widths(768, 12, 12, 3072)),
            "patch embedding, encoder, final norm, a classifier over {labels} labels",
            rules=(_CHANNELS, Only("qkv_bias", True, True, "dcsim's ViT has biases on every projection")),
            quirks=("labels",),
        ),
        **VISION_LANGUAGE,
    }
)


# The configurations a vision-language model nests that are no model type of their own.
PARTS: Mapping[str, ModelType] = MappingProxyType(
    {
        "clip_vision_model": _tower(
            "CLIPVisionModel",
            "clip",
            (*_vision_sizes(768, 12, 12, 3072, 32), Size("image_size", "image_size", 224)),
            "CLIP: patch convolution without bias, class token, position table, pre- and post-norm, blocks",
        ),
        "siglip_vision_model": _tower(
            "SiglipVisionModel",
            "siglip",
            (*_vision_sizes(768, 12, 12, 3072, 16), Size("image_size", "image_size", 224)),
            "SigLIP: patch convolution, position table, blocks, post-norm",
            flags=(Flag("vision_use_head", True, ("vision_head",)),),
        ),
        "pixtral": _tower(
            "PixtralVisionModel",
            "pixtral",
            _vision_sizes(1024, 24, 16, 4096, 16),
            "Pixtral: patch convolution without bias, RMSNorms, gated blocks without biases; 2D rotary positions "
            "hold no parameters",
        ),
        "qwen2_5_vl_vision": _tower(
            "Qwen2_5_VisionTransformerPretrainedModel",
            "qwen2_5_vl",
            (
                *_vision_sizes(3584, 32, 16, 3420, 14, keys=("hidden_size", "depth", "num_heads", "intermediate_size")),
                Size("temporal_patch_size", "temporal_patch_size", 2),
                Size("merge_size", "spatial_merge_size", 2),
                Size("projector_out", "out_hidden_size", 3584),
            ),
            "a 3D patch convolution without bias, RMSNorm blocks with biases and a gated MLP; window attention and "
            "rotary positions hold no parameters",
            fixed={"projector": "qwen_merger"},
            rules=(Only("in_channels", 3, 3, "the patch convolution is counted on 3-channel images"),),
        ),
        # Qwen2.5-VL's language model: Qwen2's blocks at Qwen2_5_VLTextConfig's defaults (the 72B's).
        "qwen2_5_vl_text": dataclasses.replace(
            MODEL_TYPES["qwen2"],
            model_class="Qwen2_5_VLTextModel",
            sizes=_sizes(152_064, 8192, 80, 64, 29_568, 8, positions=True),
        ),
    }
)


_MOE_NEAR = "mixtral (moe): routed experts, but not this type's"
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


def markdown_table() -> str:
    """docs/presets.md's table of model types, written from ``MODEL_TYPES`` (a test keeps the two equal)."""
    lines = ["| `model_type` | family | counted as | quirks | refused unless as built |", "|---|---|---|---|---|"]
    for model_type, entry in MODEL_TYPES.items():
        quirks = entry.quirk_words() or "none"
        row = f"| `{model_type}` | {entry.family} | `{entry.model_class}` | {quirks} | {entry.refused() or 'none'} |"
        lines.append(row)
    return "\n".join(lines)
