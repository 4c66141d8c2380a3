"""``python -m dcsim compare FILE``: the same table as the Compare page, and one-line errors."""

import csv
import io
import json
from pathlib import Path

import pytest

from dcsim import compare
from dcsim.cli import main
from dcsim.memory import activations, budget
from dcsim.model.config import ModelConfig

TWO = compare.Comparison(
    scenarios=(
        compare.Scenario(name="seed", config=ModelConfig()),
        compare.Scenario(name="<b>wide</b>", config=ModelConfig(input_dim=8, num_shards=3), dtype="bfloat16"),
    ),
    budget=budget.Budget(amount=7, unit="values"),
)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_file(tmp_path):
    path = tmp_path / "two.json"
    path.write_text(TWO.to_json())
    return str(path)


def test_the_table_shows_both_scenarios_and_both_budget_answers(capsys, two_file):
    code, out, err = run(capsys, "compare", two_file)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[1].split()[:8] == ["1", "seed", "(baseline)", "Dense", "4", "→", "4", "2"]
    # Dense(4) on input 8: 32 + 4 = 36 values over 3 shards = 12; bfloat16 72 bytes; 16 more than the seed
    assert lines[2].split()[1:] == ["<b>wide</b>", "Dense", "8", "→", "4", "3", "bfloat16", "36", "12", "72", "16",
                                    "1.8", "(9/5)", "-8"]  # fmt: skip
    assert "  seed: needs 20 values in all\n    ideal share (an average): 3 shards\n" in out
    # the page's own sentence (dcsim.memory.budget.summary): past 4, no count divides a dimension of 4, so every
    # device holds all 20 again
    assert (
        "real layout (JAX's sharding rules, fsdp): Fits on 4 devices (data=4), 5 values each. None of the 4,092 "
        "larger counts up to 4,096 fits, e.g. 6, 8 and 12: fsdp keeps an array whole on every device when the "
        "count divides none of its dimensions, so 6 devices would hold 20 values each.\n"
    ) in out
    assert "every N from 1 to 4,096 was searched" in out
    assert "NOT the checkpoint size" in out


def test_json_carries_the_comparison_the_table_and_the_answers(capsys, two_file):
    code, out, _ = run(capsys, "compare", two_file, "--format", "json")
    record = json.loads(out)
    assert code == 0
    assert compare.Comparison.from_dict(record["comparison"]) == TWO
    assert [row["total_params"] for row in record["table"]] == [20, 36]
    assert record["table"][1]["ideal_share_text"] == "12"
    seed = record["budget_answers"][0]
    assert (seed["ideal_shards"], seed["devices"], seed["mesh"], seed["per_device"]) == (3, 4, "data=4", 5)
    assert seed["larger_device_counts_that_fit"] == [] and len(seed["larger_device_counts_that_fail"]) == 4092
    assert seed["summary"].startswith("Fits on 4 devices (data=4), 5 values each. None of the 4,092 larger")


def test_csv_is_the_table_with_exact_integers(capsys, two_file):
    code, out, _ = run(capsys, "compare", two_file, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [row["name"] for row in rows] == ["seed", "<b>wide</b>"]
    assert rows[1]["raw_float64_bytes"] == "288" and rows[1]["params_vs_baseline"] == "16"


def test_stdin_is_read_with_a_dash(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(TWO.to_json().encode())))
    code, out, _ = run(capsys, "compare", "-", "--format", "csv")
    assert code == 0 and out.count("\n") == 3


