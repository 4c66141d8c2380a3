"""Checkpoints across processes: P children on JAX's distributed runtime over loopback, their guards
and their cleanup.

A group run starts P processes that each import JAX (seconds on two busy cores), so the runs are
few and each checks much; everything decided before a child starts is tested without one. Sizes on
disk move between runs and Orbax versions: they are compared with the raw payload and with each
other, never with hard-coded values. "No process left" is checked on the pids seen while the group
ran (``/proc``), never by name.
"""

import json
import os
import signal
import socket
import time
from pathlib import Path

import faults
import pytest

from conftest import command_lines
from dcsim.checkpoint import multiprocess, records, results
from dcsim.checkpoint.measurement import CheckpointFailed, CheckpointTimeout, MeasurementOptions
from dcsim.checkpoint.multiprocess import measure_multiprocess, plan_multiprocess, plan_sweep
from dcsim.checkpoint.multiprocess_worker import HEARTBEAT_TIMEOUT_SECONDS
from dcsim.cli import main
from dcsim.model.config import DenseLayer, ModelConfig

pytestmark = pytest.mark.slow  # starts groups of JAX processes

DENSE_1024 = ModelConfig(input_dim=1024, layers=(DenseLayer(features=1024),))
DENSE_1024_FLOAT32_BYTES = 4_198_400  # (1024 x 1024 + 1024) x 4
LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


def group_pids(folder: Path) -> dict[int, int]:
    """Live processes of a group, by process id: each worker's argv names its own folder."""
    found = {}
    for pid, argv in command_lines():
        for arg in argv:
            text = arg.decode(errors="replace")
            if text.startswith(str(folder)) and text.endswith("request.json"):
                found[int(Path(text).parent.name.removeprefix("process_"))] = pid
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped: it runs nothing.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def listening_addresses(pids) -> set[str]:
    """The local addresses (``HEXIP:HEXPORT``) the given processes listen on, from /proc."""
    inodes = set()
    for pid in pids:
        with_fds = Path(f"/proc/{pid}/fd")
        try:
            links = [os.readlink(fd) for fd in with_fds.iterdir()]
        except OSError:
            continue
        inodes |= {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1])
    return found


def is_loopback(address: str) -> bool:
    host = address.split(":")[0]
    # IPv4, or IPv6 ::1 / ::ffff:127.0.0.1 in /proc's 32-hex-digit form.
    return host in (LOOPBACK_HEX, "00000000000000000000000001000000") or host.endswith("FFFF0000" + LOOPBACK_HEX)


class Watch:
    """Records every (process, stage), the group's pids and, once connected, what they listen on."""

    def __init__(self, folder: Path, paused: Path | None = None):
        """``paused``: the file a ``pause`` fault writes its pid to; that process is killed from here."""
        self.folder, self.paused = folder, paused
        self.stages: list[tuple[int, str]] = []
        self.seen_at: dict[tuple[int, str], float] = {}  # monotonic time each (process, stage) was first reported
        self.pids: dict[int, int] = {}
        self.listening: set[str] = set()

    def __call__(self, process_id: int, stage: str) -> None:
        self.stages.append((process_id, stage))
        self.seen_at.setdefault((process_id, stage), time.monotonic())
        self.pids |= group_pids(self.folder)
        if (process_id, stage) == (0, "initialising"):  # coordinator and gloo are up by now
            self.listening |= listening_addresses(self.pids.values())
        if self.paused is not None and stage == "saving":
            pid, self.paused = faults.wait_until_paused(self.paused), None  # once
            assert pid in self.pids.values()
            os.kill(pid, signal.SIGKILL)


