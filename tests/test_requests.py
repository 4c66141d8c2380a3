"""Each page's request, declared once (``dcsim.requests``): old link values keep their meaning, on/off
settings read every spelling and write the page's own, bad values are refused with the rule, the
command line has the declared flags with the declared defaults, the JSON has the declared keys, and
docs/links.md's key tables are the declaration's."""

import argparse
import json
import re
from pathlib import Path

import pytest
from hostile import literal_setting_names, unescape

from conftest import open_app
from dcsim import links, shipped
from dcsim.cli import build_parser
from dcsim.requests import Field, Request, bind, count, is_on, switch
from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN
from dcsim.requests.serving import SERVING
from dcsim.requests.tables import REQUESTS, link_tables
from dcsim.requests.timing import TIMING
from dcsim.requests.training import TRAINING
from dcsim.requests.weights import WEIGHTS

ROOT = Path(__file__).resolve().parent.parent
LINKS_DOC = ROOT / "docs" / "links.md"

# Values links carry today and what each reads as: (request, key, the link's text, as the link writes it).
OLD_VALUES = [
    (SERVING, "kv", "bfloat16", "bfloat16"),
    (SERVING, "kv", "fp8", "float8_e4m3fn"),
    (SERVING, "context", "4096", "4096"),
    (SERVING, "context", "4e3", "4000"),
    (SERVING, "concurrency", "32", "32"),
    (SERVING, "source", "auto", "auto"),
    (SERVING, "source", "", "auto"),
    (SERVING, "source", "1500", "1500"),
    (SERVING, "device", "none", "none"),
    (SERVING, "device", "h100-sxm", "h100-sxm"),
    (SERVING, "devmem", "", ""),
    (SERVING, "devmem", " 96 GB ", "96 GB"),
    (SERVING, "reserve", "10%", "0.1"),
    (SERVING, "reserve", ".25", "0.25"),
    (SERVING, "fullwin", "true", "true"),
    (SERVING, "fullwin", "false", "false"),
    (WEIGHTS, "weights", "awq-int4", "awq-int4"),
    (WEIGHTS, "group", "64", "64"),
    (WEIGHTS, "bits", "8", "8"),
    (WEIGHTS, "tile", "256", "256"),
    (WEIGHTS, "qhead", "true", "true"),
    (TRAINING, "zero", "1", "1"),
    (TRAINING, "parts", "optimizer,grads", "grads,optimizer"),
    (TRAINING, "parts", "none", "none"),
    (TRAINING, "optim", "adafactor", "adafactor"),
    (TRAINING, "param", "float32", "float32"),
    (TRAINING, "grad", "same", "same"),
    (TRAINING, "master", "none", "none"),
    (TRAINING, "master", "float32", "float32"),
    (TRAINING, "devmem", "80GiB", "80GiB"),
    (TRAINING, "seq", "none", "none"),
    (TRAINING, "seq", "NONE", "none"),
    (TRAINING, "seq", "2048", "2048"),
    (TRAINING, "mb", "2", "2"),
    (TRAINING, "remat", "dots-no-batch", "dots-no-batch"),
    (TRAINING, "attn", "naive", "naive"),
    (TRAINING, "cdtype", "float32", "float32"),
    (TRAINING, "sp", "on", "on"),
    (TRAINING, "sp", "off", "off"),
    (TRAINING, "cf", "1.25", "1.25"),
    (TRAINING, "cf", "none", "none"),
]


@pytest.mark.parametrize(
    ("request_", "key", "text", "written"), OLD_VALUES, ids=[f"{r.name}-{k}={t!r}" for r, k, t, _ in OLD_VALUES]
)
def test_a_value_links_carry_today_reads_as_before(request_, key, text, written):
    assert request_[key].read(text) == written


# On/off settings: every spelling on every page, each page writing its own words.
SWITCHES = [
    (SERVING, "fullwin", ("false", "true")),
    (WEIGHTS, "qhead", ("false", "true")),
    (TRAINING, "sp", ("off", "on")),
]


@pytest.mark.parametrize(("request_", "key", "words"), SWITCHES, ids=[key for _, key, _ in SWITCHES])
@pytest.mark.parametrize(("text", "on"), [("true", True), ("on", True), ("ON", True), ("false", False), ("off", False)])
def test_a_switch_reads_every_spelling_and_writes_its_pages(request_, key, words, text, on):
    field = request_[key]
    assert field.switch and field.read(text) == words[on]
    assert is_on(field, field.read(text)) is on


@pytest.mark.parametrize(("request_", "key", "words"), SWITCHES, ids=[key for _, key, _ in SWITCHES])
def test_a_switch_refuses_anything_else_naming_both_words(request_, key, words):
    with pytest.raises(ValueError, match=rf"`{key}` must be {words[1]} or {words[0]} .*got '1'"):
        request_[key].read("1")


