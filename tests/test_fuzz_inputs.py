"""Fuzzing the entry points besides links (issue 8): CLI flags, configuration JSON, mesh and rule
strings. Each gets input from a grammar of real flags and hostile values or from raw bytes; each
must answer, or refuse with one line, never raise anything else or print a traceback."""

from __future__ import annotations

import json
import re

import pytest
from hostile import unbounded_repeats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from dcsim import cli
from dcsim.checkpoint import measurement
from dcsim.model import presets
from dcsim.model.config import MAX_CONFIG_BYTES, ModelConfig
from dcsim.model.count import ArrayRow, ParamReport
from dcsim.sharding import layout, meshes

HOSTILE = [
    "", " ", "0", "-1", "1e400", "nan", "-inf", "2.5", "4294967296", "1048577", "9" * 40, "1" * 5000, "٣",
    "<script>alert(1)</script>", "[x](javascript:alert(1))", "\x00", "a\nb", "\x1b[31m", "\u202e", "💥", "=", ",",
    "--shards", "-", "x" * 10_000,
]  # fmt: skip
hostile = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30))


def _values(*good: str):
    return st.one_of(st.sampled_from(good), hostile)


FLAGS = {
    "--input-dim": _values("4", "784", "1048576"),
    "--features": _values("4", "4,8,2", "512,512,10", ",".join(["8"] * 257), "4,,4", "0,4"),
    "--batch": _values("1", "64"),
    "--seed": _values("0", "4294967295"),
    "--shards": _values("1", "3", "1048576"),
    "--preset": _values("gpt2-small", "resnet18", "mlp-mnist", "vit-b16", "nope"),
    "--set": _values("num_layers=2", "num_heads=5", "stage_blocks=1,1,1,1", "nope=1", "num_layers", "use_bias=maybe"),
    "--format": _values("table", "json", "csv"),
    "--optimizer": _values("sgd", "adam", "all"),
    "--mesh": _values("data=4", "data=2,model=2", "data=0", "a=2,a=2", "data=65", "*" * 600),
    "--strategy": _values("replicated", "fsdp", "tensor", "custom"),
    "--rule": _values("*/kernel=None,model", "*=data", "[=None", "*" * 1000 + "=None", "**/**=data", "*=nope"),
    "--dtype": _values("float32", "bfloat16", "int4"),
    "--max-params": _values("1", "30000000", "3e7", "0"),
    "--timeout": _values("1", "120", "0", "3601"),
}
COMMANDS = ["count", "presets", "layout", "checkpoint"]


@st.composite
def argvs(draw):
    """A command line from the real flags, each with a good, a near or a hostile value."""
    argv = [draw(st.one_of(st.sampled_from(COMMANDS), hostile))]
    for _ in range(draw(st.integers(0, 6))):
        roll = draw(st.integers(0, 9))
        if roll == 0:
            argv.append(draw(st.sampled_from(["--no-bias", "--bogus", "-x", "--", "--help", "-h", "--he"])))
        elif roll == 1:
            argv.append(draw(hostile))  # a stray positional
        else:
            flag = draw(st.sampled_from(sorted(FLAGS)))
            argv += [flag, draw(FLAGS[flag])] if draw(st.integers(0, 5)) else [f"{flag}={draw(FLAGS[flag])}"]
    return argv


class NotRun(measurement.CheckpointFailed):
    """The fuzz plans checkpoints (every refusal is checked) but never starts a child."""


def _not_run(plan, **_):
    raise NotRun("planned, not run (fuzz)")


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argvs())
def test_any_command_line_answers_or_refuses_in_one_line(argv, capsys, monkeypatch):
    monkeypatch.setattr(measurement, "run_checkpoint", _not_run)
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if code == 0:
        assert out and err == ""
        assert "usage:" in out or not {"--help", "-h", "--he"} & set(argv)
    elif code == 2:
        assert out == "" and err.startswith("dcsim: error: ") and err.endswith("\n") and err.count("\n") == 1, err
        assert all(char.isprintable() for char in err[:-1]), err
    else:
        assert (code, err) == (1, "dcsim: checkpoint failed: planned, not run (fuzz)\n"), (code, err)


