"""Child-process workers: every stage a worker reports reaches the caller, whatever the timing."""

import subprocess
import textwrap

from dcsim import workers
from dcsim.workers import WorkerJob, run_workers

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
