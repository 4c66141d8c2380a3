"""``python -m dcsim count``: in process for the many cases, through a subprocess for the contract."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import hypothesis.strategies as hs
import pytest
from hypothesis import HealthCheck, given, settings

from dcsim.cli import main
from dcsim.config import ModelConfig

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_no_flags_answer_the_seed_example(capsys):
    code, out, err = run(capsys, "count")
    assert code == 0 and err == ""
    assert "total parameters       20\n" in out
    assert "ideal share per shard  10 " in out
    assert "raw float32 payload    80 bytes" in out
    assert "NOT the checkpoint size" in out


def test_json_has_the_documented_keys(capsys):
    code, out, _ = run(capsys, "count", "--input-dim", "9", "--features", "4,2", "--shards", "3", "--format", "json")
    record = json.loads(out)
    assert code == 0
    assert record["total_params"] == 50 and record["num_shards"] == 3
    assert record["ideal_share"] == 50 / 3 and record["ideal_share_fraction"] == "50/3"
    assert record["raw_float32_bytes"] == 200
    assert [row["path"] for row in record["layers"]] == ["Dense_0", "Dense_1"]
    assert [row["path"] for row in record["arrays"]] == [
        "Dense_0/kernel",
        "Dense_0/bias",
        "Dense_1/kernel",
        "Dense_1/bias",
    ]
    assert record["arrays"][0]["shape"] == [9, 4] and record["arrays"][0]["dtype"] == "float32"
    assert (
        sum(row["num_params"] for row in record["layers"]) == sum(row["num_params"] for row in record["arrays"]) == 50
    )


def test_csv_gives_the_per_array_rows(capsys):
    code, out, _ = run(capsys, "count", "--features", "3,4", "--no-bias", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert [(row["path"], row["shape"], int(row["num_params"])) for row in rows] == [
        ("Dense_0/kernel", "4x3", 12),
        ("Dense_1/kernel", "3x4", 12),
    ]


def test_table_uses_separators_and_honest_units(capsys):
    code, out, _ = run(capsys, "count", "--input-dim", "65536", "--features", "65536,65536")
    assert code == 0
    assert "total parameters       8,590,065,664" in out
    assert "raw float32 payload    34,360,262,656 bytes (32.00 GiB)" in out


def test_fractional_share_is_shown_exactly(capsys):
    _, out, _ = run(capsys, "count", "--shards", "3")
    assert "ideal share per shard  6.666666666666667 (20/3)" in out


def test_flags_override_the_config_file(capsys, tmp_path):
    path = tmp_path / "model.json"
    path.write_text(ModelConfig(input_dim=9, num_shards=5).to_json())
    _, out, _ = run(capsys, "count", "--config", str(path), "--shards", "4", "--format", "json")
    record = json.loads(out)
    assert (record["config"]["input_dim"], record["num_shards"], record["total_params"]) == (9, 4, 40)


def test_config_file_keeps_per_layer_bias(capsys, tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"input_dim": 9, "layers": [{"features": 4, "use_bias": False}, {"features": 2}]}))
    _, out, _ = run(capsys, "count", "--config", str(path), "--format", "json")
    assert json.loads(out)["total_params"] == 36 + 10


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "choose a command: count"),
        (["nope"], "invalid choice: 'nope'"),
        (["count", "--bogus"], "unrecognized arguments: --bogus"),
        (["count", "--shards"], "argument --shards: expected one argument"),
        (["count", "--shards", "0"], "`--shards` must be an integer from 1 to 1,048,576, got '0'"),
        (["count", "--shards", "1e400"], "got '1e400'"),
        (["count", "--shards", "2.5"], "got '2.5'"),
        (["count", "--shards", "nan"], "got 'nan'"),
        (["count", "--seed", "-1"], "`--seed` must be an integer from 0 to 4,294,967,295"),
        (["count", "--input-dim", "abc"], "`--input-dim` must be an integer from 1 to 1,048,576, got 'abc'"),
        (["count", "--batch", "0"], "`--batch` must be an integer from 1"),
        (["count", "--features", "4,,2"], "`--features` must be an integer from 1 to 1,048,576, got ''"),
        (["count", "--features", "2000000"], "got '2000000'"),
        (["count", "--features", ",".join(["1"] * 300)], "`--features` may list at most 256 layers, got 300"),
        (["count", "--format", "xml"], "invalid choice: 'xml'"),
        (["count", "--config", "/no/such/file.json"], "cannot read the configuration file '/no/such/file.json'"),
        (["count", "--config", "/"], "cannot read the configuration file '/'"),
    ],
    ids=[
        "no-command",
        "unknown-command",
        "unknown-flag",
        "missing-value",
        "zero-shards",
        "1e400",
        "fraction",
        "nan",
        "negative-seed",
        "text",
        "zero-batch",
        "empty-width",
        "too-wide",
        "too-many-layers",
        "bad-format",
        "missing-file",
        "directory",
    ],
)
def test_bad_flags_give_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dcsim: error: ")
    assert message in err


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON"),
        ('{"shards": 2}', "unknown configuration field 'shards'"),
        ("x" * 70_000, "at most 65,536 bytes"),
    ],
    ids=["truncated", "unknown-key", "oversized"],
)
def test_bad_config_files_are_named(capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = run(capsys, "count", "--config", str(path))
    assert code == 2 and f"configuration file '{path}'" in err and message in err


def subprocess_run(*argv, stdin=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dcsim", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_module_entry_point_answers_the_seed_example():
    result = subprocess_run("count", "--format", "json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert (record["total_params"], record["ideal_share"], record["raw_float32_bytes"]) == (20, 10, 80)


def test_module_entry_point_reads_config_from_stdin():
    config = ModelConfig(input_dim=9, num_shards=4).to_json()
    result = subprocess_run("count", "--config", "-", "--format", "json", stdin=config)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ideal_share"] == 10


def test_module_entry_point_refuses_without_a_traceback():
    result = subprocess_run("count", "--shards", "-3")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "dcsim: error: `--shards` must be an integer from 1 to 1,048,576, got '-3'\n"


def test_a_bug_is_one_line_not_a_traceback(capsys, monkeypatch):
    def broken(config):
        raise RuntimeError("boom")

    monkeypatch.setattr("dcsim.cli.count_params", broken)
    code, out, err = run(capsys, "count")
    assert code == 1 and out == ""
    assert err == "dcsim: internal error: RuntimeError: boom (set DCSIM_DEBUG=1 for the traceback)\n"


flag_values = hs.one_of(
    hs.text(max_size=30),
    hs.sampled_from(["1e400", "-1", "0", "nan", "inf", "2.5", "4" * 5000, "\x00", "٣", "4,4", ""]),
    hs.integers(-(2**70), 2**70).map(str),
    hs.floats(allow_nan=True, allow_infinity=True).map(repr),
)
flags = hs.sampled_from(
    ["--input-dim", "--features", "--batch", "--seed", "--shards", "--format", "--config", "--no-bias"]
)


@given(hs.lists(hs.tuples(flags, flag_values), max_size=4))
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_flags_give_an_answer_or_one_clear_line(capsys, pairs):
    argv = ["count"]
    for flag, value in pairs:
        argv += [flag] if flag == "--no-bias" else [flag, value]
    if "--config" in argv:  # only ever a path that cannot exist: nothing is read or written
        argv[argv.index("--config") + 1] = "/nonexistent/dcsim-fuzz.json"
    code, out, err = run(capsys, *argv)
    if code == 0:
        assert err == ""
        assert out
    else:
        assert code == 2
        assert out == ""
        assert err.startswith("dcsim: error: ")
        assert err.count("\n") == 1
