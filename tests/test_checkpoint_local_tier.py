"""A lost host under the local tier, for real (issue 44, section 6): the plan's loss table against a
real multi-process save in the style of Orbax's emergency checkpointing.

One group of two JAX processes (two virtual CPU devices each, mesh data=2,model=2: process 0 holds
data=0, process 1 data=1), started once for the module over loopback as ``checkpoint --processes``
starts its own (``tests/children/local_tier.py``), saves two states, each process every shard it
holds (replicas included) into a folder of its own. Process 1's folder is then removed and each
process restores its own shards with real Orbax, process 1 from the survivor's folder:

- laid out by ``tensor`` every shard has a copy on both processes: the plan loses nothing, and the
  survivors restore every value bit for bit;
- laid out by a custom rule, three arrays have shards only process 1 held: the plan names them and
  their bytes, and real Orbax fails on exactly those arrays, its message naming each one's chunk.

The real side is read from the files (the chunks each process stored, listed by tensorstore) and
from Orbax's own errors; the plan's side from the layout alone.
"""

import dataclasses
import json
import re

import pytest

from conftest import ROOT
from dcsim.checkpoint.multiprocess import PORT_ATTEMPTS, PORT_TAKEN, free_loopback_port
from dcsim.checkpoint.plan.loss import local_loss
from dcsim.checkpoint.plan.placement import Hosts
from dcsim.checkpoint.plan.restore import check_compatible, plan_restore
from dcsim.checkpoint.plan.writers import plan_writes
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.runtime.workers import WorkerFailed, WorkerJob, cpu_worker_env, run_workers
from dcsim.sharding.meshes import parse_mesh, parse_rules
from dcsim.sharding.wire import mesh_json, spec_json

pytestmark = pytest.mark.slow  # starts a group of two JAX processes, once for the module

MODEL = ModelConfig(input_dim=64, layers=(DenseLayer(features=64), DenseLayer(features=32)))
MESH = parse_mesh("data=2,model=2")
PROCESSES, LOST = 2, 1
DEVICES_PER_PROCESS = MESH.num_devices // PROCESSES
# Dense_0's kernel split over both axes, the biases over data, Dense_1's kernel matched by no rule
# (whole on every device).
CUSTOM = ("Dense_0/kernel=model,data", "*/bias=data")
CASES = {"replicas": ("tensor", ()), "lost": ("custom", CUSTOM)}
TIME_LIMIT_SECONDS = 300
# The local tier saves zarr3 (``use_zarr3=True``), whose ``sharding_indexed`` codec stores each
# chunk as a shard of one inner chunk followed by its index: one (offset, size) pair of uint64s and
# the index's crc32c. zstd is off, so a stored chunk is its raw bytes and these 20.
ZARR3_INDEX_BYTES = 2 * 8 + 4


def laid_params(strategy, rules):
    """The model's params as memory lays them out (ZeRO-3 splits them by the strategy), in float32."""
    memory = compute_memory(
        count_params(MODEL), MESH, strategy, tuple(parse_rules(list(rules))), Training.stage(3, param_dtype="float32")
    )
    return [row for row in memory.arrays if row.part == "params"]


