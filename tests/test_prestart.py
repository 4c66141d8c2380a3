"""The checkpoint child started before the parent imports JAX (``dcsim.checkpoint.prestart``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import faults
import pytest
from flax.traverse_util import flatten_dict

from conftest import ROOT, processes_mentioning
from dcsim.checkpoint import measurement, prestart, worker
from dcsim.checkpoint.measurement import CheckpointFailed, MeasurementOptions, measure_checkpoint
from dcsim.model import modules
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.runtime import workers

pytestmark = pytest.mark.slow  # starts checkpoint children and the CLI

SMALL = ModelConfig(input_dim=64, layers=(DenseLayer(features=32), DenseLayer(features=8)))


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """Point tempfile at an empty folder, so "nothing left behind" is checkable."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    prestart.discard()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ) | extra
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _checkpoint_cli(tmp_path, *argv: str, start: tuple[str, ...] = ("-m", "dcsim")) -> subprocess.CompletedProcess:
    """``python -m dcsim checkpoint --preset mlp-mnist ARGV`` with its temporary files in ``tmp_path``
    (``start``: what follows ``python`` instead of ``-m dcsim``)."""
    return subprocess.run(
        [sys.executable, *start, "checkpoint", "--preset", "mlp-mnist", *argv],
        capture_output=True,
        text=True,
        env=_env(TMPDIR=str(tmp_path)),
        cwd=tmp_path,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (["checkpoint"], True),
        (["checkpoint", "--preset", "resnet18", "--mesh", "data=4", "--strategy", "fsdp"], True),
        (["checkpoint", "--processes", "2"], False),
        (["checkpoint", "--processes=2"], False),
        (["checkpoint", "--processes-sweep", "1,2"], False),
        (["checkpoint", "--help"], False),
        (["count", "--preset", "resnet18"], False),
        ([], False),
    ],
)
def test_only_a_single_process_checkpoint_starts_a_child_early(argv, wanted):
    assert prestart.wanted(argv) is wanted


def test_the_waiting_child_gets_no_device_count_and_keeps_the_callers_flags():
    flags = workers.worker_xla_flags("--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=3", None)
    assert flags.split() == ["--xla_cpu_enable_fast_math=false", "--xla_backend_optimization_level=1"]


def test_a_prestarted_child_measures_on_the_requested_mesh_and_leaves_nothing(own_tmp):
    waiting = prestart.start()
    assert waiting is not None and waiting.folder.parent == own_tmp and waiting.alive()
    stages = []
    report = measure_checkpoint(
        SMALL,
        MeasurementOptions(mesh="data=4", strategy="fsdp"),
        prestarted=prestart.pending(),
        on_progress=stages.append,
    )
    # The device count came with the request: the child started before the mesh was known.
    assert report.num_devices == 4
    assert report.restore_verified is True
    assert dict(report.partition_specs)["Dense_0/kernel"] == "data"
    assert stages == list(measurement.STAGES)
    assert waiting.process.returncode is not None  # ended and reaped
    assert list(own_tmp.iterdir()) == []


def test_a_previewed_child_measures_the_request_not_the_preview(own_tmp):
    waiting = prestart.start()
    # A preview of another dtype: the child's early trace does not match and is traced again.
    waiting.preview(SMALL.to_dict(), "bfloat16")
    report = measure_checkpoint(SMALL, MeasurementOptions(mesh="data=2", strategy="fsdp"), prestarted=waiting)
    assert report.dtype == "float32" and report.raw_payload_bytes == 4 * report.total_params
    assert report.restore_verified is True
    assert list(own_tmp.iterdir()) == []