def test_two_processes_of_two_devices_save_restore_and_leave_nothing(own_tmp):
    watch = Watch(own_tmp)
    report = measure_multiprocess(
        DENSE_1024, MeasurementOptions(mesh="data=4", strategy="fsdp"), processes=2, on_progress=watch
    )
    totals = report.checkpoint

    assert report.num_processes == 2 and report.devices_per_process == 2
    assert totals.num_devices == 4
    assert totals.raw_payload_bytes == DENSE_1024_FLOAT32_BYTES
    assert [p.process_id for p in report.processes] == [0, 1]
    assert all(p.restore_verified for p in report.processes) and totals.restore_verified
    assert [p.num_devices for p in report.processes] == [2, 2]
    # fsdp over 4 devices: each process holds half the payload, no replica.
    assert [p.device_bytes for p in report.processes] == [DENSE_1024_FLOAT32_BYTES // 2] * 2
    # One ocdbt.process_* folder per process, each written by its own process.
    places = {file.path.split("/")[0] for file in totals.files if file.path.startswith("ocdbt.")}
    assert places == {"ocdbt.process_0", "ocdbt.process_1"}
    for process in report.processes:
        assert process.num_files >= 1 and process.num_bytes > 0
    assert sum(p.num_bytes for p in report.processes) == totals.disk_bytes
    assert sum(p.num_files for p in report.processes) == totals.num_files
    # Each wrote its half of the data: a few percent either side of half the payload.
    for process in report.processes:
        assert 0.3 * DENSE_1024_FLOAT32_BYTES < process.num_bytes < 0.7 * DENSE_1024_FLOAT32_BYTES
    assert totals.disk_bytes != totals.raw_payload_bytes  # measured, not assumed
    assert totals.save_seconds > 0 and totals.restore_seconds > 0
    # The group's wall time spans every process's own save.
    assert all(p.save_seconds <= totals.save_seconds + 1e-6 for p in report.processes)
    assert all(p.peak_rss_bytes >= p.baseline_rss_bytes > 0 for p in report.processes)
    assert report.total_peak_rss_bytes == sum(p.peak_rss_bytes for p in report.processes)
    for process_id in (0, 1):
        assert [stage for pid, stage in watch.stages if pid == process_id] == list(multiprocess.STAGES)

    # The coordinator and gloo listened, and only on loopback.
    assert watch.listening, "no listening socket seen: the check would pass vacuously"
    assert all(is_loopback(address) for address in watch.listening), watch.listening
    # Nothing left: no process of the group runs, no file stays.
    assert set(watch.pids) == {0, 1}
    assert not [pid for pid in watch.pids.values() if alive(pid)]
    assert list(own_tmp.iterdir()) == []

    # The builders the CLI and the page share read the same figures.
    record = records.multiprocess_record(report)
    assert json.loads(json.dumps(record)) == record
    assert record["raw_payload_bytes"] == DENSE_1024_FLOAT32_BYTES and record["num_processes"] == 2
    places_frame = records.file_places_frame(report)
    assert places_frame["num_bytes"].sum() == totals.disk_bytes
    assert set(places_frame["place"]) >= {"ocdbt.process_0/", "ocdbt.process_1/", "top level"}
    frame = records.processes_frame(report)
    assert frame["num_bytes"].sum() == totals.disk_bytes and list(frame["process"]) == [0, 1]
    explanation = " ".join(records.explain_processes(report))
    assert "2 ocdbt.process_* folders for 2 processes" in explanation
    assert f"raw payload of {DENSE_1024_FLOAT32_BYTES:,}" in explanation


@pytest.mark.parametrize(
    "how",
    ["fault-hook", "sigkill-from-outside"],
    ids=["killed-inside-save", "killed-from-outside-while-saving"],
)
def test_a_process_killed_mid_save_ends_the_group_cleanly(own_tmp, tmp_path_factory, monkeypatch, how):
    if how == "fault-hook":
        # Process 1 kills itself after its save has started, before Orbax committed it.
        faults.inject(monkeypatch, "writing:kill", process=1)
        watch = Watch(own_tmp)
    else:
        # Process 1 pauses there instead and is killed from outside.
        paused = tmp_path_factory.mktemp("paused") / "pid"
        faults.inject(monkeypatch, "writing:pause", process=1, paused=paused)
        watch = Watch(own_tmp, paused=paused)
    with pytest.raises(CheckpointFailed) as failure:
        measure_multiprocess(
            DENSE_1024, MeasurementOptions(mesh="data=4", strategy="fsdp"), processes=2, on_progress=watch
        )
    ended = time.monotonic()
    message = str(failure.value)
    assert message.startswith("the process 1 of 2 was killed by SIGKILL")
    assert "(while saving)" in message or how != "fault-hook"
    assert "every process of the group was ended and the temporary checkpoint was removed" in message
    # Process 0 was waiting on its dead peer at Orbax's barrier; JAX would have let it wait for
    # the heartbeat timeout. The group was ended at once instead: well inside that timeout,
    # counted from when process 1 reported its save (it died there).
    assert ended - watch.seen_at[(1, "saving")] < HEARTBEAT_TIMEOUT_SECONDS
    assert set(watch.pids) == {0, 1}
    assert not [pid for pid in watch.pids.values() if alive(pid)]
    assert list(own_tmp.iterdir()) == []


def test_a_hanging_process_is_ended_at_the_group_time_limit(own_tmp, monkeypatch):
    faults.inject(monkeypatch, "initialising:hang", process=1)
    watch = Watch(own_tmp)
    with pytest.raises(CheckpointTimeout) as timeout:
        measure_multiprocess(
            DENSE_1024, MeasurementOptions(mesh="data=2", timeout_seconds=20), processes=2, on_progress=watch
        )
    message = str(timeout.value)
    assert message.startswith("the time limit of 20 s for the group passed (")
    assert "process 1 of 2 was initialising" in message  # where it hung
    assert "every process of the group was ended" in message
    assert not [pid for pid in watch.pids.values() if alive(pid)]
    assert list(own_tmp.iterdir()) == []


def test_a_coordinator_port_taken_after_the_probe_is_retried_on_a_fresh_one(own_tmp, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]
    real = multiprocess.free_loopback_port

    def probe():
        port = ports.pop(0) if ports else real()
        probe.given.append(port)
        return port

    probe.given = []
    monkeypatch.setattr(multiprocess, "free_loopback_port", probe)
    try:
        report = measure_multiprocess(ModelConfig(), processes=1)
        assert report.checkpoint.restore_verified and report.num_processes == 1
        assert len(probe.given) == 2 and probe.given[0] == taken.getsockname()[1] != probe.given[1]

        # Out of attempts: one clear failure naming the port.
        ports.append(taken.getsockname()[1])
        monkeypatch.setattr(multiprocess, "PORT_ATTEMPTS", 1)
        with pytest.raises(CheckpointFailed, match=r"process 0 could not start the coordinator: each of 1 free ports"):
            measure_multiprocess(ModelConfig(), processes=1)
    finally:
        taken.close()
    assert list(own_tmp.iterdir()) == []


# --- decided before any process starts ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"processes": 2, "mesh": "data=3"},
            ValueError,
            r"device count must be a multiple of the number of processes, .*: mesh data=3 has 3 devices, "
            r"not a multiple of 2 processes",
        ),
        ({"processes": 4, "mesh": "data=2"}, ValueError, r"mesh data=2 has 2 devices, not a multiple of 4"),
        ({"processes": 0}, ValueError, r"`processes` must be an integer from 1 to 8, got 0"),
        ({"processes": 9, "mesh": "data=9"}, ValueError, r"`processes` must be an integer from 1 to 8, got 9"),
        ({"processes": 2.5}, ValueError, r"`processes` must be an integer from 1 to 8, got 2.5"),
        ({"processes": True}, ValueError, r"`processes` must be an integer from 1 to 8, got True"),
        (
            {"processes": 2, "mesh": "data=4", "max_params": 2_000_000},
            ValueError,
            r"on the mesh data=4 the replicated layout has the devices hold 4,198,400 values together "
            r"\(replicas included\), over the checkpoint measurement's ceiling of 2,000,000",
        ),
        ({"processes": 2, "mesh": "data=2", "dtype": "int8"}, ValueError, r"`dtype` must be one of"),
    ],
    ids=["3-devices-2-processes", "2-devices-4-processes", "zero", "nine", "fraction", "bool", "ceiling", "dtype"],
)
def test_bad_group_requests_are_refused_before_anything_runs(own_tmp, kwargs, error, message):
    options = MeasurementOptions(**{key: value for key, value in kwargs.items() if key != "processes"})
    with pytest.raises(error, match=message):
        measure_multiprocess(DENSE_1024, options, processes=kwargs["processes"])
    assert list(own_tmp.iterdir()) == []


