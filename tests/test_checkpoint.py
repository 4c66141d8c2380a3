"""The checkpoint measurement: real Orbax saves in a child process, its guards and its cleanup.

Each measurement starts a child process (seconds on two busy cores), so the runs are few and
each checks much; everything decided before the child starts (validation, the ceiling) is tested
without one. Sizes on disk and file counts move between Orbax versions and runs: they are compared
with the raw figures and with each other, never with hard-coded values.
"""

import errno
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import faults
import hypothesis.strategies as hs
import pytest
from hypothesis import given

from conftest import processes_mentioning
from dcsim.checkpoint import measurement, records, results, worker
from dcsim.checkpoint.measurement import (
    CheckpointBusy,
    CheckpointFailed,
    CheckpointNoSpace,
    CheckpointTimeout,
    MeasurementLock,
    MeasurementOptions,
    measure_checkpoint,
    plan_checkpoint,
)
from dcsim.cli import main
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.runtime import workers

pytestmark = pytest.mark.slow  # measures real checkpoints in child processes

DENSE_1024 = ModelConfig(input_dim=1024, layers=(DenseLayer(features=1024),))
DENSE_1024_VALUES = 1024 * 1024 + 1024  # kernel + bias: 1,049,600
DENSE_1024_FLOAT32_BYTES = 4_198_400


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """Point tempfile at an empty folder, so "nothing left behind" is checkable."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    "mesh, strategy, dtype, raw_payload, device_bytes",
    [
        (None, "replicated", "float32", DENSE_1024_FLOAT32_BYTES, DENSE_1024_FLOAT32_BYTES),
        ("data=4", "fsdp", "float32", DENSE_1024_FLOAT32_BYTES, DENSE_1024_FLOAT32_BYTES),
        ("data=2", "replicated", "bfloat16", DENSE_1024_FLOAT32_BYTES // 2, DENSE_1024_FLOAT32_BYTES),
    ],
    ids=["one-device-float32", "fsdp-4-devices", "replicated-2-devices-bfloat16"],
)
def test_dense_1024_is_saved_measured_restored_and_removed(own_tmp, mesh, strategy, dtype, raw_payload, device_bytes):
    stages = []
    report = measure_checkpoint(
        DENSE_1024, MeasurementOptions(mesh=mesh, strategy=strategy, dtype=dtype), on_progress=stages.append
    )

    assert report.total_params == DENSE_1024_VALUES
    assert report.raw_float32_bytes == DENSE_1024_FLOAT32_BYTES
    assert report.raw_payload_bytes == raw_payload
    assert report.device_bytes == device_bytes  # replicas: each of the 2 devices holds all of it
    assert report.num_devices == (1 if mesh is None else int(mesh.split("=")[1]))
    assert report.restore_verified is True
    # Measured, not assumed: the disk figure differs from the raw payload and is the files' sum.
    assert report.disk_bytes != report.raw_payload_bytes
    assert report.disk_bytes == sum(file.num_bytes for file in report.files) > 0
    assert report.num_files == len(report.files) > 1
    assert report.largest_file_bytes == max(file.num_bytes for file in report.files)
    groups = {group.kind: group for group in report.file_groups}
    assert sum(group.num_bytes for group in groups.values()) == report.disk_bytes
    assert sum(group.num_files for group in groups.values()) == report.num_files
    assert {"array data", "commit marker"} <= set(groups)
    # The arrays' chunks are the bulk: a few percent either side of the payload, nowhere near 2x.
    assert 0.5 * raw_payload < groups["array data"].num_bytes < 1.5 * raw_payload
    assert stages == list(measurement.STAGES)
    assert report.peak_rss_bytes >= report.baseline_rss_bytes > 0
    peaks = dict(report.peak_rss_before_stage)
    assert list(peaks) == list(measurement.STAGES)
    assert report.baseline_rss_bytes <= peaks["initialising"] <= peaks["saving"] <= report.peak_rss_bytes
    assert report.save_seconds > 0 and report.restore_seconds > 0
    specs = dict(report.partition_specs)
    assert specs["Dense_0/kernel"] == ("data" if strategy == "fsdp" else "")
    assert list(own_tmp.iterdir()) == []  # the temporary folder is gone

    # The builders the CLI and the page share read the same figures.
    record = records.checkpoint_record(report)
    assert json.loads(json.dumps(record)) == record
    sizes = dict(zip(*records.sizes_frame(report)[["figure", "num_bytes"]].T.values, strict=True))
    assert {key: sizes[key] for key in sizes} == {key: record[key] for key in sizes}
    assert records.files_frame(report)["num_bytes"].sum() == report.disk_bytes
    assert records.file_groups_frame(report)["num_files"].sum() == report.num_files
    explanation = " ".join(records.explain(report))
    assert f"raw payload of {raw_payload:,}" in explanation
    assert ("Replicas:" in explanation) == (device_bytes > raw_payload)
    assert ("Storage dtype:" in explanation) == (dtype != "float32")


def test_the_same_measurement_again_reads_its_init_program_from_xlas_cache(own_tmp, monkeypatch):
    cache = own_tmp.parent / f"{own_tmp.name}-xla"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv(workers.COMPILATION_CACHE_ENV, str(cache))
    # JAX keeps only programs that took a second to compile; this small one must be kept too.
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    first = measure_checkpoint(DENSE_1024, MeasurementOptions(mesh="data=2", strategy="fsdp"))
    again = measure_checkpoint(DENSE_1024, MeasurementOptions(mesh="data=2", strategy="fsdp"))
    other = measure_checkpoint(DENSE_1024, MeasurementOptions(mesh="data=2", strategy="fsdp", dtype="bfloat16"))
    assert (first.compilation_cache, again.compilation_cache, other.compilation_cache) == ("miss", "hit", "miss")
    assert first.restore_verified and again.restore_verified and other.restore_verified
    assert again.device_bytes == first.device_bytes and again.raw_payload_bytes == first.raw_payload_bytes
    assert records.checkpoint_record(again)["compilation_cache"] == "hit"
    assert any(path.name.startswith("jit_init-") for path in cache.iterdir())
    assert list(own_tmp.iterdir()) == []

    monkeypatch.setenv(workers.COMPILATION_CACHE_ENV, "off")
    assert measure_checkpoint(DENSE_1024, MeasurementOptions(mesh="data=2", strategy="fsdp")).compilation_cache == "off"


@pytest.mark.parametrize(
    "fault, error, message",
    [
        (
            "measuring:kill",
            CheckpointFailed,
            r"killed by SIGKILL .*before it wrote a result .*temporary checkpoint was removed",
        ),
        ("measuring:raise", CheckpointFailed, r"failed: RuntimeError: fault injected at measuring"),
    ],
    ids=["killed-after-save", "raises-after-save"],
)
def test_a_failure_after_the_save_still_cleans_up(own_tmp, monkeypatch, fault, error, message):
    faults.inject(monkeypatch, fault)
    with pytest.raises(error, match=message):
        measure_checkpoint(DENSE_1024)
    assert list(own_tmp.iterdir()) == []
    assert processes_mentioning(str(own_tmp)) == []


def test_a_timeout_ends_the_child_and_cleans_up(own_tmp):
    with pytest.raises(CheckpointTimeout, match=r"time limit of 0\.3 s passed .* it was ended"):
        measure_checkpoint(DENSE_1024, MeasurementOptions(timeout_seconds=0.3))
    assert list(own_tmp.iterdir()) == []
    assert processes_mentioning(str(own_tmp)) == []


def test_a_child_killed_from_outside_while_it_saves_leaves_nothing(own_tmp, tmp_path_factory, monkeypatch):
    """SIGKILL from another process (as the OOM killer would) while the save is being written: the
    child pauses once its save has begun, and is killed there."""
    paused = tmp_path_factory.mktemp("paused") / "pid"
    faults.inject(monkeypatch, "writing:pause", paused=paused)
    stages, outcome = [], {}

    def measure():
        try:
            measure_checkpoint(DENSE_1024, on_progress=stages.append)
        except Exception as err:  # handed to the test thread below
            outcome["error"] = err

    thread = threading.Thread(target=measure)
    thread.start()
    try:
        os.kill(faults.wait_until_paused(paused), signal.SIGKILL)
    finally:
        thread.join(timeout=120)
    assert stages[-1:] == ["saving"]
    assert isinstance(outcome.get("error"), CheckpointFailed)
    assert re.search(r"was killed by SIGKILL \(from outside .*temporary checkpoint was removed", str(outcome["error"]))
    assert list(own_tmp.iterdir()) == []
    assert processes_mentioning(str(own_tmp)) == []


def test_a_full_temporary_disk_is_named_and_leaves_nothing(own_tmp, monkeypatch):
    # No file of the child may pass 64 KiB (RLIMIT_FSIZE): its first array chunk fails with EFBIG.
    faults.inject(monkeypatch, "fsize:65536")
    with pytest.raises(
        CheckpointFailed,
        match=r"the temporary disk filled up while saving the checkpoint \([\d,]+ bytes free in the temporary "
        r"folder, at most 65,536 bytes a file\) \(the temporary checkpoint was removed\)",
    ):
        measure_checkpoint(DENSE_1024)
    assert list(own_tmp.iterdir()) == []
    assert processes_mentioning(str(own_tmp)) == []


def test_a_disk_without_room_is_refused_before_anything_is_written(own_tmp, monkeypatch):
    plan = plan_checkpoint(DENSE_1024)
    needed = measurement.disk_bytes_needed(plan)
    assert needed > DENSE_1024_FLOAT32_BYTES
    real_usage = shutil.disk_usage

    def usage(path):
        assert Path(path) == own_tmp  # the folder the measurement would write in
        return real_usage(path)._replace(free=needed - 1)

    monkeypatch.setattr(measurement.shutil, "disk_usage", usage)
    started = []
    monkeypatch.setattr(measurement, "run_workers", lambda *args, **kwargs: started.append(args))
    with pytest.raises(
        CheckpointNoSpace,
        match=rf"temporary folder {re.escape(str(own_tmp))} has {needed - 1:,} bytes free and this checkpoint "
        rf"needs about {needed:,} \(its raw float32 payload of 4,198,400 bytes .*nothing was written",
    ):
        measurement.run_checkpoint(plan)
    assert started == [] and list(own_tmp.iterdir()) == []


def test_no_temporary_folder_is_a_failure_not_a_traceback(own_tmp, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(measurement.tempfile, "mkdtemp", full)
    with pytest.raises(CheckpointFailed, match=r"no temporary folder could be made .*No space left on device"):
        measure_checkpoint(DENSE_1024)


# --- decided before any child starts --------------------------------------------------------------


BAD_REQUESTS = {
    "over-ceiling": (
        {"max_params": 1_000_000},
        ValueError,
        r"has 1,049,600 parameters, over .* ceiling of 1,000,000 values",
    ),
    "replicas-over-ceiling": (
        {"mesh": "data=4", "max_params": 2_000_000},
        ValueError,
        r"1,049,600 parameters, and on the mesh data=4 the replicated layout has the devices hold 4,198,400 values"
        r" together \(replicas included\), over .* ceiling of 2,000,000",
    ),
    "dtype": ({"dtype": "float16"}, ValueError, r"`dtype` must be one of float32, bfloat16, got 'float16'"),
    "too-many-devices": (
        {"mesh": "data=128"},
        ValueError,
        r"at most 64 virtual devices, got a mesh of 128 \(data=128\)",
    ),
    "bad-mesh": ({"mesh": "data"}, ValueError, r"AXIS=SIZE"),
    "strategy": ({"strategy": "zigzag"}, ValueError, r"strategy must be one of replicated, fsdp"),
    "tensor-without-model": ({"strategy": "tensor", "mesh": "data=2"}, ValueError, r"mesh axis named `model`"),
    "zero-timeout": (
        {"timeout_seconds": 0},
        ValueError,
        r"`timeout_seconds` must be a number of seconds greater than 0",
    ),
    "nan-timeout": ({"timeout_seconds": float("nan")}, ValueError, r"`timeout_seconds` must be .*, got nan"),
    "bool-timeout": ({"timeout_seconds": True}, TypeError, r"`timeout_seconds` must be"),
    "zero-ceiling": ({"max_params": 0}, ValueError, r"`max_params` must be a positive integer, got 0"),
}


@pytest.mark.parametrize("kwargs, error, message", list(BAD_REQUESTS.values()), ids=list(BAD_REQUESTS))
def test_bad_requests_are_refused_before_anything_runs(own_tmp, kwargs, error, message):
    with pytest.raises(error, match=message):
        measure_checkpoint(DENSE_1024, MeasurementOptions(**kwargs))
    assert list(own_tmp.iterdir()) == []  # refused before the temporary folder existed


def test_options_must_be_measurement_options():
    with pytest.raises(TypeError, match="`options` must be MeasurementOptions, got dict"):
        plan_checkpoint(DENSE_1024, {"mesh": "data=2"})  # type: ignore[arg-type]


def test_config_must_be_a_model_config():
    with pytest.raises(TypeError, match="`config` must be a ModelConfig, got dict"):
        plan_checkpoint(DENSE_1024.to_dict())


def set_or_remove_env(monkeypatch, name: str, value: str | None) -> None:
    """``name`` set to ``value`` in the environment, or absent when ``value`` is None."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    "env, ceiling",
    [(None, measurement.DEFAULT_MAX_PARAMS), ("1000", 1000), ("30_000_000", 30_000_000), ("3e7", 30_000_000)],
    ids=["unset", "plain", "underscores", "exponent"],
)
def test_the_ceiling_comes_from_the_environment(monkeypatch, env, ceiling):
    set_or_remove_env(monkeypatch, measurement.MAX_PARAMS_ENV, env)
    assert measurement.default_max_params() == ceiling
    assert plan_checkpoint(ModelConfig()).max_params == ceiling
    assert (
        plan_checkpoint(ModelConfig(), MeasurementOptions(max_params=25)).max_params == 25
    )  # an explicit ceiling wins


