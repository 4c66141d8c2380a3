"""Hyperparameter schemas: each model family's hyperparameters, their ranges and defaults, and the
rules that tie them together.

Every family (built from real Flax modules in ``dcsim.model.families``) has a schema here: one
``HParam`` a hyperparameter, with its kind, its range, its default (the family's reference model's
value) and a line of help. The preset table (``dcsim.model.presets``) and models opened from a file
(``dcsim.model.hf``) are hyperparameters checked against these schemas; editing a form moves the
values that derive from others (``follow``) and shows only those that change the count
(``applicable``).

This module is pure Python (no JAX, no Flax): the configuration, the links codec and the dashboard's
forms read the schema cheaply. Anything that validates a hyperparameter goes through here, and every
rejection is a ``ValueError`` (or ``TypeError`` for the wrong kind of thing) that names the
hyperparameter, the rule, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from dcsim.inputs import as_bool, as_int, number_from_text, show

# Limits keep every preset cheap to trace (tracing cost grows with the number of blocks) and every
# count inside int64, which the tables use. None of them is a limit of Flax.
MAX_WIDTH = 1 << 16  # d_model, hidden widths
MAX_VOCAB = 1 << 20  # vocabularies, classes, FFN widths, positions
MAX_BLOCKS = 256  # transformer blocks or MLP layers: the same cap as the Dense stack
MAX_HEADS = 1024
MAX_IMAGE = 4096
MAX_STAGES = 8
MAX_STAGE_BLOCKS = 64

KINDS = ("int", "bool", "choice", "ints")


def _bound(value: int | None, name: str) -> int:
    if value is None:  # a schema entry without its range: a bug in the table below, not in input
        raise TypeError(f"the hyperparameter `{name}` has no range")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class HParam:
    """One hyperparameter of a family, with what a form needs to offer it.

    Attributes:
      name: the shared name, e.g. ``num_heads``.
      kind: ``int``, ``bool``, ``choice`` (one of ``choices``) or ``ints`` (a list of ints, each
        from ``minimum`` to ``maximum``, at most ``max_length`` of them).
      default: the family's default (its reference preset's value).
      description: one line for a form's help text.
      minimum, maximum: the range of an ``int`` (or of each entry of ``ints``).
      choices: the allowed values of a ``choice``.
      max_length: the longest ``ints`` list allowed.
    """

    name: str
    kind: str
    default: Any
    description: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    max_length: int | None = None

    @property
    def low(self) -> int:
        """The smallest ``int`` (or ``ints`` entry) allowed."""
        return _bound(self.minimum, self.name)

    @property
    def high(self) -> int:
        """The largest ``int`` (or ``ints`` entry) allowed."""
        return _bound(self.maximum, self.name)

    @property
    def longest(self) -> int:
        """The most entries an ``ints`` list may hold."""
        return _bound(self.max_length, self.name)

    def rule(self) -> str:
        """What a valid value looks like, for error messages and help text."""
        if self.kind == "int":
            return f"an integer from {self.minimum:,} to {self.maximum:,}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(choice) for choice in self.choices)
        return (
            f"a list of 1 to {self.max_length} integers, each from {self.minimum:,} to {self.maximum:,} (e.g. 3,4,6,3)"
        )

    def check(self, value: Any) -> Any:
        """``value`` as this hyperparameter's normal form (``ints`` become a tuple), or raise."""
        name = self.name
        if self.kind == "int":
            return as_int(value, name, minimum=self.low, maximum=self.high)
        if self.kind == "bool":
            return as_bool(value, name)
        if self.kind == "choice":
            if not isinstance(value, str):
                raise TypeError(f"`{name}` must be {self.rule()}, got {type(value).__name__} {show(value)}")
            if value not in self.choices:
                raise ValueError(f"`{name}` must be {self.rule()}, got {show(value)}")
            return value
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise TypeError(f"`{name}` must be {self.rule()}, got {type(value).__name__} {show(value)}")
        if not 1 <= len(value) <= self.longest:
            raise ValueError(f"`{name}` must be {self.rule()}, got {len(value):,} entries")
        return tuple(
            as_int(entry, f"{name}[{index}]", minimum=self.low, maximum=self.high) for index, entry in enumerate(value)
        )

    def parse(self, text: str) -> Any:
        """A value typed as text (``--set num_layers=6``, ``tied_embeddings=false``, ``3,4,6,3``)."""
        text = text.strip()
        if self.kind == "int":
            return as_int(number_from_text(text), self.name, minimum=self.low, maximum=self.high, shown=text)
        if self.kind == "bool":
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError(f"`{self.name}` must be true or false, got {show(text)}")
            return lowered == "true"
        if self.kind == "choice":
            return self.check(text)
        entries = text.split(",")
        if len(entries) > self.longest:
            return self.check(entries)  # the length message, before converting thousands of entries
        return self.check(
            [
                as_int(
                    number_from_text(entry.strip()),
                    f"{self.name}[{index}]",
                    minimum=self.low,
                    maximum=self.high,
                    shown=entry,
                )
                for index, entry in enumerate(entries)
            ]
        )


