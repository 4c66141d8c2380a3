"""``python -m dcsim memory --sequence S``: the step's activations beside the state, in the JSON
keys of issue 29, the budget counting both, and every bad value refused naming its flag."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from conftest import examples, refused_in_one_line
from conftest import run_cli as run

_SIZES = ("num_layers=3", "d_model=64", "num_heads=4", "num_kv_heads=2", "ffn_dim=96", "vocab_size=128")
SMALL = ("--preset", "llama2-7b", *(arg for pair in _SIZES for arg in ("--set", pair)))
ACTIVATION_KEYS = {
    "bytes_per_device",
    "policy",
    "attention",
    "sequence",
    "micro_batch",
    "compute_dtype",
    "korthikanti_bytes_per_device",
    "loss_bytes_per_device",
    "blocks",
}


def memory_json(capsys, *argv):
    code, out, err = run(capsys, "memory", *SMALL, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_activations_keys_and_totals(capsys):
    plain = memory_json(capsys, "--mesh", "data=2")
    record = memory_json(capsys, "--mesh", "data=2", "--sequence", "32", "--remat", "full", "--attention", "naive")
    found = record["activations"]
    assert set(found) >= ACTIVATION_KEYS
    assert found["policy"] == "full" and found["attention"] == "naive" and found["sequence"] == 32
    assert found["micro_batch"] == 1 and found["compute_dtype"] == "bfloat16"
    blocks = found["blocks"]
    assert [row["path"] for row in blocks[:3]] == ["block_0", "block_1", "block_2"]
    # full remat: each block keeps its input only, (1, 32, 64) bfloat16
    assert [(row["residuals"], row["bytes"]) for row in blocks[:3]] == [(1, 32 * 64 * 2)] * 3
    assert found["bytes_per_device"] == sum(row["bytes"] for row in blocks) + found["loss_bytes_per_device"]
    assert found["korthikanti_bytes_per_device"] == 2 * 32 * 1 * 64 * 3
    per_device = record["per_device"]
    assert per_device["activations_bytes"] == found["bytes_per_device"]
    assert per_device["total_bytes"] == plain["per_device"]["total_bytes"] + found["bytes_per_device"]
    assert "activations" not in plain and "activations_bytes" not in plain["per_device"]


def test_micro_batch_is_per_replica_and_linear(capsys):
    one = memory_json(capsys, "--mesh", "data=2", "--sequence", "32")["activations"]["bytes_per_device"]
    wider = memory_json(capsys, "--mesh", "data=8", "--sequence", "32")["activations"]["bytes_per_device"]
    two = memory_json(capsys, "--mesh", "data=2", "--sequence", "32", "--micro-batch", "2")
    assert one == wider
    assert two["activations"]["bytes_per_device"] == 2 * one


def test_the_model_axis_splits_and_sequence_parallel_splits_more(capsys):
    alone = memory_json(capsys, "--mesh", "data=2", "--sequence", "32")["activations"]["bytes_per_device"]
    tp = memory_json(capsys, "--mesh", "data=1,model=2", "--strategy", "megatron", "--sequence", "32")
    sp = memory_json(
        capsys, "--mesh", "data=1,model=2", "--strategy", "megatron", "--sequence", "32", "--sequence-parallel"
    )
    assert sp["activations"]["bytes_per_device"] < tp["activations"]["bytes_per_device"] < alone


def test_the_budget_counts_state_and_activations(capsys):
    state_only = memory_json(capsys, "--mesh", "data=1", "--budget", "2MiB")["budget"]
    assert state_only["real"] is not None
    with_step = memory_json(
        capsys, "--mesh", "data=1", "--budget", "2MiB", "--sequence", "4096", "--attention", "naive"
    )
    # naive attention at 4,096 tokens keeps (1, 4, 4096, 4096) probabilities a block: no mesh fits
    assert with_step["budget"]["real"] is None
    first = with_step["budget"]["candidates"][0]
    assert first["activations_bytes_per_device"] == with_step["activations"]["bytes_per_device"]


def test_the_table_shows_both(capsys):
    code, out, err = run(capsys, "memory", *SMALL, "--mesh", "data=2", "--sequence", "32")
    assert code == 0, err
    assert "activations" in out and "(state + activations)" in out and "Korthikanti" in out and "SwiGLU" in out


@pytest.mark.parametrize(
    "argv, says",
    [
        pytest.param(("--sequence", "0"), "`--sequence` must be an integer from 1", id="sequence-0"),
        pytest.param(("--sequence", "ten"), "`--sequence` must be an integer from 1", id="sequence-text"),
        pytest.param(("--sequence", "8", "--micro-batch", "0"), "`--micro-batch` must be an integer from 1", id="mb-0"),
        pytest.param(("--micro-batch", "-1"), "`--micro-batch` must be an integer from 1", id="mb-negative-alone"),
        pytest.param(("--sequence", "8", "--remat", "most"), "`--remat` must be one of none, full", id="remat"),
        pytest.param(("--attention", "ring"), "`--attention` must be one of flash, naive", id="attention-alone"),
        pytest.param(("--sequence", "8", "--compute-dtype", "int8"), "`--compute-dtype` must be one of", id="dtype"),
        pytest.param(("--capacity-factor", "lots"), "`--capacity-factor` must be a number from 0.01", id="capacity"),
        pytest.param(("--sequence", "8", "--batch", "4"), "--batch is the batch a model is initialised on", id="batch"),
        pytest.param(
            ("--micro-batch", "2"), "--micro-batch: for a training step's activations; give --sequence", id="mb"
        ),
        pytest.param(
            ("--sequence", "8", "--capacity-factor", "1.25"), "--capacity-factor applies to Mixture", id="dense"
        ),
        pytest.param(("--sequence", "5000"), "at most the model's positions", id="past-positions"),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(capsys, argv, says):
    err = refused_in_one_line(capsys, "memory", *SMALL, "--mesh", "data=2", *argv)
    assert says in err, err


def test_a_sequence_the_model_axis_does_not_divide_is_refused(capsys):
    err = refused_in_one_line(
        capsys,
        "memory",
        *SMALL,
        "--mesh",
        "model=2",
        "--strategy",
        "megatron",
        "--sequence",
        "33",
        "--sequence-parallel",
    )
    assert "model axis (2), which must divide it; got a sequence of 33" in err


def test_a_family_without_a_training_forward_is_refused(capsys):
    err = refused_in_one_line(capsys, "memory", "--preset", "bert-base", "--mesh", "data=2", "--sequence", "8")
    assert "activations are traced for decoder-only language models" in err


STEP_VALUES = {
    "--sequence": ("16", "32", "4096", "0", "-1", "1e400", "nan", "2.5", "4" * 5000, "", "٣", "16 ", "1048577"),
    "--micro-batch": ("1", "2", "0", "-3", "65537", "1e400", "inf", "x"),
    "--remat": ("none", "full", "dots", "dots-no-batch", "minimal", "FULL", "\x00", "x" * 500),
    "--attention": ("flash", "naive", "ring", ""),
    "--compute-dtype": ("bfloat16", "float32", "int8", "\x1b[31m"),
    "--capacity-factor": ("none", "1.25", "0", "nan", "inf", "-1", "1e400", "<script>"),
    "--batch": ("1", "2"),
}


@given(
    hs.lists(
        hs.one_of(
            hs.tuples(hs.sampled_from(sorted(STEP_VALUES)), hs.text(max_size=12)),
            hs.sampled_from(sorted(STEP_VALUES)).flatmap(
                lambda flag: hs.tuples(hs.just(flag), hs.sampled_from(STEP_VALUES[flag]))
            ),
            hs.just(("--sequence-parallel", None)),
        ),
        max_size=4,
    )
)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_step_flags_give_an_answer_or_one_clear_line(capsys, pairs):
    argv = ["memory", *SMALL, "--mesh", "data=2,model=2", "--strategy", "megatron", "--format", "json"]
    for flag, value in pairs:
        argv += [flag] if value is None else [flag, value]
    code, out, err = run(capsys, *argv)
    if code == 0:
        assert out and "Traceback" not in err
    else:
        assert code == 2 and out == "", err
        assert err.startswith("dcsim: error: ") and err.count("\n") == 1, err


@pytest.mark.slow  # starts a child process that compiles the whole step
def test_verify_compiles_the_step_and_puts_xla_beside_dcsim(capsys):
    record = memory_json(capsys, "--mesh", "data=2", "--sequence", "64", "--master-dtype", "float32", "--verify")
    xla = record["xla"]
    assert xla["matches"]  # the state's check, as before
    peak = xla["step_peak_bytes_per_device"]
    parts = ("argument", "output", "temp", "alias")
    assert peak == sum(xla[f"step_{part}_bytes_per_device"] * (-1 if part == "alias" else 1) for part in parts)
    assert xla["ratio"] == pytest.approx(record["per_device"]["total_bytes"] / peak, abs=1e-4)
    assert 0.2 < xla["ratio"] < 2  # a CPU compile keeps transients that are not residuals
    assert "CPU" in xla["step_compile"]
    largest = xla["step_largest_buffers"]  # the buffers XLA makes, largest first, exact bytes
    assert 0 < len(largest) <= 5 and [b["bytes"] for b in largest] == sorted(
        (b["bytes"] for b in largest), reverse=True
    )
    assert all(isinstance(b["bytes"], int) and b["bytes"] <= xla["step_temp_bytes_per_device"] for b in largest)


def test_the_step_check_is_for_small_models(capsys):
    err = refused_in_one_line(
        capsys, "memory", "--preset", "llama2-7b", "--mesh", "data=2", "--sequence", "8", "--verify"
    )
    assert "models of at most 400,000,000 parameters; this one has 6,738,415,616" in err