@pytest.mark.parametrize(
    "env, seconds",
    [(None, measurement.DEFAULT_TIMEOUT_SECONDS), ("", 120.0), ("2.5", 2.5)],
    ids=["unset", "empty", "set"],
)
def test_a_server_time_limit_comes_from_the_environment(monkeypatch, env, seconds):
    set_or_remove_env(monkeypatch, measurement.TIMEOUT_ENV, env)
    assert measurement.default_timeout_seconds() == seconds


@pytest.mark.parametrize("env", ["0", "soon", "1e9"])
def test_a_bad_environment_time_limit_is_named(monkeypatch, env):
    monkeypatch.setenv(measurement.TIMEOUT_ENV, env)
    with pytest.raises(
        ValueError, match=rf"`DCSIM_CHECKPOINT_TIMEOUT_SECONDS` must be a number of seconds .*got '{env}'"
    ):
        measurement.default_timeout_seconds()


def test_a_bad_environment_ceiling_is_named(monkeypatch):
    monkeypatch.setenv(measurement.MAX_PARAMS_ENV, "lots")
    with pytest.raises(ValueError, match=r"`DCSIM_CHECKPOINT_MAX_PARAMS` must be a positive integer, got 'lots'"):
        plan_checkpoint(ModelConfig())


@given(
    widths=hs.lists(hs.integers(1, 4096), min_size=1, max_size=3),
    devices=hs.sampled_from([1, 2, 4]),
    strategy=hs.sampled_from(["replicated", "fsdp"]),
    ceiling=hs.integers(1, 40_000_000),
)
def test_the_ceiling_refuses_exactly_the_layouts_that_hold_more(widths, devices, strategy, ceiling):
    config = ModelConfig(input_dim=64, layers=tuple(DenseLayer(features=width) for width in widths))
    total = 0
    for previous, width in zip([64, *widths], widths, strict=False):
        total += (previous + 1) * width
    unbounded = plan_checkpoint(
        config, MeasurementOptions(mesh=f"data={devices}", strategy=strategy, max_params=10**12)
    )
    held = unbounded.stored_values
    assert unbounded.report.total_params == total
    if strategy == "replicated":
        assert held == total * devices
    else:
        assert total <= held <= total * devices
    if held > ceiling:
        with pytest.raises(ValueError, match=rf"{total:,} parameters.* ceiling of {ceiling:,} values"):
            plan_checkpoint(config, MeasurementOptions(mesh=f"data={devices}", strategy=strategy, max_params=ceiling))
    else:
        plan = plan_checkpoint(
            config, MeasurementOptions(mesh=f"data={devices}", strategy=strategy, max_params=ceiling)
        )
        assert plan.stored_values == held <= ceiling


