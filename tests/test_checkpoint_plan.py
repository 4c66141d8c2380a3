"""The checkpoint plan's engine (``dcsim.checkpoint.plan``): golden figures by hand, the port of
Orbax's replica-slice rule against the pinned Orbax on real arrays, and properties.

The model of most tests is the Dense stack 8 -> 16 -> 4 (arrays 8x16, 16, 16x4, 4: 212 values) or
a state row built by hand where a shape must be chosen."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

from dcsim.checkpoint.plan import content as contents
from dcsim.checkpoint.plan import interval as intervals
from dcsim.checkpoint.plan import storage as storages
from dcsim.checkpoint.plan import writers
from dcsim.checkpoint.plan.loss import Loss, local_loss
from dcsim.checkpoint.plan.placement import Hosts, check_devices_per_host, placement
from dcsim.checkpoint.plan.plan import PlanRequest, SettingNames, plan_checkpoint
from dcsim.checkpoint.plan.restore import plan_restore
from dcsim.memory.state import StateArray, compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding.meshes import parse_mesh

MLP = count_params(ModelConfig(input_dim=8, layers=(DenseLayer(features=16), DenseLayer(features=4))))
ADAM_MASTER = Training.stage(3, optimizer="adam", master_dtype="float32")


def state(mesh: str, strategy: str = "fsdp", setup: Training = ADAM_MASTER):
    return compute_memory(MLP, parse_mesh(mesh), strategy, (), setup)


def saved(memory):
    return contents.Content(memory).arrays


def row(shape, spec, mesh, dtype="float32", path="w", part="params"):
    """A state array laid out by hand (its shard shape from the spec's pieces on ``mesh``)."""
    where = placement(mesh, spec, len(shape))
    shard = tuple(size // pieces for size, pieces in zip(shape, where.pieces, strict=True))
    return StateArray(
        path=path,
        part=part,
        shape=shape,
        dtype=dtype,
        spec=spec,
        shard_shape=shard,
        note="",
        stored_shape=shape,
    )


# --- what a checkpoint holds ---------------------------------------------------------------------


def test_the_checkpoint_is_memory_s_state_without_the_grads():
    # bfloat16 params 424 bytes, float32 master 848, Adam's float32 moments 2 x 848 and its int32 count
    content = contents.Content(state("data=4"))
    assert content.parts == {"params": 424, "master": 848, "optimizer": 2 * 848 + 4}
    assert content.total_bytes == 424 + 848 + 2 * 848 + 4
    assert content.scalar_bytes == 4
    assert {row.part for row in content.arrays} == {"params", "master", "optimizer"}


def test_llama3_8b_anchor_against_mlperf_dlio():
    """14 bytes a parameter plus AdamW's int32 count; DLIO's published figure adds 5 x hidden fp32
    values in each of 3 optimizer groups on each of its 8 ranks."""
    report = count_params(ModelConfig(preset="llama3-8b"))
    assert report.total_params == contents.MLPERF_LLAMA3_8B_PARAMS == 8_030_261_248
    memory = compute_memory(
        report, parse_mesh("data=8"), "fsdp", (), Training.stage(3, optimizer="adamw", master_dtype="float32")
    )
    content = contents.Content(memory)
    assert content.total_bytes == 8_030_261_248 * (2 + 4 + 4 + 4) + 4
    assert contents.MLPERF_LLAMA3_8B_BYTES == 14 * 8_030_261_248 + 8 * 3 * 5 * 4096 * 4
    assert contents.MLPERF_LLAMA3_8B_BYTES - content.dlio_formula_bytes(report.total_params) == 1_966_080


# --- devices, hosts and writers ------------------------------------------------------------------


def test_placement_numbers_pieces_and_copies_by_hand():
    # data=2, model=4; P(None, "model"): dimension 1 in 4 pieces by model, two copies along data
    where = placement(parse_mesh("data=2,model=4"), P(None, "model"), 2)
    assert where.pieces == (1, 4) and where.num_replicas == 2
    assert where.shard.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert where.replica.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # both axes on one dimension: data major, model minor
    both = placement(parse_mesh("data=2,model=4"), P(("data", "model")), 1)
    assert both.shard.tolist() == list(range(8)) and both.num_replicas == 1


@pytest.mark.parametrize("value", [3, 0, -1, 2.5, True, "8"])
def test_a_host_size_that_does_not_divide_the_mesh_is_refused(value):
    with pytest.raises(ValueError, match="--devices-per-host must"):
        check_devices_per_host(value, parse_mesh("data=8"))


def test_ddp_on_8_hosts_single_replica_has_host_0_write_everything():
    """The issue's example: the state replicated (ZeRO-0) on data=64, 8 hosts."""
    memory = state("data=64", setup=Training.stage(0, optimizer="adam", master_dtype="float32"))
    hosts = Hosts(memory.mesh, 8)
    writes = writers.plan_writes(saved(memory), memory.mesh, "single-replica")
    total = contents.Content(memory).total_bytes
    assert writes.host_bytes(hosts) == (total, 0, 0, 0, 0, 0, 0, 0)


def test_tensor_parallel_inside_a_host_single_replica_writes_from_host_0_only():
    mesh = parse_mesh("data=4,model=8")
    arrays = [row((64, 64), P(None, "model"), mesh), row((64,), P(), mesh, path="b")]
    writes = writers.plan_writes(arrays, mesh, "single-replica")
    assert writes.host_bytes(Hosts(mesh, 8)) == (64 * 64 * 4 + 64 * 4, 0, 0, 0)
    # replica-parallel spreads the same over the four data copies: 8 rows of a 64x8 shard each
    spread = writers.plan_writes(arrays, mesh, "replica-parallel").host_bytes(Hosts(mesh, 8))
    assert spread == (64 * 64 + 16 * 4,) * 4


@pytest.mark.parametrize("policy", writers.POLICIES)
@pytest.mark.parametrize("mesh_text", ["data=8", "data=2,model=4", "data=4,model=2"])
def test_every_byte_is_written_once_under_every_policy(policy, mesh_text):
    memory = state(mesh_text, "tensor" if "model" in mesh_text else "fsdp")
    arrays = saved(memory)
    writes = writers.plan_writes(arrays, memory.mesh, policy)
    assert int(writes.device_bytes.sum()) == sum(write.written_bytes for write in writes.arrays)
    assert sum(writes.host_bytes(Hosts(memory.mesh, 2))) == contents.Content(memory).total_bytes


def test_dcp_sends_each_replicated_item_to_the_emptiest_rank():
    mesh = parse_mesh("data=2")
    arrays = [row((8,), P(), mesh, path="a"), row((4,), P(), mesh, path="b"), row((2,), P(), mesh, path="c")]
    # a (32 bytes) to rank 0 (a tie, the lowest), b (16) to rank 1, c (8) to rank 1 (16 < 32)
    assert writers.plan_writes(arrays, mesh, "dcp").device_bytes.tolist() == [32, 24]


@pytest.mark.parametrize(
    ("shard", "replicas", "options", "expected"),
    [
        ((8, 6), 4, {}, writers.Slice(0, (2, 6), 4)),
        ((6, 8), 4, {}, writers.Slice(1, (6, 2), 4)),  # the first dimension 4 divides
        ((6, 6), 4, {}, None),  # none divides: single replica
        ((8, 6), 4, {"max_replicas": 2}, writers.Slice(0, (4, 6), 2)),
        ((8, 6), 4, {"min_slice_bytes": 2 * 6 * 4 + 1}, None),
        ((8, 6), 1, {}, None),
        ((), 4, {}, None),
    ],
)
def test_the_slice_rule_by_hand(shard, replicas, options, expected):
    assert writers.slice_rule(shard, "float32", replicas, writers.SliceLimits(**options)) == expected


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="--policy must be one of single-replica, replica-parallel, dcp, got 'fast'"):
        writers.check_policy("fast")


def test_ocdbt_target_file_size_is_orbax_s():
    from orbax.checkpoint._src.serialization import tensorstore_utils

    assert writers.OCDBT_TARGET_FILE_BYTES == tensorstore_utils._DEFAULT_OCDBT_TARGET_DATA_FILE_SIZE


ORBAX_CASES = [
    ("data=2,model=4", [None, ["model"]], [8, 12], "float32", {}),
    ("data=2,model=4", [["data"], None], [6, 8], "float32", {}),  # 4 copies, 8 columns: sliced on dim 1
    ("data=4,model=2", [None, None], [6, 8], "bfloat16", {}),  # whole on 8 devices
    ("data=4,model=2", [None, None], [6, 6], "float32", {}),  # 8 copies divide no dimension
    ("data=2,model=2,pipe=2", [["model"], None], [4, 12], "float32", {"max_replicas": 2}),
    ("data=8", [None], [16], "float32", {"min_slice_bytes": 16}),  # 2-value slices, 8 bytes: refused
    ("data=2,model=4", [["data", "model"], None], [8, 3], "float32", {}),
    ("data=2,model=4", [["model", "data"], None], [8, 3], "float32", {}),  # model major: pieces in the spec's order
    ("data=2,model=2,pipe=2", [["pipe"], ["data"]], [4, 6], "float32", {}),  # 2 copies along model: dim 0 cut
]


def expected_slices(where, shape, cut):
    """Each device's written slices, ``[[start, stop], ...]`` a dimension: its shard's piece, cut
    along Orbax's axis at its copy's slice when ``cut`` is given; [] for a device that writes nothing."""
    widths = [size // pieces for size, pieces in zip(shape, where.pieces, strict=True)]
    copies = cut.writers if cut else 1
    found = []
    for device in range(len(where.shard)):
        replica = int(where.replica[device])
        if replica >= copies:
            found.append([])
            continue
        box = [[int(where.piece[d][device]) * w, (int(where.piece[d][device]) + 1) * w] for d, w in enumerate(widths)]
        if cut:
            start = box[cut.axis][0] + replica * cut.local_shape[cut.axis]
            box[cut.axis] = [start, start + cut.local_shape[cut.axis]]
        found.append([box])
    return found


@pytest.mark.slow  # the session's real-mesh child (eight virtual CPU devices) and an Orbax import
@pytest.mark.parametrize("replica_parallel", [True, False], ids=["replica-parallel", "single-replica"])
def test_the_writers_are_orbax_s_own_on_real_arrays(real_mesh, replica_parallel):
    """Each device's written bytes and JAX's replica_id, from Orbax's ``get_replica_slices`` on real
    arrays on eight virtual CPU devices, against dcsim's port."""
    cases = [
        {
            "mesh": [[name, int(size)] for name, size in (axis.split("=") for axis in mesh.split(","))],
            "spec": spec,
            "shape": shape,
            "dtype": dtype,
            "replica_parallel": replica_parallel,
            **options,
        }
        for mesh, spec, shape, dtype, options in ORBAX_CASES
    ]
    real = real_mesh({"slices": cases})
    policy = "replica-parallel" if replica_parallel else "single-replica"
    for (mesh_text, spec, shape, dtype, options), devices in zip(ORBAX_CASES, real, strict=True):
        mesh = parse_mesh(mesh_text)
        pspec = P(*(None if entry is None else tuple(entry) for entry in spec))
        array = row(tuple(shape), pspec, mesh, dtype=dtype)
        where = placement(mesh, pspec, len(shape))
        assert where.replica.tolist() == [device["replica_id"] for device in devices], mesh_text
        writes = writers.plan_writes([array], mesh, policy, writers.SliceLimits(**options))
        assert writes.device_bytes.tolist() == [device["bytes"] for device in devices], (mesh_text, spec, options)
        slices = expected_slices(where, shape, writes.arrays[0].cut)
        assert slices == [device["slices"] for device in devices], (mesh_text, spec, options)


# --- restore, loss ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", writers.POLICIES)
def test_a_restore_onto_the_saving_mesh_reads_what_it_holds(policy):
    memory = state("data=4,model=2", "tensor")
    writes = writers.plan_writes(saved(memory), memory.mesh, policy)
    restore = plan_restore(writes.arrays, saved(memory), Hosts(memory.mesh, 2))
    assert restore.read_amplification == 1 and restore.bytes_read == restore.bytes_held


def test_a_boundary_that_cuts_chunks_reads_them_whole():
    """12 rows stored in 4 chunks of 3 (data=4), read as 3 pieces of 4 rows (data=3): each piece
    overlaps two chunks, 6 rows read for 4 held."""
    old, new = parse_mesh("data=4"), parse_mesh("data=3")
    written = writers.plan_writes([row((12, 5), P("data"), old)], old, "single-replica").arrays
    restore = plan_restore(written, [row((12, 5), P("data"), new)], Hosts(new, 1))
    assert restore.bytes_held == (4 * 5 * 4,) * 3
    assert restore.bytes_read == (6 * 5 * 4,) * 3
    assert restore.read_amplification == Fraction(3, 2)
    # one host of all three devices reads each chunk once: no amplification
    assert plan_restore(written, [row((12, 5), P("data"), new)], Hosts(new, 3)).read_amplification == 1


def test_an_incompatible_restore_is_refused_naming_what_differs():
    mesh = parse_mesh("data=2")
    written = writers.plan_writes([row((4, 4), P("data"), mesh)], mesh, "dcp").arrays
    with pytest.raises(
        ValueError, match=r"w: the checkpoint holds float32, the restore asks bfloat16 .*--restore-dtype"
    ):
        plan_restore(written, [row((4, 4), P("data"), mesh, dtype="bfloat16")], Hosts(mesh, 1))
    # Asked for, the cast is made and named; the bytes stay the checkpoint's: 4 x 4 float32 = 64 on one host.
    cast = plan_restore(written, [row((4, 4), P("data"), mesh, dtype="bfloat16")], Hosts(mesh, 2), cast=True)
    assert cast.casts == (("params", "float32", "bfloat16"),)
    assert cast.bytes_held == cast.bytes_read == (64,)
    assert cast.record()["casts"] == [{"part": "params", "from": "float32", "to": "bfloat16"}]
    with pytest.raises(ValueError, match="lacks, first v"):
        plan_restore(written, [row((4, 4), P("data"), mesh), row((4,), P(), mesh, path="v")], Hosts(mesh, 1))
    with pytest.raises(ValueError, match="shape 4x4, the restore layout needs 8x4"):
        plan_restore(written, [row((8, 4), P("data"), mesh)], Hosts(mesh, 1))


def test_a_lost_host_under_the_local_tier():
    # fsdp over 16 devices on 2 hosts: each host alone holds half of every array
    memory = state("data=16")
    hosts = Hosts(memory.mesh, 8)
    writes = writers.plan_writes(saved(memory), memory.mesh, "single-replica")
    loss = local_loss(writes.arrays, hosts)
    split = sum(write.written_bytes for write in writes.arrays if write.num_replicas == 1)
    assert sum(loss.bytes_lost) == split and loss.min_hosts_to_lose_data == 1
    # replicated over 8 hosts (ZeRO-0): every host holds a copy of everything
    ddp = state("data=64", setup=Training.stage(0, optimizer="adam"))
    loss = local_loss(writers.plan_writes(saved(ddp), ddp.mesh, "dcp").arrays, Hosts(ddp.mesh, 8))
    assert loss.bytes_lost == (0,) * 8 and loss.min_hosts_to_lose_data == 8
    assert loss.lost_groups() == () and loss.record()["arrays_lost"] == []


def test_hosts_that_lose_the_same_arrays_are_one_group():
    """Two layouts over five hosts, by hand: layout A is held alone by hosts 0, 2 and 4, layout B by
    hosts 2 and 3. Host 0 and host 4 lose A's arrays (a, c), host 2 all three, host 3 B's (b), host 1
    nothing; a host's group lists the arrays in the state's order."""
    layout_a, layout_b = np.array([1, 0, 1, 0, 1]), np.array([0, 0, 2, 1, 0])
    alone = (("params/a", layout_a), ("params/b", layout_b), ("params/c", layout_a))
    loss = Loss(
        tier="local", bytes_lost=(8, 0, 12, 4, 8), arrays_lost=(2, 0, 3, 1, 2), min_hosts_to_lose_data=1, alone=alone
    )
    assert loss.lost_groups() == (
        ((0, 4), ("params/a", "params/c")),
        ((2,), ("params/a", "params/b", "params/c")),
        ((3,), ("params/b",)),
    )
    assert [loss.paths_lost(host) for host in range(5)] == [
        ("params/a", "params/c"), (), ("params/a", "params/b", "params/c"), ("params/b",), ("params/a", "params/c"),
    ]  # fmt: skip
    record = loss.record()
    assert record["hosts"][2] == {"host": 2, "bytes_lost": 12, "arrays_lost": 3}
    assert record["arrays_lost"][0] == {"hosts": [0, 4], "paths": ["params/a", "params/c"]}


# --- storage and time ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("25GB/s", 25 * 10**9), ("200Gb/s", 25 * 10**9), ("5.3GB/s", 5_300_000_000), ("1GiB/s", 2**30), ("8 b/s", 1)],
)
def test_bandwidths_as_typed(text, expected):
    assert storages.parse_bandwidth(text, "--write-bandwidth") == expected


@pytest.mark.parametrize("text", ["0GB/s", "-1GB/s", "fast", "1e400GB/s", "3 GB", ""])
def test_a_bandwidth_of_0_negative_or_unreadable_is_refused(text):
    with pytest.raises(ValueError, match="--write-bandwidth must be"):
        storages.parse_bandwidth(text, "--write-bandwidth")


def test_save_time_is_the_slowest_host_at_its_share():
    own = storages.Storage(name="t", title="t", host_bytes_per_s=5 * 10**9)
    assert storages.save_time([10 * 10**9, 0], own).seconds == 2
    shared = storages.Storage(name="t", title="t", host_bytes_per_s=5 * 10**9, aggregate_bytes_per_s=10 * 10**9)
    time = storages.save_time([10**10] * 4, shared)  # 4 writers share 10 GB/s: 2.5 GB/s each
    assert time.seconds == 4 and time.limit == "the storage's aggregate bandwidth"
    files = storages.Storage(name="t", title="t", host_bytes_per_s=10**9, file_micros=100_000, file_micros_high=200_000)
    time = storages.save_time([10**9], files)  # 1 s + 3 files (one data file, manifest, metadata) x 0.1 s
    assert time.seconds == pytest.approx(1 + 8 * 0.1) and time.seconds_high == pytest.approx(1 + 8 * 0.2)


def test_the_speedup_curve_flattens_at_the_aggregate():
    mesh = parse_mesh("data=16")
    writes = writers.plan_writes([row((64, 4), P("data"), mesh)], mesh, "single-replica")
    total = int(writes.device_bytes.sum())
    disk = storages.Storage(name="t", title="t", host_bytes_per_s=total, aggregate_bytes_per_s=4 * total)
    curve = storages.speedup_curve(writes.device_bytes, 16, disk)
    assert [point.hosts for point in curve] == [1, 2, 4, 8, 16]
    assert [point.seconds for point in curve][:3] == [1, 0.5, 0.25]
    assert storages.flattens_at(curve).hosts == 4 and curve[-1].limit == "the storage's aggregate bandwidth"


def test_every_catalog_row_has_a_source_and_positive_figures():
    for row_ in (*storages.STORAGES.values(), *storages.HOST_LINKS.values()):
        assert row_.source
    for disk in storages.STORAGES.values():
        assert disk.host_bytes_per_s > 0 and disk.file_micros <= disk.file_micros_high


def test_the_default_policy_follows_orbax_s_platform_rule():
    assert storages.default_policy("h100-sxm")[0] == "single-replica"
    assert storages.default_policy("tpu-v5p")[0] == "replica-parallel"
    assert storages.default_policy("mi300x")[0] == "replica-parallel"  # JAX_PLATFORMS=rocm
    assert storages.default_policy(None)[0] == "replica-parallel"


# --- how often to save -----------------------------------------------------------------------------


def test_young_and_daly_by_hand():
    assert intervals.young_interval(50, 10_000) == pytest.approx(1000)
    assert intervals.daly_interval(50, 10_000) == pytest.approx(1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50)
    assert intervals.daly_interval(30_000, 10_000) == 10_000  # δ ≥ 2M: M
    assert intervals.mtbi_seconds(64, 50_000) == 50_000 * 3600 / 64


def test_the_observed_llama3_mtbi_is_an_mttf_near_mlperf_s():
    mttf = intervals.llama3_mtbi_seconds() * intervals.LLAMA3_GPUS / 3600
    assert 50_000 < mttf < 51_000


def test_goodput_is_highest_near_daly_s_interval():
    plan = intervals.plan_interval(16_384, 50_000, 30, 300)
    best = max(plan.curve, key=lambda point: point[1])
    assert plan.goodput_at_optimum >= best[1] - 1e-4 and 0 < plan.goodput_at_optimum < 1


@pytest.mark.parametrize("value", [0, -5, float("nan"), float("inf")])
def test_an_mttf_of_0_or_below_is_refused(value):
    with pytest.raises(ValueError, match="--mttf-hours must be a number of hours above 0"):
        PlanRequest(mttf_hours=value)


# --- the whole plan ----------------------------------------------------------------------------------


def test_the_plan_record_has_exactly_the_issue_s_keys():
    memory = state("data=16")
    plan = plan_checkpoint(MLP, memory, PlanRequest(devices_per_host=8, device="h100-sxm", asynchronous=True))
    record = plan.record()
    assert list(record) == [
        "total_bytes", "parts", "hosts", "writing_hosts", "max_host_bytes", "policy", "save_seconds",
        "blocking_seconds", "host_staging_bytes", "mtbi_seconds", "young_interval_seconds",
        "daly_interval_seconds", "goodput_at_optimum", "restore", "loss",
    ]  # fmt: skip
    assert record["policy"] == "single-replica" and record["writing_hosts"] == 2
    assert sum(host["bytes_written"] for host in record["hosts"]) == record["total_bytes"]
    assert record["restore"]["read_amplification"] == 1
    assert record["loss"]["persistent"]["min_hosts_to_lose_data"] is None
    assert plan.blocking_seconds == plan.writes.max_device_bytes / 64e9


def test_a_restore_mesh_that_cannot_hold_the_arrays_is_refused():
    with pytest.raises(ValueError, match="--restore-mesh: the restore cannot lay the checkpoint out"):
        plan_checkpoint(MLP, state("data=4"), PlanRequest(devices_per_host=2, restore_mesh=parse_mesh("data=3")))


PAGE_WORDS = SettingNames(devices_per_host="Hosts of", device="Chip", asynchronous="Async", restore_mesh="Restore on")


@pytest.mark.parametrize(
    ("mesh", "request_", "says"),
    [
        ("data=8", {"devices_per_host": 3}, "Hosts of must divide the mesh's 8 devices"),
        ("data=8", {"devices_per_host": 2, "asynchronous": True}, "Async needs Chip with a host link figure"),
        ("data=4", {"devices_per_host": 2, "restore_mesh": parse_mesh("data=3")}, "Restore on: the restore cannot"),
    ],
    ids=["devices-a-host", "async", "restore-mesh"],
)
def test_refusals_name_the_settings_as_the_request_names_them(mesh, request_, says):
    with pytest.raises(ValueError, match="^" + says) as raised:
        plan_checkpoint(MLP, state(mesh), PlanRequest(**request_, names=PAGE_WORDS))
    assert "--" not in str(raised.value)


def test_the_numbering_is_per_spec_not_per_device():
    """16,384 devices cost what 8 do: a handful of placements, whatever the array count."""
    mesh = parse_mesh("data=2048,model=8")
    arrays = [row((16384, 128), P(("data", "model")), mesh, path=f"w{index}") for index in range(200)]
    writes = writers.plan_writes(arrays, mesh, "replica-parallel")
    assert np.all(writes.device_bytes == 200 * 128 * 4)


def test_an_async_save_is_not_planned_more_often_than_its_background_write():
    """llama3.1-405b-sized arithmetic at small scale: a tiny blocking copy gives Daly an interval
    shorter than the background write, so the plan saves no more often than the write takes."""
    memory = state("data=16")
    slow = storages.Storage(name="t", title="t", host_bytes_per_s=1)  # a byte a second: minutes of writing
    plan = plan_checkpoint(MLP, memory, PlanRequest(device="h100-sxm", asynchronous=True, storage=slow))
    assert plan.interval.daly < plan.save.seconds == plan.save_every
    assert "the background write; Daly's" in plan.verdict
    synchronous = plan_checkpoint(MLP, memory, PlanRequest(storage=slow))
    assert synchronous.save_every == synchronous.interval.daly


@st.composite
def laid_out_arrays(draw):
    """A mesh of up to three axes and a few arrays, each dimension split over axes that divide it."""
    names = ["data", "model", "pipe"][: draw(st.integers(1, 3))]
    sizes = [draw(st.sampled_from([1, 2, 3, 4])) for _ in names]
    mesh = parse_mesh(",".join(f"{name}={size}" for name, size in zip(names, sizes, strict=True)))
    arrays = []
    for index in range(draw(st.integers(1, 4))):
        free = list(names)
        shape, spec = [], []
        for _ in range(draw(st.integers(0, 3))):
            axes = [name for name in free if draw(st.booleans())]
            free = [name for name in free if name not in axes]
            pieces = math.prod(dict(mesh.axes)[name] for name in axes)
            shape.append(pieces * draw(st.integers(1, 6)))
            spec.append(tuple(axes) if axes else None)
        arrays.append(row(tuple(shape), P(*spec), mesh, path=f"a{index}"))
    return mesh, arrays, draw(st.sampled_from([1, 2, 3, 4]))


@given(laid_out_arrays(), st.sampled_from(writers.POLICIES))
def test_every_policy_writes_each_shard_once_whatever_the_layout(case, policy):
    mesh, arrays, max_replicas = case
    writes = writers.plan_writes(arrays, mesh, policy, writers.SliceLimits(max_replicas=max_replicas))
    expected = sum(write.shard_bytes * write.num_shards for write in writes.arrays)
    assert int(writes.device_bytes.sum()) == expected == sum(math.prod(a.shape) * 4 for a in arrays)
    # a device writes only what it holds: never more than its own shards' bytes
    assert int(writes.device_bytes.max()) <= sum(writers.shard_bytes(array) for array in arrays)


@given(laid_out_arrays(), st.sampled_from(writers.POLICIES), st.data())
def test_a_host_reads_at_least_what_it_holds_and_exactly_that_on_the_saving_mesh(case, policy, data):
    mesh, arrays, _ = case
    writes = writers.plan_writes(arrays, mesh, policy)
    per_host = data.draw(st.sampled_from([n for n in range(1, mesh.num_devices + 1) if mesh.num_devices % n == 0]))
    same = plan_restore(writes.arrays, arrays, Hosts(mesh, per_host))
    assert same.bytes_read == same.bytes_held
    # onto one axis over all the devices, each array along its first dimension where it divides
    flat = parse_mesh(f"data={mesh.num_devices}")
    moved = [
        row(a.shape, P("data") if a.shape and a.shape[0] % mesh.num_devices == 0 else P(), flat, path=a.path)
        for a in arrays
    ]
    restore = plan_restore(writes.arrays, moved, Hosts(flat, per_host))
    assert all(read >= held for read, held in zip(restore.bytes_read, restore.bytes_held, strict=True))
