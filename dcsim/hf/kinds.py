"""The vocabulary ``dcsim.hf.table``'s entries are written in: one constructor a family (``decoder``,
``llama``, ``learned_gpt``, ``moe``, ``variant``, ``bert``, ``headless``), each filling in what every
entry of its family shares, and the runs of ``Size``s many types publish alike (``sizes_at``,
``widths``, ``experts``, ``encdec_sizes``, ``one_heads_field``), so that an entry says only what
sets its type apart.

Tables of fields read as they are (Mamba's sizes, Jamba's layout, Llama 4's vision tower) are in
``sizes.json`` beside this module (``size_table``). Pure data, no JAX.
"""

from __future__ import annotations

from typing import Any

from dcsim import shipped
from dcsim.hf.language import READ_NO_HEAD_DIM, Flag, ModelType, NoBias, Only, Same, Size
from dcsim.inputs import reject_unknown, show

# Sizes most model types publish under the same names; ``sizes_at`` gives them the class's defaults.
_SIZE_KEYS = (
    ("d_model", "hidden_size"),
    ("num_layers", "num_hidden_layers"),
    ("num_heads", "num_attention_heads"),
    ("ffn_dim", "intermediate_size"),
)
WIDTH_KEYS = tuple(key for _, key in _SIZE_KEYS)


def widths(hidden: int, layers: int, heads: int, ffn: int) -> tuple[Size, ...]:
    """hidden_size, num_hidden_layers, num_attention_heads and intermediate_size at these defaults."""
    return tuple(
        Size(name, key, default) for (name, key), default in zip(_SIZE_KEYS, (hidden, layers, heads, ffn), strict=True)
    )


def sizes_at(
    vocab: int, hidden: int, layers: int, heads: int, ffn: int, kv: int | None = None, *, positions: bool = False
) -> tuple[Size, ...]:
    """vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size and
    num_key_value_heads at the class's defaults (``kv`` None: as many as the query heads; a null
    field means that too, as transformers reads it). ``positions``: max_position_embeddings too,
    leniently (rotary: it changes no count)."""
    taken = (Size("vocab_size", "vocab_size", vocab), *widths(hidden, layers, heads, ffn))
    lengths = (Size("max_positions", "max_position_embeddings", lenient=True),) if positions else ()
    kv_heads = Size("num_kv_heads", "num_key_value_heads", Same("num_heads") if kv is None else kv, Same("num_heads"))
    return taken + lengths + (kv_heads,)


def experts(experts_key: str, count: int, top_k: int, ffn_key: str, ffn: int) -> tuple[Size, ...]:
    """The routed experts' count (under ``experts_key``), how many a token takes and their width
    (under ``ffn_key``) at these defaults."""
    return (
        Size("num_experts", experts_key, count),
        Size("experts_per_token", "num_experts_per_tok", top_k),
        Size("expert_ffn_dim", ffn_key, ffn),
    )


def one_heads_field(vocab: int, keys: tuple[str, str, str], d_model: int, layers: int, heads: int) -> tuple[Size, ...]:
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


def encdec_sizes(
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


def named_sizes(key: str) -> tuple[Size, ...]:
    """A ``Size`` of each (hyperparameter, field, default) of ``sizes.json``'s table ``key``."""
    return tuple(Size(name, field, default) for name, field, default in size_table(key))


def mixer_biases(projections: str, conv: str) -> tuple[Flag, ...]:
    """A Mamba mixer's two bias switches: on in_proj and out_proj (off by default), on the conv (on)."""
    return Flag(projections, False, ("use_bias",)), Flag(conv, True, ("conv_bias",))


# What every entry of a family shares; an entry says only what sets its type apart.
# Why a decoder type with biases on some projections only is refused (GPT-NeoX's rule, readers' one_bias quirk).
ONE_BIAS = "dcsim's decoder has biases on every projection or on none"
_CROSS = Only("add_cross_attention", False, False, "cross-attention adds weights to every block")
ROTARY = {"position_embedding": "none"}
_LLAMA = ROTARY | {"use_bias": False, "norm": "rmsnorm", "gated_mlp": True}
LEARNED_GPT = {"position_embedding": "learned", "use_bias": True, "norm": "layernorm", "gated_mlp": False}
_BERT_RULES = (
    _CROSS,
    Only("position_embedding_type", "absolute", "absolute", "relative position types add a distance table"),
)
_MOE_COUNTED = "embeddings, blocks ({what}), final norm, {head}; rotary positions hold no parameters"


def no_projection_biases(family: str) -> NoBias:
    """The rule of a family whose attention projections have no biases."""
    return NoBias(("attention_bias",), f"dcsim's {family} blocks have no biases on the attention projections")


def headless(family: str, model_class: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
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


def decoder(model_class: str, sizes: tuple[Size, ...], **more: Any) -> ModelType:
    """An entry of the decoder family."""
    return ModelType(family="decoder", model_class=model_class, sizes=sizes, **more)


def llama(model_class: str, sizes: tuple[Size, ...], **more: Any) -> ModelType:
    """A decoder with Llama's blocks (rotary positions, RMSNorms, a SwiGLU MLP, no biases), and
    the entry's ``fixed`` on top."""
    return decoder(model_class, sizes, fixed=_LLAMA | more.pop("fixed", {}), **more)


def learned_gpt(model_class: str, **more: Any) -> ModelType:
    """A decoder with GPT-2's blocks (learned positions, biases, LayerNorms, a plain MLP), read
    under GPT-2's names at GPT-2 small's defaults, its head tied by default."""
    return decoder(
        model_class,
        _gpt2_sizes(50_257, 1024, 768, 12, 12),
        head_dim=READ_NO_HEAD_DIM,
        tied=True,
        fixed=LEARNED_GPT,
        rules=(_CROSS,),
        **more,
    )


def moe(model_class: str, sizes: tuple[Size, ...], what: str, *, aside: str = "", **more: Any) -> ModelType:
    """An entry of the moe family; ``what`` its blocks hold, said as ``_MOE_COUNTED`` says it."""
    counted = _MOE_COUNTED.replace("{what}", what) + aside
    return ModelType(family="moe", model_class=model_class, sizes=sizes, counted=counted, **more)


def variant(model_class: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
    """An entry of the variant family (its ``fixed`` switches the family's quirks on)."""
    return ModelType(family="variant", model_class=model_class, sizes=sizes, counted=counted, **more)


def bert(model_class: str, sizes: tuple[Size, ...], counted: str) -> ModelType:
    """An encoder of the bert family, read by BERT's rules."""
    return headless("bert", model_class, sizes, counted, rules=_BERT_RULES)
