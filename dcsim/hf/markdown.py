"""docs/presets.md's table of model types, written from ``dcsim.hf.table``'s entries: each type's
family, the class counted, what sets it apart and the fields it refuses (``tests/test_hf.py`` keeps
the docs equal to it)."""

from __future__ import annotations

from collections.abc import Mapping

from dcsim.hf.language import ModelType, Nested, NoBias, Only
from dcsim.hf.table import MODEL_TYPES


def markdown_table(model_types: Mapping[str, ModelType] = MODEL_TYPES) -> str:
    """The table of ``model_types`` (every type dcsim reads), a row a type in the table's order."""
    lines = ["| `model_type` | family | counted as | quirks | refused unless as built |", "|---|---|---|---|---|"]
    for model_type, entry in model_types.items():
        quirks = quirk_words(entry) or "none"
        row = f"| `{model_type}` | {entry.family} | `{entry.model_class}` | {quirks} | {refused(entry) or 'none'} |"
        lines.append(row)
    return "\n".join(lines)


def quirk_words(entry: ModelType) -> str:
    """What sets a type apart: the hyperparameters it hard-codes, the fields read into switches, a
    head tied by default, how its parts are read and its readings beyond the table."""
    fixed = [name if value is True else f"{name}={value}" for name, value in entry.fixed.items() if value]
    flags = [f"{flag.key} -> {'/'.join(flag.names)}" for flag in entry.flags]
    tied = ["head tied by default"] if entry.tied or (entry.nested and entry.nested.tied) else []
    parts = _parts_words(entry.nested) if entry.nested else []
    return ", ".join(fixed + flags + tied + parts + list(entry.quirks))


def refused(entry: ModelType) -> str:
    """The fields refused unless at the value dcsim builds."""
    keys = [rule.key for rule in entry.rules if isinstance(rule, Only)]
    keys += [key for rule in entry.rules if isinstance(rule, NoBias) for key in rule.keys]
    return ", ".join(f"`{key}`" for key in keys)


def _parts_words(nested: Nested) -> list[str]:
    """How a vision-language model's parts are read."""
    text_key = "text_config (or the top level)" if nested.top_level_text else "text_config"
    return [
        _read_as(text_key, nested.text_type, nested.text_auto),
        _read_as("vision_config", nested.vision_type, nested.vision_auto),
    ]


def _read_as(key: str, kind: str, auto: bool) -> str:
    return f"{key} as its model_type (default {kind})" if auto else f"{key} as {kind}"
