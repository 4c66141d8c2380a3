"""Each page's request, declared once: for every setting its link key, its command-line flag, its
key in the JSON a command writes, its parser and its default.

Before this module one setting had three names written in three places (the Memory page's budget
was ``devmem`` in a link, ``--budget`` on the command line and ``budget.bytes`` in JSON) and a
parser in each face. Here a ``Field`` holds them together and the faces are built from it: the
pages seed their widgets with ``Field.default`` and check text with ``Field.read`` (``dcsim.ui``),
``serve`` and ``memory`` add their flags with ``Request.add_arguments`` and ``serve`` reads them
with ``Request.from_flag`` (``dcsim.cli``), a link is read and written with ``Request.decode`` and
``Request.encode``, and the key tables of docs/links.md are ``link_tables()``'s output (a test
compares them).

The names stay what they were: links that worked keep working, and the JSON keys are an API. What
is new is that an on/off setting reads every spelling on every page (``true``/``false`` and
``on``/``off``); a page still writes the spelling its links always had (``fullwin=false``,
``sp=off``), so a link written before reads the same and a new link looks like an old one.

The requests: ``WEIGHTS`` (a weight format and its options: the Model and Serving pages, ``count``
and ``serve``), ``SERVING`` (the Serving page and ``serve``), ``TRAINING`` (the Memory page and
``memory``: the training state and the step's activations). The checkpoint plan's request joins
``REQUESTS`` when it lands. Parsers come from the engine modules that own each value (budgets from
``dcsim.quantities.amounts``, dtypes from ``dcsim.memory.training``, formats from
``dcsim.quant.formats``...); the step's, which need JAX's tracer module, import it only when called.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dcsim.inputs import as_int, number_from_text, show
from dcsim.memory import training
from dcsim.model.optimizer import OPTIMIZER_NAMES, check_optimizer
from dcsim.quant.formats import FORMATS, check_format
from dcsim.quantities.amounts import parse_budget
from dcsim.serving import catalog
from dcsim.serving import request as serving_request

MAX_SETTING_CHARS = 64  # a page setting's text in a link, at most (the weight options' fewer)
REMATS = ("none", "full", "dots", "dots-no-batch", "minimal")  # dcsim.memory.activations.POLICIES' names
ATTENTIONS = ("flash", "naive")
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
# The policies' one-line help, for --help without importing JAX (dcsim.memory.activations has the same).
REMAT_HELP = (
    ("none", "no remat (default)"),
    ("full", "each block keeps only its input"),
    ("dots", "the matmuls' outputs kept"),
    ("dots-no-batch", "the projections' outputs kept"),
    ("minimal", "MaxText's named projections kept"),
)
TRUE_WORDS = ("true", "on")
FALSE_WORDS = ("false", "off")

Parser = Callable[[str, str], str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Field:
    """One setting of a request.

    Attributes:
      link: its key in a link (``devmem``).
      flag: its command-line flag (``--budget``), or None where the command line has none.
      json: its key in the command's JSON (``budget_bytes``; dotted inside an object:
        ``budget.bytes``), or None where the JSON does not echo it.
      parse: ``parse(text, name)``: the text as the link writes it (``fp8`` becomes
        ``float8_e4m3fn``); raises ValueError (or TypeError) saying what was wrong and what is
        allowed, under ``name`` (the link key, or the flag on the command line).
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
      choices: the flag's choices, where argparse itself refuses others.
    """

    link: str
    flag: str | None
    json: str | None
    parse: Parser
    default: str
    meaning: str
    unset: tuple[str, ...] = ()
    switch: bool = False
    flag_default: str | None = None
    limit: int = MAX_SETTING_CHARS
    help: str = ""
    metavar: str | None = None
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

    def add_arguments(self, parser: Any, links: Iterable[str]) -> None:
        """The flags of the settings ``links`` on ``parser`` (an ``argparse`` parser or group), in
        that order: a switch as ``store_true``, any other as text read later by ``from_flag``."""
        for link in links:
            field = self[link]
            if field.flag is None:
                raise ValueError(f"request {self.name}: `{link}` has no command-line flag")
            if field.switch:
                parser.add_argument(field.flag, action="store_true", help=field.help)
            elif field.choices is not None:
                parser.add_argument(field.flag, choices=field.choices, default=field.flag_default, help=field.help)
            else:
                parser.add_argument(field.flag, metavar=field.metavar, default=field.flag_default, help=field.help)

    def from_flag(self, args: argparse.Namespace, link: str) -> str | None:
        """The flag of ``link`` as the link would write it, checked under the flag's name; None
        when it was not given (a switch: the page's word for on, or None when off)."""
        field = self[link]
        assert field.flag is not None, f"{link} has no flag"
        given = getattr(args, field.flag.removeprefix("--").replace("-", "_"))
        if field.switch:
            return switch_word(field.parse, True) if given else None
        return None if given is None else field.parse(given, field.flag)


# --- parsers: each reads a setting's text with the engine's own check --------------------------------


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


def one_of(choices: tuple[str, ...]) -> Parser:
    def parse(text: str, name: str) -> str:
        if text not in choices:
            raise ValueError(f"`{name}` must be one of {', '.join(choices)}, got {show(text)}")
        return text

    return parse


def _budget(text: str, name: str) -> str:
    """A budget with its unit, as typed (stripped); a bare number is refused (``parse_budget``)."""
    parse_budget(text)
    return text.strip()


def _kv_dtype(text: str, name: str) -> str:
    return serving_request.check_kv_dtype(text, name)


def _reserve(text: str, name: str) -> str:
    return serving_request.reserve_text(serving_request.parse_reserve(text, name))


def _device(text: str, name: str) -> str:
    return catalog.get_accelerator(text).name


def _format_name(text: str, name: str) -> str:
    return check_format(text).name


def _format_option(option: str, example: str) -> Parser:
    def parse(text: str, name: str) -> str:
        return str(getattr(check_format(example, **{option: number_from_text(text.strip())}), option))

    return parse


def _dtype(what: str) -> Parser:
    def parse(text: str, name: str) -> str:
        return training.check_dtype(text, what)

    return parse


def _dtype_or(word: str, what: str, meaning: str) -> Parser:
    """One of the training dtypes, or ``word`` (``meaning``), named in the message."""

    def parse(text: str, name: str) -> str:
        if text == word:
            return text
        try:
            return training.check_dtype(text, what)
        except ValueError as err:
            raise ValueError(f"{err}, or {word} ({meaning})") from None

    return parse


def _optimizer(text: str, name: str) -> str:
    return check_optimizer(text)


def _stage(text: str, name: str) -> str:
    return str(training.check_stage(text))


def _parts(text: str, name: str) -> str:
    return training.parts_text(training.parse_parts(text))


def _sequence(text: str, name: str) -> str:
    from dcsim.memory.activations import sequence_from_text  # the tracer's module: JAX, when asked

    return str(sequence_from_text(text.strip(), name))


def _micro_batch(text: str, name: str) -> str:
    from dcsim.memory.activations import micro_batch_from_text

    return str(micro_batch_from_text(text.strip(), name))


def _capacity(text: str, name: str) -> str:
    from dcsim.memory.activations import check_capacity_factor

    value = number_from_text(text.strip())
    if not isinstance(value, (int, float)):
        raise ValueError(f"`{name}` must be a number from 0.01 to 64 (or none: dropless), got {show(text)}")
    return f"{check_capacity_factor(value, f'`{name}`'):g}"


# --- the requests --------------------------------------------------------------------------------

MESH_KEYS = "`mesh`, `strategy` and `rules`: the Layout page's keys, same meaning and checks"

WEIGHTS = Request(
    name="weights",
    title="The weight format's keys (Model and Serving pages)",
    faces="the Model page (`/`, default `none`: the storage dtype alone) and the Serving page (`/serving`, default "
    "`bfloat16`); `count` and `serve`",
    fields=(
        Field(
            link="weights",
            flag="--weights",
            json="weights_format",
            parse=_format_name,
            default=serving_request.DEFAULT_WEIGHTS,
            meaning="the weights' format (docs/quantized.md): " + ", ".join(f"`{name}`" for name in FORMATS),
            limit=32,
        ),
        Field(
            link="group",
            flag="--group",
            json="weights_options.group",
            parse=_format_option("group", "gptq-int4"),
            default="128",
            meaning="GPTQ's and AWQ's group: input features a scale",
            limit=8,
        ),
        Field(
            link="bits",
            flag="--bits",
            json="weights_options.bits",
            parse=_format_option("bits", "gptq-int4"),
            default="4",
            meaning="GPTQ's bits a weight: `4` or `8`",
            limit=4,
        ),
        Field(
            link="tile",
            flag="--tile",
            json="weights_options.tile",
            parse=_format_option("tile", "int4"),
            default="128",
            meaning="qwix's tiled formats' tile: values along the contraction",
            limit=8,
        ),
        Field(
            link="qhead",
            flag="--quantize-head",
            json="weights_options.quantize_head",
            parse=switch("false", "true"),
            default="false",
            meaning="`true`: the output head quantized too (qwix, GPTQ, AWQ); `false` keeps it, as the tools do",
            switch=True,
            limit=8,
        ),
    ),
    notes="An option is in the link only when the format has it (`group` for GPTQ and AWQ, `bits` for GPTQ, `tile` "
    "for qwix's tiled formats, `qhead` for qwix, GPTQ and AWQ).",
)

SERVING = Request(
    name="serving",
    title="The Serving page's keys",
    faces="the Serving page (`/serving`) and `serve`",
    shared=MESH_KEYS + " (default mesh `data=1`, strategy `megatron`)",
    includes=(WEIGHTS,),
    fields=(
        Field(
            link="kv",
            flag="--kv-dtype",
            json="kv_dtype",
            parse=_kv_dtype,
            default=serving_request.DEFAULT_KV_DTYPE,
            meaning="the KV cache's dtype: " + ", ".join(f"`{name}`" for name in serving_request.KV_DTYPE_NAMES),
            flag_default=serving_request.DEFAULT_KV_DTYPE,
            metavar="D",
            help=f"the cache's dtype: {', '.join(serving_request.KV_DTYPE_NAMES)}",
        ),
        Field(
            link="context",
            flag="--context",
            json="context",
            parse=count(serving_request.MAX_CONTEXT),
            default=str(serving_request.DEFAULT_CONTEXT),
            meaning=f"tokens a sequence, 1 to {serving_request.MAX_CONTEXT:,} (default 4,096, or the model's "
            "positions when fewer)",
            metavar="T",
            help=f"tokens a sequence (default {serving_request.DEFAULT_CONTEXT:,}, or the model's positions when "
            "fewer: GPT-2's 1,024)",
        ),
        Field(
            link="concurrency",
            flag="--concurrency",
            json="concurrency",
            parse=count(serving_request.MAX_CONCURRENCY),
            default=str(serving_request.DEFAULT_CONCURRENCY),
            meaning=f"sequences at once over the whole mesh, 1 to {serving_request.MAX_CONCURRENCY:,}",
            flag_default=str(serving_request.DEFAULT_CONCURRENCY),
            metavar="N",
            help="sequences at once over the whole mesh (default 1)",
        ),
        Field(
            link="source",
            flag="--source-length",
            json="source_length",
            parse=count(serving_request.MAX_CONTEXT),
            default="auto",
            unset=("auto", ""),
            meaning="an encoder-decoder's encoder tokens a sequence, or `auto`: the context (Whisper: every encoder "
            "position); in the link only for an encoder-decoder",
            metavar="S",
            help="an encoder-decoder's encoder tokens a sequence (default: the context; Whisper: every encoder "
            "position)",
        ),
        Field(
            link="device",
            flag="--device",
            json="device",
            parse=_device,
            default="h100-sxm",
            unset=("none",),
            meaning="an accelerator whose memory is the budget: "
            + ", ".join(f"`{name}`" for name in catalog.DEVICE_NAMES)
            + ", or `none` (then `devmem`); the command line has no default device",
            metavar="NAME",
            help=f"an accelerator: {', '.join(catalog.DEVICE_NAMES)}",
        ),
        Field(
            link="devmem",
            flag="--budget",
            json="budget_bytes",
            parse=_budget,
            default="",
            unset=("",),
            meaning="one device's budget with its unit (`80GiB`, `96 GB`), used when `device` is `none`; empty: no "
            "budget, figures only",
            metavar="SIZE",
            help="bytes a device has, with a unit: 80GiB, 96GB",
        ),
        Field(
            link="reserve",
            flag="--reserve",
            json="reserve",
            parse=_reserve,
            default="0.1",
            meaning="the fraction of each device kept free, 0 to below 1: `0.1`, `.25`, `10%` (vLLM's "
            "gpu_memory_utilization 0.9 is 0.1)",
            flag_default="0.1",
            metavar="FRACTION",
            help="kept free of each device, 0 to below 1 (default 0.1)",
        ),
        Field(
            link="fullwin",
            flag="--full-windows",
            json="full_windows",
            parse=switch("false", "true"),
            default="false",
            meaning="`true`: sliding-window layers' caches allocated in full, as engines without window-aware "
            "allocation do",
            switch=True,
            help="allocate every layer's cache in full, as engines without window-aware allocation do",
        ),
    ),
    notes="`device` and `devmem` both give the budget: the page uses `devmem` only when `device` is `none`, and the "
    "command line refuses both.",
)

_DTYPE_WORDS = ", ".join(f"`{name}`" for name in training.DTYPES)

TRAINING = Request(
    name="training",
    title="The Memory page's keys",
    faces="the Memory page (`/memory`) and `memory`",
    shared=MESH_KEYS + ", remembered across the two pages for the session",
    fields=(
        Field(
            link="zero",
            flag="--zero",
            json="zero",
            parse=_stage,
            default="3",
            metavar="K",
            help="ZeRO stage (default 3, what fsdp means): "
            + "; ".join(f"{stage}: {training.STAGE_HELP[stage].split(': ', 1)[1]}" for stage in training.STAGES),
            meaning="the ZeRO stage, which parts are split over the mesh: `0` none, `1` the optimizer state and "
            "master copy, `2` the gradients too, `3` every part",
        ),
        Field(
            link="parts",
            flag="--shard",
            json="shard",
            parse=_parts,
            default="master,optimizer",
            metavar="PARTS",
            help=f"the parts to split, a comma list of {', '.join(training.PARTS)} (or {training.NO_MASTER}); "
            "the others are whole on every device",
            meaning="instead of `zero`: the parts split, named freely, as a comma list of "
            + ", ".join(f"`{part}`" for part in training.PARTS)
            + ", or `none`",
            limit=training.MAX_PARTS_CHARS,
        ),
        Field(
            link="optim",
            flag="--optimizer",
            json="optimizer",
            parse=_optimizer,
            default="adam",
            flag_default="adam",
            choices=OPTIMIZER_NAMES,
            help="the optax optimizer whose state is held (default adam: two moments per parameter and a step count)",
            meaning="the optax optimizer: " + ", ".join(f"`{name}`" for name in OPTIMIZER_NAMES),
        ),
        Field(
            link="param",
            flag="--param-dtype",
            json="param_dtype",
            parse=_dtype("param"),
            default="bfloat16",
            flag_default="bfloat16",
            metavar="D",
            help=f"the parameters' dtype: {', '.join(training.DTYPES)} (default bfloat16, as mixed-precision training "
            "keeps them)",
            meaning=f"the parameters' dtype: {_DTYPE_WORDS}",
        ),
        Field(
            link="grad",
            flag="--grad-dtype",
            json="grad_dtype",
            parse=_dtype_or("same", "grad", "the params' dtype"),
            default="same",
            metavar="D",
            help="the gradients' dtype (default: the parameters')",
            meaning="the gradients' dtype, as `param`, or `same` (the parameters')",
        ),
        Field(
            link="master",
            flag="--master-dtype",
            json="master_dtype",
            parse=_dtype_or(training.NO_MASTER, "master", "no master copy"),
            default=training.NO_MASTER,
            flag_default=training.NO_MASTER,
            metavar="D",
            help=f"the master copy's dtype, or {training.NO_MASTER} for no master copy (default {training.NO_MASTER}); "
            "the optimizer state takes the master copy's dtype when there is one, else the parameters'",
            meaning="the master copy's dtype, as `param`, or `none` (no master copy; the optimizer state is then in "
            "the parameters' dtype)",
        ),
        Field(
            link="devmem",
            flag="--budget",
            json="budget.bytes",
            parse=_budget,
            default="80GiB",
            metavar="SIZE",
            help="bytes a device may hold, with a unit (80GiB, 96GB): the smallest mesh that fits, by the ideal share "
            "and by the real layout, growing the mesh's first axis",
            meaning="one device's memory budget, with its unit: `80GiB`, `96 GB`, `1.5TiB` (GiB = 2^30 bytes, GB = "
            "10^9). A bare number is refused: 80 could be GiB or bytes",
        ),
        Field(
            link="seq",
            flag="--sequence",
            json="activations.sequence",
            parse=_sequence,
            default="none",
            unset=("none",),
            metavar="S",
            help="tokens a sequence: count the activations the step keeps for the backward pass beside the state",
            meaning="a training step's tokens a sequence: its activations are counted beside the state; `none`: the "
            "state alone",
        ),
        Field(
            link="mb",
            flag="--micro-batch",
            json="activations.micro_batch",
            parse=_micro_batch,
            default="1",
            metavar="B",
            help="sequences a data-parallel replica a step (default 1); data and fsdp axes do not change it",
            meaning="the step's sequences a data-parallel replica",
        ),
        Field(
            link="remat",
            flag="--remat",
            json="activations.policy",
            parse=one_of(REMATS),
            default="none",
            metavar="POLICY",
            help="the remat policy applied to every block: "
            + "; ".join(f"{name}: {text}" for name, text in REMAT_HELP),
            meaning="the remat policy of every block: `none`, `full`, `dots`, `dots-no-batch`, `minimal`",
        ),
        Field(
            link="attn",
            flag="--attention",
            json="activations.attention",
            parse=one_of(ATTENTIONS),
            default="flash",
            metavar="KIND",
            help="flash (default) or naive attention",
            meaning="the attention kind: `flash` or `naive`",
        ),
        Field(
            link="cdtype",
            flag="--compute-dtype",
            json="activations.compute_dtype",
            parse=one_of(COMPUTE_DTYPES),
            default="bfloat16",
            metavar="D",
            help="the dtype the forward runs in (default bfloat16): bfloat16, float16, float32",
            meaning="the dtype the forward runs in: `bfloat16`, `float16`, `float32`",
        ),
        Field(
            link="sp",
            flag="--sequence-parallel",
            json="activations.sequence_parallel",
            parse=switch("off", "on"),
            default="off",
            switch=True,
            help="Megatron's sequence parallelism over the mesh's model axis: the residual stream and the norms split "
            "over the sequence too",
            meaning="`on`: Megatron's sequence parallelism over the mesh's `model` axis",
        ),
        Field(
            link="cf",
            flag="--capacity-factor",
            json="activations.capacity_factor",
            parse=_capacity,
            default="none",
            unset=("none",),
            metavar="F",
            help="Mixture-of-Experts: GShard's capacity factor (tokens past an expert's capacity dropped); default "
            "none: dropless dispatch, each token through its chosen experts only",
            meaning="a Mixture-of-Experts model's capacity factor, 0.01 to 64; `none`: dropless dispatch",
        ),
    ),
    notes="A link gives `zero` or `parts`; with both, `parts` is ignored and said so.",
)

REQUESTS: tuple[Request, ...] = (TRAINING, SERVING, WEIGHTS)


# --- docs/links.md's key tables ------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def link_table(request: Request) -> str:
    """A request's key table in markdown: key, meaning, default, flag, JSON key."""
    lines = [
        f"### {request.title}",
        "",
        f"Read by {request.faces}." + (f" It shares {request.shared}." if request.shared else ""),
    ]
    if request.includes:
        lines[-1] += " It reads " + ", ".join(f"the {included.name} keys below" for included in request.includes) + "."
    lines += [
        "",
        "| key | meaning | default | flag | JSON |",
        "|---|---|---|---|---|",
    ]
    for field in request.fields:
        default = f"`{field.default}`" if field.default else "(empty)"
        flag = f"`{field.flag}`" if field.flag else ""
        json_key = f"`{field.json}`" if field.json else ""
        lines.append(f"| `{field.link}` | {_cell(field.meaning)} | {default} | {flag} | {json_key} |")
    if request.notes:
        lines += ["", request.notes]
    return "\n".join(lines)


def link_tables() -> str:
    """Every request's key table, as docs/links.md holds them between its generated markers."""
    return "\n\n".join(link_table(request) for request in REQUESTS) + "\n"