def _int(name: str, default: int, description: str, minimum: int, maximum: int) -> HParam:
    return HParam(name=name, kind="int", default=default, description=description, minimum=minimum, maximum=maximum)


def _bool(name: str, default: bool, description: str) -> HParam:
    return HParam(name=name, kind="bool", default=default, description=description)


def _choice(name: str, default: str, description: str, choices: tuple[str, ...]) -> HParam:
    return HParam(name=name, kind="choice", default=default, description=description, choices=choices)


# Shared definitions: a name means the same thing in every family that uses it.
_VOCAB = _int("vocab_size", 50_257, "tokens in the vocabulary: rows of the token embedding", 1, MAX_VOCAB)
_D_MODEL = _int("d_model", 768, "width of the residual stream (hidden size)", 1, MAX_WIDTH)
_LAYERS = _int("num_layers", 12, "number of transformer blocks", 1, MAX_BLOCKS)
_HEADS = _int("num_heads", 12, "attention heads (query heads); must divide d_model", 1, MAX_HEADS)
_FFN = _int("ffn_dim", 3072, "hidden width of each block's MLP", 1, MAX_VOCAB)
_POSITIONS = _int("max_positions", 1024, "longest sequence: rows of a learned position table", 1, MAX_VOCAB)
_BIAS = _bool("use_bias", True, "biases in the attention and MLP projections")
_CLASSES = _int("num_classes", 1000, "output classes of the classifier head", 1, MAX_VOCAB)
_IMAGE = _int("image_size", 224, "input image height and width in pixels (3 channels)", 1, MAX_IMAGE)

FAMILY_SCHEMAS: Mapping[str, tuple[HParam, ...]] = MappingProxyType(
    {
        "mlp": (
            _int("input_dim", 784, "width of each input example", 1, MAX_VOCAB),
            _int("hidden_dim", 512, "width of every hidden Dense layer", 1, MAX_VOCAB),
            _int("num_layers", 2, "number of hidden Dense layers (ReLU after each)", 1, MAX_BLOCKS),
            dataclasses.replace(_CLASSES, default=10),
            dataclasses.replace(_BIAS, description="a bias in every Dense layer"),
        ),
        "decoder": (
            _VOCAB,
            _D_MODEL,
            _LAYERS,
            dataclasses.replace(
                _HEADS, description="attention heads (query heads); divide d_model unless head_dim is set"
            ),
            _int("num_kv_heads", 12, "key/value heads (grouped-query attention); must divide num_heads", 1, MAX_HEADS),
            _FFN,
            _POSITIONS,
            _choice(
                "position_embedding",
                "learned",
                "learned: a position table; none: rotary or other parameter-free positions",
                ("learned", "none"),
            ),
            _bool("tied_embeddings", True, "the output projection reuses the token embedding"),
            _BIAS,
            _choice(
                "norm", "layernorm", "layernorm (scale and bias) or rmsnorm (scale only)", ("layernorm", "rmsnorm")
            ),
            _bool("gated_mlp", False, "gated MLP (SwiGLU: gate, up and down projections) instead of up and down"),
            _int("head_dim", 0, "width of each attention head; 0 for d_model / num_heads (Gemma's are wider)", 0, 4096),
            _bool("qkv_bias", False, "biases on query, key and value even without use_bias (Qwen2)"),
        ),
        "bert": (
            dataclasses.replace(_VOCAB, default=30_522),
            _D_MODEL,
            _LAYERS,
            _HEADS,
            _FFN,
            dataclasses.replace(_POSITIONS, default=512),
            _int("type_vocab_size", 2, "token types (segments): rows of the token-type embedding", 1, MAX_HEADS),
            _bool("pooler", True, "the pooler: a Dense with tanh over the first token"),
            _BIAS,
        ),
        "vit": (
            _IMAGE,
            _int("patch_size", 16, "patch height and width in pixels; must divide image_size", 1, MAX_IMAGE),
            _D_MODEL,
            _LAYERS,
            _HEADS,
            _FFN,
            _CLASSES,
            _BIAS,
        ),
        "resnet": (
            HParam(
                name="stage_blocks",
                kind="ints",
                default=(3, 4, 6, 3),
                description="residual blocks in each stage; stage i is 64 x 2^i channels wide",
                minimum=1,
                maximum=MAX_STAGE_BLOCKS,
                max_length=MAX_STAGES,
            ),
            _bool("bottleneck", True, "bottleneck blocks (1x1, 3x3, 1x1, 4x wider out) instead of basic (3x3, 3x3)"),
            _CLASSES,
            dataclasses.replace(_IMAGE, description="input image height and width (3 channels); changes no count"),
        ),
    }
)

