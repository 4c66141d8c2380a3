"""The one validated configuration that every face of dcsim shares.

A configuration arrives from widgets, URL links, uploaded JSON files and CLI flags. It is checked
once, here, into frozen dataclasses; everything downstream trusts it. Every rejection is a
``ValueError`` (or ``TypeError`` for the wrong kind of thing) whose message names the field, the
rule and the offending value, so each front end can show it to a person as it is.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from dcsim.inputs import (
    as_bool,
    as_int,
    check_document,
    check_text,
    json_kind,
    load_json,
    number_from_text,
    reject_unknown,
    show,
)
from dcsim.model import presets, schemas
from dcsim.quantities.payload import DTYPES, MAX_SHARDS

# Limits. They keep every configuration cheap to count and to draw; none is a limit of Flax.
MAX_LAYERS = 256
MAX_FEATURES = 1 << 20  # 1,048,576: wider than any vocabulary projection in use
MAX_INPUT_DIM = 1 << 20
MAX_BATCH_SIZE = 1 << 20
# jax.random.PRNGKey keeps only the low 32 bits of a seed while 64-bit mode is off (dcsim never
# turns it on: the switch is process-wide), so 2**32 would silently give the same key as 0.
MAX_SEED = 2**32 - 1
MAX_CONFIG_BYTES = 64 * 1024

# (minimum, maximum, why) of each integer field, shared with every front end's own checks.
FIELD_LIMITS: dict[str, tuple[int, int, str]] = {
    "input_dim": (1, MAX_INPUT_DIM, ""),
    "batch_size": (1, MAX_BATCH_SIZE, ""),
    "seed": (0, MAX_SEED, "the range jax.random.PRNGKey takes without wrapping"),
    "num_shards": (1, MAX_SHARDS, ""),
    "features": (1, MAX_FEATURES, ""),
}

DEFAULT_DTYPE = "float32"
MAX_NAME_CHARS = 100  # a model's name from a file: a Hub id or a class name, with room to spare
MAX_MODEL_TYPE_CHARS = 40
_MODEL_TYPE_TEXT = re.compile(r"[a-z0-9][a-z0-9_-]*")  # xlm-roberta has a hyphen
# A Hugging Face Hub id: huggingface_hub's own REPO_ID_REGEX (ASCII letters, digits, -, _ and .;
# no - or . at either end of a part), read only after the length check below, so it cannot backtrack
# far. 96 characters is the Hub's bound on a name; owner/name together are held to it too.
MAX_HUB_ID_CHARS = 96
_HUB_ID_TEXT = re.compile(r"(?:\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
HUB_ID_RULE = (
    "owner/name (mistralai/Mixtral-8x7B-v0.1) or a single name (gpt2): ASCII letters, digits, '-', '_' and '.', "
    f"at most {MAX_HUB_ID_CHARS} characters, no '--' or '..', neither part starting or ending with '-' or '.'"
)
# A revision: a branch, a tag (v1.0, refs/pr/1) or a 40-hex commit, as git names them, in the
# characters such names use; it travels percent-encoded as one piece of the URL's path.
MAX_REVISION_CHARS = 96
_REVISION_TEXT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*", re.ASCII)
REVISION_RULE = (
    "a branch, tag or commit of the repository (main, v1.0, refs/pr/1, a 40-hex commit): ASCII letters, digits, "
    f"'-', '_', '.' and '/', at most {MAX_REVISION_CHARS} characters, no '..' or '//'"
)

CONFIG_FORMAT = "dcsim.config"
CONFIG_VERSION = 1


def check_field(value: Any, field: str, name: str | None = None, shown: str | None = None) -> int:
    """Check an integer configuration field against ``FIELD_LIMITS``; ``name`` is what the
    person typed it as (``--shards``), the field's own name by default."""
    minimum, maximum, why = FIELD_LIMITS[field]
    return as_int(value, name or field, minimum=minimum, maximum=maximum, why=why, shown=shown)


def parse_int(text: str, field: str, name: str | None = None) -> int:
    """Parse a person's typed integer (``"2"``, ``"2.0"``, ``"1e3"``) and check it as ``field``."""
    text = text.strip()
    return check_field(number_from_text(text), field, name, shown=text)


def parse_widths(text: str, name: str = "features", *, use_bias: bool = True) -> tuple[DenseLayer, ...]:
    """Dense layers from a comma-separated list of widths such as ``"4,8,2"``."""
    widths = text.split(",")
    if len(widths) > MAX_LAYERS:
        raise ValueError(f"`{name}` may list at most {MAX_LAYERS} layers, got {len(widths):,}")
    return tuple(DenseLayer(features=parse_int(width, "features", name), use_bias=use_bias) for width in widths)


