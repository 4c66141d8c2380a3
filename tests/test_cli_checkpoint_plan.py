"""``python -m dcsim checkpoint-plan``: the verdict first, the JSON keys, exact bytes by hand, and
one-line refusals of bad input.

The model is the Dense stack 8 -> 16 -> 4 (212 values): bfloat16 params 424 bytes, Adam's float32
moments 2 x 424 x 2 and its int32 step count, no master copy unless asked."""

import json

import pytest

from conftest import refused_in_one_line
from conftest import run_cli as run

MLP = ("--input-dim", "8", "--features", "16,4")
KEYS = [
    "total_bytes", "parts", "hosts", "writing_hosts", "max_host_bytes", "policy", "save_seconds",
    "blocking_seconds", "host_staging_bytes", "mtbi_seconds", "young_interval_seconds",
    "daly_interval_seconds", "goodput_at_optimum", "restore", "loss",
]  # fmt: skip


def plan_json(capsys, *argv):
    code, out, err = run(capsys, "checkpoint-plan", *MLP, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_json_has_exactly_the_issue_s_keys_and_exact_bytes(capsys):
    record = plan_json(capsys, "--mesh", "data=16", "--master-dtype", "float32")
    assert list(record) == KEYS
    assert record["parts"] == {"params": 424, "master": 848, "optimizer": 2 * 848 + 4}
    assert record["total_bytes"] == 424 + 848 + 2 * 848 + 4
    assert [host["host"] for host in record["hosts"]] == [0, 1]
    assert sum(host["bytes_written"] for host in record["hosts"]) == record["total_bytes"]
    assert record["policy"] == "replica-parallel"  # no --device: Orbax's default off CUDA
    assert record["mtbi_seconds"] == 50_000 * 3600 / 16
    # fsdp over 16 devices on 2 hosts of 8, by hand: Dense_0's kernel (its 16 columns), Dense_0's bias
    # (16) and Dense_1's kernel (16 rows) split over data, so half of each dies with a host, in each of
    # the four parts; Dense_1's bias (4 values) is copied on every device and survives. Host 0 alone
    # holds half of 208 values in bfloat16 and in three float32 copies: 208 + 3 x 416 = 1,456 bytes.
    local = record["loss"]["local"]
    split = ("Dense_0/kernel", "Dense_0/bias", "Dense_1/kernel")
    paths = [f"{part}/{path}" for part in ("params", "master", "optimizer/0/mu", "optimizer/0/nu") for path in split]
    assert local["arrays_lost"] == [{"hosts": [0, 1], "paths": paths}]
    assert local["hosts"] == [{"host": host, "bytes_lost": 1_456, "arrays_lost": 12} for host in (0, 1)]
    assert record["loss"]["persistent"]["arrays_lost"] == []


def test_the_text_names_the_arrays_the_worst_host_takes_with_it(capsys):
    code, out, err = run(capsys, "checkpoint-plan", *MLP, "--mesh", "data=16", "--master-dtype", "float32")
    assert code == 0, err
    assert (
        "\n    host 0 takes with it: params/Dense_0/kernel, params/Dense_0/bias, params/Dense_1/kernel and 9 more "
        "(--format json lists each)\n"
    ) in out


def test_ddp_on_gpus_writes_from_host_0_and_says_so_first(capsys):
    code, out, err = run(capsys, "checkpoint-plan", *MLP, "--mesh", "data=64", "--zero", "0", "--device", "h100-sxm")
    assert code == 0, err
    first = out.splitlines()[0]
    assert "1 of 8 hosts write under single-replica (7 write nothing), the busiest 8x an even split" in first
    assert "not counted:" in first and "Estimates for times" in first
    assert "7 write nothing (hosts 1-7)" in out
    assert "Orbax's default when JAX_PLATFORMS names cuda (h100-sxm)" in out


def test_a_restore_onto_another_mesh_and_the_dcp_policy(capsys):
    record = plan_json(
        capsys, "--mesh", "data=4", "--policy", "dcp", "--restore-mesh", "data=2", "--devices-per-host", "2"
    )
    assert record["policy"] == "dcp"
    restore = record["restore"]
    assert [host["bytes_held"] for host in restore["hosts"]] == [record["total_bytes"]]
    assert restore["read_amplification"] == 1


def test_a_restore_into_another_dtype_casts_only_when_asked(capsys):
    """bfloat16 params and no master copy, so Adam's moments are bfloat16 too: restoring into float32
    params casts both (the step count stays int32); what is read is the checkpoint as stored, the
    same bytes as a restore without the cast."""
    plain = plan_json(capsys, "--mesh", "data=16")
    cast = plan_json(capsys, "--mesh", "data=16", "--restore-dtype", "float32")
    assert plain["restore"]["casts"] == []
    assert cast["restore"]["casts"] == [
        {"part": "params", "from": "bfloat16", "to": "float32"},
        {"part": "optimizer", "from": "bfloat16", "to": "float32"},
    ]
    assert cast["restore"]["hosts"] == plain["restore"]["hosts"]
    # By hand, in the stored bfloat16: each of the 2 hosts holds half of what is split and a whole copy
    # of what is copied everywhere (Dense_1's bias, 4 x 2 bytes, in the params and both moments, and
    # the 4-byte step count), so together the checkpoint's 1,276 bytes and one more copy of 28.
    assert sum(host["bytes_held"] for host in cast["restore"]["hosts"]) == plain["total_bytes"] + 3 * 8 + 4 == 1_304
    assert plan_json(capsys, "--mesh", "data=16", "--restore-dtype", "bfloat16")["restore"]["casts"] == []  # as saved
    code, out, err = run(capsys, "checkpoint-plan", *MLP, "--mesh", "data=16", "--restore-dtype", "float32")
    assert code == 0, err
    assert (
        "  cast on restore, as asked with --restore-dtype: params bfloat16 -> float32, optimizer bfloat16 -> float32; "
        "the bytes read and held are the checkpoint's, as stored (Orbax itself casts to a target's dtype without "
        "asking)\n"
    ) in out


def test_async_needs_a_device_with_a_host_link(capsys):
    err = refused_in_one_line(capsys, "checkpoint-plan", *MLP, "--mesh", "data=8", "--async")
    assert "--async needs --device with a host link figure" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--mesh", "data=8", "--devices-per-host", "3"), "--devices-per-host must divide the mesh's 8 devices"),
        (("--mesh", "data=8", "--write-bandwidth", "0GB/s"), "`--write-bandwidth` must be above 0 bytes a second"),
        (("--mesh", "data=8", "--storage-bandwidth=-5GB/s"), "`--storage-bandwidth` must be a bandwidth"),
        (("--mesh", "data=8", "--mttf-hours", "0"), "`--mttf-hours` must be a number of hours above 0, got '0'"),
        (("--mesh", "data=8", "--mttf-hours=-3"), "`--mttf-hours` must be a number of hours above 0"),
        (("--mesh", "data=8", "--mttf-hours", "nan"), "`--mttf-hours` must be a number of hours above 0"),
        (("--mesh", "data=8", "--restart-seconds=-1"), "`--restart-seconds` must be a number of seconds 0 or more"),
        (("--mesh", "data=8", "--policy", "fast"), "`--policy` must be one of single-replica, replica-parallel, dcp"),
        (("--mesh", "data=8", "--storage", "tape"), "`--storage` must be one of local-nvme, parallel-fs"),
        (("--mesh", "data=8", "--keep", "0"), "`--keep` must be an integer from 1 to 10,000, got '0'"),
        (("--mesh", "data=4", "--restore-mesh", "data=3"), "--restore-mesh: the restore cannot lay the checkpoint out"),
        (("--mesh", "data=8", "--restore-strategy", "tensor"), "--restore-strategy needs --restore-mesh"),
        (("--mesh", "data=8", "--device", "abacus"), "unknown device 'abacus'"),
        (("--mesh", "data=8", "--restore-dtype", "fp7"), "`--restore-dtype`: the restore dtype must be one of float32"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value),
)
def test_bad_input_is_refused_in_one_line(capsys, flags, message):
    err = refused_in_one_line(capsys, "checkpoint-plan", *MLP, "--devices-per-host", "2", *flags)
    assert message in err


HOSTILE = ("", " ", "0", "-1", "1e400", "nan", "inf", "9" * 70, "<script>x</script>", "💥", "data=0", "8,", "none ")


def test_hostile_link_values_are_named_and_replaced_by_the_default():
    """Every key of the plan's request with hostile values: decode never raises, names each refused
    key, keeps the default, and what it keeps reads back as itself."""
    from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN

    for field in CHECKPOINT_PLAN.fields:
        for text in HOSTILE:
            values, problems = CHECKPOINT_PLAN.decode({field.link: text})
            assert all(problem.startswith(f"`{field.link}`") for problem in problems), (field.link, text, problems)
            if problems:
                assert values[field.link] == field.default
            assert CHECKPOINT_PLAN.decode(CHECKPOINT_PLAN.encode(values)) == (values, [])