@pytest.mark.parametrize(
    "path, kind",
    [
        ("ocdbt.process_0/d/47bd6fa6ba70267e8eed49f6987e77b5", "array data"),
        ("ocdbt.process_12/d/abc", "array data"),
        ("ocdbt.process_0/manifest.ocdbt", "index"),
        ("manifest.ocdbt", "index"),
        ("d/e25cab6c22dc867fe043da27e3b4ceb9", "index"),
        ("commit_success.txt", "commit marker"),
        ("_METADATA", "metadata"),
        ("_sharding", "metadata"),
        ("array_metadatas/process_0", "metadata"),
    ],
    ids=lambda value: value.replace("/", "|") if isinstance(value, str) else None,
)
def test_file_kinds(path, kind):
    assert results.file_kind(path) == kind


# --- one measurement at a time --------------------------------------------------------------------


def test_a_second_measurement_is_told_the_server_is_busy():
    lock = MeasurementLock()
    with lock.hold():
        assert lock.busy
        busy = pytest.raises(CheckpointBusy, match=r"another checkpoint measurement is running .* try again")
        with busy, lock.hold(wait_seconds=0.05):
            pass
    assert not lock.busy
    with lock.hold():  # free again once the first is done
        pass


def test_a_waiting_measurement_gets_the_lock_once_it_is_released():
    lock = MeasurementLock()
    held, release = threading.Event(), threading.Event()

    def first():
        with lock.hold():
            held.set()
            release.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(5)
    threading.Timer(0.1, release.set).start()
    with lock.hold(wait_seconds=5):
        assert lock.busy
    thread.join(5)
    assert not lock.busy


