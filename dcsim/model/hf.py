"""Open a Hugging Face ``config.json`` as a dcsim model under the file's own name.

Teams usually meet a model as the ``config.json`` next to its weights. dcsim reads the fields that
decide the parameter count and builds the same configuration from its own families
(``dcsim.model.families``), so the count still comes from initialising Flax modules. The result is a
family with hyperparameters and an ``Origin`` naming the model as the file does
(``GemmaForCausalLM (gemma, from config.json)``), never a preset's name; it travels in a link like
any other configuration.

A field that changes the count and that dcsim's family cannot express (a ``head_dim`` other than
``hidden_size / num_attention_heads``, biases on the attention but not the MLP, cross-attention,
relative position tables...) is refused by name, never ignored: an import either counts what
transformers counts or says why it cannot. Fields that change no count (dropouts, activations,
rotary settings, token ids) are not read. ``bench/hf_import.py`` checks every supported
``model_type`` against transformers' own ``num_parameters()``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from dcsim.inputs import as_bool, as_int, json_kind, json_size, load_json, show
from dcsim.model import schemas
from dcsim.model.config import MAX_CONFIG_BYTES, MAX_NAME_CHARS, ModelConfig, Origin

# A config.json with a classifier's label names (ViT's 1,000 ImageNet classes, twice: id2label and
# label2id) runs to about 70 KB, past the 64 KiB of a dcsim configuration file.
MAX_HF_CONFIG_BYTES = 256 * 1024

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Imported:
    """A Hugging Face configuration opened as a dcsim one.

    Attributes:
      config: the model, its ``origin`` naming it (shards, dtype, seed and batch kept from the
        configuration it replaced).
      counted_as: what is counted, in transformers' terms (``LlamaForCausalLM: ...``).
    """

    config: ModelConfig
    counted_as: str

    def message(self) -> str:
        assert self.config.origin is not None
        return f"Opened {self.config.origin.title}. Counted as {self.counted_as}."


def is_hf_config(data: Any) -> bool:
    """A Hugging Face ``config.json`` has a ``model_type``; a dcsim configuration never does."""
    return isinstance(data, dict) and "model_type" in data and "format" not in data


class _Fields:
    """One config.json's fields, read into dcsim hyperparameters. Each value is checked against
    the dcsim hyperparameter's range under the file's own name (``hidden_size``, not ``d_model``),
    and where it came from is kept for the messages about hyperparameters taken together."""

    def __init__(self, data: Mapping[str, Any], family: str):
        self.data = data
        self.family = family
        self.hparams: dict[str, Any] = {}
        self.source: dict[str, str] = {}

    def _int(self, key: str, default: Any, minimum: int = 1, maximum: int | None = None) -> int:
        """The integer field ``key``; ``default`` stands for a missing or null one (``_MISSING``: required)."""
        value = self.data.get(key, default)
        if value is None and default is not _MISSING:
            value = default
        if value is _MISSING:
            raise ValueError(f"`{key}` is missing; it decides the parameter count")
        return as_int(value, key, minimum=minimum, maximum=maximum)

    def take(self, name: str, key: str, default: Any = _MISSING) -> int:
        """The integer field ``key`` as the hyperparameter ``name``, within that one's range."""
        spec = schemas.hparam(self.family, name, self.family)
        self.hparams[name] = self._int(key, default, spec.low, spec.high)
        self.source[name] = key
        return self.hparams[name]

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        return default if value is None else as_bool(value, key)

    def set(self, **hparams: Any) -> None:
        self.hparams.update(hparams)

    def require(self, key: str, wanted: Any, default: Any, why: str) -> None:
        value = self.data.get(key, default)
        if value != wanted or isinstance(value, bool) is not isinstance(wanted, bool):
            raise ValueError(f"`{key}` is {show(value)}; dcsim counts only {show(wanted)}: {why}")

    def head_dim(self) -> None:
        """Heads wider (or narrower) than hidden_size / num_attention_heads, as Gemma's are, become
        the ``head_dim`` hyperparameter; the usual width stays 0, dcsim's "d_model / num_heads"."""
        hidden, heads = self.hparams["d_model"], self.hparams["num_heads"]
        if self.data.get("head_dim") is None:
            return
        spec = schemas.hparam(self.family, "head_dim", self.family)
        width = self._int("head_dim", _MISSING, 1, spec.maximum)
        self.hparams["head_dim"] = 0 if width * heads == hidden else width
        self.source["head_dim"] = "head_dim"


_ONE_BIAS = "dcsim's decoder has biases on every projection or on none"


def _no_cross_attention(fields: _Fields) -> None:
    fields.require("add_cross_attention", False, False, "cross-attention adds weights to every block")


def _lm_head(tied: bool) -> str:
    return "language-model head " + ("tied to the token embedding" if tied else "untied")