def orbax_key(path):
    """The chunk keys' prefix Orbax gives the param ``Dense_0/kernel`` saved under ``params``."""
    return "params." + path.replace("/", ".") + "/c/"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The group's folder (``shared/``: the ``lost`` case saved to shared storage) and each process's
    result: for each case, the chunks it stored, where it restored from, and each array's restore
    (restored, bit for bit, or Orbax's error)."""
    root = tmp_path_factory.mktemp("local-tier")
    for attempt in range(PORT_ATTEMPTS):
        try:
            folder = root / f"attempt_{attempt}"
            return folder, run_group(folder)
        except WorkerFailed as err:
            # Another program took the coordinator's port between the probe and the bind.
            if PORT_TAKEN not in str(err) or attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def run_group(root):
    root.mkdir()
    request = {
        "shared_case": "lost",
        "mesh": mesh_json(MESH),
        "num_processes": PROCESSES,
        "lost_process": LOST,
        "port": free_loopback_port(),
        "root": str(root),
        "connect_timeout_seconds": TIME_LIMIT_SECONDS,
        "cases": {
            name: {
                "arrays": [
                    {"path": row.path, "shape": list(row.shape), "dtype": row.dtype, "spec": spec_json(row.spec)}
                    for row in laid_params(*layout)
                ]
            }
            for name, layout in CASES.items()
        },
    }
    jobs = []
    for process_id in range(PROCESSES):
        folder = root / f"worker_{process_id}"
        folder.mkdir()
        env = cpu_worker_env(DEVICES_PER_PROCESS, compilation_cache=False)
        jobs.append(
            WorkerJob(
                name=f"process {process_id} of {PROCESSES}",
                module="local_tier",
                request=request | {"process_id": process_id},
                folder=folder,
                env=env | {"PYTHONPATH": str(ROOT / "tests" / "children")},
            )
        )
    results = run_workers(jobs, timeout_seconds=TIME_LIMIT_SECONDS)
    assert [result.get("error") for result in results] == [None] * PROCESSES
    return [result["cases"] for result in sorted(results, key=lambda result: result["process_id"])]


@pytest.fixture(scope="module")
def group(saved):
    return saved[1]


def plan(case):
    rows = laid_params(*CASES[case])
    writes = plan_writes(rows, MESH, "single-replica")  # the local tier writes whole shards: the policy's chunks
    hosts = Hosts(MESH, DEVICES_PER_PROCESS)  # a process is a host of its devices, in mesh order
    return rows, local_loss(writes.arrays, hosts), plan_restore(writes.arrays, rows, hosts)


def lost_chunks(group, case, host):
    """The chunks ``host`` stored that no other process stored: what its folder took with it."""
    others = set().union(*(group[p][case]["stored"] for p in range(PROCESSES) if p != host))
    return {key: size for key, size in group[host][case]["stored"].items() if key not in others}


def raw_bytes(chunks):
    return sum(size - ZARR3_INDEX_BYTES for size in chunks.values())


@pytest.mark.parametrize("case", list(CASES))
def test_each_host_s_folder_holds_its_distinct_shards_as_the_plan_says(group, case):
    """Every shard a process holds, once however many of its devices hold it: the plan's
    ``bytes_held`` on the saving mesh, to the byte, each chunk one shard and its zarr3 index."""
    rows, _, restore = plan(case)
    shard_bytes = {orbax_key(write.array.path): write.shard_bytes for write in plan_writes(rows, MESH, "dcp").arrays}
    for process in group:
        for key, size in process[case]["stored"].items():
            assert size == shard_bytes[key.split("/c/")[0] + "/c/"] + ZARR3_INDEX_BYTES, key
    assert [raw_bytes(group[p][case]["stored"]) for p in range(PROCESSES)] == list(restore.bytes_held)


def test_with_replicas_on_other_hosts_the_survivors_restore_bit_for_bit(group):
    rows, loss, _ = plan("replicas")
    assert loss.bytes_lost == (0, 0) and loss.paths_lost(LOST) == () and loss.min_hosts_to_lose_data == 2
    assert lost_chunks(group, "replicas", LOST) == {}  # the folder removed held nothing the survivor lacks
    assert group[LOST]["replicas"]["source"] == "process_0"  # the replacement read the survivor's folder
    for process in group:
        arrays = process["replicas"]["arrays"]
        assert set(arrays) == {row.path for row in rows}
        assert all(entry["restored"] and entry["same_bits"] for entry in arrays.values()), arrays


def test_a_lost_host_fails_the_restore_on_the_arrays_the_plan_names(group):
    rows, loss, _ = plan("lost")
    # By hand: Dense_0's kernel is a quarter a device, a process holds two quarters alone
    # (2 x 16 x 64 x 4 = 8,192 bytes); each bias is half a process (32 x 4 + 16 x 4 = 192 bytes);
    # Dense_1's kernel has a copy everywhere.
    predicted = {"params/Dense_0/kernel", "params/Dense_0/bias", "params/Dense_1/bias"}
    assert set(loss.paths_lost(LOST)) == predicted and loss.arrays_lost[LOST] == 3
    ((hosts, paths),) = loss.lost_groups()  # both processes lose alike: one group in the JSON
    assert hosts == (0, 1) and set(paths) == predicted
    assert loss.bytes_lost == (8_192 + 192, 8_192 + 192) and loss.min_hosts_to_lose_data == 1

    # What the removed folder held that the survivor's lacks: those arrays' chunks, those bytes.
    gone = lost_chunks(group, "lost", LOST)
    assert raw_bytes(gone) == loss.bytes_lost[LOST]
    assert {"params/" + row.path for row in rows if any(key.startswith(orbax_key(row.path)) for key in gone)} == (
        predicted
    )
    # Symmetric: process 0's own folder held as much that process 1 lacks.
    assert raw_bytes(lost_chunks(group, "lost", 0)) == loss.bytes_lost[0]

    # Real Orbax, restoring the replacement's shards from the survivor's folder, fails on exactly
    # the arrays the plan named, and says which chunk is missing; the others come back bit for bit.
    arrays = group[LOST]["lost"]["arrays"]
    failed = {"params/" + path for path, entry in arrays.items() if not entry["restored"]}
    assert failed == predicted
    for path, entry in arrays.items():
        if entry["restored"]:
            assert entry["same_bits"] is True, path
        else:
            missing = re.search(r'NOT_FOUND: chunk .* in "([^"]+)" in OCDBT database .* is missing', entry["error"])
            assert missing and missing[1].startswith(orbax_key(path)) and missing[1] in gone, entry["error"]
    # The survivor restores everything from its own folder.
    assert all(entry["restored"] and entry["same_bits"] for entry in group[0]["lost"]["arrays"].values())
    assert json.dumps(group)  # plain JSON came back


# --- the persistent tier restored on fewer processes (issue 44, section 5) ----------------------------

# The two-process save of the ``lost`` layout, restored by one process onto other meshes and layouts.
RESTORED_ON = [("data=2", "fsdp"), ("model=8", "tensor")]


def spec_lists(spec):
    """A PartitionSpec as the real-mesh child reads it: each entry null or a list of axis names."""
    return [None if entry is None else [entry] if isinstance(entry, str) else list(entry) for entry in spec]


def new_layout(mesh_text, strategy):
    memory = compute_memory(
        count_params(MODEL), parse_mesh(mesh_text), strategy, (), Training.stage(3, param_dtype="float32")
    )
    return [row for row in memory.arrays if row.part == "params"]


def reshaped(row, shape):
    return dataclasses.replace(row, shape=shape, stored_shape=shape, shard_shape=shape)


# Each refused restore: the rows changed, dcsim's refusal, and what real Orbax does with the same
# targets (None: it restores, casting: a target's dtype is a cast Orbax makes).
REFUSALS = {
    "shape": (
        lambda rows: [reshaped(r, (32, 64)) if r.path == "Dense_0/kernel" else r for r in rows],
        "Dense_0/kernel: the checkpoint holds shape 64x64, the restore layout needs 32x64",
        "is not compatible with the stored shape: (64, 64). Truncating/padding is disabled",
    ),
    "asks-for-more": (
        lambda rows: [*rows, dataclasses.replace(rows[0], path="Dense_2/kernel")],
        "the restore asks for 1 array the checkpoint lacks, first Dense_2/kernel",
        "tree structures do not match",
    ),
    "leaves-out": (
        lambda rows: [r for r in rows if r.path != "Dense_1/bias"],
        "the checkpoint holds 1 array the restore leaves out, first Dense_1/bias",
        "tree structures do not match",
    ),
    "dtype": (
        lambda rows: [dataclasses.replace(r, dtype="bfloat16") if r.path == "Dense_0/kernel" else r for r in rows],
        "Dense_0/kernel: the checkpoint holds float32, the restore asks bfloat16",
        None,
    ),
}


def test_a_two_process_save_restores_on_one_process_as_the_plan_says_and_refuses_what_orbax_refuses(saved, real_mesh):
    """Saved by two processes on data=2,model=2 (the custom layout, every process into one folder),
    restored by one process onto two other meshes and layouts: every value bit for bit, each device's
    distinct bytes as the plan's restore says. Four incompatible restores: dcsim refuses each
    before reading anything; real Orbax fails on the same three that change the arrays' shapes or
    names, and casts the fourth (a target of another dtype), which dcsim's refusal asks to be explicit."""
    root, _ = saved
    rows = laid_params(*CASES["lost"])
    writes = plan_writes(rows, MESH, "replica-parallel").arrays  # as the group saved it
    restores = [new_layout(*target) for target in RESTORED_ON]
    base = parse_mesh(RESTORED_ON[0][0])
    changed = {name: change(restores[0]) for name, (change, _, _) in REFUSALS.items()}
    real = real_mesh(
        {
            "restore_from": {
                "folder": str(root / "shared"),
                "arrays": [{"name": row.path, "shape": list(row.shape), "dtype": row.dtype} for row in rows],
                "restores": [
                    {"mesh": mesh_json(parse_mesh(mesh)), "specs": {r.path: spec_lists(r.spec) for r in new}}
                    for (mesh, _), new in zip(RESTORED_ON, restores, strict=True)
                ],
                "refusals": [
                    {
                        "mesh": mesh_json(base),
                        "arrays": [
                            {"name": r.path, "shape": list(r.shape), "dtype": r.dtype, "spec": spec_lists(r.spec)}
                            for r in new
                        ],
                    }
                    for new in changed.values()
                ],
            }
        }
    )
    for (mesh_text, strategy), new, arrays in zip(RESTORED_ON, restores, real["restores"], strict=True):
        assert set(arrays) == {row.path for row in rows}
        assert all(a["same_bits"] and a["same_sharding"] for a in arrays.values()), (mesh_text, strategy)
        mesh = parse_mesh(mesh_text)
        held = [sum(a["shards"][device]["bytes"] for a in arrays.values()) for device in range(mesh.num_devices)]
        assert list(plan_restore(writes, new, Hosts(mesh, 1)).bytes_held) == held, (mesh_text, strategy)
        # one host of all the devices holds each distinct shard once: the whole payload
        (whole,) = plan_restore(writes, new, Hosts(mesh, mesh.num_devices)).bytes_held
        assert whole == sum(row.num_values * 4 for row in rows)

    for (name, (_, refusal, orbax)), new, found in zip(
        REFUSALS.items(), changed.values(), real["refusals"], strict=True
    ):
        with pytest.raises(ValueError, match=re.escape(refusal)):
            check_compatible(writes, new)
        if orbax is None:
            assert found["error"] is None and found["dtypes"]["Dense_0/kernel"] == "bfloat16", name
            # the cast Orbax made without asking, dcsim makes when asked (--restore-dtype), and names
            assert check_compatible(writes, new, cast=True) == (("params", "float32", "bfloat16"),)
        else:
            assert found["error"] is not None and orbax in found["error"], (name, found["error"])