# --- what front ends show -------------------------------------------------------------------------


def test_cli_json_has_the_documented_keys(own_tmp, capsys):
    code = main(["checkpoint", "--input-dim", "1024", "--features", "1024", "--dtype", "bfloat16", "--format", "json"])
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert code == 0 and err == ""
    assert record["raw_payload_bytes"] == DENSE_1024_FLOAT32_BYTES // 2
    assert record["raw_float32_bytes"] == DENSE_1024_FLOAT32_BYTES
    assert record["disk_bytes"] == sum(row["num_bytes"] for row in record["files"])
    assert record["num_files"] == len(record["files"])
    assert record["largest_file_bytes"] == max(row["num_bytes"] for row in record["files"])
    assert record["restore_verified"] is True and record["num_devices"] == 1
    assert record["save_seconds"] > 0 and record["restore_seconds"] > 0
    assert record["config"]["layers"] == [{"features": 1024, "use_bias": True}]
    assert any("bfloat16" in line for line in record["explanation"])
    assert list(own_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--max-params", "10"],
            "this model has 20 parameters, over the checkpoint measurement's ceiling of 10 values (it would "
            "initialise 80 bytes for real); raise the ceiling with --max-params or DCSIM_CHECKPOINT_MAX_PARAMS",
        ),
        (["--max-params", "1e400"], "`--max-params` must be a positive integer, got '1e400'"),
        (["--timeout", "-1"], "`--timeout` must be a number of seconds greater than 0 and at most 3600, got '-1'"),
        (["--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
        (["--mesh", "data=2", "--strategy", "tensor"], "mesh axis named `model`"),
    ],
    ids=["ceiling", "huge-ceiling", "negative-timeout", "dtype", "tensor-without-model"],
)
def test_cli_refusals_are_one_line_exit_2(capsys, argv, message):
    code = main(["checkpoint", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("dcsim: error: ") and message in err and err.count("\n") == 1


def test_cli_failure_is_one_line_exit_1(own_tmp, capsys):
    code = main(["checkpoint", "--timeout", "0.2"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("dcsim: checkpoint failed: the time limit of 0.2 s passed") and err.count("\n") == 1
    assert list(own_tmp.iterdir()) == []


def test_cli_environment_ceiling_refuses(capsys, monkeypatch):
    monkeypatch.setenv(measurement.MAX_PARAMS_ENV, "19")
    assert main(["checkpoint"]) == 2
    assert "over the checkpoint measurement's ceiling of 19 values" in capsys.readouterr().err


def test_worker_environment_keeps_other_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=3")
    env = workers.cpu_worker_env(8, compilation_cache=False)
    assert env["XLA_FLAGS"].split() == [
        "--xla_cpu_enable_fast_math=false",
        f"--xla_backend_optimization_level={workers.WORKER_OPT_LEVEL}",
        "--xla_force_host_platform_device_count=8",
    ]
    assert env["JAX_PLATFORMS"] == "cpu"
    assert os.environ["XLA_FLAGS"].endswith("=3")  # the caller's own environment is untouched


def test_worker_environment_lowers_the_optimisation_level_only_if_the_caller_did_not(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert workers.cpu_worker_env(2, compilation_cache=False)["XLA_FLAGS"].split() == [
        "--xla_backend_optimization_level=1",
        "--xla_force_host_platform_device_count=2",
    ]
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")
    assert workers.cpu_worker_env(2, compilation_cache=False)["XLA_FLAGS"].split() == [
        "--xla_backend_optimization_level=3",
        "--xla_force_host_platform_device_count=2",
    ]


def test_the_fault_injector_listens_to_the_workers_own_stage_event():
    """``tests/faults.py`` holds the event's name without importing the worker (it runs at start-up)."""
    assert faults._EVENT == worker.STAGE_EVENT


@pytest.mark.parametrize(
    "argv", [[], ["solo", "a", "b", "c"], ["single", "a", "b"], ["group", "--wait", "a", "b", "c"]], ids=repr
)
def test_the_child_entry_point_refuses_a_wrong_command_line_with_its_usage(argv):
    from dcsim.checkpoint import child

    with pytest.raises(SystemExit, match=r"usage: python -m dcsim.checkpoint.child \{single,group\}"):
        child.main(argv)