def _request_later(folder: Path, preview: str | None) -> threading.Thread:
    def write() -> None:
        if preview is not None:
            (folder / prestart.PREVIEW_FILE).write_text(preview)
        time.sleep(0.3)
        (folder / "request.json").write_text("{}")

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_the_waiting_child_traces_a_previewed_init_before_its_request(tmp_path, monkeypatch):
    # The request is written once the child has begun tracing the preview, not after a fixed
    # sleep: on a loaded machine the child may first look after 0.3 s, and a request already
    # there is rightly served without the early trace (the request traces it then).
    tracing, trace_init = threading.Event(), worker.trace_init

    def trace_and_tell(*args):
        tracing.set()
        return trace_init(*args)

    monkeypatch.setattr(worker, "trace_init", trace_and_tell)
    (tmp_path / prestart.PREVIEW_FILE).write_text(json.dumps({"config": SMALL.to_dict(), "dtype": "bfloat16"}))

    def request_once_tracing() -> None:
        tracing.wait(timeout=60)
        (tmp_path / "request.json").write_text("{}")

    thread = threading.Thread(target=request_once_tracing)
    thread.start()
    waited = worker.wait_for_request(tmp_path / "request.json", wait_seconds=60)
    thread.join()
    assert waited.requested and waited.traced is not None
    assert waited.traced.matches(SMALL, "bfloat16") and not waited.traced.matches(SMALL, "float32")
    shapes = {key: (leaf.shape, str(leaf.dtype)) for key, leaf in flatten_dict(waited.traced.params).items()}
    assert shapes == {
        ("Dense_0", "kernel"): ((64, 32), "bfloat16"),
        ("Dense_0", "bias"): ((32,), "bfloat16"),
        ("Dense_1", "kernel"): ((32, 8), "bfloat16"),
        ("Dense_1", "bias"): ((8,), "bfloat16"),
    }


@pytest.mark.parametrize("preview", [None, "{not json", json.dumps({"config": {"input_dim": -3}, "dtype": "float32"})])
def test_no_preview_or_a_bad_one_still_waits_for_the_request(tmp_path, preview):
    thread = _request_later(tmp_path, preview)
    waited = worker.wait_for_request(tmp_path / "request.json", wait_seconds=60)
    thread.join()
    assert waited == worker.Waited(True, None)


def test_the_replayed_trace_initialises_the_same_values_as_a_fresh_one():
    import jax

    mesh = jax.make_mesh((1,), ("data",))
    specs = {"Dense_0/kernel": [], "Dense_0/bias": [], "Dense_1/kernel": [], "Dense_1/bias": []}
    traced = worker.trace_init(SMALL, "float32")
    early = worker.init_params(SMALL, "float32", mesh, specs, traced).params
    again = worker.init_params(SMALL, "float32", mesh, specs).params
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), early, again))
    # Flax's own init, outside any trace: the values a user of the model gets for this seed.
    module, inputs = modules.build(SMALL)
    direct = module.init(jax.random.PRNGKey(SMALL.seed), *(jax.numpy.zeros(x.shape, x.dtype) for x in inputs))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), early, direct["params"]))


def test_a_prestarted_child_is_ended_when_the_plan_is_refused(own_tmp):
    waiting = prestart.start()
    with pytest.raises(ValueError, match="ceiling of 5 values"):
        measure_checkpoint(SMALL, MeasurementOptions(max_params=5), prestarted=waiting)
    assert waiting.process.returncode is not None
    assert list(own_tmp.iterdir()) == []


def test_a_prestarted_child_that_fails_is_ended_and_cleaned_up(own_tmp, monkeypatch):
    faults.inject(monkeypatch, "measuring:raise")  # the child inherits the environment it starts with
    waiting = prestart.start()
    with pytest.raises(CheckpointFailed, match="fault injected at measuring"):
        measure_checkpoint(SMALL, prestarted=waiting)
    assert waiting.process.returncode is not None
    assert list(own_tmp.iterdir()) == []