def test_an_empty_comparison_says_so(capsys, tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(compare.Comparison().to_json())
    assert run(capsys, "compare", str(path)) == (0, "the comparison holds no scenarios\n", "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "comparison file '{path}': the comparison is not valid JSON"),
        ('{"format": "dcsim.config"}', "`format` must be 'dcsim.comparison'"),
        ('{"format": "dcsim.comparison", "scenarios": [{"name": "a", "num_shards": 0}]}', "scenario 1: `num_shards`"),
        ("x" * 300_000, "at most 262,144 bytes, got 262,145"),
    ],
)
def test_bad_files_exit_2_with_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(capsys, "compare", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dcsim: error: ")
    assert message.format(path=path) in err


def test_a_missing_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "compare", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read the comparison file" in err and err.count("\n") == 1


# --- a scenario's training step (issue 29) ------------------------------------------------------------

STEPPED = compare.Comparison(
    scenarios=(
        compare.Scenario(name="state", config=ModelConfig(preset="gpt2-small"), dtype="bfloat16"),
        compare.Scenario(
            name="step",
            config=ModelConfig(preset="gpt2-small"),
            dtype="bfloat16",
            step=activations.Step(sequence=512, remat="full"),
        ),
    ),
    budget=budget.Budget(amount=2 * 10**9, training="adam"),
)


@pytest.fixture
def stepped_file(two_file):
    path = Path(two_file).with_name("stepped.json")
    path.write_text(STEPPED.to_json())
    return str(path)


def test_a_step_is_a_column_and_its_activations_count_in_the_budget_line(capsys, stepped_file):
    code, out, err = run(capsys, "compare", stepped_file)
    assert code == 0 and err == ""
    traced = activations.trace_activations(STEPPED.scenarios[1].config, STEPPED.scenarios[1].step, "bfloat16")
    lines = out.splitlines()
    assert lines[0].split()[-1] == "step" and lines[2].endswith(
        "sequence 512, micro-batch 1, remat full, flash attention"
    )
    assert lines[1].endswith(" -")
    state_line = next(line for line in lines if line.startswith("    real layout") and "only" in line)
    assert state_line.endswith(
        "Counts the training state only: a step's activations are not counted (give a sequence to add them)."
    )
    step_line = next(line for line in lines if line.startswith("    real layout") and "activations;" in line)
    assert step_line.endswith("not XLA's temporaries, communication buffers or fragmentation.")
    of_it = "    of it, the step's activations (sequence 512, micro-batch 1, remat full, flash attention): "
    assert f"{of_it}{traced.bytes_per_device:,} bytes" in out
    assert "    ideal share (an average, of the state alone): " in out


def test_json_gives_a_steps_activations_and_what_the_verdict_counts(capsys, stepped_file):
    code, out, _ = run(capsys, "compare", stepped_file, "--format", "json")
    assert code == 0
    record = json.loads(out)
    state, step = record["budget_answers"]
    assert "activations_bytes_per_device" not in state and "counts" not in state  # as it always was
    assert step["activations_bytes_per_device"] > 0 and step["counts"].startswith("Counts the state and the step's")
    assert step["per_device"] == state["per_device"] + step["activations_bytes_per_device"]
    assert record["comparison"]["scenarios"][1]["sequence"] == 512
    assert [row["sequence"] for row in record["table"]] == [None, 512]


def test_a_comparison_without_steps_prints_what_it_always_did(capsys, two_file):
    _, out, _ = run(capsys, "compare", two_file)
    assert "step" not in out.splitlines()[0] and "Counts the" not in out and "activations" not in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sequence": 0}, "scenario 1: `sequence` must be an integer from 1 to 1,048,576 (tokens a sequence), got 0"),
        ({"sequence": 64, "remat": "most"}, "scenario 1: `remat` must be one of none, full"),
        ({"preset": "t5-small", "sequence": 64}, "scenario 1: activations are traced for decoder-only language models"),
    ],
)
def test_a_bad_step_exits_2_with_one_line(capsys, tmp_path, change, message):
    path = tmp_path / "bad.json"
    scenario = {"name": "a", "preset": "gpt2-small", **change}
    path.write_text(json.dumps({"format": "dcsim.comparison", "scenarios": [scenario]}))
    code, out, err = run(capsys, "compare", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
