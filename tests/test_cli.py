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

from conftest import examples, refused_in_one_line
from conftest import run_cli as run
from dcsim.model.config import ModelConfig

ROOT = Path(__file__).resolve().parent.parent


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


BAD_FLAGS = {
    "no-command": ([], "choose a command: count"),
    "unknown-command": (["nope"], "invalid choice: 'nope'"),
    "unknown-flag": (["count", "--bogus"], "unrecognized arguments: --bogus"),
    "missing-value": (["count", "--shards"], "argument --shards: expected one argument"),
    "zero-shards": (["count", "--shards", "0"], "`--shards` must be an integer from 1 to 1,048,576, got '0'"),
    "1e400": (["count", "--shards", "1e400"], "got '1e400'"),
    "fraction": (["count", "--shards", "2.5"], "got '2.5'"),
    "nan": (["count", "--shards", "nan"], "got 'nan'"),
    "negative-seed": (["count", "--seed", "-1"], "`--seed` must be an integer from 0 to 4,294,967,295"),
    "text": (["count", "--input-dim", "abc"], "`--input-dim` must be an integer from 1 to 1,048,576, got 'abc'"),
    "zero-batch": (["count", "--batch", "0"], "`--batch` must be an integer from 1"),
    "empty-width": (["count", "--features", "4,,2"], "`--features` must be an integer from 1 to 1,048,576, got ''"),
    "too-wide": (["count", "--features", "2000000"], "got '2000000'"),
    "too-many-layers": (
        ["count", "--features", ",".join(["1"] * 300)],
        "`--features` may list at most 256 layers, got 300",
    ),
    "bad-format": (["count", "--format", "xml"], "invalid choice: 'xml'"),
    "missing-file": (
        ["count", "--config", "/no/such/file.json"],
        "cannot read the configuration file '/no/such/file.json'",
    ),
    "directory": (["count", "--config", "/"], "cannot read the configuration file '/'"),
}


@pytest.mark.parametrize("argv, message", list(BAD_FLAGS.values()), ids=list(BAD_FLAGS))
def test_bad_flags_give_one_line_and_exit_2(capsys, argv, message):
    assert message in refused_in_one_line(capsys, *argv)


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