def _hub_text(value: Any, name: str, max_chars: int, rule: str, url_hint: str) -> str:
    """The checks a Hub id and a revision share: text, not empty, bounded, no URL, no whitespace."""
    if not isinstance(value, str):
        raise TypeError(f"`{name}` must be text, got {type(value).__name__} {show(value)}")
    if not value:
        raise ValueError(f"`{name}` is empty; it must be {rule}")
    if len(value) > max_chars:
        raise ValueError(f"`{name}` may be at most {max_chars} characters, got {len(value):,}")
    if "://" in value or value.lower().startswith(("huggingface.co/", "hf.co/", "www.")):
        raise ValueError(f"`{name}` is a URL; {url_hint}; got {show(value)}")
    if any(char.isspace() for char in value):
        raise ValueError(f"`{name}` may not hold spaces or other whitespace, got {show(value)}")
    return value


def check_hub_id(value: Any, name: str = "hub_id") -> str:
    """A Hugging Face Hub repository id (``HUB_ID_RULE``), checked before anything is asked of the
    Hub: every refusal says what was wrong and what is allowed."""
    hint = "give the model's Hub id, owner/name (for https://huggingface.co/google/gemma-7b, google/gemma-7b)"
    text = _hub_text(value, name, MAX_HUB_ID_CHARS, HUB_ID_RULE, hint)
    if text.count("/") > 1:
        raise ValueError(f"`{name}` is owner/name or a single name, with one '/' at most; got {show(text)}")
    if ".." in text or "--" in text:
        raise ValueError(f"`{name}` may not hold '..' or '--', got {show(text)}")
    if text.endswith(".git") or not _HUB_ID_TEXT.fullmatch(text):
        raise ValueError(f"`{name}` must be {HUB_ID_RULE}; got {show(text)}")
    return text


def check_hub_revision(value: Any, name: str = "revision") -> str:
    """A revision of a Hub repository (``REVISION_RULE``), checked before anything is asked of the Hub."""
    text = _hub_text(value, name, MAX_REVISION_CHARS, REVISION_RULE, "give a branch, tag or commit (main, v1.0)")
    odd = ".." in text or "//" in text or "/." in text or text.endswith(("/", ".", ".lock"))
    if odd or not _REVISION_TEXT.fullmatch(text):
        raise ValueError(f"`{name}` must be {REVISION_RULE}; got {show(text)}")
    return text


