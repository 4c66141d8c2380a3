"""Each page's request, declared once: for every setting its link key, its command-line flag, its
key in the JSON a command writes, its parser and its default.

Before this package one setting had three names written in three places (the Memory page's budget
was ``devmem`` in a link, ``--budget`` on the command line and ``budget.bytes`` in JSON) and a
parser in each face. Here a ``Field`` holds them together and the faces are built from it: the
pages seed their widgets with ``Field.default`` and check text with ``Field.read`` (``dcsim.ui``),
the commands add their flags with ``Request.add_arguments`` and ``serve`` reads them with
``Request.from_flag`` (``dcsim.cli``), a link is read and written with ``Request.decode`` and
``Request.encode``, and the key tables of docs/links.md are ``tables.link_tables()``'s output (a
test compares them).

The names stay what they were: links that worked keep working, and the JSON keys are an API. What
is new is that an on/off setting reads every spelling on every page (``true``/``false`` and
``on``/``off``); a page still writes the spelling its links always had (``fullwin=false``,
``sp=off``), so a link written before reads the same and a new link looks like an old one.

The fields' words (key, flag, JSON key, default, placeholder, limit, help, meaning) are data, one
row a setting in fields.json beside this module, read once and checked row by row
(``dcsim.shipped``); each request module binds its parsers to them by link key and fills the
``{placeholders}`` of their texts with the lists its engine modules own (``declared``).

One module a request, each importing only what its parsers need: ``weights`` (a weight format and
its options: the Model and Serving pages, ``count`` and ``serve``; no JAX, so ``count --help``
stays light), ``serving`` (the Serving page and ``serve``), ``training`` (the Memory page and
``memory``: the training state and the step's activations), ``checkpoint_plan`` (``checkpoint-plan``:
hosts, writers, storage, restore and interval); ``tables`` lists them (``REQUESTS``) and writes
docs/links.md's tables. Parsers
come from the engine modules that own each value (budgets from ``dcsim.quantities.amounts``, dtypes
from ``dcsim.memory.training``, formats from ``dcsim.quant.formats``...); the step's, which need
JAX's tracer module, import it only when called.
"""

from __future__ import annotations

import argparse
import dataclasses
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dcsim import shipped
from dcsim.inputs import as_int, number_from_text, show
from dcsim.quantities.amounts import parse_budget

MAX_SETTING_CHARS = 64  # a page setting's text in a link, at most (the weight options' fewer)
TRUE_WORDS = ("true", "on")
FALSE_WORDS = ("false", "off")

