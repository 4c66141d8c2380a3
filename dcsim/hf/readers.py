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

import functools
import math
import re
from collections.abc import Callable, Mapping

from dcsim.hf.experts import QUIRKS as EXPERT_QUIRKS
from dcsim.hf.fields import Fields, lm_head
from dcsim.hf.kinds import ONE_BIAS
from dcsim.hf.language import READ_NO_HEAD_DIM, Flag, ModelType, NoBias, Only, Same, Size
from dcsim.hf.llama4 import QUIRKS as LLAMA4_QUIRKS
from dcsim.hf.llama4 import multimodal as llama4_multimodal
from dcsim.hf.multimodal import vision_language
from dcsim.inputs import as_int, json_kind, show
from dcsim.model import schemas


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
    if fields.data.get("quantization_config"):
        fields.note(
            "the file has a quantization_config: the model is counted unquantized, as transformers' class "
            "counts it; the quantized formats size the file, not the count"
        )
    return entry.counted.format(**fields.text)


def _one_bias(fields: Fields) -> None:
    """Llama-like: ``attention_bias`` and ``mlp_bias`` together, dcsim's ``use_bias``."""
    attention_bias, mlp_bias = fields.flag("attention_bias", False), fields.flag("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise ValueError(
            f"`attention_bias` is {str(attention_bias).lower()} and `mlp_bias` is {str(mlp_bias).lower()}; {ONE_BIAS}"
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


def _tied_by_default(fields: Fields) -> None:
    """A head transformers ties though the file does not say so (StarCoder2, GPT-BigCode)."""
    if fields.data.get("tie_word_embeddings") is None:
        fields.note(
            "the file does not set tie_word_embeddings; transformers' class ties the head to the token embedding "
            "by default, and so does this count"
        )


def _multi_query(fields: Fields) -> None:
    """GPT-BigCode: ``multi_query`` (true by default) means one key/value head."""
    if fields.flag("multi_query", True):
        fields.set(num_kv_heads=1)
        fields.source["num_kv_heads"] = "multi_query"


def _opt_positions(fields: Fields) -> None:
    """OPT's learned positions have 2 rows more than ``max_position_embeddings`` (an offset kept from
    fairseq); a ``word_embed_proj_dim`` other than ``hidden_size`` adds projections no family builds."""
    length = fields.take("max_positions", "max_position_embeddings", 2048)
    spec = schemas.hparam(fields.family, "max_positions", fields.family)
    fields.set(max_positions=as_int(length + 2, "max_position_embeddings + 2", maximum=spec.high))
    width = fields.data.get("word_embed_proj_dim")
    if width is not None and width != fields.hparams["d_model"]:
        raise ValueError(
            f"`word_embed_proj_dim` is {show(width)}, not hidden_size ({fields.hparams['d_model']:,}); "
            "dcsim counts only OPTs without the project_in and project_out layers that width adds"
        )


def _falcon(fields: Fields) -> None:
    """Falcon's key/value heads and block wiring: ``new_decoder_architecture`` (Falcon-40B, 180B) has
    ``num_kv_heads`` and two norms a block; otherwise ``multi_query`` means one key/value head, and
    ``parallel_attn`` one norm for attention and MLP (or, when false, one before each)."""
    heads = fields.hparams["num_heads"]
    new = fields.flag("new_decoder_architecture", False)
    if new:
        fields.take("num_kv_heads", "num_kv_heads", heads)
    else:
        fields.set(num_kv_heads=1 if fields.flag("multi_query", True) else heads)
        fields.source["num_kv_heads"] = "multi_query"
    if not fields.flag("parallel_attn", True):
        residual, words = "sequential", "a norm before attention and one before the MLP"
    else:
        norms = fields.data.get("num_ln_in_parallel_attn")
        norms = 2 if norms is None and new else norms
        two = as_int(norms or 1, "num_ln_in_parallel_attn", maximum=2) == 2
        residual = "parallel_two_norms" if two else "parallel"
        words = "parallel attention and MLP, " + ("a norm each" if two else "one norm for both")
    fields.set(residual=residual)
    fields.text["blocks"] = words


def _bloom(fields: Fields) -> None:
    """BLOOM's width may be written ``n_embed`` (older files); its MLP is 4 x as wide, always."""
    if "hidden_size" not in fields.data and "n_embed" in fields.data:
        fields.take("d_model", "n_embed", 64)
    fields.set(ffn_dim=4 * fields.hparams["d_model"])
    fields.source["ffn_dim"] = "4 x hidden_size"


def _mpt(fields: Fields) -> None:
    """MPT: the MLP is ``expansion_ratio`` x ``d_model`` wide; ALiBi only (transformers builds no
    position table whatever ``attn_config`` says)."""
    ratio = as_int(fields.data.get("expansion_ratio", 4) or 4, "expansion_ratio", maximum=schemas.MAX_VOCAB)
    spec = schemas.hparam(fields.family, "ffn_dim", fields.family)
    fields.set(ffn_dim=as_int(ratio * fields.hparams["d_model"], "expansion_ratio x d_model", maximum=spec.high))
    fields.source["ffn_dim"] = "expansion_ratio x d_model"


def _mixer(fields: Fields, expand_key: str, rank_key: str) -> None:
    """A Mamba mixer's inner width, ``expand`` x hidden_size (transformers' ``int()`` of it), and
    its time-step rank: a number, or ``"auto"`` (the default) for ceil(hidden_size / 16)."""
    hidden = fields.hparams["d_model"]
    expand = fields.data.get(expand_key, 2)
    if expand is None:
        expand = 2
    if isinstance(expand, bool) or not isinstance(expand, (int, float)) or not expand > 0:
        raise ValueError(
            f"`{expand_key}` must be a positive number (the mixer's width over hidden_size), got {show(expand)}"
        )
    spec = schemas.hparam(fields.family, "inner_dim", fields.family)
    fields.set(inner_dim=as_int(int(expand * hidden), f"{expand_key} x hidden_size", maximum=spec.high))
    fields.source["inner_dim"] = f"{expand_key} x hidden_size"
    rank = fields.data.get(rank_key, "auto")
    if rank is None or rank == "auto":
        fields.set(dt_rank=math.ceil(hidden / 16))
        fields.source["dt_rank"] = f"{rank_key} auto: ceil(hidden_size / 16)"
    else:
        fields.take("dt_rank", rank_key)


def _mamba(fields: Fields) -> None:
    """Mamba's mixer: ``expand`` and ``time_step_rank``."""
    _mixer(fields, "expand", "time_step_rank")


def _jamba(fields: Fields) -> None:
    """Jamba's mixer (``mamba_expand``, ``mamba_dt_rank``), and its periods: each offset below its
    period, as ``JambaConfig`` requires, and no more experts a token than there are."""
    _mixer(fields, "mamba_expand", "mamba_dt_rank")
    h = fields.hparams
    for kind in ("attn", "expert"):
        if h[f"{kind}_offset"] >= h[f"{kind}_period"]:
            raise ValueError(
                f"`{kind}_layer_offset` ({h[f'{kind}_offset']:,}) must be below `{kind}_layer_period` "
                f"({h[f'{kind}_period']:,}), as JambaConfig requires"
            )
    if h["num_experts"] > 1 and h["experts_per_token"] > h["num_experts"]:
        raise ValueError(
            f"`num_experts_per_tok` ({h['experts_per_token']:,}) must be at most `num_experts` ({h['num_experts']:,})"
        )


QUIRKS: Mapping[str, Callable[[Fields], None]] = {
    "one_bias": _one_bias,
    "tied_by_default": _tied_by_default,
    "multi_query": _multi_query,
    "opt_positions": _opt_positions,
    "falcon": _falcon,
    "bloom": _bloom,
    "mpt": _mpt,
    "t5_projection": _t5_projection,
    "labels": _labels,
    "mamba": _mamba,
    "jamba": _jamba,
    "vision_language": functools.partial(vision_language, read),
    **EXPERT_QUIRKS,
    **LLAMA4_QUIRKS,
    "llama4_multimodal": lambda fields: llama4_multimodal(fields, read),  # the text_config, read as llama4_text
}