def check_dtype(value: Any, name: str = "dtype") -> str:
    """A storage dtype name from ``DTYPES``."""
    if not isinstance(value, str) or value not in DTYPES:
        raise ValueError(f"`{name}` must be one of {', '.join(DTYPES)}, got {show(value)}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Origin:
    """Where a model that is not a preset came from: a Hugging Face ``config.json``, opened as a
    file or fetched from the Hub by the model's id.

    Such a model is a family (``dcsim.model.schemas.FAMILIES``) with hyperparameters, shown under the
    name the file gives it, never under a preset's: a Gemma file is not "Llama 2 7B with changes".

    Attributes:
      name: the file's ``_name_or_path``, else its ``architectures`` entry (``GemmaForCausalLM``);
        the Hub id for a model fetched from the Hub.
      model_type: the file's ``model_type`` (``gemma``): lower-case letters, digits, ``_`` and ``-``.
      family: the dcsim family that builds it (``decoder``).
      edited: whether its hyperparameters were changed after it was opened.
      hub_id: the Hub id it was fetched by (``mistralai/Mixtral-8x7B-v0.1``), or None.
      revision: the branch, tag or commit it was fetched at, when one was given (None: the default
        branch); only with ``hub_id``.
    """

    name: str
    model_type: str
    family: str
    edited: bool = False
    hub_id: str | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_text(self.name, "name", MAX_NAME_CHARS))
        model_type = check_text(self.model_type, "model_type", MAX_MODEL_TYPE_CHARS)
        if not _MODEL_TYPE_TEXT.fullmatch(model_type):
            raise ValueError(
                "`model_type` must be lower-case letters, digits, _ and - (gemma, gpt_neox, xlm-roberta), "
                f"got {show(model_type)}"
            )
        object.__setattr__(self, "model_type", model_type)

        schemas.schema(self.family)
        object.__setattr__(self, "edited", as_bool(self.edited, "edited"))
        if self.hub_id is not None:
            check_hub_id(self.hub_id)
        if self.revision is not None:
            if self.hub_id is None:
                raise ValueError("`revision` is a revision of the Hub model in `hub_id`, which is missing")
            check_hub_revision(self.revision)

    @property
    def title(self) -> str:
        """``GemmaForCausalLM (gemma, from config.json)``, or ``google/gemma-7b (gemma, from the Hub)``
        (``at v1.0`` for a revision), with ``, edited`` once changed."""
        where = "from config.json"
        if self.hub_id is not None:
            where = "from the Hub" + (f" at {self.revision}" if self.revision else "")
        return f"{self.name} ({self.model_type}, {where})" + (", edited" if self.edited else "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "model_type": self.model_type,
            "family": self.family,
            "edited": self.edited,
        }
        data |= {key: getattr(self, key) for key in ("hub_id", "revision") if getattr(self, key) is not None}
        return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseLayer:
    """One ``flax.linen.Dense`` layer of the stack.

    Attributes:
      features: output width F (the layer holds a D x F kernel, D being its input width).
      use_bias: whether the layer holds an F-value bias (Flax's default, True).
    """

    features: int
    use_bias: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", check_field(self.features, "features"))
        object.__setattr__(self, "use_bias", as_bool(self.use_bias, "use_bias"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A stack of Dense layers applied to inputs of shape (batch_size, input_dim).

    The defaults are the seed exercise's example: one Dense(4) with bias on input dimension 4,
    split over 2 shards, seed 0: 20 parameters, an ideal share of 10.

    Attributes:
      input_dim: D, the width of each input example.
      layers: the Dense layers in order; each one's input width is the previous one's features.
      batch_size: B. Every example shares the same kernels and biases, so B never changes a count.
      seed: the PRNG seed of the initialisation. It changes the values, never their number.
      num_shards: how many checkpoint shards the ideal share divides the total by.
      dtype: the storage dtype of the byte figures (bytes per shard, raw payload), one of
        ``DTYPES``; the raw float32 estimate is always shown beside it. It never changes a count.
      preset: the name of an architecture preset (``dcsim.model.presets.PRESETS``), or None. With a
        preset or an origin, ``input_dim`` and ``layers`` are not used.
      overrides: hyperparameters changed from the preset's (or, with an origin, from its family's
        defaults), as sorted (name, value) pairs; a mapping is accepted and normalised.
      origin: a model opened from a Hugging Face config.json: its name and family (no preset).
    """

    input_dim: int = 4
    layers: tuple[DenseLayer, ...] = (DenseLayer(features=4),)
    batch_size: int = 1
    seed: int = 0
    num_shards: int = 2
    dtype: str = DEFAULT_DTYPE
    preset: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    origin: Origin | None = None

    def __post_init__(self) -> None:
        self._check_preset()
        if not self.is_dense:  # unused by a family's model: kept at their defaults, so equal models compare equal
            object.__setattr__(self, "input_dim", _DENSE_DEFAULTS[0])
            object.__setattr__(self, "layers", _DENSE_DEFAULTS[1])
        for field in ("input_dim", "batch_size", "seed", "num_shards"):
            object.__setattr__(self, field, check_field(getattr(self, field), field))
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        if isinstance(self.layers, (str, bytes)) or not isinstance(self.layers, (list, tuple)):
            raise TypeError(f"`layers` must be a list of Dense layers, got {type(self.layers).__name__}")
        layers = tuple(self.layers)
        if not layers:
            raise ValueError("`layers` must hold at least one Dense layer, got none")
        if len(layers) > MAX_LAYERS:
            raise ValueError(f"`layers` may hold at most {MAX_LAYERS} layers, got {len(layers):,}")
        for index, layer in enumerate(layers):
            if not isinstance(layer, DenseLayer):
                raise TypeError(f"`layers[{index}]` must be a DenseLayer, got {type(layer).__name__}")
        object.__setattr__(self, "layers", layers)

    def _check_preset(self) -> None:

        if self.origin is not None:
            if not isinstance(self.origin, Origin):
                raise TypeError(f"`origin` must be an Origin, got {type(self.origin).__name__}")
            if self.preset is not None:
                raise ValueError("a model opened from a file has its own name and no `preset`")
            object.__setattr__(
                self, "overrides", schemas.normalize_family_overrides(self.origin.family, self.overrides)
            )
            return
        if self.preset is None:
            if not isinstance(self.overrides, (tuple, list, dict)) or len(self.overrides):
                raise ValueError("`overrides` change a preset's hyperparameters; set `preset` too")
            object.__setattr__(self, "overrides", ())
            return
        presets.get_preset(self.preset)
        object.__setattr__(self, "overrides", presets.normalize_overrides(self.preset, self.overrides))

    @property
    def is_dense(self) -> bool:
        """Whether this is the editable Dense stack (no preset, not opened from a file)."""
        return self.preset is None and self.origin is None

    @property
    def family(self) -> str | None:
        """The family that builds the model (``decoder``, ``resnet``...); None for the Dense stack."""
        if self.origin is not None:
            return self.origin.family
        if self.preset is None:
            return None
        return presets.PRESETS[self.preset].family

    def architecture(self) -> ModelConfig:
        """The same model with every field that changes no count at its default (shards, dtype,
        seed, batch size, the Dense fields of a family's model): the key under which a count, a
        layout or an optimizer state is shared, so changing the shard count recounts nothing."""
        if self.is_dense:
            return ModelConfig(input_dim=self.input_dim, layers=self.layers)
        return ModelConfig(preset=self.preset, origin=self.origin, overrides=self.overrides)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the JSON object that the dashboard downloads and the CLI reads.

        ``input_dim`` and ``layers`` appear only for the Dense stack, ``preset``, ``origin`` and
        ``overrides`` only for a family's model."""
        data: dict[str, Any] = {"format": CONFIG_FORMAT, "version": CONFIG_VERSION}
        if self.is_dense:
            data["input_dim"] = self.input_dim
        data |= {"batch_size": self.batch_size, "seed": self.seed, "num_shards": self.num_shards, "dtype": self.dtype}
        if self.is_dense:
            data["layers"] = [{"features": layer.features, "use_bias": layer.use_bias} for layer in self.layers]
        if self.preset is not None:
            data["preset"] = self.preset
        if self.origin is not None:
            data["origin"] = self.origin.to_dict()
        if not self.is_dense:
            data["overrides"] = {
                name: list(value) if isinstance(value, tuple) else value for name, value in self.overrides
            }
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> ModelConfig:
        """Validate a parsed JSON object. Missing fields take their defaults; unknown ones are
        rejected by name."""
        check_document(
            data,
            what="configuration",
            keys=_CONFIG_KEYS,
            format_name=CONFIG_FORMAT,
            version=CONFIG_VERSION,
            format_required=False,
        )
        fields = {key: data[key] for key in _CONFIG_FIELDS if key in data}
        if "layers" in data:
            fields["layers"] = _layers_from_json(data["layers"])
        if "preset" in data:
            fields["preset"] = data["preset"]
        if "origin" in data:
            fields["origin"] = _origin_from_json(data["origin"])
        if "overrides" in data:
            if not isinstance(data["overrides"], dict):
                raise TypeError(
                    f'`overrides` must be an object like {{"num_layers": 6}}, got {json_kind(data["overrides"])}'
                )
            fields["overrides"] = data["overrides"]
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelConfig:
        """Parse and validate configuration JSON (at most MAX_CONFIG_BYTES, duplicate keys refused)."""
        return cls.from_dict(load_json(text, "configuration", MAX_CONFIG_BYTES))


_DENSE_DEFAULTS = (4, (DenseLayer(features=4),))
_CONFIG_FIELDS = ("input_dim", "batch_size", "seed", "num_shards", "dtype", "layers")
MODEL_KEYS = (*_CONFIG_FIELDS, "preset", "origin", "overrides")  # a configuration's JSON fields, envelope aside
_CONFIG_KEYS = ("format", "version", *MODEL_KEYS)
_ORIGIN_KEYS = ("name", "model_type", "family", "edited", "hub_id", "revision")
_LAYER_KEYS = ("features", "use_bias")


def _origin_from_json(origin: Any) -> Origin:
    if not isinstance(origin, dict):
        raise TypeError(
            f'`origin` must be an object like {{"name": "GemmaForCausalLM", "model_type": "gemma", '
            f'"family": "decoder"}}, got {json_kind(origin)}'
        )
    reject_unknown(origin, _ORIGIN_KEYS, "`origin`")
    missing = [key for key in _ORIGIN_KEYS[:3] if key not in origin]
    if missing:
        raise ValueError(f"`origin` needs {', '.join(missing)}")
    try:
        return Origin(**origin)
    except (TypeError, ValueError) as err:
        raise type(err)(f"`origin`: {err}") from None


def _layers_from_json(layers: Any) -> tuple[DenseLayer, ...]:
    if not isinstance(layers, list):
        raise TypeError(f"`layers` must be a JSON array of layers, got {json_kind(layers)}")
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"`layers` may hold at most {MAX_LAYERS} layers, got {len(layers):,}")
    parsed = []
    for index, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise TypeError(
                f'`layers[{index}]` must be an object like {{"features": 4, "use_bias": true}}, got {json_kind(layer)}'
            )
        reject_unknown(layer, _LAYER_KEYS, f"`layers[{index}]`")
        if "features" not in layer:
            raise ValueError(f"`layers[{index}]` needs `features`, its output width")
        try:
            parsed.append(DenseLayer(**layer))
        except (TypeError, ValueError) as err:
            raise type(err)(f"`layers[{index}]`: {err}") from None
    return tuple(parsed)