# Values each request refuses: (request, key, the link's text, a regular expression its error matches).
BAD_VALUES = [
    (TRAINING, "devmem", "80", r"the budget needs a unit"),
    (SERVING, "devmem", "80", r"the budget needs a unit"),
    (SERVING, "kv", "int4", r"`kv` must be one of bfloat16, .*got 'int4'"),
    (SERVING, "context", "0", r"`context` must be"),
    (SERVING, "reserve", "1.5", r"`reserve` must be at least 0 and below 1"),
    (SERVING, "device", "h900", r"h100-sxm"),
    (TRAINING, "remat", "FULL", r"`remat` must be one of none, full, dots, dots-no-batch, minimal, got 'FULL'"),
    (TRAINING, "grad", "int4", r"or same \(the params' dtype\)"),
    (TRAINING, "master", "double", r"or none \(no master copy\)"),
    (TRAINING, "seq", "-8", r"`seq`"),
    (TRAINING, "cf", "x", r"`cf` must be a number from 0.01 to 64 \(or none: dropless\), got 'x'"),
    (WEIGHTS, "bits", "3", r"bits"),
    (TIMING, "tokens", "0", r"`tokens` must be an integer from 1"),
    (TIMING, "tokens", "1e400", r"`tokens` must be"),
    (TIMING, "tokens", "many", r"`tokens` must be"),
    (TIMING, "price", "nan", r"`price` must be a price a device-hour, a number at least 0"),
    (TIMING, "price", "-inf", r"`price` must be a price a device-hour, a number at least 0"),
    (TIMING, "dph", "1e9", r"`dph` must be an integer from 1 to 65,536"),
    (TIMING, "prompt", "2.5", r"`prompt` must be"),
    (CHECKPOINT_PLAN, "dph", "0", r"`dph` must be an integer from 1"),
    (CHECKPOINT_PLAN, "policy", "fast", r"`policy` must be one of single-replica, replica-parallel, dcp, got 'fast'"),
    (CHECKPOINT_PLAN, "wbw", "0GB/s", r"`wbw` must be above 0 bytes a second"),
    (CHECKPOINT_PLAN, "sbw", "-5GB/s", r"`sbw` must be a bandwidth"),
    (CHECKPOINT_PLAN, "mttf", "0", r"`mttf` must be a number of hours above 0, got '0'"),
    (CHECKPOINT_PLAN, "rmesh", "data=0", r"`rmesh`: "),
    (CHECKPOINT_PLAN, "rstrategy", "custom", r"`rstrategy` must be one of replicated, fsdp, tensor, megatron"),
    (CHECKPOINT_PLAN, "pdevice", "abacus", r"`pdevice`: unknown device 'abacus'"),
]


@pytest.mark.parametrize(
    ("request_", "key", "text", "message"), BAD_VALUES, ids=[f"{r.name}-{k}={t}" for r, k, t, _ in BAD_VALUES]
)
def test_a_bad_value_is_refused_with_what_is_allowed(request_, key, text, message):
    with pytest.raises((TypeError, ValueError), match=message):  # a word for a number: TypeError, as declared
        request_[key].read(text)
    values, problems = request_.decode({key: text})  # in a link: named, and the default kept
    assert values[key] == request_[key].default
    assert len(problems) == 1 and problems[0].startswith(f"`{key}`") and re.search(message, problems[0])


def test_every_default_reads_as_itself():
    for request in REQUESTS:
        for field in request.all_fields:
            assert field.read(field.default) == field.default, (request.name, field.link)


def test_decode_keeps_the_good_values_and_names_each_bad_one():
    values, problems = SERVING.decode({"kv": "fp8", "context": "0", "fullwin": "on", "reserve": "9" * 100, "x": "1"})
    assert values["kv"] == "float8_e4m3fn" and values["fullwin"] == "true"
    assert values["context"] == "4096" and values["reserve"] == "0.1"  # refused: the defaults
    assert values["weights"] == "bfloat16"  # absent: the default
    assert len(problems) == 2 and problems[0].startswith("`context`: ") and "at most 64 characters" in problems[1]
    assert "x" not in values


def test_encode_writes_each_value_as_the_link_does_and_refuses_a_bad_one():
    assert TRAINING.encode({"sp": "true", "seq": "4e3", "devmem": "96 GB"}) == {
        "devmem": "96 GB",
        "seq": "4000",
        "sp": "on",
    }
    decoded, _ = TRAINING.decode({"sp": "true", "cf": "2"})
    assert TRAINING.decode(TRAINING.encode(decoded)) == (decoded, [])
    with pytest.raises(ValueError, match="`sp` must be on or off"):
        TRAINING.encode({"sp": "yes"})


