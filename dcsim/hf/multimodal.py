"""A vision-language model's config.json (LLaVA, Gemma 3, Mistral 3, Qwen2.5-VL): its
``text_config`` and ``vision_config`` each read by the entry that reads such a configuration alone.

The language model's fields go through its own type's entry of ``dcsim.hf.table`` (``llama``,
``mistral``, ``gemma3_text``...), with that type's defaults for the fields a short ``text_config``
leaves out (LLaVA's sets five); the vision tower's through an entry of ``PARTS``. A file without a
part takes the fields the composite class starts it with (``Nested.text``, ``Nested.vision``), as
transformers' ``SubConfigSpec`` does. The head is tied as the composite class's top-level
``tie_word_embeddings`` says, which is how transformers 5 ties it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dcsim.hf.fields import Fields, lm_head
from dcsim.hf.language import ModelType, Nested
from dcsim.hf.table import MODEL_TYPES, PARTS
from dcsim.hf.windows import serving_hparams
from dcsim.inputs import as_int, json_kind, show
from dcsim.model import schemas

Reader = Callable[[ModelType, Fields], str]
# The sliding-window rules a language model of these types follows (see ``dcsim.hf.windows``).
WINDOWS_AS = {"qwen2_5_vl_text": "qwen2"}
TEXT_FAMILY = "decoder"


def _part(data: Mapping[str, Any], key: str, absent: Mapping[str, Any], top_level: bool = False) -> Mapping[str, Any]:
    """The nested configuration ``key``: the file's, else ``absent`` (or, with ``top_level``, the
    file's own top-level fields)."""
    part = data.get(key)
    if part is None:
        return data if top_level else absent
    if not isinstance(part, dict):
        raise TypeError(f"`{key}` must be a JSON object of the model's fields, got {json_kind(part)}")
    return part


def _entry(part: Mapping[str, Any], key: str, default: str, auto: bool, family: str) -> tuple[str, ModelType]:
    """The entry that reads ``part``: its ``model_type``'s when the class resolves parts by type
    (``auto``), else ``default``; it must build a model of ``family``."""
    named = part.get("model_type") if auto and part is not None else None
    kind = named if isinstance(named, str) and named else default
    entry = PARTS.get(kind) or MODEL_TYPES.get(kind)
    if entry is None or entry.family != family or entry.nested is not None:
        known = [
            name for name, known in {**MODEL_TYPES, **PARTS}.items() if known.family == family and not known.nested
        ]
        raise ValueError(
            f"`{key}` has model_type {show(kind)}; dcsim reads a vision-language model's {key} of the types "
            f"{', '.join(known)}"
        )
    return kind, entry


def _read_part(
    read: Reader, entry: ModelType, part: Mapping[str, Any], key: str, family: str, windows: str = ""
) -> Fields:
    """``part`` read by ``entry`` (and, given ``windows``, its sliding windows by that type's rules);
    a refusal names the part."""
    fields = Fields(part, family)
    try:
        fields.text["words"] = read(entry, fields)
        if windows:
            fields.set(**serving_hparams(part, windows, family, fields.hparams))
    except (TypeError, ValueError) as err:
        raise type(err)(f"{key}: {err}") from None
    return fields


def _feature_layers(fields: Fields) -> None:
    """LLaVA's and Mistral 3's ``vision_feature_layer``: one layer, or a list whose outputs the
    projector reads side by side."""
    layers = fields.data.get("vision_feature_layer")
    count = len(layers) if isinstance(layers, list) else 1
    fields.set(feature_layers=as_int(count, "vision_feature_layer's number of layers", maximum=schemas.MAX_BLOCKS))


def vision_language(read: Reader, fields: Fields) -> None:
    """Read the language model and the vision tower of a vision-language model's file into
    ``fields`` (the multimodal family's), and say what each is."""
    nested: Nested | None = MODEL_TYPES[fields.data["model_type"]].nested
    assert nested is not None, "a vision_language entry names its nested parts"
    data = fields.data
    text_part = _part(data, "text_config", nested.text, nested.top_level_text)
    text_type, text_entry = _entry(text_part, "text_config", nested.text_type, nested.text_auto, TEXT_FAMILY)
    windows = WINDOWS_AS.get(text_type, text_type)
    text = _read_part(read, text_entry, text_part, "text_config", TEXT_FAMILY, windows)
    vision_part = _part(data, "vision_config", nested.vision)
    _, vision_entry = _entry(vision_part, "vision_config", nested.vision_type, nested.vision_auto, fields.family)
    vision = _read_part(read, vision_entry, vision_part, "vision_config", fields.family)
    for part, key in ((text, "text_config"), (vision, "vision_config")):
        fields.set(**{name: value for name, value in part.hparams.items() if name != "tied_embeddings"})
        fields.source.update({name: f"{key}.{source}" for name, source in part.source.items()})
        for note in part.notes:
            fields.note(note)
    _feature_layers(fields)
    tied = fields.flag("tie_word_embeddings", nested.tied)
    if not tied and nested.tie_from_text and text_part is not data and text.flag("tie_word_embeddings", False):
        tied = True  # transformers 5 forwards a tie that older files saved in text_config
    if data.get("tie_word_embeddings") is None and tied and not text.hparams.get("tied_embeddings", True):
        _tied_by_class(fields, MODEL_TYPES[data["model_type"]].model_class)
    fields.set(tied_embeddings=tied)
    words = text_entry.counted.replace(", {head}", "").format(**text.text)  # the head is the whole model's
    fields.text |= {"head": lm_head(tied), "text": f"{text_entry.model_class}: {words}"}
    pooling = ", the attention-pooling head" if fields.hparams.get("vision_head") else ""
    fields.text["vision"] = f"{vision_entry.model_class}, {vision.text['words']}{pooling}"
    fields.text["projector"] = PROJECTOR_WORDS[fields.hparams["projector"]]


def _tied_by_class(fields: Fields, model_class: str) -> None:
    """Mistral 3: the file's text_config says untied, but the top level says nothing, and the class ties."""
    head = fields.hparams["vocab_size"] * fields.hparams["d_model"]
    fields.note(
        f"the file sets no top-level tie_word_embeddings, so transformers' {model_class} ties the head to the "
        "token embedding (its default) and so does this count, though text_config says untied; a published "
        f"checkpoint that stores its own lm_head holds {head:,} parameters more (vocab_size x hidden_size)"
    )


PROJECTOR_WORDS = {
    "mlp": "two Dense layers with GELU between",
    "merger_mlp": "an RMSNorm, a patch merger without bias and two Dense layers",
    "soft_embedding": "an RMSNorm and a projection without bias",
    "qwen_merger": "the vision model's merger: an RMSNorm and two Dense layers over merged patches",
}