FAMILY_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "mlp": "multilayer perceptron: Dense layers with ReLU, then a classifier",
        "decoder": "decoder-only transformer (GPT-2, LLaMA, Mistral, GPT-NeoX style), pre-norm",
        "bert": "encoder transformer (BERT): token, position and token-type embeddings, post-norm, pooler",
        "vit": "vision transformer: patch convolution, class token, learned positions, classifier head",
        "resnet": "ResNet v1.5: basic or bottleneck blocks, BatchNorm (running statistics are variables)",
    }
)

FAMILIES = tuple(FAMILY_SCHEMAS)


def schema(family: str) -> tuple[HParam, ...]:
    """The hyperparameters of ``family``, in the order a form should show them."""
    if family not in FAMILY_SCHEMAS:
        raise ValueError(f"unknown family {show(family)}; families: {', '.join(FAMILIES)}")
    return FAMILY_SCHEMAS[family]


def hparam(family: str, name: Any, preset: str) -> HParam:
    """The hyperparameter ``name`` of ``family``, or a message listing the valid names (``preset``
    is named in it for context)."""
    for spec in schema(family):
        if spec.name == name:
            return spec
    valid = ", ".join(spec.name for spec in schema(family))
    raise ValueError(f"unknown hyperparameter {show(name)} for preset {preset!r} ({family} family); valid: {valid}")


def family_defaults(family: str) -> dict[str, Any]:
    """Every hyperparameter of ``family`` at its default (its reference model's value)."""
    return {spec.name: spec.default for spec in schema(family)}


def normalize(family: str, base: Mapping[str, Any], overrides: Any, context: str) -> tuple[tuple[str, Any], ...]:
    """``overrides`` (a mapping, or (name, value) pairs) checked against ``family`` one by one and
    together over ``base``, as a sorted tuple of (name, value) pairs; ``context`` names the model
    in messages."""
    if isinstance(overrides, Mapping):
        pairs = list(overrides.items())
    elif isinstance(overrides, (list, tuple)):
        pairs = []
        for index, pair in enumerate(overrides):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise TypeError(f"`overrides[{index}]` must be a (name, value) pair, got {show(pair)}")
            pairs.append(tuple(pair))
    else:
        raise TypeError(f"`overrides` must map hyperparameter names to values, got {type(overrides).__name__}")
    checked: dict[str, Any] = {}
    for name, value in pairs:
        spec = hparam(family, name, context)
        if name in checked:
            raise ValueError(f"`overrides` repeats the hyperparameter {show(name)}")
        checked[name] = spec.check(value)
    check_hparams(family, {**base, **checked})
    return tuple(sorted(checked.items()))


def normalize_family_overrides(family: str, overrides: Any) -> tuple[tuple[str, Any], ...]:
    """``normalize_overrides`` for a model of ``family`` that is no preset (one opened from a
    file): its overrides are against the family's defaults."""
    return normalize(family, family_defaults(family), overrides, f"{family} family")


