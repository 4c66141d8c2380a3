"""``python -m dcsim compare FILE``: the same table as the Compare page, and one-line errors."""

import csv
import io
import json

import pytest

from dcsim import compare
from dcsim.cli import main
from dcsim.memory import budget
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
