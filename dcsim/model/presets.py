"""Architecture presets: one table of published models, each checked against the hyperparameter
schema of its family (``dcsim.model.schemas``).

Every preset names a model family (built from real Flax modules in ``dcsim.model.families``), its full
hyperparameters, the parameter count it is published with and where that figure comes from. The
tests initialise every preset abstractly and assert the published figure exactly, so a row here is
a claim the suite checks, not a number copied in. Beside the table: a model's hyperparameters with
its overrides applied, its title, and where its count comes from, in words.

This module is pure Python (no JAX, no Flax), like the schemas it builds on: the configuration, the
links codec and the dashboard's forms read the table cheaply. Every row is checked at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.inputs import show
from dcsim.model.schemas import FAMILY_DESCRIPTIONS, check_hparams, family_defaults, normalize, schema


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """One row of the preset table.

    Attributes:
      name: the preset's name, e.g. ``gpt2-small``.
      family: the family it is built from, a key of ``dcsim.model.schemas.FAMILY_SCHEMAS``.
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


def get_preset(name: Any) -> Preset:
    """The preset called ``name``, or a message listing the valid names."""
    if not isinstance(name, str):
        raise TypeError(f"`preset` must be a preset name, got {type(name).__name__} {show(name)}")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {show(name)}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def normalize_overrides(preset: str, overrides: Any) -> tuple[tuple[str, Any], ...]:
    """Check ``overrides`` against the preset's family and return them as a sorted tuple of
    (name, value) pairs; the resolved hyperparameters are checked together too (heads dividing
    ``d_model`` and so on)."""
    row = get_preset(preset)
    return normalize(row.family, row.hparams, overrides, preset)


def resolve(preset: str, overrides: Any = ()) -> dict[str, Any]:
    """The preset's hyperparameters with ``overrides`` applied, every one checked."""
    row = get_preset(preset)
    merged = {**row.hparams, **dict(normalize_overrides(preset, overrides))}
    return {spec.name: merged[spec.name] for spec in schema(row.family)}


def base_hparams(config: Any) -> dict[str, Any]:
    """What a model's overrides are changes from: its preset's hyperparameters, or its family's
    defaults for a model opened from a file; empty for the Dense stack."""
    if config.origin is not None:
        return family_defaults(config.origin.family)
    if config.preset is None:
        return {}
    return dict(PRESETS[config.preset].hparams)


def resolved_hparams(config: Any) -> dict[str, Any]:
    """The hyperparameters a ``ModelConfig`` builds with: its base's (``base_hparams``), overrides
    applied, in the family schema's order; empty for the Dense stack. The configuration checked
    them when it was made."""
    if config.family is None:
        return {}
    merged = {**base_hparams(config), **dict(config.overrides)}
    return {spec.name: merged[spec.name] for spec in schema(config.family)}


def model_title(config: Any) -> str:
    """What a person calls the model: the preset's title (``Llama 2 70B (8 KV heads)``), a file's
    own name (``GemmaForCausalLM (gemma, from config.json)``), or ``Dense stack``."""
    if config.origin is not None:
        return config.origin.title
    if config.preset is not None:
        return PRESETS[config.preset].title
    return "Dense stack"


def provenance(config: Any, total_params: int) -> str | None:
    """One sentence on where the model comes from and how its count compares with the published
    one: ``matches the published ...`` only for a preset at its published values; a changed preset
    names its changes; a file's model says it is built from the file. None for the Dense stack."""
    if config.origin is not None:
        family = config.origin.family
        return (
            f"{config.origin.title}: built from the file's hyperparameters as dcsim's {family} family "
            f"({FAMILY_DESCRIPTIONS[family]})."
        )
    if config.preset is None:
        return None
    row = PRESETS[config.preset]
    if config.overrides:
        changed = ", ".join(f"{name}={value_text(value)}" for name, value in config.overrides)
        return f"{row.title} with {changed}; the published {row.title} has {row.published_params:,}."
    same = "matches" if total_params == row.published_params else "DIFFERS FROM"
    return f"{row.title}: {same} the published {row.published_params:,} ({row.source})."


def value_text(value: Any) -> str:
    """A hyperparameter as a link or a message writes it: ``true``, ``3,4,6,3``, ``768``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(entry) for entry in value)
    return str(value)


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