def overrides_from(family: str, base: Mapping[str, Any], hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters of ``hparams`` that differ from ``base``: a model's overrides."""
    return {spec.name: hparams[spec.name] for spec in schema(family) if hparams[spec.name] != base[spec.name]}


# --- editing: values that derive from others follow them -----------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived:
    """A hyperparameter that derives from another unless a person sets it.

    ``ratio``: it keeps its ratio to ``source`` (an MLP 4x as wide as ``d_model`` stays 4x).
    ``tied``: it equals ``source`` while it does (as many key/value heads as query heads).
    """

    name: str
    source: str
    kind: str


_FFN_FOLLOWS = Derived(name="ffn_dim", source="d_model", kind="ratio")
DERIVED: Mapping[str, tuple[Derived, ...]] = MappingProxyType(
    {
        "decoder": (_FFN_FOLLOWS, Derived(name="num_kv_heads", source="num_heads", kind="tied")),
        "bert": (_FFN_FOLLOWS,),
        "vit": (_FFN_FOLLOWS,),
    }
)


def follow(family: str, before: Mapping[str, Any], after: Mapping[str, Any], pinned: Any = ()) -> dict[str, Any]:
    """``after`` (``before`` with some values edited) with each derived value following its source.

    A derived value follows when its source changed, it was not itself edited, and it is not in
    ``pinned`` (values a person set): ``ffn_dim`` keeps its ratio to ``d_model`` (rounded to the
    nearest integer), and ``num_kv_heads`` stays equal to ``num_heads`` if it was. GPT-2 small
    taken to ``d_model`` 2048 so gets ``ffn_dim`` 8192, as its 4x MLP means.
    """
    result = dict(after)
    for rule in DERIVED.get(family, ()):
        old_source, new_source = before[rule.source], after[rule.source]
        if rule.name in pinned or after[rule.name] != before[rule.name] or old_source == new_source:
            continue
        if rule.kind == "ratio":
            scaled = round(Fraction(before[rule.name] * new_source, old_source))
            spec = hparam(family, rule.name, family)
            result[rule.name] = min(max(scaled, spec.low), spec.high)
        elif before[rule.name] == old_source:
            result[rule.name] = new_source
    return result


def applicable(family: str, hparams: Mapping[str, Any]) -> tuple[str, ...]:
    """The hyperparameters that change the count of this model (a form shows only these): a
    decoder without a learned position table has no use for ``max_positions``, and ``qkv_bias``
    adds nothing when ``use_bias`` already puts biases everywhere."""
    hidden: set[str] = set()
    if family == "decoder":
        if hparams["position_embedding"] == "none":
            hidden.add("max_positions")
        if hparams["use_bias"]:
            hidden.add("qkv_bias")
    return tuple(spec.name for spec in schema(family) if spec.name not in hidden)


def _divisors(number: int, up_to: int) -> str:
    found = [divisor for divisor in range(1, min(number, up_to) + 1) if number % divisor == 0]
    shown = ", ".join(f"{divisor:,}" for divisor in found[:12])
    return shown + (", ..." if len(found) > 12 else "")


def _must_divide(
    hparams: Mapping[str, Any], part: str, whole: str, why: str, options: str, *, aside: str = "", up_to: int = 0
) -> None:
    """Refuse a ``part`` that does not divide ``whole``: say why it must, and which values would
    (divisors of ``whole`` up to ``up_to``, all of them by default)."""
    size, total = hparams[part], hparams[whole]
    if total % size:
        raise ValueError(
            f"`{part}` ({size:,}) must divide `{whole}` ({total:,}) {why}: change {whole} and {part} together"
            f"{aside}; {options} that divide {total:,}: {_divisors(total, up_to or total)}"
        )


def check_hparams(family: str, hparams: Mapping[str, Any]) -> None:
    """Check the rules that tie hyperparameters together; raise a ``ValueError`` that says which."""
    if "num_heads" in hparams and not hparams.get("head_dim"):
        _must_divide(
            hparams,
            "num_heads",
            "d_model",
            "so every head gets d_model / num_heads features",
            "head counts",
            aside=" (or set head_dim, each head's own width)" if family == "decoder" else "",
            up_to=MAX_HEADS,
        )
    if "num_kv_heads" in hparams:
        _must_divide(
            hparams,
            "num_kv_heads",
            "num_heads",
            "so each key/value head serves the same number of query heads",
            "key/value head counts",
        )
    if family == "vit":
        _must_divide(hparams, "patch_size", "image_size", "so the patches tile the image", "patch sizes")


def _check_defaults() -> None:
    """Every family's defaults obey the rules that tie its hyperparameters together: checked at
    import (a model opened from a file is overrides against these)."""
    for family in FAMILIES:
        check_hparams(family, family_defaults(family))


_check_defaults()
