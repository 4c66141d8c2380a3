"""The plan checked against real Orbax (issue 44, section 3): each process's bytes predicted by the
plan's writers before it saves, compared with the chunks it stored, under both of Orbax's policies.

The quick tests check the prediction by hand and the refusals; one parametrized slow test starts
four groups of two JAX processes (replicated, fsdp, tensor and a custom rule, each policy twice)
and checks every figure of each run. Orbax's own slice rule against dcsim's port on real arrays is
tests/test_checkpoint_plan.py's ``test_the_writers_are_orbax_s_own_on_real_arrays``.
"""

import json
import math
from types import SimpleNamespace

import pytest

from conftest import hand_run_figures
from dcsim.checkpoint import disk, multiprocess, records, results
from dcsim.checkpoint.measurement import MeasurementOptions
from dcsim.checkpoint.plan import verify, writers
from dcsim.checkpoint.plan.placement import Hosts
from dcsim.checkpoint.plan.restore import plan_restore
from dcsim.checkpoint.plan.writers import plan_writes
from dcsim.cli import main
from dcsim.cli.checkpoint import render_on_this_machine, render_processes_table
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding.meshes import parse_mesh, parse_rules
from dcsim.ui import checkpoint as measuring

# Two layers, so the biases are small arrays with replicas under every layout but fsdp.
MODEL = ModelConfig(input_dim=64, layers=(DenseLayer(features=64), DenseLayer(features=32)))
PAYLOAD = (64 * 64 + 64 + 64 * 32 + 32) * 4  # 24,960 bytes in float32
MESH = "data=2,model=2"  # process 0 holds data=0 (devices 0, 1), process 1 data=1
# Dense_0's kernel split over both axes, the biases over data, Dense_1's kernel matched by no rule.
CUSTOM = ("Dense_0/kernel=model,data", "*/bias=data")


def group_plan(strategy, rules=(), processes=2):
    options = MeasurementOptions(mesh=MESH, strategy=strategy, rules=parse_rules(list(rules)))
    return multiprocess.plan_multiprocess(MODEL, options, processes=processes)


