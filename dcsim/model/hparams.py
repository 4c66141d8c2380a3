"""One hyperparameter of a model family: its kind, its range, its default and its help, and how a
value is checked (``check``) or read from text (``parse``). Every rejection is a ``ValueError`` (or
``TypeError`` for the wrong kind of thing) that names the hyperparameter, the rule, the value and
what is allowed. ``dcsim.model.schemas`` holds the families' tables of these.

Pure Python (no JAX, no Flax), like the schemas.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.inputs import as_bool, as_int, number_from_text, show

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
      min_length: the shortest ``ints`` list allowed (0: it may be empty, written as nothing).
    """

    name: str
    kind: str
    default: Any
    description: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    max_length: int | None = None
    min_length: int = 1

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
        example = "0,1,2" if self.min_length == 0 else "3,4,6,3"
        return (
            f"a list of {self.min_length} to {self.max_length} integers, each from {self.minimum:,} to "
            f"{self.maximum:,} (e.g. {example})"
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
        if not self.min_length <= len(value) <= self.longest:
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
        if self.min_length == 0 and text.lower() in ("", "none"):  # as presets.value_text writes an empty list
            return ()
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


def int_param(name: str, default: int, description: str, minimum: int, maximum: int) -> HParam:
    return HParam(name=name, kind="int", default=default, description=description, minimum=minimum, maximum=maximum)


def bool_param(name: str, default: bool, description: str) -> HParam:
    return HParam(name=name, kind="bool", default=default, description=description)


def choice_param(name: str, default: str, description: str, choices: tuple[str, ...]) -> HParam:
    return HParam(name=name, kind="choice", default=default, description=description, choices=choices)


def blocks_param(name: str, description: str) -> HParam:
    """A list of block numbers (from 0, below ``MAX_LISTED_BLOCKS``), empty by default."""
    return HParam(
        name=name,
        kind="ints",
        default=(),
        description=description,
        minimum=0,
        maximum=MAX_LISTED_BLOCKS - 1,
        max_length=MAX_LISTED_BLOCKS,
        min_length=0,
    )


MAX_POSITIONS = 1 << 20  # the schemas' MAX_VOCAB: positions, windows
MAX_LISTED_BLOCKS = 256  # the schemas' MAX_BLOCKS

# What a decoder caches when it serves (dcsim.serving); none of them changes a count.
WINDOW = int_param(
    "sliding_window",
    0,
    "tokens a local block attends to and caches (Mistral, Gemma 2 and 3); 0 for none. Changes no count",
    0,
    MAX_POSITIONS,
)
LOCAL_LAYERS = blocks_param(
    "local_layers",
    "the blocks that attend within the sliding window, numbered from 0 (Gemma 2: the even ones); "
    "none or empty: every block attends to every token. Changes no count",
)
ROPE_SCALING = bool_param(
    "rope_scaling",
    False,
    "rotary positions are scaled (config.json's rope_scaling): a context past max_positions is allowed, with a note",
)
SERVING_HPARAMS = (WINDOW, LOCAL_LAYERS, ROPE_SCALING)
SERVING_ONLY = frozenset(spec.name for spec in SERVING_HPARAMS)  # shown by the Serving page only
