"""Layouts with experts: stacked expert arrays split over a mesh axis named ``expert``, checked by
hand on a small synthetic Mixture-of-Experts model, against real devices, and as properties."""

import tomllib
from pathlib import Path

import hypothesis.strategies as hs
import pytest
from arrays import array
from hypothesis import given, settings
from jax.sharding import PartitionSpec

from conftest import check_on_real_devices, examples
from dcsim.cli import main
from dcsim.cli.layout import render_layout_table
from dcsim.memory import budget
from dcsim.model.count import ParamReport
from dcsim.sharding import layout, meshes
from dcsim.sharding.layout import LayoutError, compute_layout, partition_specs
from dcsim.sharding.meshes import parse_mesh, parse_rules
from dcsim.ui import layout as lw


def moe(num_experts=8, d_model=16, ffn=32, blocks=2):
    """Each block: dense attention (qkv 16x48, out 16x16), a router (16x8) and stacked experts
    (gate and up 8x16x32, down 8x32x16): 768 + 256 + 128 + 3 x 4,096 = 13,440 values a block."""
    rows = []
    for block in range(blocks):
        rows += [
            array(f"block_{block}/attn/qkv/kernel", (d_model, 3 * d_model)),
            array(f"block_{block}/attn/out/kernel", (d_model, d_model)),
            array(f"block_{block}/moe/router/kernel", (d_model, num_experts)),
            array(f"block_{block}/moe/experts/gate", (num_experts, d_model, ffn)),
            array(f"block_{block}/moe/experts/up", (num_experts, d_model, ffn)),
            array(f"block_{block}/moe/experts/down", (num_experts, ffn, d_model)),
        ]
    return ParamReport(arrays=tuple(rows))


MOE = moe()  # 2 x 13,440 = 26,880 values
BLOCK = ["qkv", "out", "router", "gate", "up", "down"]


def shards(result, block=0):
    """Block ``block``'s shard shapes by array name."""
    return dict(zip(BLOCK, [row.shard_shape for row in result.arrays[6 * block : 6 * block + 6]], strict=True))


# --- golden layouts, checked by hand ------------------------------------------------------------


# tests/data/expert_layouts.toml: each golden layout by test id, with the arithmetic that checks it.
GOLDEN = {
    name: (
        row["mesh"],
        row["strategy"],
        {array: tuple(shape) for array, shape in row["shards"].items()},
        row["values_per_device"],
        row["replication"],
    )
    for name, row in tomllib.loads((Path(__file__).parent / "data" / "expert_layouts.toml").read_text()).items()
}


@pytest.mark.parametrize("mesh, strategy, shapes, per_device, replication", list(GOLDEN.values()), ids=list(GOLDEN))
def test_golden_expert_layouts(mesh, strategy, shapes, per_device, replication):
    mesh_spec = parse_mesh(mesh)
    result = compute_layout(MOE, mesh_spec, strategy)
    assert result.total_params == 26_880
    assert shards(result) == shapes == shards(result, block=1)
    assert result.values_per_device == per_device
    assert result.total_stored_values == per_device * mesh_spec.num_devices
    by_name = dict(zip(BLOCK, result.arrays[:6], strict=True))
    assert {name: by_name[name].replication_factor for name in replication} == replication
    assert result.num_expert_arrays == 6 and [row.expert for row in result.arrays[:6]] == [False] * 3 + [True] * 3
    assert all(row.spec[0] == "expert" for row in result.arrays if row.expert)
    assert result.num_replicated_fallbacks == 0


def test_fsdp_on_an_expert_mesh_is_the_ideal_share():
    for mesh in ("data=2,expert=8", "data=2,expert=4,model=2", "expert=8", "expert=2,data=4"):
        result = compute_layout(MOE, parse_mesh(mesh), "fsdp")
        assert result.gap == 0 and result.replication_factor == 1, mesh


def test_specs_and_notes_say_what_is_split_where():
    specs = partition_specs(MOE, parse_mesh("data=2,expert=4,model=2"), "fsdp")
    assert specs["block_0/moe/experts/gate"] == PartitionSpec("expert", None, ("data", "model"))
    assert specs["block_0/moe/experts/down"] == PartitionSpec("expert", ("data", "model"))
    assert specs["block_0/attn/qkv/kernel"] == PartitionSpec(None, ("data", "expert", "model"))
    notes = {
        strategy: compute_layout(MOE, parse_mesh("data=2,expert=4,model=2"), strategy).arrays[3].note
        for strategy in ("replicated", "fsdp", "tensor")
    }
    assert notes == {
        "replicated": "replicated by the strategy, except num_experts (dimension 0) over `expert`",
        "fsdp": "num_experts (dimension 0) over `expert`, dimension 2 over mesh axes `data` x `model` "
        "(sizes 2 x 2 = 4)",
        "tensor": "num_experts (dimension 0) over `expert`, last dimension over `model`",
    }
    alone = compute_layout(MOE, parse_mesh("expert=8"), "fsdp").arrays[3]
    assert alone.note == "num_experts (dimension 0) over `expert`; no other mesh axis to split the rest over"


