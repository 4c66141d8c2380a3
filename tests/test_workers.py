"""Child-process workers: every stage a worker reports reaches the caller, whatever the timing."""

import subprocess
import textwrap

import pytest

from dcsim.runtime import workers
from dcsim.runtime.workers import WorkerJob, run_workers

WORKER = textwrap.dedent(
    """
    import json, sys
    request, result, progress = sys.argv[1:4]
    with open(progress, "a") as out:
        for stage in json.load(open(request))["stages"]:
            out.write(stage + "\\n")
    json.dump({"ok": True}, open(result, "w"))
    """
)


@pytest.mark.slow  # real child interpreters, on real time limits
def test_stages_written_just_before_the_exit_are_still_reported(tmp_path, monkeypatch):
    (tmp_path / "quickworker.py").write_text(WORKER)
    folder = tmp_path / "job"
    folder.mkdir()
    job = WorkerJob(
        name="quick worker",
        module="quickworker",
        request={"stages": ["start", "save", "done"]},
        folder=folder,
        env={"PYTHONPATH": str(tmp_path)},
    )
    # The worst timing: the first progress read happens before the worker has written anything,
    # and the worker has exited by the time its exit is seen.
    monkeypatch.setattr(subprocess.Popen, "poll", lambda self: self.wait())
    seen = []
    assert run_workers([job], timeout_seconds=60, on_progress=lambda name, stage: seen.append((name, stage))) == [
        {"ok": True}
    ]
    assert seen == [("quick worker", "start"), ("quick worker", "save"), ("quick worker", "done")]


def test_a_stage_still_being_written_is_not_reported_yet(tmp_path):
    progress = tmp_path / "progress.txt"
    progress.write_text("start\nsav")
    assert workers._read_progress(progress) == ["start"]
    progress.write_text("start\nsaving\n")
    assert workers._read_progress(progress) == ["start", "saving"]
    assert workers._read_progress(tmp_path / "missing.txt") == []


SLOW_STARTER = textwrap.dedent(
    """
    import json, sys, time
    request, result, progress = sys.argv[1:4]
    asked = json.load(open(request))
    time.sleep(asked["start"])  # as an interpreter importing JAX on a busy machine
    with open(progress, "a") as out:
        out.write("up\\n")
        out.flush()
        time.sleep(asked["work"])
        out.write("done\\n")
    json.dump({"ok": True}, open(result, "w"))
    """
)


def slow_job(tmp_path, name, start, work):
    (tmp_path / "slowstarter.py").write_text(SLOW_STARTER)
    folder = tmp_path / name
    folder.mkdir()
    return WorkerJob(
        name=name,
        module="slowstarter",
        request={"start": start, "work": work},
        folder=folder,
        env={"PYTHONPATH": str(tmp_path)},
    )


@pytest.mark.slow  # real child interpreters, on real time limits
def test_the_time_limit_counts_from_when_every_worker_is_up(tmp_path):
    """Starting slowly is not hanging: a group whose start-up alone takes longer than the time
    limit still finishes, as long as its work fits the limit once every worker is up."""
    jobs = [slow_job(tmp_path, "first", 0.5, 0.1), slow_job(tmp_path, "second", 2.5, 0.1)]
    assert run_workers(jobs, timeout_seconds=1.5, start_seconds=30) == [{"ok": True}, {"ok": True}]


@pytest.mark.slow  # real child interpreters, on real time limits
def test_a_worker_that_never_comes_up_is_ended_at_the_start_allowance(tmp_path):
    jobs = [slow_job(tmp_path, "quick", 0, 0.1), slow_job(tmp_path, "stuck", 30, 0)]
    with pytest.raises(workers.WorkerTimeout, match=r"time limit of 1\.5 s passed before the stuck had started") as err:
        run_workers(jobs, timeout_seconds=30, start_seconds=1.5)
    assert err.value.starting and err.value.workers == ("stuck",)


@pytest.mark.slow  # real child interpreters, on real time limits
def test_work_past_the_limit_is_ended_once_every_worker_is_up(tmp_path):
    jobs = [slow_job(tmp_path, "hangs", 0, 30)]
    with pytest.raises(workers.WorkerTimeout, match=r"time limit of 1\.5 s passed before the hangs finished") as err:
        run_workers(jobs, timeout_seconds=1.5, start_seconds=30)
    assert not err.value.starting


# --- XLA's compilation cache for the checkpoint workers ------------------------------------------


@pytest.fixture
def cache_env(monkeypatch):
    """No cache setting of the caller's, so each test sets the one it is about."""
    for name in (workers.COMPILATION_CACHE_ENV, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("word", ["off", "OFF", " 0 ", "false", "no", "none"])
def test_the_compilation_cache_can_be_turned_off(cache_env, word):
    cache_env.setenv(workers.COMPILATION_CACHE_ENV, word)
    assert workers.compilation_cache_folder() is None
    assert workers.compilation_cache_env() == {}


def test_the_compilation_cache_goes_where_it_is_told_bounded_and_private(cache_env, tmp_path):
    folder = tmp_path / "nested" / "xla"
    cache_env.setenv(workers.COMPILATION_CACHE_ENV, str(folder))
    assert workers.compilation_cache_env() == {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(256 * 2**20),
    }
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700


def test_the_compilation_cache_defaults_to_the_users_cache_folder(cache_env, tmp_path):
    cache_env.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert workers.compilation_cache_env()["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "dcsim" / "xla")
    cache_env.delenv("XDG_CACHE_HOME")
    cache_env.setenv("HOME", str(tmp_path / "home"))
    assert workers.compilation_cache_folder() == tmp_path / "home" / ".cache" / "dcsim" / "xla"


def test_the_callers_own_jax_cache_is_left_alone(cache_env, tmp_path):
    cache_env.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "theirs"))
    cache_env.setenv(workers.COMPILATION_CACHE_ENV, str(tmp_path / "ours"))
    assert workers.compilation_cache_env() == {}
    assert not (tmp_path / "ours").exists()


def test_a_cache_folder_that_cannot_be_made_leaves_the_cache_off(cache_env, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    cache_env.setenv(workers.COMPILATION_CACHE_ENV, str(tmp_path / "a-file" / "xla"))
    assert workers.compilation_cache_env() == {}