# Each case's bytes a process, by hand:
# - replicated, single-replica: every array whole on every device; device 0 (process 0) writes all.
# - fsdp: every array split four ways, no copies: a quarter a device, half a process, either policy.
# - tensor, replica-parallel: split over model, two copies along data (one a process): each copy
#   writes half its shard, so each process half the payload. Single-replica: process 0 all of it.
# - custom, single-replica: Dense_0/kernel split four ways (8,192 a process); the biases split over
#   data, each half written by its copy on model=0, one a process (128 + 64 each); Dense_1/kernel
#   (no rule: replicated) by device 0: process 0 8,192 + 8,192 + 128 + 64, process 1 8,192 + 128 + 64.
CASES = [
    ("replicated", (), "single-replica", (PAYLOAD, 0)),
    ("fsdp", (), "replica-parallel", (PAYLOAD // 2, PAYLOAD // 2)),
    ("tensor", (), "replica-parallel", (PAYLOAD // 2, PAYLOAD // 2)),
    ("custom", CUSTOM, "single-replica", (16_576, 8_384)),
]
# The other policy's prediction for the same layout: where it differs, a run under the wrong
# policy, or a wrong port of its rule, could not match.
OTHER = {
    "replicated": (PAYLOAD // 2, PAYLOAD // 2),
    "fsdp": (PAYLOAD // 2, PAYLOAD // 2),
    "tensor": (PAYLOAD, 0),
    "custom": (PAYLOAD // 2, PAYLOAD // 2),
}


@pytest.mark.parametrize("strategy, rules, policy, expected", CASES, ids=[case[0] for case in CASES])
def test_the_prediction_by_hand(strategy, rules, policy, expected):
    plan = group_plan(strategy, rules)
    assert verify.predict_process_bytes(plan, policy, parse_rules(list(rules))) == expected
    other = "replica-parallel" if policy == "single-replica" else "single-replica"
    assert verify.predict_process_bytes(plan, other, parse_rules(list(rules))) == OTHER[strategy]
    assert sum(expected) == PAYLOAD  # each byte written once


def test_a_process_is_a_host_of_its_devices_in_mesh_order():
    # tensor over 4 processes of one device each: each device's own share.
    plan = group_plan("tensor", processes=4)
    assert verify.predict_process_bytes(plan, "single-replica") == (PAYLOAD // 2, PAYLOAD // 2, 0, 0)
    assert verify.predict_process_bytes(plan, "replica-parallel") == (PAYLOAD // 4,) * 4


def test_only_orbax_s_policies_can_be_checked():
    assert set(multiprocess.ORBAX_POLICIES) < set(writers.POLICIES)
    with pytest.raises(ValueError, match=r"--policy must be one of single-replica, replica-parallel .*got 'dcp'"):
        verify.with_prediction(group_plan("fsdp"), "dcp")
    with pytest.raises(ValueError, match="a prediction names 3 process"):
        multiprocess.MultiprocessPlan(
            checkpoint=group_plan("fsdp").checkpoint, num_processes=2, predicted_bytes=(1, 2, 3)
        )


def process(process_id, predicted, stored, files):
    return results.ProcessReport(
        process_id=process_id,
        num_devices=1,
        device_bytes=0,
        num_files=1,
        num_bytes=files,
        chunk_bytes=stored,
        predicted_bytes=predicted,
        **hand_run_figures(),
    )


@pytest.mark.parametrize(
    "processes, matches",
    [
        ([process(0, 100, 100, 100 + 65_536), process(1, 0, 0, 0)], True),
        ([process(0, 100, 100, 100 + 65_537), process(1, 0, 0, 0)], False),  # files too far from the arrays
        ([process(0, 1_000, 1_000, 990), process(1, 0, 0, 0)], True),  # inline chunks compressed: fewer bytes
        ([process(0, 100, 99, 200), process(1, 0, 0, 0)], False),  # a byte short of the prediction
        ([process(0, None, None, 200)], None),  # nothing predicted
    ],
    ids=["64-KiB", "over-64-KiB", "fewer-file-bytes", "a-byte-off", "no-prediction"],
)
def test_prediction_matches_to_the_byte_within_64_kib(processes, matches):
    report = results.MultiprocessReport(
        checkpoint=None, num_processes=len(processes), processes=tuple(processes), cpu_count=1, load_average=0.0
    )
    assert report.prediction_matches is matches


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--policy", "single-replica"], "--policy checks the plan against a save from several processes: it needs"),
        (["--processes", "2", "--mesh", "data=2", "--policy", "dcp"], "argument --policy: invalid choice: 'dcp'"),
    ],
    ids=["without-processes", "not-orbax-s"],
)
def test_policy_refusals_are_one_line_exit_2(capsys, argv, message):
    code = main(["checkpoint", "--input-dim", "8", "--features", "8", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("dcsim: error: ") and message in err and err.count("\n") == 1


@pytest.mark.slow  # starts a group of two JAX processes a case
@pytest.mark.parametrize("strategy, rules, policy, expected", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_each_process_stores_the_bytes_the_plan_predicted(own_tmp, strategy, rules, policy, expected):
    plan = verify.with_prediction(group_plan(strategy, rules), policy, parse_rules(list(rules)))
    assert plan.predicted_bytes == expected  # predicted before any process starts
    report = multiprocess.run_multiprocess(plan)

    assert report.policy == policy and report.checkpoint.restore_verified
    assert [p.predicted_bytes for p in report.processes] == list(expected)
    # What each process stored in its own OCDBT database, read back: the prediction to the byte.
    assert [p.chunk_bytes for p in report.processes] == list(expected)
    assert report.prediction_matches is True
    # Its files: the chunks plus its index and metadata, within 64 KiB either way; process 0 adds
    # the checkpoint's top-level files.
    for entry in report.processes:
        assert abs(entry.overhead_bytes) <= results.MAX_OVERHEAD_BYTES
        assert entry.num_bytes == sum(
            f.num_bytes for f in report.checkpoint.files if results.file_process(f.path) == entry.process_id
        )
    top = sum(f.num_bytes for f in report.checkpoint.files if results.file_place(f.path) == "top level")
    assert report.processes[0].overhead_bytes >= top > 0
    if 0 in expected:  # a process with nothing to write has no OCDBT folder of its own
        idle = expected.index(0)
        assert not [f for f in report.checkpoint.files if f.path.startswith(f"ocdbt.process_{idle}/")]
    assert list(own_tmp.iterdir()) == []

    # The JSON record and the table carry it.
    record = records.multiprocess_record(report)
    assert json.loads(json.dumps(record)) == record
    assert record["policy"] == policy and record["compression"] == "off" and record["prediction_matches"] is True
    assert [(p["predicted_bytes"], p["chunk_bytes"]) for p in record["processes"]] == [(b, b) for b in expected]
    assert [p["overhead_bytes"] for p in record["processes"]] == [
        p.num_bytes - b for p, b in zip(report.processes, expected, strict=True)
    ]
    assert "compared to the byte" in record["prediction_explanation"][0]
    if 0 in expected:
        assert f"no ocdbt.process_{expected.index(0)}/: nothing to write" in record["prediction_explanation"][1]
    assert record["explanation"][0].startswith("Compression: off for this save")
    table = render_processes_table(report)
    handler = "False" if policy == "single-replica" else "True"
    assert f"policy             {policy} (Orbax ArrayHandler use_replica_parallel={handler}), zstd off" in table
    assert "prediction         matches" in table
    for process_id, size in enumerate(expected):
        assert f"\n  process {process_id}        predicted {size:,} · stored {size:,}\n" in table


# --- a restore onto another mesh, for real (issue 44, section 5) -----------------------------------


def laid_params(mesh_text, strategy):
    """The model's params as memory lays them out (ZeRO-3 splits them by the strategy), in float32."""
    memory = compute_memory(
        count_params(MODEL), parse_mesh(mesh_text), strategy, (), Training.stage(3, param_dtype="float32")
    )
    return [row for row in memory.arrays if row.part == "params"]


def spec_json(spec):
    return [None if entry is None else [entry] if isinstance(entry, str) else list(entry) for entry in spec]


def mesh_json(text):
    return [list(axis) for axis in parse_mesh(text).axes]


SAVED_ON = ("data=8", "fsdp")
# Other strategies on fewer devices, and the saving layout itself.
RESTORED_ON = [("data=2,model=2", "tensor"), ("data=2", "replicated"), SAVED_ON]
# What a restore reads besides the chunks: the manifests, the B-tree nodes with the zarr metadata,
# and the checkpoint's metadata files (a few hundred bytes here).
METADATA_READ_BYTES = 64 * 2**10


@pytest.mark.slow  # the session's real-mesh child saves and restores with Orbax
def test_a_checkpoint_restores_bit_for_bit_onto_another_mesh_as_the_plan_says(real_mesh, tmp_path):
    """Saved from eight devices under fsdp, restored onto four under tensor, onto two whole and onto
    the same layout: every value comes back bit for bit on the new layout, each host holds the
    distinct bytes the plan's restore says (``bytes_held``), and tensorstore reads at least the
    plan's ``bytes_read``: that many and the metadata when each chunk is needed once."""
    saved = laid_params(*SAVED_ON)
    restores = [laid_params(mesh, strategy) for mesh, strategy in RESTORED_ON]
    name = {row.path: row.path.replace("/", ".") for row in saved}
    real = real_mesh(
        {
            "restore": {
                "folder": str(tmp_path / "checkpoint"),
                "arrays": [{"name": name[row.path], "shape": list(row.shape), "dtype": row.dtype} for row in saved],
                "mesh": mesh_json(SAVED_ON[0]),
                "specs": {name[row.path]: spec_json(row.spec) for row in saved},
                "restores": [
                    {"mesh": mesh_json(mesh), "specs": {name[row.path]: spec_json(row.spec) for row in rows}}
                    for (mesh, _), rows in zip(RESTORED_ON, restores, strict=True)
                ],
            }
        }
    )
    writes = plan_writes(saved, parse_mesh(SAVED_ON[0]), "replica-parallel")
    inline = sum(write.written_bytes for write in writes.arrays if math.prod(write.chunk_shape) * 4 <= 1024)
    for (mesh_text, strategy), rows, arrays in zip(RESTORED_ON, restores, real, strict=True):
        read = arrays.pop("bytes_read")
        assert set(arrays) == set(name.values())
        assert all(array["same_bits"] and array["same_sharding"] for array in arrays.values()), (mesh_text, strategy)
        mesh = parse_mesh(mesh_text)
        for per_host in (1, 2):  # a host a device, and hosts of two devices in mesh order
            hosts = Hosts(mesh, per_host)
            held = [0] * hosts.num_hosts
            for array in arrays.values():
                shards = array["shards"]
                assert len(shards) == mesh.num_devices and None not in shards  # on every device of the new mesh
                for host in range(hosts.num_hosts):
                    own = shards[per_host * host : per_host * (host + 1)]
                    held[host] += sum({json.dumps(shard["index"]): shard["bytes"] for shard in own}.values())
            plan = plan_restore(writes.arrays, rows, hosts)
            assert list(plan.bytes_held) == held, (mesh_text, strategy, per_host)
            assert sum(plan.bytes_read) >= sum(plan.bytes_held)
            if per_host == 2:  # by hand: a whole replica, or under fsdp over eight a quarter
                assert held == [PAYLOAD // 4 if strategy == "fsdp" else PAYLOAD] * hosts.num_hosts
        # This one process is one host of the whole mesh: the plan's reads, each chunk once, are a
        # floor. Orbax reads the chunks each device's shard overlaps, so a chunk two devices need
        # may be read twice (tensorstore's cache serves the second read only sometimes).
        # Chunks of at most 1,024 bytes (OCDBT's max_inline_value_bytes in Orbax) come inside B-tree
        # nodes that OCDBT compresses, so those may read fewer bytes than their own.
        (planned,) = plan_restore(writes.arrays, rows, Hosts(mesh, mesh.num_devices)).bytes_read
        assert planned - inline <= read, (mesh_text, strategy, read, planned, inline)
        if (mesh_text, strategy) == SAVED_ON or strategy == "replicated":  # every chunk needed once
            assert read - planned <= METADATA_READ_BYTES, (mesh_text, strategy, read, planned)


# --- a sweep's save time on this machine (issue 44, section 4) --------------------------------------


def sweep_run(num_processes, process_bytes, save_seconds):
    """What the prediction reads of a sweep's run: each process's bytes and the measured time."""
    return SimpleNamespace(
        num_processes=num_processes,
        processes=[SimpleNamespace(num_bytes=size) for size in process_bytes],
        checkpoint=SimpleNamespace(save_seconds=save_seconds),
        cpu_count=2,
        load_average=3.5,
    )


def test_a_sweep_s_time_by_hand_from_a_disk_probe():
    """One disk every process shares: 1 GB/s at best, 0.5 GB/s at worst; a file 1 to 2 ms.
    - P = 1, 200 MB: 0.2 s + 8 files (a data file, the process's 2, process 0's 5) x 1 ms = 0.208 s;
      at worst 0.4 s + 8 x 2 ms = 0.416 s.
    - P = 2, 100 MB each: each gets half the disk, 0.2 s, and process 0 has the 8 files: 0.208 s
      again (one disk: more processes do not save faster); at worst 0.416 s."""
    probe = disk.DiskProbe(
        folder="/tmp", num_bytes=2**20, bytes_per_s=(10**9, 5 * 10**8, 8 * 10**8), file_micros=(1_000, 2_000, 1_500)
    )
    runs = [sweep_run(1, [200 * 10**6], 0.832), sweep_run(2, [100 * 10**6] * 2, 0.624)]
    times = verify.predict_sweep_times(runs, probe)
    assert [t.predicted_seconds for t in times] == pytest.approx([0.208, 0.208])
    assert [t.predicted_seconds_high for t in times] == pytest.approx([0.416, 0.416])
    assert [t.ratio for t in times] == pytest.approx([4.0, 3.0])
    assert [t.limit for t in times] == ["each host's own bandwidth", "the storage's aggregate bandwidth"]
    assert verify.sweep_leaves_out(runs).startswith("CPU contention (2 processes of JAX and Orbax on 2 CPU cores")
    table = "\n".join(render_on_this_machine(runs, probe))
    assert (
        "1.00 GB/s to 500.00 MB/s (3 tries of 1,048,576 bytes written and synced in /tmp), a file 1,000 to 2,000 us"
        in table
    )
    assert "  P = 2: predicted 0.2080 to 0.4160 s (the storage's aggregate bandwidth), measured 0.624 s: 3.0x" in table
    # The Checkpoint page's table of the same figures, one row a run.
    shown = measuring.sweep_times_frame(times)
    assert shown.to_dict("list") == {
        "Processes": ["1", "2"],
        "Predicted save (estimate)": ["0.2080 to 0.4160 s", "0.2080 to 0.4160 s"],
        "Measured save": ["0.832 s", "0.624 s"],
        "Measured / predicted": ["4.0x", "3.0x"],
        "Limited by": ["each host's own bandwidth", "the storage's aggregate bandwidth"],
    }
    record = verify.on_this_machine_record(runs, probe)  # the CLI's JSON and the page's download
    assert record["disk"] == {
        "folder": "/tmp",
        "num_bytes": 1_048_576,
        "bytes_per_s": [10**9, 5 * 10**8, 8 * 10**8],
        "file_micros": [1_000, 2_000, 1_500],
    }
    assert [run["ratio"] for run in record["runs"]] == pytest.approx([4.0, 3.0])


def test_the_disk_probe_measures_here_and_leaves_nothing(tmp_path):
    probe = disk.probe_disk(disk.probe_bytes(10), folder=str(tmp_path))
    assert probe.num_bytes == disk.MIN_PROBE_BYTES and probe.folder == str(tmp_path)
    assert len(probe.bytes_per_s) == len(probe.file_micros) == disk.PROBE_TRIES
    assert min(probe.bytes_per_s) > 0 and min(probe.file_micros) >= 0
    assert list(tmp_path.iterdir()) == []
    assert disk.probe_bytes(10**12) == disk.MAX_PROBE_BYTES and disk.probe_bytes(5 * 2**20) == 5 * 2**20
    with pytest.raises(ValueError, match="a disk probe writes a positive whole number of bytes, got 0"):
        disk.probe_disk(0, folder=str(tmp_path))