def test_without_an_expert_axis_expert_arrays_are_laid_out_like_any_other():
    result = compute_layout(MOE, parse_mesh("data=8"), "fsdp")
    assert shards(result)["gate"] == (8, 16, 4)  # the largest dimension, 32, over 8 devices
    assert shards(result)["down"] == (8, 4, 16)
    tensor = compute_layout(MOE, parse_mesh("data=2,model=4"), "tensor")
    assert shards(tensor)["gate"] == (8, 16, 8) and tensor.arrays[3].replication_factor == 2


def test_fsdp_copies_experts_over_the_other_axes_when_nothing_else_divides_and_flags_them():
    result = compute_layout(MOE, parse_mesh("data=3,expert=4"), "fsdp")
    # Dense over 12: only qkv's 48 divides (48/12 = 4); out and router are replicated. Experts: 8/4 = 2
    # each, and none of 16 and 32 splits 3 ways, so each is copied over data.
    assert shards(result) == {
        "qkv": (16, 4), "out": (16, 16), "router": (16, 8), "gate": (2, 16, 32), "up": (2, 16, 32),
        "down": (2, 32, 16),
    }  # fmt: skip
    assert result.values_per_device == 2 * (64 + 256 + 128 + 3 * 1024)
    assert result.num_replicated_fallbacks == 2 * 5
    gate = result.arrays[3]
    assert gate.replicated_fallback and gate.replication_factor == 3 and gate.spec == PartitionSpec("expert")
    assert gate.note == (
        "replicated over mesh axis `data` (size 3): no dimension but num_experts of 8x16x32 splits evenly into "
        "3 parts; num_experts (dimension 0) over `expert`"
    )
    outcome = lw.lay_out(MOE, parse_mesh("data=3,expert=4"), "fsdp")
    assert "replicated instead (expert arrays: over every axis but `expert`)" in lw.fallback_warning(outcome.layout)
    dense_only = lw.lay_out(moe(blocks=1), parse_mesh("data=3"), "fsdp")
    assert "replicated on every device instead" in lw.fallback_warning(dense_only.layout)


# --- experts that the expert axis does not divide ------------------------------------------------

SIXTY = (
    "num_experts (dimension 0) is 60, which mesh axis `expert` (size 8) does not divide evenly (JAX splits a "
    "dimension only into equal parts); an axis `expert` of size 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60 "
    "would divide it"
)


@pytest.mark.parametrize("strategy", ["replicated", "fsdp", "tensor"])
def test_sixty_experts_on_eight_say_so_with_the_sizes_that_would_divide(strategy):
    report = moe(num_experts=60, blocks=1)
    mesh = parse_mesh("expert=8,model=2")  # 16 devices: every dense array splits
    with pytest.raises(LayoutError) as refused:
        compute_layout(report, mesh, strategy)
    paths = [path for path, _ in refused.value.problems]
    assert paths == ["block_0/moe/experts/gate", "block_0/moe/experts/up", "block_0/moe/experts/down"]
    first = refused.value.problems[0][1]
    assert (
        first == f"`block_0/moe/experts/gate` (shape 60x16x32) cannot be split as the {strategy} strategy asks: {SIXTY}"
    )
    assert "IndivisibleError" not in str(refused.value) and "\n" not in str(refused.value)
    # The page still lays out what it can: the dense arrays.
    outcome = lw.lay_out(report, mesh, strategy)
    assert [row.path for row in outcome.placed.arrays] == [row.path for row in report.arrays[:3]]
    table = lw.array_table(report, outcome)
    dense = lw.REPLICATED if strategy == "replicated" else lw.SPLIT
    assert list(table["status"]) == [dense] * 3 + [lw.IMPOSSIBLE] * 3