def test_a_dead_prestarted_child_is_replaced_by_a_fresh_one(own_tmp):
    waiting = prestart.start()
    os.killpg(waiting.process.pid, signal.SIGKILL)
    waiting.process.wait(timeout=30)
    assert prestart.pending() is None  # seen dead: discarded, its folder removed
    report = measure_checkpoint(SMALL, prestarted=waiting)
    assert report.restore_verified is True
    assert list(own_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-params", "5"], "over the checkpoint measurement's ceiling of 5 values"),
        (["--mesh", "data=x"], "mesh"),
    ],
    ids=["ceiling-refused", "bad-mesh"],
)
def test_the_cli_ends_its_prestarted_child_on_a_refusal(tmp_path, argv, message):
    done = _checkpoint_cli(tmp_path, *argv)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_the_cli_measures_through_its_prestarted_child_and_leaves_nothing(tmp_path):
    done = _checkpoint_cli(tmp_path, "--mesh", "data=2", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the whole report arrived before the fast exit
    assert report["restore_verified"] is True and report["num_devices"] == 2
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_the_fast_exit_flushes_a_buffered_report_to_its_last_line(tmp_path):
    """``checkpoint`` skips the interpreter's teardown (``dcsim.__main__``): stdout to a file is
    block-buffered, so a missing flush would lose the report's tail."""
    out = tmp_path.parent / f"{tmp_path.name}-report.txt"
    env = _env(TMPDIR=str(tmp_path))
    env.pop("PYTHONUNBUFFERED", None)  # buffered, as for a user: an unflushed tail would be lost
    with open(out, "w") as file:
        done = subprocess.run(
            [sys.executable, "-m", "dcsim", "checkpoint", "--preset", "mlp-mnist"],
            stdout=file,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith("checkpoint of 669,706 parameters")
    assert lines[-1].startswith("File layout:") and lines[-1].endswith("not one file per device shard.")
    assert list(tmp_path.iterdir()) == []


# ``python -m dcsim`` as it runs, with one line on stderr when ``dcsim.__main__`` starts the child.
_MARKED_MAIN = textwrap.dedent(
    """
    import runpy, sys
    from dcsim.checkpoint import prestart
    start = prestart.start
    def marked_start():
        print("MARK child started", file=sys.stderr, flush=True)
        return start()
    prestart.start = marked_start
    runpy.run_module("dcsim", run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_parent_starts_its_child_before_jax_and_never_imports_pandas(tmp_path, output):
    """Read from ``python -X importtime``, whose lines come in the order the imports finish: no
    JAX, Flax or pandas before the child is started, and no pandas at all (the single-process
    record and tables are built without it); the parent does import JAX later, for its plan."""
    done = _checkpoint_cli(tmp_path, "--format", output, start=("-X", "importtime", "-c", _MARKED_MAIN))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("checkpoint of 669,706" if output == "table" else "{")
    lines = done.stderr.splitlines()
    mark = lines.index("MARK child started")

    def packages(part: list[str]) -> set[str]:
        return {line.rpartition("|")[2].strip().split(".")[0] for line in part if line.startswith("import time:")}

    before, after = packages(lines[:mark]), packages(lines[mark + 1 :])
    assert "dcsim" in before and not before & {"jax", "jaxlib", "flax", "pandas", "numpy"}
    assert {"jax", "flax"} <= after and "pandas" not in after
    assert list(tmp_path.iterdir()) == []


def test_a_waiting_child_whose_parent_dies_exits_and_removes_its_folder(tmp_path):
    parent = textwrap.dedent(
        """
        import os
        from dcsim.checkpoint import prestart
        waiting = prestart.start()
        print(waiting.process.pid, waiting.folder, flush=True)
        os._exit(0)  # no discard, no atexit: as if killed
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", parent],
        capture_output=True,
        text=True,
        env=_env(TMPDIR=str(tmp_path)),
        timeout=120,
        check=True,
    )
    _pid, folder = done.stdout.split()
    assert Path(folder).parent == tmp_path
    deadline = time.monotonic() + 120  # a bound for a busy machine, not a speed requirement
    while (Path(folder).exists() or processes_mentioning(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(folder) == []
    assert not Path(folder).exists()