def _gpt2(fields: _Fields) -> str:
    _no_cross_attention(fields)
    fields.take("vocab_size", "vocab_size")
    d_model = fields.take("d_model", "n_embd")
    fields.take("num_layers", "n_layer")
    fields.take("num_kv_heads", "n_head")
    fields.take("num_heads", "n_head")
    fields.take("ffn_dim", "n_inner", 4 * d_model)
    fields.take("max_positions", "n_positions")
    tied = fields.flag("tie_word_embeddings", True)
    fields.set(tied_embeddings=tied)
    return f"embeddings, blocks, final norm, {_lm_head(tied)}"


def _gpt_neox(fields: _Fields) -> str:
    fields.require("attention_bias", True, True, f"{_ONE_BIAS}, and GPT-NeoX's MLP always has them")
    _decoder_dims(fields)
    fields.take("num_kv_heads", "num_attention_heads")
    tied = fields.flag("tie_word_embeddings", False)
    fields.set(position_embedding="none", tied_embeddings=tied, use_bias=True, norm="layernorm", gated_mlp=False)
    return f"embeddings, blocks, final norm, {_lm_head(tied)}; rotary positions hold no parameters"


def _transformer_dims(fields: _Fields) -> None:
    """The widths and depth under the names every model type but GPT-2 uses."""
    fields.take("d_model", "hidden_size")
    fields.take("num_layers", "num_hidden_layers")
    fields.take("num_heads", "num_attention_heads")
    fields.take("ffn_dim", "intermediate_size")


def _decoder_dims(fields: _Fields) -> None:
    fields.take("vocab_size", "vocab_size")
    _transformer_dims(fields)
    positions = fields.data.get("max_position_embeddings")
    # Rotary positions: the length changes no count, and may pass the learned table's cap.
    if isinstance(positions, int) and not isinstance(positions, bool) and 1 <= positions <= schemas.MAX_VOCAB:
        fields.take("max_positions", "max_position_embeddings")


def _llama(fields: _Fields, *, tied_by_default: bool = False) -> str:
    """Llama, Mistral and Gemma: RMSNorm, a gated MLP, rotary positions, grouped KV heads."""
    _decoder_dims(fields)
    fields.head_dim()
    fields.take("num_kv_heads", "num_key_value_heads", fields.hparams["num_heads"])
    attention_bias, mlp_bias = fields.flag("attention_bias", False), fields.flag("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise ValueError(
            f"`attention_bias` is {str(attention_bias).lower()} and `mlp_bias` is {str(mlp_bias).lower()}; {_ONE_BIAS}"
        )
    tied = fields.flag("tie_word_embeddings", tied_by_default)
    fields.set(position_embedding="none", tied_embeddings=tied, use_bias=attention_bias, norm="rmsnorm", gated_mlp=True)
    return f"embeddings, blocks, final norm, {_lm_head(tied)}; rotary positions hold no parameters"


def _qwen2(fields: _Fields) -> str:
    """Qwen2 is Llama with biases on query, key and value only (transformers hard-codes them)."""
    _decoder_dims(fields)
    fields.head_dim()
    fields.take("num_kv_heads", "num_key_value_heads", fields.hparams["num_heads"])
    tied = fields.flag("tie_word_embeddings", False)
    fields.set(
        position_embedding="none", tied_embeddings=tied, use_bias=False, qkv_bias=True, norm="rmsnorm", gated_mlp=True
    )
    return (
        f"embeddings, blocks (biases on query, key and value only), final norm, {_lm_head(tied)}; "
        "rotary positions hold no parameters"
    )


def _bert(fields: _Fields) -> str:
    _no_cross_attention(fields)
    fields.require("position_embedding_type", "absolute", "absolute", "relative position types add a distance table")
    fields.take("vocab_size", "vocab_size")
    _transformer_dims(fields)
    fields.take("max_positions", "max_position_embeddings")
    fields.take("type_vocab_size", "type_vocab_size", 2)
    return "embeddings, encoder and pooler; task heads (masked LM, classifiers) are not counted"


def _vit(fields: _Fields) -> str:
    fields.require("num_channels", 3, 3, "the patch convolution is counted on 3-channel images")
    fields.require("qkv_bias", True, True, "dcsim's ViT has biases on every projection")
    fields.take("image_size", "image_size")
    fields.take("patch_size", "patch_size")
    _transformer_dims(fields)
    labels = fields.data.get("id2label")
    if labels is None:
        classes = fields.take("num_classes", "num_labels", 2)
    elif not isinstance(labels, dict) or not labels:
        raise TypeError(f"`id2label` must be a JSON object naming the labels, got {json_kind(labels)}")
    else:
        classes = as_int(len(labels), "id2label's number of labels", maximum=schemas.MAX_VOCAB)
        fields.set(num_classes=classes)
        fields.source["num_classes"] = "id2label"
    return f"patch embedding, encoder, final norm, a classifier over {classes:,} labels"


