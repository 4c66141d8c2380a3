"""Hostile links for every page of the dashboard, and the check that a page survived one.

Shared by ``tests/test_app_fuzz.py`` (a seeded subset in CI) and ``bench/bench_fuzz.py`` (the
full sweep). Nothing here knows the pages by hand: they are read from app.py's ``st.Page`` list,
and the keys each page reads are found by running it (every page setting goes through
``dcsim.ui.state.page_setting``) and by scanning the pages for literal setting names, so a new
page and its keys join the sweep without an edit here.

What "survived" means, for one hostile query string opened as a fresh session on one page
(``check_run``):

1. the run raised nothing (``at.exception`` is empty);
2. every problem a link codec finds in the query is shown, word for word, in a warning or error
   on the page (``dcsim.links.decode`` on every page; a codec of its own, such as
   ``dcsim.links.comparisons.decode``, on a page that writes its keys);
3. every page setting the page read this run (``state.page_setting``) whose link value the page
   did not keep (the rewritten link carries another value) is named, as `` `key` ``, in a warning
   or error that starts with "Link:";
4. the rewritten link decodes cleanly (no problems, the configuration on screen) and carries
   none of the query's keys that the page neither reads nor writes;
5. nothing from the query reached the page as markup: no unescaped ``<script``, ``<img``,
   ``javascript:`` or markdown link in any text element.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import importlib
import pkgutil
import random
import re
from pathlib import Path
from urllib.parse import parse_qs, quote

from dcsim import links
from dcsim.model import presets, schemas
from dcsim.ui.state import CONFIG

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"

# --- what to attack ------------------------------------------------------------------------------


def pages_from_app(app: Path = APP) -> list[str]:
    """The page scripts of app.py's router, in its order (``st.Page("pages/x.py", ...)``)."""
    found = []
    for node in ast.walk(ast.parse(app.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "Page"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(node.args[0].value)
    return found


# ``page_setting("name"``, ``seeded("name"`` and the shared helpers' ``seeded_setting(page, "name"``.
_LITERAL_SETTING = re.compile(
    r"""(?:(?:page_setting|seeded)\(\s*|seeded_setting\(\s*[\w.]+\s*,\s*)["']([A-Za-z0-9_.]+)["']"""
)


def literal_setting_names(root: Path = ROOT) -> set[str]:
    """Names passed literally to ``page_setting``/``seeded``/``seeded_setting`` anywhere in pages/
    or dcsim/ui/."""
    names: set[str] = set()
    for folder in ("pages", "dcsim/ui"):
        for path in sorted((root / folder).glob("*.py")):
            names.update(_LITERAL_SETTING.findall(path.read_text()))
    return names


def link_codecs() -> list:
    """Every link codec of dcsim (a ``decode`` that never raises and its ``KEYS``): the
    configuration's (``dcsim.links``) and each one ``dcsim.links`` holds besides, such as the
    comparison's (``dcsim.links.comparisons``); found, not listed, so a new one is attacked too."""
    modules = [
        links,
        *(importlib.import_module(f"dcsim.links.{info.name}") for info in pkgutil.iter_modules(links.__path__)),
    ]
    return [
        module
        for module in modules
        if callable(getattr(module, "decode", None)) and isinstance(getattr(module, "KEYS", None), tuple)
    ]


CODECS = link_codecs()
CONFIG_KEYS = tuple(links.KEYS)
HPARAM_KEYS = tuple(
    sorted({links.HPARAM_PREFIX + spec.name for family in schemas.FAMILY_SCHEMAS for spec in schemas.schema(family)})
)
UNKNOWN_KEYS = ("x", "utm_source", "page", "v2", "H.num_layers", "h.", "h.nope", "", " ", "shards ", "%ZZ", "💥")

# A real server answers 400 at about 200 KB (see NOTES.md) and Streamlit ignores a query string
# over 512 KiB, so a longer link never reaches a page.
MAX_QUERY_CHARS = 200_000

# --- hostile values ---------------------------------------------------------------------------------

# The markup payloads the tests paste everywhere text is echoed: one spelling each, so a payload added
# or sharpened here reaches every test that names it.
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
MD_LINK = "[x](javascript:alert(1))"
MARKUP = (
    SCRIPT,
    IMG,
    MD_LINK,
    "**bold**",
    ":red[red] :material/home: $x^2$",
    "`code`<b>b</b>",
)
NUMBERS = (
    "1e400",
    "-1e400",
    "1e308",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "2.5",
    "4.0",
    "1e3",
    "-1",
    "-0",
    "0",
    "00",
    "08",
    "+3",
    " 7 ",
    "0x10",
    "1_000",
    str(2**32),
    str(2**64),
    "9" * 31,
    "9" * 33,
    "1" * 400,
    "٣",
    "Ⅸ",
    "𝟠",
    "½",
    "1,000",
)
WEIRD = (
    "",
    " ",
    "\x00",
    "\x1b[31mred",
    "\r\n",
    "\t",
    "\u202e",
    "e\u0301",
    "💥",
    "𝕏",
    "\ufeff4",
    "\ufffd",
    "null",
    "None",
    "true",
    "[]",
    "{}",
    "'",
    '"',
    "\\",
    "%",
    "&",
    "=",
    "#",
    "?",
    "/",
)
# Raw (already encoded) pieces a pasted link may carry: junk and invalid UTF-8 percent-encodings.
JUNK_ENCODINGS = ("%", "%Z", "%ZZ", "%%", "%C3%28", "%FF%FE", "%E2%82", "%00", "%0A", "%u0041", "+", "%2B%2B", "a%3Db")

SPECIFIC = {
    "v": ("1", "2", "3", "0", "99999999999", "2.0"),
    "layers": ("512x2_10", "8nx3_2", "4x257", "4x0", "0", "4__4", "4,8", "99999999", "4096x256", "1048576n_" * 455),
    "preset": (*list(presets.PRESETS)[:4], "nope", "GPT2-SMALL", "llama2-70b"),
    "mesh": (
        "data=4",
        "data=2,model=2",
        "data = 4",
        "data=0",
        "data=1048577",
        "a=2,a=2",
        "None=2",
        "data=4,model=",
        "=4",
        "*" * 1000,
        "a=2," * 9,
        "model=1048576",
        "data=64",
        "data=65",
        "data=1e400",
        "data=-1",
    ),
    "strategy": ("replicated", "fsdp", "tensor", "custom", "CUSTOM", "nope"),
    "rules": (
        "*/kernel=data,model\n*/bias=model",
        "*" * 1000 + "=None",
        "[=None",
        "**/**=data",
        "*/kernel=None,model",
        "\n".join(["*=None"] * 65),
        "*/kernel=" + ",".join(["None"] * 17),
        "x" * 300 + "=None",
        "*/kernel=nope",
        "[!a-z]*=data",
        "*=data+model",
        "*=data+data",
    ),
    "opt": ("adam", "adam,lion", "sgd,adam,adamw,adafactor,lion", "nope", ",,,", "adam,adam", "adam,nope", "ADAM"),
    "dtype": ("float32", "bfloat16", "int4", "float64"),
}
# The comparison's keys (dcsim.compare), near-valid and not: scenario tokens, baseline, budget.
SPECIFIC |= {
    "s": (
        "float32~shards=4~n=A",
        "bfloat16~preset=gpt2-small~n=B",
        "~~~",
        "float32~n=",
        "int4~shards=0~n=<b>x</b>",
        # a scenario's training step (issue 29): valid, out of range, on a family without a training forward
        "bfloat16~preset=gpt2-small~seq=128~mb=2~remat=full~n=C",
        "bfloat16~preset=gpt2-small~seq=1e400~mb=0~remat=most~attn=ring~n=D",
        "float32~preset=bert-base~seq=64~n=E",
        "float32~mb=4~n=F",
        "bfloat16~preset=gpt2-small~seq=4096~n=G",
    ),
    "base": ("1", "2", "9", "0", "x"),
    "budget": ("85899345920", "80 GiB", "1e400", "0", "1" * 40),
    "bunit": ("bytes", "values", "kg"),
    "btrain": ("none", "adam", "nope"),
    "bstrat": ("fsdp", "tensor", "custom"),
    "cv": ("1", "2", "x"),
}
# The Memory page's keys (dcsim.ui.memory): valid, near-valid and a hostile few of each.
SPECIFIC |= {
    "zero": ("0", "1", "2", "3", "4", "-1", "3.0", "ZeRO-3"),
    "parts": ("params,grads", "none", "optimizer,master", "weights", ",,,", "params," * 50),
    "optim": ("adam", "sgd", "momentum", "adafactor", "rmsprop", "ADAM"),
    "param": ("bfloat16", "float32", "int8", "float64", "fp8"),
    "grad": ("same", "float32", "int4"),
    "master": ("none", "float32", "bfloat16", "double"),
    "devmem": ("80GiB", "80 GB", "80", "1.5TiB", "0GiB", "1e400 GiB", "80 GiBs", "9" * 40),
    # a training step's activations (issue 29)
    "seq": ("none", "4096", "1", "0", "-8", "1048577", "1e400", "4096.5", "nan", "4,096"),
    "mb": ("1", "8", "0", "-1", "65537", "1e400", "2.5", "none"),
    "remat": ("none", "full", "dots", "dots-no-batch", "minimal", "FULL", "dots_saveable", ""),
    "attn": ("flash", "naive", "ring", "Flash"),
    "cdtype": ("bfloat16", "float32", "float16", "int8", "fp8"),
    "sp": ("on", "off", "true", "1"),
    "cf": ("none", "1.25", "1", "0", "-1", "65", "1e400", "nan", "inf"),
}
for _key in HPARAM_KEYS:
    SPECIFIC[_key] = ("1", "6", "0", "257", "true", "false", "rmsnorm", "none", "3,4,6,3", "1,2,3,4,5,6,7,8,9", "65")


def hostile_value(rng: random.Random, key: str) -> str:
    """One value for ``key``: a valid or near-valid one of its own, or something hostile."""
    roll = rng.random()
    if roll < 0.3 and key in SPECIFIC:
        return rng.choice(SPECIFIC[key])
    if roll < 0.5:
        return rng.choice(NUMBERS)
    if roll < 0.62:
        return rng.choice(WEIRD)
    if roll < 0.75:
        return rng.choice(MARKUP)
    if roll < 0.8:  # tens of kilobytes
        return rng.choice("9a<*_x💥") * rng.randint(10_000, 40_000)
    if roll < 0.85:
        return rng.choice(MARKUP) * rng.randint(50, 400)
    if roll < 0.92:  # mixed: a plausible value with junk glued on
        base = rng.choice(SPECIFIC.get(key, NUMBERS))
        return base + rng.choice(WEIRD + MARKUP)
    return "".join(
        chr(rng.choice((rng.randint(0, 0x7F), rng.randint(0x80, 0x2FFF), rng.randint(0x1F300, 0x1F6FF))))
        for _ in range(rng.randint(1, 40))
    )


def hostile_query(rng: random.Random, page_keys: tuple[str, ...]) -> str:
    """A raw query string (what follows ``?``) aimed at a page that reads ``page_keys``."""
    pool = [*CONFIG_KEYS, *page_keys]
    pairs: list[str] = []
    count = rng.choice((1, 1, 2, 3, 4, 6, 8))
    for _ in range(count):
        roll = rng.random()
        if roll < 0.7:
            key = rng.choice(pool)
        elif roll < 0.85:
            key = rng.choice(HPARAM_KEYS)
        else:
            key = rng.choice(UNKNOWN_KEYS)
        for _ in range(1 if rng.random() < 0.85 else rng.randint(2, 3)):  # sometimes repeated
            value = hostile_value(rng, key)
            encoded = quote(value, safe="")
            if rng.random() < 0.1:  # a junk encoding spliced in, unencoded
                encoded += rng.choice(JUNK_ENCODINGS)
            pairs.append(f"{quote(key, safe='')}={encoded}")
    if rng.random() < 0.25 and not any(pair.startswith("preset=") for pair in pairs):
        pairs.append("preset=" + rng.choice(list(presets.PRESETS)))  # so hyperparameters are read
    if rng.random() < 0.02:  # hundreds of fields
        pairs += [f"k{index}=1" for index in range(rng.randint(100, 600))]
    rng.shuffle(pairs)
    while len(pairs) > 1 and sum(len(pair) + 1 for pair in pairs) > MAX_QUERY_CHARS:
        pairs.pop()
    return "&".join(pairs)[:MAX_QUERY_CHARS]


def as_params(query: str) -> dict[str, str | list[str]]:
    """The query string as Streamlit parses it (``parse_qs``, blanks kept), in AppTest's shape."""
    parsed = parse_qs(query, keep_blank_values=True)
    return {key: values[0] if len(values) == 1 else values for key, values in parsed.items()}


def as_lists(params: dict[str, str | list[str]]) -> dict[str, list[str]]:
    return {key: value if isinstance(value, list) else [value] for key, value in params.items()}


# --- running a page and judging it ----------------------------------------------------------------


class SettingRecorder:
    """Wraps ``dcsim.ui.state.page_setting`` to note every setting a page reads in a run."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @contextlib.contextmanager
    def installed(self):
        from dcsim.ui import state

        original = state.page_setting

        def recording(name, default, **kwargs):
            self.names.append(name)
            return original(name, default, **kwargs)

        state.page_setting = recording
        try:
            yield self
        finally:
            state.page_setting = original


ALERTS = ("warning", "error")
# Elements whose body is markdown (st.text and st.code show their text literally).
MARKDOWN_KINDS = ("markdown", "caption", "warning", "error", "info", "success")
# A link dcsim writes itself is absolute (docs, sources) or relative to the app's root (the landing
# page's questions, "./memory?..."); an echoed value's brackets are escaped, so any other is injected.
_UNESCAPED_MARKUP = re.compile(
    r"(?<!\\)<\s*(?:script|img)|javascript:|(?<!\\)\]\((?!https?://|\./[a-z]*\?)", re.IGNORECASE
)


def unescape(text: str) -> str:
    """An alert's text as the person reads it (dcsim backslash-escapes markdown in echoes)."""
    return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)


def alert_texts(at) -> list[str]:
    return [unescape(element.value) for kind in ALERTS for element in at.get(kind)]


def _same(given: str, kept: str) -> bool:
    return "".join(given.split()) == "".join(kept.split())


def check_run(at, query: str, read_settings: list[str], page_keys: tuple[str, ...] = ()) -> list[str]:
    """Every way the run fell short of the module docstring's definition; empty when it held.
    ``page_keys`` are the page's own keys (``discover_page_keys``), which it may write back."""
    failures: list[str] = []
    if at.exception:
        failures.append(f"exception: {at.exception[0].message[:300]}")
        return failures
    params = as_lists(as_params(query))
    alerts = alert_texts(at)
    for codec in CODECS:
        if codec is not links and not set(codec.KEYS) & set(page_keys):
            continue  # another page's codec: its keys are dropped, not read, here
        for problem in codec.decode(params).problems:
            if not any(problem in alert for alert in alerts):
                failures.append(f"link problem not shown: {problem[:200]}")
    published = as_lists(dict(at.query_params))
    for name in dict.fromkeys(read_settings):
        if name not in params:
            continue
        given = params[name]
        kept = published.get(name)
        if len(given) == 1 and kept is not None and _same(given[0], kept[0]):
            continue
        if not any(alert.startswith("Link:") and f"`{name}`" in alert for alert in alerts):
            failures.append(f"page setting `{name}` changed from {given[0][:60]!r} without a Link: message naming it")
    config_keys = set(links.KEYS) | {key for key in published if key.startswith(links.HPARAM_PREFIX)}
    stray = [key for key in published if key in params and key not in {*config_keys, *read_settings, *page_keys}]
    if stray:
        failures.append(f"rewritten link keeps unread keys {stray[:5]}")
    reopened = links.decode(published)
    if reopened.problems:
        failures.append(f"rewritten link has problems: {reopened.problems[0][:200]}")
    if reopened.config != at.session_state[CONFIG]:
        failures.append("rewritten link does not reopen the configuration on screen")
    return failures + markup_failures(at)


def markup_failures(at) -> list[str]:
    """Markdown bodies that carry markup unescaped (a link's or a person's, turned into HTML)."""
    return [
        f"{kind} carries markup unescaped: {str(element.value)[:200]!r}"
        for kind in MARKDOWN_KINDS
        for element in at.get(kind)
        if _UNESCAPED_MARKUP.search(str(element.value))
    ]


def open_page(page: str, query: str, timeout: float = 60):
    """A fresh session that opens ``query`` on ``page``, as a pasted deep link does: the
    finished AppTest and the page settings it read."""
    from streamlit.testing.v1 import AppTest

    from dcsim.ui.model import EDIT_HPARAMS, EDIT_LAYERS

    at = AppTest.from_file(str(APP), default_timeout=timeout)
    at.query_params.update(as_params(query))
    for key in (EDIT_LAYERS, EDIT_HPARAMS):  # the Model page's editors open: every field within reach
        at.session_state[key] = True
    at.switch_page(page)
    with SettingRecorder().installed() as recorder:
        at.run()
    return at, recorder.names


def discover_page_keys(pages: list[str]) -> dict[str, tuple[str, ...]]:
    """Each page's own link keys: those it reads on a clean run, those it writes into the link,
    and every literal setting name in the sources (settings read only in some states)."""
    literal = literal_setting_names()
    keys = {}
    for page in pages:
        at, read = open_page(page, "")
        written = [key for key in at.query_params if key not in links.KEYS]
        codec_keys = [key for codec in CODECS if set(codec.KEYS) & set(written) for key in codec.KEYS]
        keys[page] = tuple(dict.fromkeys([*read, *written, *codec_keys, *sorted(literal)]))
    return keys


def unbounded_repeats(pattern: str) -> tuple[int, int]:
    """How many unbounded repeats a glob's regular expression holds, and how many of them are
    outside an atomic group (the only kind that can backtrack): a count instead of a clock."""
    regex = fnmatch.translate(pattern)
    return regex.count(".*"), regex.count(".*") - regex.count("(?>.*?")