def test_the_ceiling_is_the_whole_groups():
    # 1,049,600 values replicated on 4 devices: 4,198,400 held, however many processes share them.
    for processes in (1, 2, 4):
        plan = plan_multiprocess(
            DENSE_1024, MeasurementOptions(mesh="data=4", max_params=4_198_400), processes=processes
        )
        assert plan.checkpoint.stored_values == 4_198_400
        assert plan.devices_per_process == 4 // processes


def test_a_sweep_is_planned_whole_before_any_process_starts(own_tmp):
    with pytest.raises(ValueError, match=r"mesh data=2 has 2 devices, not a multiple of 4 processes"):
        plan_sweep(DENSE_1024, MeasurementOptions(mesh="data=2"), processes=(1, 2, 4))
    plans = plan_sweep(DENSE_1024, MeasurementOptions(mesh="data=4", strategy="fsdp"))
    assert [plan.num_processes for plan in plans] == [1, 2, 4]
    assert list(own_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "text, parsed",
    [("1,2,4", (1, 2, 4)), ("4, 1 ,2", (1, 2, 4)), ("2,2", (2,)), ("8", (8,))],
    ids=["plain", "spaces-unsorted", "repeated", "one"],
)
def test_process_lists(text, parsed):
    assert multiprocess.parse_processes_list(text) == parsed