# model_type -> (the family that builds it, what transformers calls the model, the reader)
_READERS: Mapping[str, tuple[str, str, Callable[[_Fields], str]]] = {
    "gpt2": ("decoder", "GPT2LMHeadModel", _gpt2),
    "gpt_neox": ("decoder", "GPTNeoXForCausalLM", _gpt_neox),
    "llama": ("decoder", "LlamaForCausalLM", _llama),
    "mistral": ("decoder", "MistralForCausalLM", _llama),
    "gemma": ("decoder", "GemmaForCausalLM", functools.partial(_llama, tied_by_default=True)),
    "qwen2": ("decoder", "Qwen2ForCausalLM", _qwen2),
    "bert": ("bert", "BertModel", _bert),
    "vit": ("vit", "ViTForImageClassification", _vit),
}
MODEL_TYPES = tuple(_READERS)


def model_name(data: Mapping[str, Any], model_class: str) -> str:
    """The name a file gives its model: ``_name_or_path`` (a Hub id such as ``google/gemma-7b``),
    else the first of ``architectures`` (``GemmaForCausalLM``), else the class transformers builds
    for its model_type. A value that is not short printable text is passed over, never shown."""
    architectures = data.get("architectures")
    candidates = [
        data.get("_name_or_path"),
        architectures[0] if isinstance(architectures, list) and architectures else None,
    ]
    for candidate in candidates:
        text = candidate.strip() if isinstance(candidate, str) else ""
        if text and len(text) <= MAX_NAME_CHARS and text.isprintable():
            return text
    return model_class


def from_hf_config(data: Any, base: ModelConfig | None = None) -> Imported:
    """The dcsim configuration of a parsed Hugging Face ``config.json``.

    ``base`` gives the shard count, storage dtype, seed and batch size to keep (defaults
    otherwise). Raises ``ValueError``/``TypeError`` naming the field when the file cannot be counted
    exactly.
    """
    if not isinstance(data, dict):
        raise TypeError(f"a Hugging Face config must be a JSON object, got {json_kind(data)}")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _READERS:
        raise ValueError(
            f"dcsim reads Hugging Face configs of model_type {', '.join(MODEL_TYPES)}; "
            f"got {show(model_type)}, whose layers it has no family for"
        )
    family, model_class, reader = _READERS[model_type]
    fields = _Fields(data, family)
    counted_as = f"{model_class}: {reader(fields)}"
    defaults = schemas.family_defaults(family)
    overrides = {name: value for name, value in fields.hparams.items() if defaults[name] != value}
    origin = Origin(name=model_name(data, model_class), model_type=model_type, family=family)
    base = base or ModelConfig()
    try:
        config = ModelConfig(
            num_shards=base.num_shards,
            dtype=base.dtype,
            seed=base.seed,
            batch_size=base.batch_size,
            origin=origin,
            overrides=tuple(overrides.items()),
        )
    except ValueError as err:  # hyperparameters taken together, named as dcsim names them
        renamed = ", ".join(f"{name} is {key}" for name, key in fields.source.items() if name != key)
        raise ValueError(f"{err} (dcsim's names; in this file {renamed})") from None
    return Imported(config=config, counted_as=counted_as)


def read_config_file(raw: bytes | str, base: ModelConfig | None = None) -> tuple[ModelConfig, str | None]:
    """Open a configuration file: dcsim's own JSON, or a Hugging Face ``config.json``.

    Returns the configuration and, for a Hugging Face file, the message that says what was
    counted. dcsim files keep their 64 KiB limit; a Hugging Face file may be up to
    ``MAX_HF_CONFIG_BYTES`` (label tables make them long).
    """
    size = json_size(raw)
    if size <= MAX_CONFIG_BYTES:
        data = load_json(raw, "configuration", MAX_CONFIG_BYTES)
    else:
        data = None
        if size <= MAX_HF_CONFIG_BYTES:
            try:
                data = load_json(raw, "configuration", MAX_HF_CONFIG_BYTES)
            except ValueError:
                data = None
        if not is_hf_config(data):
            more = "" if size <= MAX_HF_CONFIG_BYTES else f", or {MAX_HF_CONFIG_BYTES:,} for a Hugging Face config.json"
            raise ValueError(f"a configuration file may be at most {MAX_CONFIG_BYTES:,} bytes{more}, got {size:,}")
    if is_hf_config(data):
        try:
            imported = from_hf_config(data, base)
        except (TypeError, ValueError) as err:
            raise type(err)(f"Hugging Face config.json: {err}") from None
        return imported.config, imported.message()
    return ModelConfig.from_dict(data), None