@pytest.mark.slow  # a fresh interpreter: the module entry point itself
def test_module_entry_point_answers_the_seed_example():
    result = subprocess_run("count", "--format", "json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert (record["total_params"], record["ideal_share"], record["raw_float32_bytes"]) == (20, 10, 80)


@pytest.mark.slow  # a fresh interpreter: the module entry point itself
def test_module_entry_point_reads_config_from_stdin():
    config = ModelConfig(input_dim=9, num_shards=4).to_json()
    result = subprocess_run("count", "--config", "-", "--format", "json", stdin=config)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ideal_share"] == 10


@pytest.mark.slow  # a fresh interpreter: the module entry point itself
def test_module_entry_point_refuses_without_a_traceback():
    result = subprocess_run("count", "--shards", "-3")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "dcsim: error: `--shards` must be an integer from 1 to 1,048,576, got '-3'\n"


def imported_by(imports_probe, *argv):
    """The command's answer and the heavy top-level packages it imports, as a fresh process
    would (the ``imports_probe`` child forks one a command)."""
    reply = imports_probe({"argv": list(argv)})
    return reply, set(reply["heavy"])


@pytest.mark.slow  # one child interpreter, forked a command
@pytest.mark.parametrize(
    "argv",
    [["--help"], ["presets"], ["count", "--help"], ["count", "--bogus"], ["count", "--shards", "0"], ["bogus"]],
    ids=" ".join,
)
def test_help_presets_and_a_bad_flag_import_no_jax(imports_probe, argv):
    reply, heavy = imported_by(imports_probe, *argv)
    assert reply["code"] in (0, 2) and "Traceback" not in reply["stderr"]
    assert heavy == set()


@pytest.mark.slow  # one child interpreter, forked a command
def test_a_count_imports_only_what_it_uses(imports_probe):
    reply, heavy = imported_by(imports_probe, "count", "--preset", "llama2-7b")
    assert reply["code"] == 0 and "6,738,415,616" in reply["stdout"]
    assert heavy == {"jax", "flax", "pandas"}  # no optax, Orbax, Altair, huggingface_hub or a format's library
    reply, heavy = imported_by(imports_probe, "count", "--preset", "llama2-7b", "--format", "json")
    assert json.loads(reply["stdout"])["total_params"] == 6_738_415_616
    assert heavy == {"jax", "flax"}  # the JSON record is built without pandas
    _, heavy = imported_by(imports_probe, "count", "--preset", "llama2-7b", "--optimizer", "adam")
    assert "optax" in heavy


@pytest.mark.slow  # one child interpreter, forked a command
def test_a_format_imports_only_its_own_library(imports_probe):
    reply, heavy = imported_by(imports_probe, "count", "--preset", "gpt2-small", "--weights", "gptq-int4")
    assert reply["code"] == 0 and "qwix" in heavy  # its linears are found by qwix in the forward
    assert "gguf" not in heavy and "safetensors" not in heavy
    _, heavy = imported_by(imports_probe, "serve", "--preset", "gpt2-small", "--context", "64")
    assert not heavy & {"qwix", "gguf", "safetensors"}


def test_the_parsers_optimizer_names_are_the_optimizers():
    from dcsim.cli.common import OPTIMIZER_CHOICES
    from dcsim.model import optimizer

    assert OPTIMIZER_CHOICES == optimizer.OPTIMIZER_NAMES


def test_every_command_is_listed_with_its_help_and_parses_alone(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in ("count", "presets", "layout", "memory", "serve", "checkpoint", "compare"):
        assert name in out
    code, _, err = run(capsys, "layout", "--mesh", "data=2", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize(
    "name", ["count", "presets", "layout", "memory", "serve", "checkpoint", "checkpoint-plan", "compare"]
)
def test_each_commands_help_opens_with_its_description_and_fills_every_default(capsys, name):
    from dcsim.cli.common import COMMAND_TEXTS, MESH_HELP

    code, out, _ = run(capsys, name, "--help")
    flat = " ".join(out.split())  # argparse wraps the texts to the terminal's width
    assert code == 0 and " ".join(COMMAND_TEXTS[name].description.split()) in flat
    if name in MESH_HELP:
        assert "--mesh" in out and "--strategy" in out and "--rule" in out
        assert "{default_" not in flat and "_mesh}" not in flat and "_strategy}" not in flat, flat
    assert set(MESH_HELP) <= set(COMMAND_TEXTS)


def test_a_bug_is_one_line_not_a_traceback(capsys, monkeypatch):
    def broken(config):
        raise RuntimeError("boom")

    monkeypatch.setattr("dcsim.model.count.count_params", broken)  # count imports it when it runs
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
@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
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


# Presets: `count --preset NAME [--set key=value ...]` and `presets`.


def test_preset_json_has_the_dense_keys_and_reads_like_the_architecture(capsys):
    code, out, err = run(capsys, "count", "--preset", "gpt2-small", "--format", "json")
    _, dense, _ = run(capsys, "count", "--format", "json")
    record = json.loads(out)
    assert code == 0 and err == ""
    assert set(record) == set(json.loads(dense))
    assert record["total_params"] == 124_439_808
    assert record["config"]["preset"] == "gpt2-small" and record["config"]["overrides"] == {}
    paths = [row["path"] for row in record["layers"]]
    assert paths[:3] == ["embed/token", "embed/position", "block_0/attn_norm"] and "block_3/attn/query" in paths
    assert sum(row["num_params"] for row in record["layers"]) == 124_439_808
    assert sum(row["num_params"] for row in record["arrays"]) == 124_439_808


def test_set_changes_hyperparameters_and_reaches_pythia_70m(capsys):
    argv = ["count", "--preset", "gpt2-small", "--format", "json"]
    for pair in ("vocab_size=50304", "d_model=512", "num_layers=6", "num_heads=8", "num_kv_heads=8"):
        argv += ["--set", pair]
    argv += ["--set", "ffn_dim=2048", "--set", "position_embedding=none", "--set", "tied_embeddings=false"]
    code, out, _ = run(capsys, *argv)
    record = json.loads(out)
    assert code == 0 and record["total_params"] == 70_426_624
    assert record["config"]["overrides"]["tied_embeddings"] is False


def test_set_moves_derived_values_with_their_source_as_the_model_page_does(capsys):
    # Issue 46: GPT-2 small's 12 heads are all KV heads, so 16 query heads bring 16 KV heads (the
    # count is unchanged: the projections stay d_model x d_model), not a refusal over 12.
    code, out, _ = run(capsys, "count", "--preset", "gpt2-small", "--set", "num_heads=16", "--format", "json")
    assert code == 0
    record = json.loads(out)
    assert record["total_params"] == 124_439_808
    assert record["config"]["overrides"] == {"num_heads": 16, "num_kv_heads": 16}
    # Llama 2 7B stays a multi-head model at 64 heads: its own 6,738,415,616, not a grouped-query
    # model of 6,201,544,704 with 32 KV heads left behind.
    _, out, _ = run(capsys, "count", "--preset", "llama2-7b", "--set", "num_heads=64", "--format", "json")
    assert json.loads(out)["total_params"] == 6_738_415_616
    # a derived value given too is the person's, and stays
    _, out, _ = run(
        capsys, "count", "--preset", "llama2-7b", "--set", "num_heads=64", "--set", "num_kv_heads=8", "--format", "json"
    )
    assert json.loads(out)["config"]["overrides"] == {"num_heads": 64, "num_kv_heads": 8}
    # ffn_dim keeps its 4x ratio: d_model 1,536 gives 6,144. By hand: embeddings (50,257 + 1,024) x
    # 1,536 = 78,767,616; a block 1,536 x 4,608 + 4,608 (qkv) + 1,536^2 + 1,536 (out) + 1,536 x 6,144
    # + 6,144 + 6,144 x 1,536 + 1,536 (MLP) + 4 x 1,536 (two LayerNorms) = 28,331,520, 12 of them
    # 339,978,240; the final LayerNorm 3,072: 418,748,928.
    _, out, _ = run(capsys, "count", "--preset", "gpt2-small", "--set", "d_model=1536", "--format", "json")
    record = json.loads(out)
    assert record["total_params"] == 418_748_928
    assert record["config"]["overrides"] == {"d_model": 1536, "ffn_dim": 6144}


def test_a_run_of_identical_blocks_is_one_row_with_its_multiplicity(capsys):
    code, out, _ = run(capsys, "count", "--preset", "llama2-7b")
    block = 4 * 4096 * 4096 + 3 * 4096 * 11_008 + 2 * 4096  # attention, gated MLP, two RMSNorms
    assert code == 0 and block == 202_383_360
    row = next(line for line in out.splitlines() if line.startswith("block_0..block_31 "))
    assert row.split() == ["block_0..block_31", "blocks", "32", "202,383,360", "288", "6,476,267,520", "96.11%"]
    assert "\nblock_1 " not in out and "--all-rows shows every block" in out
    _, every, _ = run(capsys, "count", "--preset", "llama2-7b", "--all-rows")
    assert sum(line.startswith("block_") for line in every.splitlines()) == 32
    assert "block_0..block_31" not in every and "--all-rows shows" not in every
    # DeepSeek-V3: 3 dense blocks, then 58 with experts; a block that differs starts its own row.
    _, out, _ = run(capsys, "count", "--preset", "deepseek-v3")
    rows = [line.split()[:3] for line in out.splitlines() if line.startswith("block_")]
    assert rows == [["block_0..block_2", "blocks", "3"], ["block_3..block_60", "blocks", "58"]]


def test_preset_table_shows_groups_non_embedding_and_batchnorm_apart(capsys):
    code, out, _ = run(capsys, "count", "--preset", "resnet18", "--shards", "4")
    assert code == 0
    assert "model: preset resnet18 (ResNet-18;" in out
    assert "ResNet-18: matches the reference count 11,689,512 (library documentation: torchvision" in out
    assert out.startswith("total parameters       11,689,512\n")  # the answer first
    assert "other variables        9,600 (BatchNorm running statistics: not parameters, not in the total)" in out
    assert "\nstage_3 " in out  # the top-level modules; every array is in --format csv
    assert "(62 arrays: every one with --format csv or --format json)" in out
    _, out, _ = run(capsys, "count", "--preset", "llama2-7b", "--set", "num_layers=2")
    assert "non-embedding parameters: 404,770,816" in out  # 2 blocks of 202,383,360 and the final norm
    assert "changed from the preset: num_layers" in out
    unchanged = "the reference count of Llama 2 7B is 6,738,415,616 (transformers count of the config)."
    assert f"Llama 2 7B with num_layers=2; {unchanged}" in out


def test_the_answer_comes_first_and_bytes_per_shard_are_in_the_chosen_dtype(capsys):
    code, out, _ = run(capsys, "count", "--preset", "llama2-70b", "--shards", "64", "--dtype", "bfloat16")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "total parameters       68,976,648,192"
    assert lines[3] == (
        "bytes per shard        2,155,520,256 bytes in bfloat16 (2.01 GiB)  (an average, NOT the checkpoint size)"
    )
    assert len(lines) < 150  # 1,470 lines before: every array is in csv and json, not in the table
    _, out, _ = run(
        capsys, "count", "--preset", "llama2-70b", "--shards", "64", "--dtype", "bfloat16", "--format", "json"
    )
    record = json.loads(out)
    assert (record["dtype"], record["bytes_per_shard_fraction"]) == ("bfloat16", "2155520256")
    assert record["config"]["dtype"] == "bfloat16"


def test_config_file_preset_with_set_on_top(capsys, tmp_path):
    path = tmp_path / "model.json"
    path.write_text(ModelConfig(preset="llama2-7b", overrides={"num_layers": 2}).to_json())
    _, out, _ = run(capsys, "count", "--config", str(path), "--set", "vocab_size=1000", "--format", "json")
    overrides = json.loads(out)["config"]["overrides"]
    assert overrides == {"num_layers": 2, "vocab_size": 1000}
    _, out, _ = run(capsys, "count", "--config", str(path), "--preset", "gpt2-small", "--format", "json")
    assert json.loads(out)["total_params"] == 124_439_808  # another preset: the file's overrides do not carry over


def test_optimizer_state_is_a_section_apart(capsys):
    code, out, _ = run(capsys, "count", "--preset", "mlp-mnist", "--optimizer", "adam", "--format", "json")
    record = json.loads(out)
    assert code == 0 and record["total_params"] == 669_706
    assert [row["optimizer"] for row in record["optimizer_state"]] == ["adam"]
    assert record["optimizer_state"][0]["num_values"] == 2 * 669_706 + 1
    assert "not part of the parameter total" in record["optimizer_state_note"]
    _, out, _ = run(capsys, "count", "--optimizer", "all")
    assert "optimizer state: held beside the parameters" in out
    assert "  sgd                        0 values (0 per parameter)  raw 0 bytes" in out
    assert "  momentum                  20 values" in out


def test_presets_lists_names_families_and_counts(capsys):
    code, out, _ = run(capsys, "presets")
    assert code == 0
    assert (
        "llama2-70b         decoder    68,976,648,192  transformers count of the config  Llama 2 70B (8 KV heads)"
        in out
    )
    assert "resnet18           resnet         11,689,512  library documentation             ResNet-18" in out
    code, out, _ = run(capsys, "presets", "--format", "json")
    rows = json.loads(out)
    assert len(rows) == 41 and rows[0]["name"] == "mlp-mnist" and rows[0]["reference_params"] == 669_706
    assert rows[0]["source_kind"] == "model summary"
    assert rows[10]["hparams"]["stage_blocks"] == [3, 4, 6, 3] and rows[10]["source"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["count", "--preset", "gpt5"], "unknown preset 'gpt5'; presets: mlp-mnist,"),
        (["count", "--set", "num_layers=2"], "`--set` changes a preset's hyperparameters; choose a preset"),
        (["count", "--preset", "gpt2-small", "--set", "layers=2"], "unknown hyperparameter 'layers'"),
        (["count", "--preset", "gpt2-small", "--set", "num_layers"], "`--set` takes KEY=VALUE"),
        (["count", "--preset", "gpt2-small", "--set", "num_heads=7"], "`num_heads` (7) must divide `d_model` (768)"),
        (["count", "--preset", "llama3-8b", "--set", "num_kv_heads=5"], "`num_kv_heads` (5) must divide"),
        (["count", "--preset", "gpt2-small", "--set", "num_layers=1e400"], "`num_layers` must be an integer"),
        (["count", "--preset", "gpt2-small", "--set", "gated_mlp=yes"], "`gated_mlp` must be true or false"),
        (["count", "--preset", "resnet18", "--set", "stage_blocks=2,x"], "`stage_blocks[1]` must be an integer"),
        (["count", "--preset", "gpt2-small", "--features", "4"], "--features: only for the Dense stack"),
        (["count", "--optimizer", "sgdm"], "invalid choice: 'sgdm'"),
        (["presets", "--format", "csv"], "invalid choice: 'csv'"),
    ],
    ids=[
        "unknown-preset",
        "set-without-preset",
        "unknown-hparam",
        "no-equals",
        "heads",
        "kv-heads",
        "1e400",
        "bool",
        "stage-entry",
        "dense-flag",
        "optimizer",
        "presets-format",
    ],
)
def test_bad_preset_flags_give_one_line_and_exit_2(capsys, argv, message):
    assert message in refused_in_one_line(capsys, *argv)


@given(hs.sampled_from(["num_layers", "num_heads", "norm", "tied_embeddings", "bogus", ""]), flag_values)
@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_set_value_gives_an_answer_or_one_clear_line(capsys, name, value):
    code, out, err = run(capsys, "count", "--preset", "gpt2-small", "--set", f"{name}={value}", "--set", "num_layers=1")
    if code == 0:
        assert err == "" and out
    else:
        assert code == 2 and out == "" and err.startswith("dcsim: error: ") and err.count("\n") == 1


@pytest.mark.slow  # a fresh interpreter: the module entry point itself
def test_module_entry_point_counts_a_preset():
    result = subprocess_run("count", "--preset", "llama2-70b", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total_params"] == 68_976_648_192


def test_count_shows_the_head_width_a_config_file_says(capsys):
    # Llama 3.2 1B's config.json says head_dim 64: 2,048 / 32 heads, which dcsim builds as "0, d_model
    # / num_heads"; the line shows the width, never head_dim=0 (issue 46).
    code, out, _ = run(capsys, "count", "--config", str(Path(__file__).parent / "data/hf/llama-3.2-1b.json"))
    line = next(line for line in out.splitlines() if line.startswith("hyperparameters: "))
    assert code == 0 and "head_dim=64 (d_model / num_heads)" in line and "head_dim=0" not in line
