"""Architecture presets: one table of published models, each checked against the hyperparameter
schema of its family (``dcsim.model.schemas``).

Every preset names a model family (built from real Flax modules in ``dcsim.model.families``), its full
hyperparameters, the exact parameter count it reproduces (its reference count), what kind of figure
that is and where it comes from. Model cards and papers round ("7B"), so most reference counts are
transformers' count of the model's config, not a figure its authors publish; ``source_kind`` says
which kind each row's is, and what is shown to users names it. The tests initialise every preset abstractly
and assert the reference count exactly, so a row here is a claim the suite checks, not a number
copied in. Beside the table: a model's hyperparameters with
its overrides applied, its title, and where its count comes from, in words.

This module is pure Python (no JAX, no Flax), like the schemas it builds on: the configuration, the
links codec and the dashboard's forms read the table cheaply. The rows are data (``presets.json``
beside this module), every one checked at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim import shipped
from dcsim.inputs import show
from dcsim.model.schemas import FAMILY_DESCRIPTIONS, check_hparams, family_defaults, normalize, schema


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """One row of the preset table.

    Attributes:
      name: the preset's name, e.g. ``gpt2-small``.
      family: the family it is built from, a key of ``dcsim.model.schemas.FAMILY_SCHEMAS``.
      hparams: every hyperparameter of the family, by name.
      reference_params: the exact parameter count the preset reproduces; the tests assert it.
      source_kind: what kind of figure that is, one of ``SOURCE_KINDS``.
      source: where that figure comes from, in words.
      title: a readable name, e.g. ``GPT-2 small (124M)``.
    """

    name: str
    family: str
    title: str
    hparams: Mapping[str, Any]
    reference_params: int
    source_kind: str
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hparams", MappingProxyType(dict(self.hparams)))


_GPT2 = {"vocab_size": 50_257, "max_positions": 1024, "position_embedding": "learned", "tied_embeddings": True}
_GPT2 |= {"use_bias": True, "norm": "layernorm", "gated_mlp": False, "head_dim": 0, "qkv_bias": False}
_PLAIN_BLOCKS: dict[str, Any] = {"qk_norm": False, "post_norms": False, "fused_projections": False}
_PLAIN_BLOCKS |= {"sliding_window": 0, "local_layers": (), "rope_scaling": False}  # every block attends to all
_GPT2 |= _PLAIN_BLOCKS
_LLAMA: dict[str, Any] = {"position_embedding": "none", "tied_embeddings": False, "use_bias": False, "norm": "rmsnorm"}
_LLAMA |= {"gated_mlp": True, "head_dim": 0, "qkv_bias": False} | _PLAIN_BLOCKS
_ROTARY = {**_LLAMA, "max_positions": 4096}  # rotary decoders: no position table to size

# The bases a row of presets.json writes its own values over (its "base"; null: it sets every
# hyperparameter itself): GPT-2, Llama, a rotary Llama-style decoder, the moe, llama4 and t5 families'
# defaults (Mixtral 8x7B's and T5-small's rows are those defaults, 32,768 positions for Mixtral).
_BASES: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {"gpt2": _GPT2, "llama": _LLAMA, "rotary": _ROTARY}
    | {name: family_defaults(name) for name in ("moe", "llama4", "t5")}
)

# The table is data, in presets.json beside this module: one row a model, with its reference count,
# the kind of figure it is (``SOURCE_KINDS``) and where that figure comes from. A source that names
# transformers' count says where it is checked: up to Llama 3 8B, bench/hf_counts.py builds each
# configuration on the meta device and prints num_parameters(); after it, bench/hf_import.py writes
# each model's config.json and count to tests/data/hf/, and tests/test_hf_modern.py requires the
# preset's hyperparameters and count of every file named there. The rows of issue 30, item 8 carry
# the serving fields their files publish: positions, sliding windows (Mistral 7B v0.1 on every
# block; Gemma 2 on the even ones), scaled rotary positions. JSON, not TOML: the refusal of a bad
# configuration reads this table before anything else.
_FIELDS = ("name", "family", "title", "reference_params", "source_kind", "source", "base", "hparams")

SOURCE_KINDS: Mapping[str, str] = MappingProxyType(
    {
        "transformers count of the config": "transformers' num_parameters() of the model built from its "
        "config.json on the meta device: exact, and not a figure the model's authors publish (they round)",
        "library documentation": "the count a library's documentation prints for its model (torchvision's "
        "num_params), which transformers' count of the same model agrees with",
        "model summary": "the total a framework's model.summary() prints in a published example",
        "checkpoint tensors": "the parameters the published checkpoint's tensors hold, as stored",
    }
)
"""What a preset's reference count is, by kind: each row's ``source_kind`` is one of these keys."""


def _row(index: int, record: Any) -> Preset:
    """Row ``index`` of presets.json as a ``Preset``: its base's hyperparameters with its own over
    them (JSON arrays as tuples); ``_check_table`` then checks them against the family."""
    where = f"dcsim/model/presets.json row {index}"
    if not isinstance(record, dict) or sorted(record) != sorted(_FIELDS):
        raise RuntimeError(f"{where} must have exactly the fields {list(_FIELDS)}, has {show(record)}")
    texts = {key: record[key] for key in ("name", "family", "title", "source_kind", "source")}
    if not all(isinstance(text, str) for text in texts.values()):
        raise RuntimeError(f"{where}: name, family, title, source_kind and source must be strings, got {show(texts)}")
    if texts["source_kind"] not in SOURCE_KINDS:
        raise RuntimeError(
            f"{where}: source_kind must be one of {list(SOURCE_KINDS)}, got {show(texts['source_kind'])}"
        )
    base, own = record["base"], record["hparams"]
    if not (base is None or base in _BASES) or not isinstance(own, dict):
        raise RuntimeError(f"{where} needs a base of {list(_BASES)} or null and an object of hparams")
    own = {name: tuple(value) if isinstance(value, list) else value for name, value in own.items()}
    hparams = {**(_BASES[base] if base else {}), **own}
    return Preset(**texts, hparams=hparams, reference_params=record["reference_params"])


_ROWS = tuple(_row(index, record) for index, record in enumerate(shipped.load(__file__, "presets.json")))

PRESETS: Mapping[str, Preset] = MappingProxyType({row.name: row for row in _ROWS})
"""The preset table, by name, in presets.json's order (MLP, GPT-2, BERT, ViT, ResNet, Llama, then the
families of issues 16 and 30)."""
if len(PRESETS) != len(_ROWS):
    raise RuntimeError(f"dcsim/model/presets.json names a preset twice: {[row.name for row in _ROWS]}")


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
    """One sentence on where the model comes from and how its count compares with the preset's
    reference count, naming what kind of figure that is: ``matches the reference count ...`` only for
    a preset at its own values; a changed preset names its changes; a file's model says it is built
    from the file. None for the Dense stack."""
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
        reference = f"{row.reference_params:,} ({row.source_kind})"
        return f"{row.title} with {changed}; the reference count of {row.title} is {reference}."
    same = "matches" if total_params == row.reference_params else "DIFFERS FROM"
    return f"{row.title}: {same} the reference count {row.reference_params:,} ({row.source_kind}: {row.source})."


EMPTY_LIST = "none"


def value_text(value: Any) -> str:
    """A hyperparameter as a link or a message writes it: ``true``, ``3,4,6,3``, ``768``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):  # an empty list is `none`: an empty link value may be dropped on the way
        return ",".join(str(entry) for entry in value) or EMPTY_LIST
    return str(value)


def reference_table() -> list[dict[str, Any]]:
    """The preset table as plain rows: name, family, title, reference_params, source_kind, source."""
    return [
        {
            "name": row.name,
            "family": row.family,
            "title": row.title,
            "reference_params": row.reference_params,
            "source_kind": row.source_kind,
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
        if type(row.reference_params) is not int or row.reference_params <= 0:
            raise RuntimeError(f"preset {row.name!r} needs a positive reference count")


_check_table()