def test_a_joined_rule_and_a_prime_count_of_experts_are_said_in_the_same_words():
    with pytest.raises(LayoutError, match=r"mesh axes `expert` x `data` \(sizes 8 x 2 = 16\) do not divide evenly"):
        compute_layout(
            moe(60, blocks=1), parse_mesh("data=2,expert=8"), "custom", parse_rules(["*/experts/*=expert+data"])
        )
    with pytest.raises(LayoutError, match=r"an axis `expert` of size 1 or 7 would divide it"):
        compute_layout(moe(7, blocks=1), parse_mesh("expert=2"), "fsdp")
    # a dense array's refusal is unchanged: its dimension, not num_experts
    with pytest.raises(LayoutError, match=r"its dimension 1 has size 60, which mesh axis `model` \(size 8\)"):
        compute_layout(moe(60, blocks=1), parse_mesh("expert=4,model=8"), "tensor")


@pytest.mark.parametrize(
    "size, words",
    [
        (1, "of size 1"),
        (2, "of size 1 or 2"),
        (720_720, "of size 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, …"),  # 240 divisors
    ],
)
def test_dividing_sizes_are_listed_up_to_a_cap(size, words):
    assert meshes.dividing_sizes_text(size, ["expert"]) == f"an axis `expert` {words}"


# --- custom rules name `expert` like any other axis ------------------------------------------------


def test_custom_rules_naming_expert():
    rules = parse_rules(["*/experts/*=expert,None,model", "*/kernel=data+expert,model"])
    result = compute_layout(MOE, parse_mesh("data=2,expert=4,model=2"), "custom", rules)
    # experts: 8/4 = 2 each, the last dimension over model; kernels: rows over data x expert (8), columns over model
    assert shards(result) == {
        "qkv": (2, 24), "out": (2, 8), "router": (2, 4), "gate": (2, 16, 16), "up": (2, 16, 16), "down": (2, 32, 8),
    }  # fmt: skip
    assert result.values_per_device == 2 * (48 + 16 + 8 + 3 * 512)
    assert [row.replication_factor for row in result.arrays[:6]] == [1, 1, 1, 2, 2, 2]  # experts copied over data
    assert result.arrays[3].note == "rule */experts/*=expert,None,model"
    with pytest.raises(ValueError, match=r"names mesh axis `expert`, which the mesh data=8 does not have"):
        compute_layout(MOE, parse_mesh("data=8"), "custom", parse_rules(["*/experts/*=expert"]))


# --- the shape-only fast path and the budget --------------------------------------------------------


def test_the_layout_by_shape_refuses_an_expert_mesh_it_cannot_tell_apart():
    shapes = [row.shape for row in MOE.arrays]
    with pytest.raises(ValueError, match=r"has an `expert` axis.*a layout by shape alone cannot tell them apart"):
        layout.shard_values_by_shape(shapes, parse_mesh("data=2,expert=8"), "fsdp")


@pytest.mark.parametrize("strategy, axis", [("fsdp", "data"), ("replicated", "data"), ("tensor", "model")])
def test_the_budget_meshes_have_no_expert_axis_and_agree_with_compute_layout(strategy, axis):
    demand = budget.demand(MOE, "float32")
    for devices in (1, 2, 3, 4, 8, 16, 32):
        mesh = meshes.MeshSpec(((axis, devices),))
        try:
            full = compute_layout(MOE, mesh, strategy).values_per_device
        except LayoutError:
            with pytest.raises(LayoutError):
                budget.per_device(demand, mesh, strategy, "values")
            continue
        assert budget.per_device(demand, mesh, strategy, "values") == full, (strategy, devices)


# --- what the front ends say ---------------------------------------------------------------------


def test_the_expert_axis_is_explained_with_and_without_experts():
    mesh = parse_mesh("data=2,expert=4")
    assert lw.experts_caption(MOE, parse_mesh("data=8")) is None
    with_experts = lw.experts_caption(MOE, mesh)
    assert with_experts.startswith("6 expert arrays (under modules named `experts`): the built-in strategies split")
    assert "over mesh axis `expert` (size 4)" in with_experts
    dense = ParamReport(arrays=MOE.arrays[:3])
    assert lw.experts_caption(dense, mesh).startswith(
        "This model has no experts (no arrays under a module named `experts`), so mesh axis `expert` (size 4) acts "
        "as one more data axis"
    )
    assert "`expert`" in lw.MESH_HELP