@pytest.mark.parametrize(
    "text, message",
    [
        ("1,,2", r"process counts separated by commas, e\.g\. 1,2,4, got '1,,2'"),
        ("1,16", r"`processes_sweep` must be an integer from 1 to 8, got '16'"),
        ("one", r"must be an integer from 1 to 8, got 'one'"),
    ],
    ids=["empty-item", "too-many", "word"],
)
def test_bad_process_lists_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        multiprocess.parse_processes_list(text)


@pytest.mark.parametrize(
    "path, process, place",
    [
        ("ocdbt.process_0/d/47bd6fa6ba70267e8eed49f6987e77b5", 0, "ocdbt.process_0/"),
        ("ocdbt.process_3/manifest.ocdbt", 3, "ocdbt.process_3/"),
        ("ocdbt.process_12/d/abc", 12, "ocdbt.process_12/"),
        ("array_metadatas/process_2", 2, "array_metadatas/"),
        ("manifest.ocdbt", 0, "top level"),
        ("d/e25cab6c22dc867fe043da27e3b4ceb9", 0, "top level"),
        ("commit_success.txt", 0, "top level"),
        ("_METADATA", 0, "top level"),
    ],
    ids=lambda value: value.replace("/", "|") if isinstance(value, str) else None,
)
def test_which_process_wrote_a_file(path, process, place):
    assert results.file_process(path) == process
    assert results.file_place(path) == place
    assert results.file_kind(path)  # every path still has a kind


# --- the command line -------------------------------------------------------------------------------


def test_cli_sweep_json_and_table(own_tmp, capsys):
    argv = ["checkpoint", "--input-dim", "64", "--features", "64", "--mesh", "data=2", "--strategy", "fsdp"]
    assert main([*argv, "--processes-sweep", "1,2", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    sweep = json.loads(out)["sweep"]
    assert [run["num_processes"] for run in sweep] == [1, 2]
    assert [run["devices_per_process"] for run in sweep] == [2, 1]
    for run in sweep:
        assert run["raw_payload_bytes"] == (64 + 1) * 64 * 4
        assert run["restore_verified"] is True
        assert sum(p["num_bytes"] for p in run["processes"]) == run["disk_bytes"]
        assert len(run["processes"]) == run["num_processes"]
    # Each run's save time by the plan's storage model from this disk, probed here, beside the
    # measured one; the probe's folder is gone (own_tmp is empty below).
    machine = json.loads(out)["on_this_machine"]
    assert machine["disk"]["num_bytes"] == 2**20  # the probe's floor: the payload is smaller
    assert len(machine["disk"]["bytes_per_s"]) == len(machine["disk"]["file_micros"]) == 3
    assert [run["num_processes"] for run in machine["runs"]] == [1, 2]
    for run, measured in zip(machine["runs"], sweep, strict=True):
        assert 0 < run["predicted_seconds"] <= run["predicted_seconds_high"]
        assert run["measured_seconds"] == measured["save_seconds"]
        assert run["ratio"] == pytest.approx(run["measured_seconds"] / run["predicted_seconds"])
    assert machine["not_modelled"].startswith("CPU contention (2 processes of JAX and Orbax on ")
    assert list(own_tmp.iterdir()) == []

    assert main([*argv, "--processes-sweep", "1,2"]) == 0
    out, _ = capsys.readouterr()
    assert "On this machine (estimate): the plan's storage model with this disk as measured here: " in out
    assert "\n  P = 2: predicted " in out and "x the prediction\n" in out and "  not modelled: CPU contention" in out

    assert main([*argv, "--processes", "2"]) == 0
    out, _ = capsys.readouterr()
    assert "2 processes x 1 device" in out
    assert "ocdbt.process_0/" in out and "ocdbt.process_1/" in out
    assert "cannot show" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--processes", "2", "--mesh", "data=3"], "not a multiple of 2 processes"),
        (["--processes", "9"], "`--processes` must be an integer from 1 to 8, got '9'"),
        (["--processes-sweep", "1,2,4", "--mesh", "data=2"], "mesh data=2 has 2 devices, not a multiple of 4"),
        (["--processes", "2", "--processes-sweep", "1,2"], "--processes and --processes-sweep: choose one"),
        (["--processes-sweep", "1,x"], "`--processes-sweep` must be an integer from 1 to 8, got 'x'"),
    ],
    ids=["indivisible", "too-many", "sweep-indivisible", "both", "bad-sweep"],
)
def test_cli_group_refusals_are_one_line_exit_2(own_tmp, capsys, argv, message):
    code = main(["checkpoint", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("dcsim: error: ") and message in err and err.count("\n") == 1
    assert list(own_tmp.iterdir()) == []
