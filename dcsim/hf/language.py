"""The language ``dcsim.hf.table`` describes Hugging Face ``model_type``s in: one ``ModelType`` an
entry, built of the readings a config.json's fields get.

An entry says which dcsim family builds the model, which config.json fields become which of the
family's hyperparameters (``Size``, ``Flag``: each with the default of transformers' own configuration
class for that type), the hyperparameters the model class hard-codes (``fixed``), the fields it
refuses by name because no family builds them (``Only``, ``NoBias``), how a vision-language model's
parts are read (``Nested``), and the few readings a table cannot say (``quirks``: names of functions
in ``dcsim.hf.readers``). ``dcsim.hf.readers`` reads a file by an entry; ``dcsim.hf.markdown``
describes one for the docs. Pure data, no JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
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


READ_NO_HEAD_DIM = "not read"