def test_the_table_shows_each_expert_row_as_a_device_holds_it():
    outcome = lw.lay_out(MOE, parse_mesh("data=2,expert=8"), "replicated")
    table = lw.array_table(MOE, outcome).set_index("path")
    gate = table.loc["block_1/moe/experts/gate"]
    assert (gate["shape"], gate["shard_shape"], gate["partition_spec"]) == ("8x16x32", "1x16x32", "P('expert',)")
    assert (gate["status"], gate["values_per_shard"], gate["replication_factor"]) == (lw.SPLIT, 512, 2)
    assert table.loc["block_1/attn/qkv/kernel", "status"] == lw.REPLICATED
    assert int(table["values_per_shard"].sum()) == outcome.layout.values_per_device
    assert int(table["stored_values"].sum()) == outcome.layout.total_stored_values


def test_the_command_line_table_has_the_expert_rows_and_the_line_about_experts():
    text = render_layout_table(compute_layout(MOE, parse_mesh("data=2,expert=8"), "fsdp"))
    gate = next(line for line in text.splitlines() if line.startswith("block_0/moe/experts/gate"))
    assert "8x16x32" in gate and "1x16x16" in gate and "256" in gate
    assert "Experts: 6 expert arrays (under modules named `experts`)" in text
    assert "values per device              1,680\n" in text
    plain = render_layout_table(compute_layout(MOE, parse_mesh("data=16"), "fsdp"))
    assert "Experts:" not in plain


def test_the_command_line_says_a_dense_model_has_no_experts(capsys):
    code = main(["layout", "--input-dim", "8", "--features", "8", "--mesh", "data=2,expert=2", "--strategy", "fsdp"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "values per device              18\n" in out  # kernel 2x8 + bias 2: expert is one more data axis
    assert "Experts: This model has no experts" in out


# --- properties and real devices --------------------------------------------------------------------


@hs.composite
def expert_cases(draw):
    report = moe(
        num_experts=draw(hs.sampled_from([1, 2, 3, 4, 6, 8, 12, 60])),
        d_model=draw(hs.sampled_from([2, 4, 6, 8])),
        ffn=draw(hs.sampled_from([1, 3, 4, 8])),
        blocks=draw(hs.integers(1, 2)),
    )
    names = draw(hs.permutations(["data", "expert", "model"]))[: draw(hs.integers(1, 3))]
    if "expert" not in names:
        names = [*names, "expert"]
    mesh = meshes.MeshSpec(tuple((name, draw(hs.sampled_from([1, 2, 3, 4, 8]))) for name in names))
    strategies = ["replicated", "fsdp", "tensor"] if "model" in names else ["replicated", "fsdp"]
    return report, mesh, draw(hs.sampled_from(strategies))


@settings(max_examples=examples(120))
@given(expert_cases())
def test_expert_layouts_add_up(case):
    report, mesh, strategy = case
    try:
        result, problems, refusal = compute_layout(report, mesh, strategy), (), ""
    except LayoutError as err:
        result, problems, refusal = None, err.problems, str(err)
    if result is None:
        assert "IndivisibleError" not in refusal and "\n" not in refusal
        for path, message in problems:
            assert message.startswith(f"`{path}`")
            if "/experts/" in path and "num_experts" in message:
                assert "mesh axis `expert`" in message and "would divide it" in message
        return
    devices = mesh.num_devices
    # The mesh stores what the devices hold, and every value replication_factor times.
    assert (
        result.values_per_device * devices == result.total_stored_values == sum(r.stored_values for r in result.arrays)
    )
    assert sum(row.num_values * row.replication_factor for row in result.arrays) == result.total_stored_values
    for row in result.arrays:
        assert row.values_per_shard * devices == row.num_values * row.replication_factor
        if row.expert:  # num_experts always split over `expert`
            assert row.spec[0] == "expert"
            assert row.shard_shape[0] * mesh.shape["expert"] == row.shape[0]
        else:
            assert "expert" not in str(row.spec) or strategy == "fsdp"


@pytest.mark.slow  # the session's real-mesh child (eight virtual CPU devices)
def test_expert_layouts_agree_with_real_devices(real_mesh):
    plans = [
        (MOE, "data=2,expert=4", "fsdp"),
        (MOE, "data=2,expert=4", "replicated"),
        (MOE, "expert=2,data=2,model=2", "tensor"),
        (MOE, "expert=2,data=2,model=2", "fsdp"),
        (moe(blocks=1), "data=3,expert=2", "fsdp"),
        (moe(blocks=1), "expert=8", "fsdp"),
    ]
    meshes = [parse_mesh(mesh_text) for _, mesh_text, _ in plans]
    layouts = [
        (mesh, compute_layout(report, mesh, strategy))
        for mesh, (report, _, strategy) in zip(meshes, plans, strict=True)
    ]
    assert check_on_real_devices(real_mesh, layouts) > 30
