"""Read a config.json by its ``model_type``'s entry in ``dcsim.hf.table``: one reader for every type.

The entry's sizes are taken under the file's own names (``hidden_size``, not ``d_model``), each
checked against the dcsim hyperparameter's range; an absent or null field takes the default of
transformers' own configuration class for that model_type, so a reader counts what
``AutoModel.from_config`` would build. A field that changes transformers' count and that no family
builds (biases where the family has none, cross-attention, ...) is refused by name; a field
transformers' class ignores (DeepSeek-V3's ``num_nextn_predict_layers``) is noted. Fields that
change no count (dropouts, activations, rotary settings, token ids) are not read.

``QUIRKS`` holds what a table cannot say, by the names the table's entries use; the
Mixture-of-Experts ones are in ``dcsim.hf.experts``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from dcsim.hf.experts import QUIRKS as EXPERT_QUIRKS
from dcsim.hf.fields import Fields, lm_head
from dcsim.hf.table import READ_NO_HEAD_DIM, Flag, ModelType, NoBias, Only, Same, Size
from dcsim.inputs import as_int, json_kind, show
from dcsim.model import schemas

_ONE_BIAS = "dcsim's decoder has biases on every projection or on none"


def _default(fields: Fields, value: int | Same | None) -> object:
    if isinstance(value, Same):
        return fields.hparams[value.name] * value.times
    return fields.missing if value is None else value


def _size(fields: Fields, size: Size) -> None:
    if size.lenient:
        value = fields.data.get(size.key)
        spec = schemas.hparam(fields.family, size.name, fields.family)
        if isinstance(value, int) and not isinstance(value, bool) and spec.low <= value <= spec.high:
            fields.take(size.name, size.key)
        return
    default = _default(fields, size.default)
    if size.key in fields.data and fields.data[size.key] is None:
        default = _default(fields, size.null if size.null is not None else size.default)
    fields.take(size.name, size.key, default)


def _rule(fields: Fields, rule: Only | NoBias) -> None:
    if isinstance(rule, Only):
        fields.require(rule.key, rule.wanted, rule.default, rule.why)
    else:
        fields.no_biases(rule.why, *rule.keys)


def _flag(fields: Fields, flag: Flag) -> None:
    value = fields.flag(flag.key, flag.default)
    fields.set(**dict.fromkeys(flag.names, value))


def read(entry: ModelType, fields: Fields) -> str:
    """Read ``fields`` as ``entry`` says into the family's hyperparameters; say what is counted."""
    for rule in entry.rules:
        _rule(fields, rule)
    for size in entry.sizes:
        _size(fields, size)
    if entry.head_dim != READ_NO_HEAD_DIM:
        fields.head_width(entry.head_dim if isinstance(entry.head_dim, int) else None)
    for flag in entry.flags:
        _flag(fields, flag)
    fields.set(**entry.fixed)
    if entry.tied is not None:
        tied = fields.flag("tie_word_embeddings", entry.tied)
        fields.set(tied_embeddings=tied)
        fields.text["head"] = lm_head(tied)
    for quirk in entry.quirks:
        QUIRKS[quirk](fields)
    return entry.counted.format(**fields.text)


def _one_bias(fields: Fields) -> None:
    """Llama-like: ``attention_bias`` and ``mlp_bias`` together, dcsim's ``use_bias``."""
    attention_bias, mlp_bias = fields.flag("attention_bias", False), fields.flag("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise ValueError(
            f"`attention_bias` is {str(attention_bias).lower()} and `mlp_bias` is {str(mlp_bias).lower()}; {_ONE_BIAS}"
        )
    fields.set(use_bias=attention_bias)


_T5_PROJECTIONS = re.compile(r"(gated-)?[a-z_]{1,32}")


def _t5_projection(fields: Fields) -> None:
    """T5's ``feed_forward_proj`` (``gated-gelu``: T5 v1.1, Flan-T5) and its untied head's note."""
    projection = fields.data.get("feed_forward_proj", "relu")
    if not isinstance(projection, str) or not _T5_PROJECTIONS.fullmatch(projection):
        raise ValueError(
            f"`feed_forward_proj` must be an activation such as relu, or gated- and one such as gated-gelu; "
            f"got {show(projection)}"
        )
    fields.set(gated_mlp=projection.startswith("gated-"))
    fields.text["head"] = fields.text["head"].replace("token embedding", "shared embedding")
    if not fields.hparams["tied_embeddings"]:
        fields.note(
            "tie_word_embeddings is false, so lm_head is counted apart, as the published checkpoint stores it; "
            "transformers 5 ties T5's head to the shared table whatever the file says, and counts vocab x d_model fewer"
        )


def _labels(fields: Fields) -> None:
    """A classifier's labels: ``id2label``'s entries, else ``num_labels`` (2, transformers' default)."""
    labels = fields.data.get("id2label")
    if labels is None:
        classes = fields.take("num_classes", "num_labels", 2)
    elif not isinstance(labels, dict) or not labels:
        raise TypeError(f"`id2label` must be a JSON object naming the labels, got {json_kind(labels)}")
    else:
        classes = as_int(len(labels), "id2label's number of labels", maximum=schemas.MAX_VOCAB)
        fields.set(num_classes=classes)
        fields.source["num_classes"] = "id2label"
    fields.text["labels"] = f"{classes:,}"


QUIRKS: Mapping[str, Callable[[Fields], None]] = {
    "one_bias": _one_bias,
    "t5_projection": _t5_projection,
    "labels": _labels,
    **EXPERT_QUIRKS,
}