def test_help_in_process_returns_0_instead_of_exiting(capsys):
    assert cli.main(["count", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m dcsim count")


@pytest.mark.parametrize(
    "argv",
    [
        ["count", "foo\nbar"],  # argparse joins unrecognized arguments as they are
        ["count", "\x1b[2J\x1b[31mred"],  # a terminal escape would repaint the person's screen
        ["count", "--shards", "1\n2"],
    ],
    ids=["newline", "terminal-escape", "newline-in-value"],
)
def test_an_error_is_one_printable_line_whatever_was_typed(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(char.isprintable() for char in err[:-1]), err
    assert "\\n" in err or "\\x1b" in err


# --- configuration JSON (the upload box and --config) ---------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)
config_like = st.fixed_dictionaries(
    {},
    optional={
        "format": st.one_of(st.just("dcsim.config"), json_values),
        "version": st.one_of(st.just(1), json_values),
        "input_dim": st.one_of(st.integers(-5, 2**21), json_values),
        "num_shards": st.one_of(st.integers(-5, 2**21), json_values),
        "seed": st.one_of(st.integers(-5, 2**33), json_values),
        "layers": st.one_of(
            st.lists(st.fixed_dictionaries({"features": st.integers(-1, 2**21)}, optional={"use_bias": json_values})),
            json_values,
        ),
        "preset": st.one_of(st.sampled_from(sorted(presets.PRESETS)), json_values),
        "overrides": st.one_of(
            st.dictionaries(st.sampled_from(["num_layers", "d_model", "x"]), json_values), json_values
        ),
    },
)


def attempt(function, *args):
    """``(result, None)``, or ``(None, message)`` when ``function`` refuses as dcsim refuses."""
    try:
        return function(*args), None
    except (TypeError, ValueError) as err:
        return None, str(err)


def parsed_or_refused_in_one_line(parse, text: str):
    """What ``parse`` makes of ``text``, or None when it refuses: in one line, under 600 characters."""
    parsed, refusal = attempt(parse, text)
    if refusal is None:
        assert parsed is not None  # None stands for a refusal here
    else:
        assert "\n" not in refusal and len(refusal) < 600
    return parsed


def _opens_or_refuses(data: bytes | str) -> None:
    config, refusal = attempt(ModelConfig.from_json, data)
    if refusal is not None:
        assert refusal and "\n" not in refusal
    else:
        assert ModelConfig.from_json(config.to_json()) == config


@settings(max_examples=examples(150))
@given(st.one_of(json_values, config_like))
def test_any_json_document_opens_or_is_refused_with_a_message(document):
    _opens_or_refuses(json.dumps(document))


@given(st.binary(max_size=400))
def test_any_bytes_open_or_are_refused_with_a_message(raw):
    _opens_or_refuses(raw)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 60_000, "nested too deeply"),
        ('{"a":' * 30_000 + "1" + "}" * 30_000, "at most 65,536 bytes"),
        ("[" * 30_000 + "]" * 30_000, "nested too deeply"),
        ('{"input_dim": ' + "9" * 5000 + "}", "not valid JSON"),
        ('{"input_dim": 1e400}', "`input_dim` must be an integer from 1 to 1,048,576, got inf"),
        ('{"input_dim": NaN}', "got nan"),
        ('{"seed": 1, "seed": 2}', "repeats the field 'seed'"),
        ('{"layers": [{"features": 4, "features": 8}]}', "repeats the field 'features'"),
        (b'{"input_dim": "\xff"}', "must be UTF-8 text"),
        (" " * (MAX_CONFIG_BYTES + 1), "at most 65,536 bytes, got 65,537"),
        ("💥" * (MAX_CONFIG_BYTES // 4 + 1), "at most 65,536 bytes, got 65,540"),
        ('{"layers": [' + ",".join(['{"features": 1}'] * 257) + "]}", "at most 256 layers, got 257"),
        ('{"preset": "gpt2-small", "overrides": {"num_layers": 1e400}}', "`num_layers`"),
        ('{"preset": "<script>alert(1)</script>"}', "unknown preset '<script>alert(1)</script>'"),
    ],
    ids=lambda value: str(value)[:24],
)
def test_hostile_json_is_refused_by_name(text, message):
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        ModelConfig.from_json(text)


# --- mesh and rule strings -------------------------------------------------------------------------

mesh_text = st.one_of(
    st.text(max_size=80),
    st.lists(
        st.builds("{}={}".format, st.sampled_from(["data", "model", "a", "None", "x" * 33]), st.integers(-1, 10**8)),
        min_size=1,
        max_size=10,
    ).map(",".join),
    st.sampled_from(["*" * 1000, "data=" + "9" * 600, "a=2," * 200, "None=2", "data=1e400", "ß=2", "data=٣"]),
)


@settings(max_examples=examples(150))
@given(mesh_text)
def test_any_mesh_string_parses_or_is_refused(text):
    mesh = parsed_or_refused_in_one_line(meshes.parse_mesh, text)
    if mesh is not None:
        assert 1 <= mesh.num_devices <= meshes.MAX_MESH_DEVICES
        assert len(mesh.names) <= meshes.MAX_MESH_AXES
        assert meshes.parse_mesh(mesh.text) == mesh


GLOBS = ["*" * 1000, "[", "**/**", "[!]", "[]]", "*[*", "?" * 256, "*a" * 128, "[a-" * 80, "*/" * 128, "\\*"]
rule_text = st.one_of(
    st.text(max_size=80),
    st.builds(lambda glob, spec: f"{glob}={spec}", st.sampled_from(GLOBS), st.sampled_from(["None", "data", "x,y"])),
    st.builds(
        lambda pattern, spec: f"{pattern}={','.join(spec)}",
        st.text(alphabet="*?/[]!a_0", min_size=1, max_size=300),
        st.lists(st.sampled_from(["None", "data", "model", "data+model"]), min_size=1, max_size=17),
    ),
)
# Paths of the length and shape the engine produces, to match hostile globs against.
PATHS = [f"block_{index}/attn/query_{'x' * (index % 40)}/kernel" for index in range(500)]


@settings(max_examples=examples(150))
@given(rule_text)
def test_any_rule_string_parses_or_is_refused(text):
    rule = parsed_or_refused_in_one_line(meshes.parse_rule, text)
    if rule is not None:
        assert 1 <= len(rule.pattern) <= meshes.MAX_PATTERN_CHARS
        assert meshes.parse_rule(rule.text) == rule


@pytest.mark.parametrize("glob", [glob for glob in GLOBS if len(glob) <= meshes.MAX_PATTERN_CHARS], ids=repr)
def test_hostile_globs_compile_to_expressions_that_cannot_backtrack(glob):
    """A count instead of a clock: a glob's regex may hold one `.*` per run of stars, each but the
    last inside an atomic group; backtracking needs a repeat it can re-enter, and has none here."""
    repeats, outside_atomic = unbounded_repeats(glob)
    assert repeats == len(re.findall(r"\*+", glob))
    assert outside_atomic <= 1
    rule = meshes.parse_rule(f"{glob}=None")
    # The counts above are the proof (`(.*)*z` on a 28-character path took 24 s, NOTES.md); the
    # match itself must still answer for every path.
    matched = sum(rule.matches(path) for path in PATHS)
    assert 0 <= matched <= len(PATHS)


def test_sixty_four_of_the_worst_rules_lay_a_model_out_at_once():
    rules = meshes.parse_rules(["*a" * 128 + "=None"] * 63 + ["*=None"])
    report = ParamReport(
        arrays=tuple(
            ArrayRow(
                collection="params",
                path=path,
                module=path.rsplit("/", 1)[0],
                kind="kernel",
                shape=(4, 4),
                dtype="float32",
                num_values=16,
            )
            for path in PATHS[:200]
        )
    )
    # No clock: every rule's glob compiles to an expression that cannot backtrack (the count above),
    # so the layout answers; bench/bench_layout.py times it.
    assert all(unbounded_repeats(rule.pattern)[1] <= 1 for rule in rules)
    result = layout.compute_layout(report, meshes.parse_mesh("data=2"), "custom", rules)
    assert result.total_params == 200 * 16