def test_a_request_refuses_a_key_declared_twice():
    field = Field(link="a", flag=None, json=None, parse=count(4), default="1", meaning="")
    with pytest.raises(ValueError, match="declared twice"):
        Request(name="x", title="", faces="", fields=(field, field))
    with pytest.raises(KeyError, match="no link key 'b'"):
        Request(name="x", title="", faces="", fields=(field,))["b"]


def test_fields_json_declares_each_request_and_nothing_else():
    """The fields' words are data (dcsim/requests/fields.json); each of its requests is one the
    package lists, and the limit of the Memory page's parts is the engine's."""
    from dcsim.memory import training

    assert set(shipped.load(str(ROOT / "dcsim" / "requests" / "x.py"), "fields.json")) == {r.name for r in REQUESTS}
    assert TRAINING["parts"].limit == training.MAX_PARTS_CHARS


ROW = {"link": "n", "flag": "--n", "json": "n", "default": "{most}", "meaning": "1 to {most:,}", "metavar": "N"}


def test_a_row_is_bound_to_its_parser_and_its_words_filled():
    (field,) = bind([ROW], "t.json", {"n": count(5000)}, words={"most": 5000})
    assert (field.default, field.meaning, field.metavar, field.flag_default, field.limit) == (
        "5000",
        "1 to 5,000",
        "N",
        None,
        64,
    )
    assert field.read("4e3") == "4000"


@pytest.mark.parametrize(
    "parsers, words, message",
    [
        ({}, {"most": 1}, r"t.json declares \['n'\]; its module reads \[\]"),
        ({"n": count(1), "m": count(1)}, {"most": 1}, r"declares \['n'\]; its module reads \['m', 'n'\]"),
        ({"n": count(1)}, {}, r"t.json `n`: its default names 'most', which its module lacks"),
        ({"n": count(1)}, {"most": 1, "least": 0}, r"t.json: no text names \['least'\]"),
    ],
    ids=["a row without a parser", "a parser without a row", "a placeholder not given", "a word not used"],
)
def test_a_row_and_its_module_must_agree(parsers, words, message):
    with pytest.raises(ValueError, match=message):
        bind([ROW], "t.json", parsers, words=words)


def test_a_switch_parser_writes_the_words_it_is_given():
    assert switch("no", "yes")("on", "k") == "yes" and switch("no", "yes")("false", "k") == "no"


# --- the faces: the command line's flags, the JSON's keys, the pages' link keys, the docs ----------


def _flags(command: str) -> dict[str, argparse.Action]:
    parser = build_parser([command])
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {flag: action for action in sub.choices[command]._actions for flag in action.option_strings}


@pytest.mark.parametrize(
    ("command", "request_", "defaults"),
    [
        ("serve", SERVING, {"weights": "bfloat16"}),
        ("count", WEIGHTS, {"weights": None}),
        ("memory", TRAINING, {}),
    ],
    ids=["serve", "count", "memory"],
)
def test_each_command_has_the_declared_flags_with_the_declared_defaults(command, request_, defaults):
    """Every declared setting is a flag of its command: none left out, a switch as a switch, the
    declared default (or the command's own, named here)."""
    flags = _flags(command)
    for field in request_.all_fields:
        assert field.flag is not None and field.flag in flags, (command, field.link)
        action = flags[field.flag]
        assert isinstance(action, argparse._StoreTrueAction) is field.switch, field.flag
        expected = False if field.switch else defaults.get(field.link, field.flag_default)
        assert action.default == expected, field.flag
        assert action.help.startswith(field.help)  # a command may add to it (--weights: its default)


