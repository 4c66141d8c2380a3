"""Architecture presets: one table of published models, and the hyperparameter schema they share.

Every preset names a model family (built from real Flax modules in ``dcsim.families``), its full
hyperparameters, the parameter count it is published with and where that figure comes from. The
tests initialise every preset abstractly and assert the published figure exactly, so a row here is
a claim the suite checks, not a number copied in.

This module is pure Python (no JAX, no Flax): the configuration, the links codec and the dashboard's
forms read the schema cheaply. Anything that validates a hyperparameter goes through here, and every
rejection is a ``ValueError`` (or ``TypeError`` for the wrong kind of thing) that names the
hyperparameter, the rule, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.config import as_bool, as_int, number_from_text, show

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
            return as_int(value, name, minimum=self.minimum, maximum=self.maximum)
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
        if not 1 <= len(value) <= self.max_length:
            raise ValueError(f"`{name}` must be {self.rule()}, got {len(value):,} entries")
        return tuple(
            as_int(entry, f"{name}[{index}]", minimum=self.minimum, maximum=self.maximum)
            for index, entry in enumerate(value)
        )

    def parse(self, text: str) -> Any:
        """A value typed as text (``--set num_layers=6``, ``tied_embeddings=false``, ``3,4,6,3``)."""
        text = text.strip()
        if self.kind == "int":
            return as_int(number_from_text(text), self.name, minimum=self.minimum, maximum=self.maximum, shown=text)
        if self.kind == "bool":
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError(f"`{self.name}` must be true or false, got {show(text)}")
            return lowered == "true"
        if self.kind == "choice":
            return self.check(text)
        entries = text.split(",")
        if len(entries) > self.max_length:
            return self.check(entries)  # the length message, before converting thousands of entries
        return self.check(
            [
                as_int(
                    number_from_text(entry.strip()),
                    f"{self.name}[{index}]",
                    minimum=self.minimum,
                    maximum=self.maximum,
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """One row of the preset table.

    Attributes:
      name: the preset's name, e.g. ``gpt2-small``.
      family: the family it is built from, a key of ``FAMILY_SCHEMAS``.
      hparams: every hyperparameter of the family, by name.
      published_params: the parameter count published for the model; the tests reproduce it.
      source: where that figure comes from.
      title: a readable name, e.g. ``GPT-2 small (124M)``.
    """

    name: str
    family: str
    title: str
    hparams: Mapping[str, Any]
    published_params: int
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hparams", MappingProxyType(dict(self.hparams)))


_GPT2 = {"vocab_size": 50_257, "max_positions": 1024, "position_embedding": "learned", "tied_embeddings": True}
_GPT2 |= {"use_bias": True, "norm": "layernorm", "gated_mlp": False, "head_dim": 0, "qkv_bias": False}
_LLAMA = {"position_embedding": "none", "tied_embeddings": False, "use_bias": False, "norm": "rmsnorm"}
_LLAMA |= {"gated_mlp": True, "head_dim": 0, "qkv_bias": False}
# Each figure below is also what Hugging Face transformers' own model of the same configuration
# counts (bench/hf_counts.py builds them on the meta device and prints num_parameters()).
_HF = "transformers {cls}({config}).num_parameters(), checked in bench/hf_counts.py"
_TV = "torchvision's model documentation (num_params)"

_ROWS: tuple[Preset, ...] = (
    Preset(
        name="mlp-mnist",
        family="mlp",
        title="MLP 784-512-512-10 (MNIST)",
        hparams={"input_dim": 784, "hidden_dim": 512, "num_layers": 2, "num_classes": 10, "use_bias": True},
        published_params=669_706,
        source="the Keras MNIST MLP example's model.summary() (Dense 512, 512, 10 on 784 inputs)",
    ),
    *(
        Preset(
            name=f"gpt2-{size}",
            family="decoder",
            title=f"GPT-2 {size}",
            hparams={**_GPT2, "d_model": d_model, "num_layers": layers, "num_heads": heads, "num_kv_heads": heads}
            | {"ffn_dim": 4 * d_model},
            published_params=published,
            source=_HF.format(cls="GPT2LMHeadModel", config=f"gpt2-{size}") + "; lm_head tied to wte, counted once",
        )
        for size, d_model, layers, heads, published in (
            ("small", 768, 12, 12, 124_439_808),
            ("medium", 1024, 24, 16, 354_823_168),
            ("large", 1280, 36, 20, 774_030_080),
            ("xl", 1600, 48, 25, 1_557_611_200),
        )
    ),
    *(
        Preset(
            name=f"bert-{size}",
            family="bert",
            title=f"BERT {size} (uncased, with pooler)",
            hparams={"vocab_size": 30_522, "d_model": d_model, "num_layers": layers, "num_heads": heads}
            | {"ffn_dim": 4 * d_model, "max_positions": 512, "type_vocab_size": 2, "pooler": True, "use_bias": True},
            published_params=published,
            source=_HF.format(cls="BertModel", config=f"bert-{size}-uncased") + "; pooler in, pre-training heads out",
        )
        for size, d_model, layers, heads, published in (
            ("base", 768, 12, 12, 109_482_240),
            ("large", 1024, 24, 16, 335_141_888),
        )
    ),
    *(
        Preset(
            name=f"vit-{size[0]}16",
            family="vit",
            title=f"ViT-{size[0].upper()}/16 (224 px, 1000 classes)",
            hparams={"image_size": 224, "patch_size": 16, "d_model": d_model, "num_layers": layers}
            | {"num_heads": heads, "ffn_dim": 4 * d_model, "num_classes": 1000, "use_bias": True},
            published_params=published,
            source=f"{_TV} for vit_{size[0]}_16; "
            + _HF.format(cls="ViTForImageClassification", config=f"vit-{size}-patch16-224, 1000 labels"),
        )
        for size, d_model, layers, heads, published in (
            ("base", 768, 12, 12, 86_567_656),
            ("large", 1024, 24, 16, 304_326_632),
        )
    ),
    *(
        Preset(
            name=f"resnet{depth}",
            family="resnet",
            title=f"ResNet-{depth}",
            hparams={"stage_blocks": blocks, "bottleneck": bottleneck, "num_classes": 1000, "image_size": 224},
            published_params=published,
            source=f"{_TV} for resnet{depth} (BatchNorm scale and bias counted, running statistics not); "
            + _HF.format(cls="ResNetForImageClassification", config=f"resnet-{depth}"),
        )
        for depth, blocks, bottleneck, published in (
            (18, (2, 2, 2, 2), False, 11_689_512),
            (50, (3, 4, 6, 3), True, 25_557_032),
            (152, (3, 8, 36, 3), True, 60_192_808),
        )
    ),
    *(
        Preset(
            name=name,
            family="decoder",
            title=title,
            hparams={**_LLAMA, "vocab_size": vocab, "d_model": d_model, "num_layers": layers, "num_heads": heads}
            | {"num_kv_heads": kv_heads, "ffn_dim": ffn_dim, "max_positions": positions},
            published_params=published,
            source=source,
        )
        for name, title, vocab, d_model, layers, heads, kv_heads, ffn_dim, positions, published, source in (
            (
                "llama2-7b",
                "Llama 2 7B",
                32_000,
                4096,
                32,
                32,
                32,
                11_008,
                4096,
                6_738_415_616,
                _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-7b-hf"),
            ),
            (
                "llama2-13b",
                "Llama 2 13B",
                32_000,
                5120,
                40,
                40,
                40,
                13_824,
                4096,
                13_015_864_320,
                _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-13b-hf"),
            ),
            (
                "llama2-70b",
                "Llama 2 70B (8 KV heads)",
                32_000,
                8192,
                80,
                64,
                8,
                28_672,
                4096,
                68_976_648_192,
                _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-70b-hf"),
            ),
            (
                "llama3-8b",
                "Llama 3 8B (8 KV heads)",
                128_256,
                4096,
                32,
                32,
                8,
                14_336,
                8192,
                8_030_261_248,
                _HF.format(cls="LlamaForCausalLM", config="meta-llama/Meta-Llama-3-8B"),
            ),
        )
    ),
)

PRESETS: Mapping[str, Preset] = MappingProxyType({row.name: row for row in _ROWS})
"""The preset table, by name, in the order above (MLP, GPT-2, BERT, ViT, ResNet, Llama)."""


def schema(family: str) -> tuple[HParam, ...]:
    """The hyperparameters of ``family``, in the order a form should show them."""
    if family not in FAMILY_SCHEMAS:
        raise ValueError(f"unknown family {show(family)}; families: {', '.join(FAMILIES)}")
    return FAMILY_SCHEMAS[family]


def get_preset(name: Any) -> Preset:
    """The preset called ``name``, or a message listing the valid names."""
    if not isinstance(name, str):
        raise TypeError(f"`preset` must be a preset name, got {type(name).__name__} {show(name)}")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {show(name)}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def hparam(family: str, name: Any, preset: str) -> HParam:
    """The hyperparameter ``name`` of ``family``, or a message listing the valid names (``preset``
    is named in it for context)."""
    for spec in schema(family):
        if spec.name == name:
            return spec
    valid = ", ".join(spec.name for spec in schema(family))
    raise ValueError(f"unknown hyperparameter {show(name)} for preset {preset!r} ({family} family); valid: {valid}")


def normalize_overrides(preset: str, overrides: Any) -> tuple[tuple[str, Any], ...]:
    """Check ``overrides`` (a mapping, or (name, value) pairs) against the preset's family and
    return them as a sorted tuple of (name, value) pairs; the resolved hyperparameters are checked
    together too (heads dividing ``d_model`` and so on)."""
    row = get_preset(preset)
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
        spec = hparam(row.family, name, preset)
        if name in checked:
            raise ValueError(f"`overrides` repeats the hyperparameter {show(name)}")
        checked[name] = spec.check(value)
    check_hparams(row.family, {**row.hparams, **checked})
    return tuple(sorted(checked.items()))


def resolve(preset: str, overrides: Any = ()) -> dict[str, Any]:
    """The preset's hyperparameters with ``overrides`` applied, every one checked."""
    row = get_preset(preset)
    merged = {**row.hparams, **dict(normalize_overrides(preset, overrides))}
    return {spec.name: merged[spec.name] for spec in schema(row.family)}


