"""Open a Hugging Face ``config.json`` as a dcsim model under the file's own name.

Teams usually meet a model as the ``config.json`` next to its weights. dcsim reads the fields that
decide the parameter count and builds the same configuration from its own families
(``dcsim.model.families``), so the count still comes from initialising Flax modules. The result is a
family with hyperparameters and an ``Origin`` naming the model as the file does
(``GemmaForCausalLM (gemma, from config.json)``), never a preset's name; it travels in a link like
any other configuration.

A field that changes the count and that dcsim's family cannot express (biases on the attention
but not the MLP, cross-attention, relative position tables...) is refused by name, never ignored:
an import either counts what transformers counts or says why it cannot. Fields that change no count
(dropouts, activations, rotary settings, token ids) are not read; fields transformers' own class
ignores are noted. How each ``model_type`` is read is one entry of ``dcsim.hf.table``, read by
``dcsim.hf.readers``; ``bench/hf_import.py`` checks every supported ``model_type`` against
transformers' own ``num_parameters()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dcsim.hf.fields import Fields
from dcsim.hf.table import MODEL_TYPES as TYPES
from dcsim.hf.table import nearest
from dcsim.inputs import json_kind, json_size, load_json, show
from dcsim.model import schemas
from dcsim.model.config import DTYPES, MAX_CONFIG_BYTES, MAX_NAME_CHARS, ModelConfig, Origin

MODEL_TYPES = tuple(TYPES)  # every model_type dcsim opens, in the table's order

# A config.json with a classifier's label names (ViT's 1,000 ImageNet classes, twice: id2label and
# label2id) runs to about 70 KB, past the 64 KiB of a dcsim configuration file.
MAX_HF_CONFIG_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True)
class Imported:
    """A Hugging Face configuration opened as a dcsim one.

    Attributes:
      config: the model, its ``origin`` naming it (shards, seed and batch kept from the
        configuration it replaced; the dtype the file's own, where it names one).
      counted_as: what is counted, in transformers' terms (``LlamaForCausalLM: ...``).
      stored: a sentence saying that the bytes are in the file's own dtype, when they are (empty
        otherwise), so the person sees why the storage dtype changed.
    """

    config: ModelConfig
    counted_as: str
    stored: str = ""

    def message(self) -> str:
        assert self.config.origin is not None
        return f"Opened {self.config.origin.title}. Counted as {self.counted_as}.{self.stored}"


def is_hf_config(data: Any) -> bool:
    """A Hugging Face ``config.json`` has a ``model_type``; a dcsim configuration never does."""
    return isinstance(data, dict) and "model_type" in data and "format" not in data


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


def saved_dtype(data: Mapping[str, Any]) -> str | None:
    """The dtype the file says its weights are saved in, when dcsim's byte figures have it: its
    ``dtype`` (transformers writes that name from 4.56 on), else its ``torch_dtype``. None for a
    file that says nothing, ``auto``, or a dtype dcsim does not store in."""
    for key in ("dtype", "torch_dtype"):
        value = data.get(key)
        if value is not None:
            return value if isinstance(value, str) and value in DTYPES else None
    return None


def from_hf_config(data: Any, base: ModelConfig | None = None, *, keep_dtype: bool = False) -> Imported:
    """The dcsim configuration of a parsed Hugging Face ``config.json``.

    ``base`` gives the shard count, seed and batch size to keep (defaults otherwise). The storage
    dtype is the model's own (``saved_dtype``: a bfloat16 model's bytes are counted in bfloat16, as
    its checkpoint holds them), or ``base``'s when the file names none or ``keep_dtype`` says the
    person chose one (a link's ``dtype``). Raises ``ValueError``/``TypeError`` naming the field when
    the file cannot be counted exactly.
    """
    if not isinstance(data, dict):
        raise TypeError(f"a Hugging Face config must be a JSON object, got {json_kind(data)}")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in TYPES:
        near = nearest(model_type) if isinstance(model_type, str) else ""
        raise ValueError(
            f"dcsim reads Hugging Face configs of {len(TYPES)} model types (docs/presets.md lists them); "
            f"got {show(model_type)}, whose layers it has no family for" + (f"; {near}" if near else "")
        )
    from dcsim.hf.readers import read  # the reader imports the schemas; a refusal above needs none
    from dcsim.hf.windows import serving_hparams

    entry = TYPES[model_type]
    family, model_class = entry.family, entry.model_class
    fields = Fields(data, family)
    counted_as = f"{model_class}: {read(entry, fields)}" + "".join(f". Note: {note}" for note in fields.notes)
    fields.set(**serving_hparams(data, model_type, family, fields.hparams))
    defaults = schemas.family_defaults(family)
    overrides = {name: value for name, value in fields.hparams.items() if defaults[name] != value}
    origin = Origin(name=model_name(data, model_class), model_type=model_type, family=family)
    base = base or ModelConfig()
    own = None if keep_dtype else saved_dtype(data)
    try:
        config = ModelConfig(
            num_shards=base.num_shards,
            dtype=own or base.dtype,
            seed=base.seed,
            batch_size=base.batch_size,
            origin=origin,
            overrides=tuple(overrides.items()),
        )
    except ValueError as err:  # hyperparameters taken together, named as dcsim names them
        renamed = ", ".join(f"{name} is {key}" for name, key in fields.source.items() if name != key)
        raise ValueError(f"{err} (dcsim's names; in this file {renamed})") from None
    stored = f" Bytes in {own}, the model's own dtype." if own else ""
    return Imported(config=config, counted_as=counted_as, stored=stored)


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