Parser = Callable[[str, str], str]
MESH_KEYS = "`mesh`, `strategy` and `rules`: the Layout page's keys, same meaning and checks"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Words:
    """A setting's words: all of a ``Field`` but its parser and choices, as fields.json declares
    them (``declared``).

    Attributes:
      link: its key in a link (``devmem``).
      flag: its command-line flag (``--budget``), or None where the command line has none.
      json: its key in the command's JSON (``budget_bytes``; dotted inside an object:
        ``budget.bytes``), or None where the JSON does not echo it.
      default: the page's text when a link does not give it (``""``: no value).
      meaning: what it is, with its values, for docs/links.md.
      unset: the page's words for "not set" (``none``, ``auto``, the empty text), read before
        ``parse`` in any case and written as the first; the command line says "not set" by leaving
        the flag out.
      switch: an on/off setting: a ``store_true`` flag, and its text is one of the page's two words.
      flag_default: the flag's default, where it has one that is not ``default``'s.
      limit: the most characters a link's value may have.
      help: the flag's ``--help``.
      metavar: the flag's placeholder.
    """

    link: str
    flag: str | None
    json: str | None
    default: str
    meaning: str
    unset: tuple[str, ...] = ()
    switch: bool = False
    flag_default: str | None = None
    limit: int = MAX_SETTING_CHARS
    help: str = ""
    metavar: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Field(Words):
    """One setting of a request: its words and how its text is read.

    Attributes:
      parse: ``parse(text, name)``: the text as the link writes it (``fp8`` becomes
        ``float8_e4m3fn``); raises ValueError (or TypeError) saying what was wrong and what is
        allowed, under ``name`` (the link key, or the flag on the command line).
      choices: the flag's choices, where argparse itself refuses others.
    """

    parse: Parser
    choices: tuple[str, ...] | None = None

    def read(self, text: str, name: str | None = None) -> str:
        """A link's or a box's text as the link writes it; raises ValueError naming ``name`` (the
        link key unless given), the rule and the value."""
        if text.strip().lower() in self.unset:
            return self.unset[0]
        return self.parse(text, self.link if name is None else name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """A page's settings, in the order its link writes them, and the keys it shares.

    Attributes:
      name: the request's name (``serving``).
      title: its heading in docs/links.md.
      faces: the page or pages and the command it is read from, in words.
      fields: its own settings.
      shared: keys read with another page's meaning (``mesh``, ``strategy``, ``rules``: the
        Layout page's), and where they are explained.
      includes: requests whose fields this page reads as well (the Serving page's weight format).
      notes: what a reader of the table must know besides (a rule between two keys).
    """

    name: str
    title: str
    faces: str
    fields: tuple[Field, ...]
    shared: str = ""
    includes: tuple[Request, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        links = [field.link for field in self.all_fields]
        if len(set(links)) != len(links):
            raise ValueError(f"request {self.name}: a link key is declared twice in {links}")

    @property
    def all_fields(self) -> tuple[Field, ...]:
        return (*(field for included in self.includes for field in included.all_fields), *self.fields)

    def __getitem__(self, link: str) -> Field:
        for field in self.all_fields:
            if field.link == link:
                return field
        raise KeyError(f"request {self.name} has no link key {link!r}")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(field.link for field in self.all_fields)

    def decode(self, query: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """Each of the request's settings from a link's ``query`` (one text a key): the value as the
        link writes it, or the default where it is absent or refused; and a problem a refused
        value, naming its key. Never raises; keys the request does not know are left alone."""
        values, problems = {}, []
        for field in self.all_fields:
            text = query.get(field.link)
            if text is None:
                values[field.link] = field.default
                continue
            if len(text) > field.limit:
                problems.append(f"`{field.link}` may be at most {field.limit} characters, got {len(text):,}")
                values[field.link] = field.default
                continue
            try:
                values[field.link] = field.read(text)
            except (TypeError, ValueError) as err:
                problems.append(f"`{field.link}`: {err}")
                values[field.link] = field.default
        return values, problems

    def encode(self, values: Mapping[str, str]) -> dict[str, str]:
        """The link's keys for ``values`` (link key -> text), in the request's order, each as the
        link writes it; a key missing from ``values`` is left out. Raises ValueError for a value
        the request refuses: a link is only written from checked values."""
        return {field.link: field.read(values[field.link]) for field in self.all_fields if field.link in values}

    def add_arguments(
        self,
        parser: Any,
        links: Iterable[str],
        *,
        defaults: Mapping[str, str | None] | None = None,
        more_help: Mapping[str, str] | None = None,
    ) -> None:
        """The flags of the settings ``links`` on ``parser`` (an ``argparse`` parser or group), in
        that order: a switch as ``store_true``, any other as text read later by ``from_flag``.
        ``defaults`` and ``more_help`` are a command's own default of a flag and what its help adds
        (``count`` has no default format, ``serve`` bfloat16)."""
        defaults, more_help = defaults or {}, more_help or {}
        for link in links:
            field = self[link]
            if field.flag is None:
                raise ValueError(f"request {self.name}: `{link}` has no command-line flag")
            text = field.help + more_help.get(link, "")
            default = defaults.get(link, field.flag_default)
            if field.switch:
                parser.add_argument(field.flag, action="store_true", help=text)
            elif field.choices is not None:
                parser.add_argument(field.flag, choices=field.choices, default=default, help=text)
            else:
                parser.add_argument(field.flag, metavar=field.metavar, default=default, help=text)

    def from_flag(self, args: argparse.Namespace, link: str) -> str | None:
        """The flag of ``link`` as the link would write it, checked under the flag's name; None
        when it was not given or says "not set" (``--capacity-factor none``; a switch: the page's
        word for on, or None when off)."""
        field = self[link]
        assert field.flag is not None, f"{link} has no flag"
        given = getattr(args, field.flag.removeprefix("--").replace("-", "_"))
        if field.switch:
            return switch_word(field.parse, True) if given else None
        if given is None:
            return None
        text = field.read(given, field.flag)
        return None if text in field.unset else text  # a flag's "none" is the flag left out


# Every request's fields, in the order its link writes them: their words are data, one row a
# setting, and each request module binds its parsers to them by link key (``declared``).
_DECLARED = shipped.load(__file__, "fields.json")
_TEXTS = ("default", "flag_default", "help", "meaning")  # the words that may name {placeholders}


def declared(
    name: str,
    parsers: Mapping[str, Parser],
    *,
    title: str,
    faces: str,
    shared: str = "",
    includes: tuple[Request, ...] = (),
    notes: str = "",
    words: Mapping[str, object] | None = None,
    choices: Mapping[str, tuple[str, ...]] | None = None,
) -> Request:
    """The request ``name``: its fields as fields.json declares them, in its order, bound as ``bind``
    says, and the rest of ``Request``'s attributes as given."""
    fields = bind(_DECLARED[name], f"fields.json {name}", parsers, words=words, choices=choices)
    return Request(name=name, title=title, faces=faces, fields=fields, shared=shared, includes=includes, notes=notes)


def bind(
    data: Any,
    where: str,
    parsers: Mapping[str, Parser],
    *,
    words: Mapping[str, object] | None = None,
    choices: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[Field, ...]:
    """The rows of ``data`` (a JSON array of ``Words``; ``where`` names it) as fields, in order,
    each read with ``parsers[link]`` and limited to ``choices[link]`` where given. The
    ``{placeholders}`` of their texts are filled from ``words``: the lists and figures the engine
    modules own (``{dtypes}``, ``{max_context:,}``). A row without a parser or a parser without a
    row, a placeholder not in ``words`` or a word no text uses is refused (ValueError), naming
    ``where`` and the key: a request module fails on import."""
    rows = shipped.as_rows(Words, data, where)
    words, choices = words or {}, choices or {}
    links = [row.link for row in rows]
    if sorted(links) != sorted(parsers) or not set(choices) <= set(links):
        raise ValueError(f"{where} declares {links}; its module reads {sorted(parsers)} (choices {sorted(choices)})")
    used: set[str] = set()
    fields = []
    for row in rows:
        texts = {field.name: getattr(row, field.name) for field in dataclasses.fields(row)}
        for name in _TEXTS:
            if texts[name] is None:
                continue
            used |= {key for _, key, _, _ in string.Formatter().parse(texts[name]) if key}
            try:
                texts[name] = texts[name].format_map(words)
            except KeyError as err:
                raise ValueError(f"{where} `{row.link}`: its {name} names {err}, which its module lacks") from None
        fields.append(Field(**texts, parse=parsers[row.link], choices=choices.get(row.link)))
    if unused := sorted(set(words) - used):
        raise ValueError(f"{where}: no text names {unused}")
    return tuple(fields)


# --- parsers that more than one request uses -----------------------------------------------------


def switch(off: str, on: str) -> Parser:
    """An on/off setting's parser: ``true``/``on`` and ``false``/``off`` are read alike, and the
    text is written as ``on`` or ``off`` (the page's own words: a link written before keeps its
    spelling)."""

    def parse(text: str, name: str) -> str:
        word = text.strip().lower()
        if word in TRUE_WORDS:
            return on
        if word in FALSE_WORDS:
            return off
        raise ValueError(f"`{name}` must be {on} or {off} (true, on, false and off are all read), got {show(text)}")

    parse.words = (off, on)  # type: ignore[attr-defined]
    return parse


def switch_word(parse: Parser, value: bool) -> str:
    """The word a switch's parser writes for ``value``."""
    off, on = parse.words  # type: ignore[attr-defined]
    return on if value else off


def is_on(field: Field, text: str) -> bool:
    """Whether a switch's text (as ``read`` gives it) is on."""
    return text == switch_word(field.parse, True)


def count(maximum: int) -> Parser:
    """A whole number from 1 to ``maximum``, written as digits (``4e3`` is 4000)."""

    def parse(text: str, name: str) -> str:
        return str(as_int(number_from_text(text.strip()), name, maximum=maximum, shown=text))

    return parse


def ticked(names: Iterable[str]) -> str:
    """``names`` as docs/links.md lists values: each in backticks, comma-separated."""
    return ", ".join(f"`{name}`" for name in names)


def one_of(choices: tuple[str, ...]) -> Parser:
    def parse(text: str, name: str) -> str:
        if text not in choices:
            raise ValueError(f"`{name}` must be one of {', '.join(choices)}, got {show(text)}")
        return text

    return parse


def budget(text: str, name: str) -> str:
    """A budget with its unit, as typed (stripped); a bare number is refused (``parse_budget``)."""
    parse_budget(text)
    return text.strip()