def resolved_hparams(config: Any) -> dict[str, Any]:
    """The hyperparameters a ``ModelConfig`` with a preset builds with: the preset's, overrides
    applied, in the family schema's order; empty for the Dense stack."""
    if config.preset is None:
        return {}
    return resolve(config.preset, config.overrides)


def _divisors(number: int, up_to: int) -> str:
    found = [divisor for divisor in range(1, min(number, up_to) + 1) if number % divisor == 0]
    shown = ", ".join(f"{divisor:,}" for divisor in found[:12])
    return shown + (", ..." if len(found) > 12 else "")


def check_hparams(family: str, hparams: Mapping[str, Any]) -> None:
    """Check the rules that tie hyperparameters together; raise a ``ValueError`` that says which."""
    if "num_heads" in hparams and not hparams.get("head_dim"):
        heads, d_model = hparams["num_heads"], hparams["d_model"]
        if d_model % heads:
            raise ValueError(
                f"`num_heads` ({heads:,}) must divide `d_model` ({d_model:,}) so every head gets "
                f"d_model / num_heads features; head counts that divide {d_model:,}: {_divisors(d_model, MAX_HEADS)}"
                + (" (or set head_dim, each head's own width)" if family == "decoder" else "")
            )
    if "num_kv_heads" in hparams:
        heads, kv_heads = hparams["num_heads"], hparams["num_kv_heads"]
        if heads % kv_heads:
            raise ValueError(
                f"`num_kv_heads` ({kv_heads:,}) must divide `num_heads` ({heads:,}) so each key/value head "
                f"serves the same number of query heads; valid: {_divisors(heads, heads)}"
            )
    if family == "vit":
        image, patch = hparams["image_size"], hparams["patch_size"]
        if image % patch:
            raise ValueError(
                f"`patch_size` ({patch:,}) must divide `image_size` ({image:,}) so the patches tile the image; "
                f"patch sizes that divide {image:,}: {_divisors(image, image)}"
            )


def num_patches(hparams: Mapping[str, Any]) -> int:
    """Patches a ViT cuts its image into."""
    return (hparams["image_size"] // hparams["patch_size"]) ** 2


def published_table() -> list[dict[str, Any]]:
    """The preset table as plain rows: name, family, title, published_params, source."""
    return [
        {
            "name": row.name,
            "family": row.family,
            "title": row.title,
            "published_params": row.published_params,
            "source": row.source,
        }
        for row in PRESETS.values()
    ]


def _check_table() -> None:
    """Every row's hyperparameters are exactly its family's, each valid: checked at import."""
    for row in _ROWS:
        names = [spec.name for spec in schema(row.family)]
        if sorted(row.hparams) != sorted(names):
            raise RuntimeError(f"preset {row.name!r} must set exactly {names}, sets {sorted(row.hparams)}")
        for spec in schema(row.family):
            spec.check(row.hparams[spec.name])
        check_hparams(row.family, row.hparams)
        if type(row.published_params) is not int or row.published_params <= 0:
            raise RuntimeError(f"preset {row.name!r} needs a positive published count")


_check_table()