def test_serve_reads_its_flags_with_the_declared_parsers(capsys):
    from dcsim.cli import main

    argv = ["serve", "--preset", "gpt2-small", "--kv-dtype", "fp8", "--context", "5e2", "--reserve", "10%"]
    assert main([*argv, "--budget", "16GiB", "--full-windows", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    # Every declared JSON key of the request is in serve's JSON, with the value the flags gave.
    for field in SERVING.all_fields:
        head, _, tail = field.json.partition(".")
        assert head in record and (not tail or tail in record[head]), field.json
    assert (record["kv_dtype"], record["context"], record["reserve"]) == ("float8_e4m3fn", 500, "0.1")
    assert (record["budget_bytes"], record["full_windows"], record["device"]) == (16 * 2**30, True, None)
    assert main(["serve", "--preset", "gpt2-small", "--context", "0"]) == 2
    assert "`--context` must be" in capsys.readouterr().err


def test_memory_reads_its_flags_with_the_declared_parsers(capsys):
    from dcsim.cli import main

    base = ["memory", "--preset", "mixtral-8x7b", "--set", "num_layers=1", "--mesh", "data=2", "--format", "json"]
    step = ["--sequence", "4e1", "--micro-batch", "2", "--remat", "full", "--capacity-factor", "1.2345678"]
    assert main([*base, *step, "--sequence-parallel", "--grad-dtype", "same", "--budget", " 96 GB "]) == 0
    record = json.loads(capsys.readouterr().out)
    activations = record["activations"]
    assert (activations["sequence"], activations["micro_batch"], activations["policy"]) == (40, 2, "full")
    assert activations["capacity_factor"] == 1.2345678  # as typed: no digit lost to the link's short form
    assert record["budget"]["bytes"] == 96 * 10**9
    # A flag given the page's word for "not set" is the flag left out, as in a link.
    assert main([*base, "--sequence", "none"]) == 0
    assert "activations" not in json.loads(capsys.readouterr().out)
    assert main([*base, "--zero", "4"]) == 2
    assert "the ZeRO stage must be 0, 1, 2 or 3" in capsys.readouterr().err


def test_the_docs_key_tables_are_the_declarations():
    doc = LINKS_DOC.read_text()
    start = doc.index("<!-- the tables below are dcsim.requests.tables.link_tables()")
    start = doc.index("\n", start) + 1
    end = doc.index("<!-- end of the generated tables -->")
    assert doc[start:end] == link_tables(), (
        "docs/links.md's key tables are not the declarations': put the output of "
        "python -c 'from dcsim.requests.tables import link_tables; print(link_tables(), end=\"\")' between the markers"
    )


def test_the_docs_list_every_key_every_page_reads():
    """Each setting a page or its helpers name (``seeded("kv"``...) and each declared key has a row
    in docs/links.md: a key table's first column, or the first table's."""
    doc = LINKS_DOC.read_text()
    documented = set(re.findall(r"^\| `([^`]+)`", doc, re.M)) | set(re.findall(r"`(\w+)`", doc))
    declared = {field.link for request in REQUESTS for field in request.all_fields}
    assert literal_setting_names() | declared <= documented
    rows = set(re.findall(r"^\| `([^`]+)` \|", doc, re.M))
    assert declared <= rows


def test_the_serving_page_writes_only_declared_and_shared_keys():
    at = open_app({"preset": "gpt2-small", "kv": "fp8", "fullwin": "on"}, "pages/serving.py", editors=False)
    assert not at.exception
    own = {key: at.query_params[key] for key in at.query_params if key not in links.KEYS}
    timing = {key: own.pop(key) for key in ("prompt", "dph")}  # the decode speed's keys, with its device
    assert set(own) <= {*SERVING.keys, "mesh", "strategy", "rules"}
    assert own["kv"] == "float8_e4m3fn" and own["fullwin"] == "true"  # `on` read, the page's word written
    assert SERVING.decode(own)[1] == [] and TIMING.decode(timing)[1] == [] and timing == {"prompt": "128", "dph": "8"}


def test_the_memory_page_reads_true_as_on_and_writes_only_declared_keys():
    """An old Memory link wrote sp=on|off; one written by hand with true is read as on, said so, and
    rewritten in the page's word. Every key the page writes is declared (or the Layout page's)."""
    at = open_app({"input_dim": "8", "layers": "8", "mesh": "data=2", "sp": "true"}, "pages/memory.py", editors=False)
    assert not at.exception
    own = {key: at.query_params[key] for key in at.query_params if key not in links.KEYS}
    assert set(own) <= {*TRAINING.keys, "mesh", "strategy", "rules"}
    assert own["sp"] == "on" and own["devmem"] == "80GiB" and own["zero"] == "3"
    assert any(unescape(warning.value) == "Link: `sp` true is read as on." for warning in at.warning)
    assert TRAINING.decode(own)[1] == []


def test_the_lists_declared_without_jax_are_the_engines():
    """The step's choices and the default format are written out so that reading a request loads no
    JAX; they must be the tracer's and the serving request's own."""
    from dcsim.memory import activations
    from dcsim.requests import training as declared
    from dcsim.serving.request import DEFAULT_WEIGHTS

    assert declared.REMATS == tuple(activations.POLICIES) == tuple(name for name, _ in declared.REMAT_HELP)
    assert set(activations.ATTENTION_KINDS) == set(declared.ATTENTIONS)  # the page lists flash, its default, first
    assert tuple(activations.COMPUTE_DTYPES) == declared.COMPUTE_DTYPES
    assert WEIGHTS["weights"].default == DEFAULT_WEIGHTS
