"""Shard layouts by JAX's rules: golden layouts by hand, errors in the person's terms, agreement
with real devices, huge meshes, hostile input, properties, and the ``layout`` command."""

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import hostile
import hypothesis.strategies as hs
import pytest
from arrays import param_report
from hypothesis import given, settings
from jax.sharding import AbstractMesh, PartitionSpec

from conftest import check_on_real_devices, examples
from dcsim.cli import main
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.report.records import layout_record
from dcsim.report.tables import layout_frame
from dcsim.sharding.layout import LayoutError, compute_layout, partition_specs
from dcsim.sharding.meshes import MAX_MESH_DEVICES, MeshSpec, Rule, abstract_mesh, parse_mesh, parse_rule, parse_rules

ROOT = Path(__file__).resolve().parent.parent


def dense(input_dim, *widths, use_bias=True):
    layers = tuple(DenseLayer(features=width, use_bias=use_bias) for width in widths)
    return count_params(ModelConfig(input_dim=input_dim, layers=layers))


def synthetic(**shapes):
    """A report of arrays with the given shapes; ``a__b=(2, 3)`` is the array ``a/b``."""
    return param_report({name.replace("__", "/"): shape for name, shape in shapes.items()})


DENSE_8_8 = dense(8, 8)  # kernel 8x8 (64) + bias 8 = 72 values


# --- golden layouts, checked by hand --------------------------------------------------------


@pytest.mark.parametrize(
    "mesh, strategy, per_device, ideal, stored, replication",
    [
        # kernel 8x4 + bias 4 on each of 2 devices; nothing replicated
        ("model=2", "tensor", 36, Fraction(36), 72, 1),
        # every device holds all 72 values: 4 copies of each
        ("data=4", "replicated", 72, Fraction(18), 288, 4),
        # kernel rows 8/4 = 2 (2x8 = 16) + bias 8/4 = 2: 18, the ideal share exactly
        ("data=4", "fsdp", 18, Fraction(18), 72, 1),
        # split over model, copied over data: 36 per device, 4 x 36 = 144 stored, twice the total
        ("data=2,model=2", "tensor", 36, Fraction(18), 144, 2),
        # fsdp over data x model = 4 parts is as good as data=4
        ("data=2,model=2", "fsdp", 18, Fraction(18), 72, 1),
        # 8 divides by no 3: fsdp must replicate; ideal 24, each device 72
        ("data=3", "fsdp", 72, Fraction(24), 216, 3),
    ],
    ids=["tensor-model2", "replicated-data4", "fsdp-data4", "tensor-data2-model2", "fsdp-data2-model2", "fsdp-data3"],
)
def test_golden_layouts_of_dense8_on_input8(mesh, strategy, per_device, ideal, stored, replication):
    result = compute_layout(DENSE_8_8, parse_mesh(mesh), strategy)
    assert result.total_params == 72
    assert result.values_per_device == per_device
    assert result.ideal_share.exact == ideal
    assert result.total_stored_values == stored
    assert result.replication_factor == replication
    assert result.raw_float32_bytes_per_device == 4 * per_device
    assert result.gap == per_device - ideal
    assert result.gap_ratio == Fraction(per_device) / ideal


def test_tensor_example_rows():
    result = compute_layout(DENSE_8_8, parse_mesh("model=2"), "tensor")
    kernel, bias = result.arrays
    assert (kernel.path, kernel.shape, kernel.shard_shape, kernel.values_per_shard) == (
        "Dense_0/kernel",
        (8, 8),
        (8, 4),
        32,
    )
    assert (bias.path, bias.shape, bias.shard_shape, bias.values_per_shard) == ("Dense_0/bias", (8,), (4,), 4)
    assert kernel.spec == PartitionSpec(None, "model") and kernel.partition_spec == "P(None, 'model')"
    assert kernel.rule_spec == "None,model" and bias.rule_spec == "model"
    assert not kernel.replicated_fallback and kernel.replication_factor == 1


def test_tensor_replicates_over_the_other_axes():
    result = compute_layout(DENSE_8_8, parse_mesh("data=2,model=2"), "tensor")
    assert [row.replication_factor for row in result.arrays] == [2, 2]
    assert [row.stored_values for row in result.arrays] == [128, 16]


def test_replicated_is_not_flagged_as_forced():
    result = compute_layout(DENSE_8_8, parse_mesh("data=4"), "replicated")
    assert all(row.spec == PartitionSpec() and not row.replicated_fallback for row in result.arrays)
    assert [row.replication_factor for row in result.arrays] == [4, 4]


# --- fsdp: one dimension over every mesh axis together ----------------------------------------


@pytest.mark.parametrize(
    "shape, mesh, dimension",
    [
        ((6, 6), "data=2", 0),  # a tie: the first
        ((4, 8), "data=4", 1),  # the largest that divides
        ((8, 6), "data=3", 1),  # the largest, 8, does not divide by 3; 6 does
        ((12, 16, 4), "data=2,model=2", 1),  # over data x model = 4
        ((3, 8, 8), "a=2,b=2,c=2", 1),  # three axes together, 8 parts
    ],
    ids=["tie-first", "largest", "largest-dividing", "two-axes", "three-axes"],
)
def test_fsdp_splits_the_largest_evenly_dividing_dimension(shape, mesh, dimension):
    mesh_spec = parse_mesh(mesh)
    result = compute_layout(synthetic(w=shape), mesh_spec, "fsdp")
    (row,) = result.arrays
    names = mesh_spec.names
    expected = [None] * len(shape)
    expected[dimension] = names if len(names) > 1 else names[0]
    assert row.spec == PartitionSpec(*expected[: dimension + 1])
    assert row.shard_shape[dimension] == shape[dimension] // mesh_spec.num_devices
    assert row.replication_factor == 1 and not row.replicated_fallback


def test_fsdp_entry_names_every_axis_as_one_tuple():
    specs = partition_specs(DENSE_8_8, parse_mesh("data=2,model=2"), "fsdp")
    assert specs == {
        "Dense_0/kernel": PartitionSpec(("data", "model")),
        "Dense_0/bias": PartitionSpec(("data", "model")),
    }


@pytest.mark.parametrize("shape, why", [((5, 7), "no dimension of 5x7"), ((), "a scalar")], ids=["odd", "scalar"])
def test_fsdp_replicates_and_flags_what_cannot_split(shape, why):
    (row,) = compute_layout(synthetic(w=shape), parse_mesh("data=2"), "fsdp").arrays
    assert row.replicated_fallback and row.spec == PartitionSpec()
    assert row.replication_factor == 2 and row.shard_shape == shape
    assert row.note.startswith("replicated: ") and why in row.note


# --- impossible requests, said in the person's terms -----------------------------------------


def test_dense5_over_model2_names_parameter_dimension_axis_and_sizes():
    with pytest.raises(ValueError, match=r"`Dense_0/kernel` \(shape 8x5\).*dimension 1 has size 5.*`model` \(size 2\)"):
        compute_layout(dense(8, 5), parse_mesh("model=2"), "tensor")


def test_every_array_that_cannot_be_placed_is_listed():
    with pytest.raises(LayoutError) as caught:
        compute_layout(dense(8, 5, 6, 3), parse_mesh("model=2"), "tensor")
    paths = [path for path, _ in caught.value.problems]
    assert paths == ["Dense_0/kernel", "Dense_0/bias", "Dense_2/kernel", "Dense_2/bias"]
    assert "dimension 1 has size 3" in caught.value.problems[2][1]
    assert str(caught.value).endswith(
        "; 3 more arrays cannot be placed either (`Dense_0/bias`, `Dense_2/kernel`, `Dense_2/bias`)"
    )
    assert isinstance(caught.value, ValueError) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "report, mesh, strategy, rules, message",
    [
        (DENSE_8_8, "data=4", "tensor", (), r"mesh axis named `model`, and the mesh data=4 has none"),
        (synthetic(s=()), "model=2", "tensor", (), r"`s` is a scalar"),
        (
            DENSE_8_8,
            "data=4",
            "sideways",
            (),
            r"strategy must be one of replicated, fsdp, tensor, megatron, custom; got 'sideways'",
        ),
        (DENSE_8_8, "data=4", "custom", (), r"custom strategy needs at least one"),
        (DENSE_8_8, "data=4", "fsdp", ("*=data",), r"rules apply only to the custom strategy, not fsdp"),
        (DENSE_8_8, "data=4", "custom", ("*/kernel=None,model",), r"names mesh axis `model`.*axes: data"),
        (DENSE_8_8, "data=4", "custom", ("*=data,None",), r"`Dense_0/bias` \(shape 8\) has 1 dimension but rule"),
        (
            dense(6, 6),
            "data=2,model=2",
            "custom",
            ("*/kernel=data+model",),
            r"`Dense_0/kernel` \(shape 6x6\).*dimension 0 has size 6.*"
            r"mesh axes `data` x `model` \(sizes 2 x 2 = 4\) do not divide",
        ),
        (
            dense(8, 5),
            "data=4,model=2",
            "custom",
            ("*/kernel=data,model",),
            r"dimension 1 has size 5, which mesh axis `model` \(size 2\) does not",
        ),
    ],
    ids=[
        "tensor-no-model",
        "tensor-scalar",
        "unknown-strategy",
        "custom-no-rules",
        "rules-not-custom",
        "unknown-axis",
        "spec-longer-than-rank",
        "indivisible-joined",
        "indivisible-second-dimension",
    ],
)
def test_impossible_requests(report, mesh, strategy, rules, message):
    rules = parse_rules(rules)
    with pytest.raises(ValueError, match=message):
        compute_layout(report, parse_mesh(mesh), strategy, rules)
    with pytest.raises(ValueError, match=message):
        partition_specs(report, parse_mesh(mesh), strategy, rules)


def test_the_wrong_kinds_of_argument():
    with pytest.raises(TypeError, match="must be a MeshSpec"):
        compute_layout(DENSE_8_8, "data=4", "fsdp")
    with pytest.raises(TypeError, match="ParamReport"):
        compute_layout({"w": (2,)}, parse_mesh("data=2"), "fsdp")
    with pytest.raises(TypeError, match="must be a Rule"):
        compute_layout(DENSE_8_8, parse_mesh("data=2"), "custom", ["*=data"])


# --- custom rules -----------------------------------------------------------------------------


def test_custom_rules_first_match_wins_and_unmatched_are_flagged():
    report = dense(8, 8, 4)
    rules = parse_rules(["Dense_1/*=data", "*/kernel=None,model", "*/kernel=data"])
    result = compute_layout(report, parse_mesh("data=2,model=2"), "custom", rules)
    rows = {row.path: row for row in result.arrays}
    assert rows["Dense_0/kernel"].spec == PartitionSpec(None, "model")
    assert rows["Dense_0/kernel"].note == "rule */kernel=None,model"
    assert rows["Dense_1/kernel"].spec == PartitionSpec("data")  # the first rule, not the second
    assert rows["Dense_1/kernel"].shard_shape == (4, 4) and rows["Dense_1/kernel"].replication_factor == 2
    assert rows["Dense_0/bias"].replicated_fallback and rows["Dense_0/bias"].note == "replicated: no rule matched"
    assert not rows["Dense_1/bias"].replicated_fallback and rows["Dense_1/bias"].shard_shape == (2,)
    # 8x4 + 8 + 4x4 + 2 = 58 per device of 112 values over 4 devices
    assert result.values_per_device == 32 + 8 + 16 + 2 and result.total_params == 108


def test_custom_joined_axes_and_a_short_spec():
    rules = parse_rules(["*/kernel=data+model", "*/bias="])
    result = compute_layout(dense(8, 8), parse_mesh("data=2,model=2"), "custom", rules)
    kernel, bias = result.arrays
    assert kernel.spec == PartitionSpec(("data", "model")) and kernel.shard_shape == (2, 8)
    assert kernel.rule_spec == "data+model"
    # an empty SPEC replicates on purpose: not flagged
    assert bias.spec == PartitionSpec() and bias.replication_factor == 4 and not bias.replicated_fallback


def test_globs_match_whole_paths_case_sensitively():
    rule = parse_rule("block_*/mlp/*=None")
    assert rule.matches("block_3/mlp/kernel") and rule.matches("block_3/x/mlp/kernel")  # * crosses /
    assert not rule.matches("Block_3/mlp/kernel") and not rule.matches("block_3/mlp")


# --- meshes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, axes",
    [
        ("data=4", (("data", 4),)),
        ("data=4,model=2", (("data", 4), ("model", 2))),
        (" data = 4 , model = 2 ", (("data", 4), ("model", 2))),
        ("x=4.0,_y=1e1", (("x", 4), ("_y", 10))),
        ("data=1048576", (("data", MAX_MESH_DEVICES),)),
    ],
    ids=["one-axis", "two-axes", "spaces", "number-forms", "largest"],
)
def test_parse_mesh(text, axes):
    mesh = parse_mesh(text)
    assert mesh.axes == axes
    assert mesh.num_devices == math.prod(size for _, size in axes)
    assert parse_mesh(mesh.text) == mesh


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"AXIS=SIZE"),
        ("data", r"AXIS=SIZE, e.g. data=4,model=2; got 'data'"),
        ("=4", r"AXIS=SIZE"),
        ("data=4,", r"AXIS=SIZE"),
        ("data=4=2", r"AXIS=SIZE"),
        ("data=0", r"mesh axis `data` needs a size .* from 1 to 1,048,576, got '0'"),
        ("data=2.5", r"got '2.5'"),
        ("data=-1", r"got '-1'"),
        ("data=1e400", r"got '1e400'"),
        ("data=four", r"got 'four'"),
        ("data=2097152", r"got '2097152'"),
        ("1data=2", r"letter or _ .* got '1data'"),
        ("da-ta=2", r"got 'da-ta'"),
        ("None=2", r"not `None`"),
        ("dätä=2", r"got 'dätä'"),
        ("a" * 33 + "=2", r"at most 32 characters"),
        ("data=2,data=4", r"mesh axis `data` is named twice"),
        ("a=1024,b=1024,c=2", r"at most 1,048,576 devices, got 2,097,152"),
        (",".join(f"a{i}=1" for i in range(9)), r"at most 8 axes, got 9"),
        ("data=" + "1" * 600, r"at most 512 characters, got 605"),
    ],
    ids=lambda value: value[:24] if isinstance(value, str) else None,
)
def test_bad_meshes(text, message):
    with pytest.raises(ValueError, match=message):
        parse_mesh(text)


@pytest.mark.parametrize(
    "axes, error, message",
    [
        ((), ValueError, "at least one axis"),
        ("data=4", TypeError, "sequence of"),
        ((("data",),), TypeError, "a .name, size. pair"),
        (((4, "data"),), TypeError, "must be text"),
        ((("data", True),), ValueError, "got True"),
        ((("data", 2.5),), ValueError, "got 2.5"),
    ],
    ids=["empty", "text", "single", "swapped", "bool", "fraction"],
)
def test_meshspec_checks_its_fields(axes, error, message):
    with pytest.raises(error, match=message):
        MeshSpec(axes)


def test_abstract_mesh_has_the_names_and_sizes_and_no_devices():
    mesh = abstract_mesh(parse_mesh("data=4,model=2"))
    assert isinstance(mesh, AbstractMesh)
    assert mesh.axis_names == ("data", "model") and mesh.axis_sizes == (4, 2) and mesh.size == 8


# --- rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, pattern, spec",
    [
        ("*/kernel=None,model", "*/kernel", (None, ("model",))),
        ("embed/*=data+model,None", "embed/*", (("data", "model"), None)),
        (" */bias = ", "*/bias", ()),
        ("block_[0-3]/?=data", "block_[0-3]/?", (("data",),)),
    ],
    ids=["none-model", "joined", "empty-spec", "classes"],
)
def test_parse_rule(text, pattern, spec):
    rule = parse_rule(text)
    assert (rule.pattern, rule.spec) == (pattern, spec)
    assert parse_rule(rule.text) == rule


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("*/kernel", r"exactly one '='", id="no-equals"),
        pytest.param("a=b=c", r"exactly one '='", id="two-equals"),
        pytest.param("=None", r"needs a PATTERN", id="no-pattern"),
        pytest.param("*=data+", r"got 'data\+'", id="dangling-plus"),
        pytest.param("*=None+data", r"got 'None\+data'", id="none-joined"),
        pytest.param("*=data,,model", r"got ''", id="empty-entry"),
        pytest.param("*=1x", r"got '1x'", id="bad-name"),
        pytest.param("*=data,data", r"uses mesh axis `data` twice", id="axis-twice"),
        pytest.param("*=data+model,model", r"uses mesh axis `model` twice", id="axis-twice-joined"),
        pytest.param("*=" + ",".join(["None"] * 17), r"at most 16 entries, got 17", id="too-many-entries"),
        pytest.param("*" * 257 + "=None", r"1 to 256 characters, got 257", id="pattern-too-long"),
        pytest.param("a\tb=None", r"printable", id="control-character"),
        pytest.param("x" * 400 + "=" + "None," * 30, r"at most 512 characters", id="rule-too-long"),
    ],
)
def test_bad_rules(text, message):
    with pytest.raises(ValueError, match=message):
        parse_rule(text)


def test_rule_count_is_capped():
    with pytest.raises(ValueError, match="at most 64 rules are allowed, got 65"):
        parse_rules(["*=None"] * 65)
    with pytest.raises(ValueError, match="at most 64 rules are allowed, got 65"):
        compute_layout(DENSE_8_8, parse_mesh("data=2"), "custom", [parse_rule("*=None")] * 65)


def test_rule_checks_its_fields():
    with pytest.raises(TypeError, match="pattern must be text"):
        Rule(3, ())
    with pytest.raises(TypeError, match="sequence of entries"):
        Rule("*", "data")
    assert Rule("*", ("data", None)).spec == (("data",), None)


@pytest.mark.parametrize(
    "pattern",
    [
        "*a" * 127 + "*b",  # exponential for a backtracking matcher on a path of a's
        "*" * 255 + "b",
        "?*" * 127 + "b",
        "[a-z]*" * 42 + "b",
    ],
    ids=["star-a", "stars", "any-star", "classes"],
)
def test_hostile_globs_do_not_hang(pattern):
    # Not a speed test: a backtracking matcher would need longer than the universe's age here. The
    # proof is a count, not a clock: fnmatch compiles each glob with every unbounded repeat but the
    # last inside an atomic group, so nothing can backtrack; then the layout answers.
    rules = parse_rules([f"{pattern}=None"] * 64)
    assert all(hostile.unbounded_repeats(rule.pattern)[1] <= 1 for rule in rules)
    report = synthetic(**{"a" * 200 + f"{i}": (2,) for i in range(50)})
    result = compute_layout(report, parse_mesh("data=2"), "custom", rules)
    assert all(row.replicated_fallback for row in result.arrays)


# --- huge meshes and huge models: exact ints --------------------------------------------------


def test_a_million_devices():
    mesh = parse_mesh("data=1024,model=1024")
    replicated = compute_layout(DENSE_8_8, mesh, "replicated")
    assert replicated.values_per_device == 72 and replicated.total_stored_values == 72 * 2**20
    assert replicated.replication_factor == 2**20
    fsdp = compute_layout(DENSE_8_8, mesh, "fsdp")
    assert fsdp.num_replicated_fallbacks == 2 and fsdp.values_per_device == 72
    with pytest.raises(ValueError, match=r"dimension 1 has size 8, which mesh axis `model` \(size 1,024\)"):
        compute_layout(DENSE_8_8, mesh, "tensor")


def test_a_huge_model_over_a_million_devices_stays_exact():
    width = 2**20
    report = dense(width, width, width)  # 2 x (2**40 + 2**20) values
    result = compute_layout(report, parse_mesh("data=1024,model=1024"), "fsdp")
    assert result.total_params == 2 * (2**40 + 2**20)
    assert [row.shard_shape for row in result.arrays] == [(1, width), (1,)] * 2
    assert result.values_per_device == 2 * (width + 1)
    assert result.ideal_share.exact == result.values_per_device and result.gap == 0
    tensor = compute_layout(report, parse_mesh("data=1024,model=1024"), "tensor")
    assert tensor.total_stored_values == 2**20 * 2 * (width * 1024 + 1024)


# --- frames and records -----------------------------------------------------------------------


def test_layout_frame():
    frame = layout_frame(compute_layout(dense(8, 8, 6), parse_mesh("data=2,model=2"), "fsdp"))
    assert list(frame.columns) == [
        "path",
        "shape",
        "dtype",
        "partition_spec",
        "shard_shape",
        "values_per_shard",
        "replication_factor",
        "stored_values",
        "replicated_fallback",
        "note",
    ]
    assert frame["values_per_shard"].dtype == "int64"
    assert frame["shape"].tolist() == ["8x8", "8", "8x6", "6"]
    assert frame["shard_shape"].tolist() == ["2x8", "2", "2x6", "6"]
    assert frame["replicated_fallback"].tolist() == [False, False, False, True]
    assert frame["partition_spec"].tolist()[0] == "P(('data', 'model'),)"


def test_layout_record_is_json_with_exact_fractions():
    rules = parse_rules(["*/kernel=None,model"])
    record = layout_record(compute_layout(dense(8, 8, 6), parse_mesh("data=2,model=2"), "custom", rules))
    record = json.loads(json.dumps(record))
    # kernels 8x4 + 8x3 split, biases 8 + 6 whole: 70 per device; total 126 over 4: ideal 63/2
    assert record["num_devices"] == 4 and record["total_params"] == 126
    assert record["ideal_share"] == 31.5 and record["ideal_share_fraction"] == "63/2"
    assert record["values_per_device"] == 70 and record["raw_float32_bytes_per_device"] == 280
    assert record["total_stored_values"] == 280
    assert record["replication_factor_fraction"] == "20/9" and record["replication_factor"] == 280 / 126
    assert record["gap_values_fraction"] == "77/2" and record["gap_ratio_fraction"] == "20/9"
    assert record["mesh"] == [{"name": "data", "size": 2}, {"name": "model", "size": 2}]
    assert record["strategy"] == "custom" and record["rules"] == ["*/kernel=None,model"]
    assert record["num_replicated_fallbacks"] == 2
    assert "not copies on disk" in record["replicas_note"]
    assert record["arrays"][0] == {
        "path": "Dense_0/kernel",
        "shape": [8, 8],
        "dtype": "float32",
        "partition_spec": "P(None, 'model')",
        "shard_shape": [8, 4],
        "values_per_shard": 32,
        "replication_factor": 2,
        "stored_values": 128,
        "replicated_fallback": False,
        "note": "rule */kernel=None,model",
    }


# --- properties -------------------------------------------------------------------------------

_names = ("data", "model", "seq")


@hs.composite
def cases(draw):
    strategy = draw(hs.sampled_from(["replicated", "fsdp", "tensor", "custom"]))
    names = draw(hs.permutations(_names))[: draw(hs.integers(1, 3))]
    if strategy == "tensor" and "model" not in names:
        names = ["model", *names[1:]]
    mesh = MeshSpec(tuple((name, draw(hs.sampled_from([1, 2, 3, 4, 8]))) for name in names))
    # Sizes with many divisors, so that splits succeed as often as they fail.
    dimension = hs.sampled_from([1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 48])
    rank = hs.integers(1 if strategy == "tensor" else 0, 3)
    shapes = draw(hs.lists(rank.flatmap(lambda n: hs.lists(dimension, min_size=n, max_size=n)), min_size=1, max_size=4))
    report = synthetic(**{f"m{i}__w": tuple(shape) for i, shape in enumerate(shapes)})
    rules = ()
    if strategy == "custom":
        entry = hs.sampled_from([None, *mesh.names, "+".join(mesh.names)])
        spec = draw(hs.lists(entry, max_size=2))
        used = [name for item in spec if item for name in item.split("+")]
        if len(used) != len(set(used)):
            spec = spec[:1]
        rules = (parse_rule(f"m{draw(hs.integers(0, 4))}/*=" + ",".join(str(item) for item in spec)),)
    return report, mesh, strategy, rules


@settings(max_examples=examples(150))
@given(cases())
def test_layout_properties(case):
    report, mesh, strategy, rules = case
    try:
        result, refusal = compute_layout(report, mesh, strategy, rules), ""
    except ValueError as err:
        result, refusal = None, str(err)
    if result is None:
        # Impossible requests are refused in the person's terms, naming an array or the mesh axis.
        assert "`" in refusal and "IndivisibleError" not in refusal and "\n" not in refusal
        return
    devices = mesh.num_devices
    assert result.values_per_device * devices == result.total_stored_values
    assert result.total_stored_values >= result.total_params
    assert result.replication_factor >= 1 and result.gap >= 0
    assert result.ideal_share.exact * devices == result.total_params
    for row in result.arrays:
        # Shards tile the array, each value held replication_factor times.
        assert row.values_per_shard * devices == row.num_values * row.replication_factor
        assert row.replication_factor >= 1 and devices % row.replication_factor == 0
    assert partition_specs(report, mesh, strategy, rules) == {row.path: row.spec for row in result.arrays}


# --- agreement with real devices --------------------------------------------------------------

# Runs in a fresh process: the virtual device count must be set before JAX starts, and this test
# process's JAX has already started with one CPU device.


@pytest.mark.slow  # the session's real-mesh child (eight virtual CPU devices)
def test_agrees_with_real_devices(real_mesh):
    plans = [
        (dense(8, 8), "model=2", "tensor", ()),
        (dense(8, 8), "data=4", "replicated", ()),
        (dense(8, 8), "data=4", "fsdp", ()),
        (dense(8, 8), "data=2,model=2", "tensor", ()),
        (dense(8, 8, 6), "data=3", "fsdp", ()),
        (dense(6, 12, 4), "data=2,model=3", "fsdp", ()),
        (dense(12, 8, 4), "data=2,model=2", "custom", ("*/kernel=model,data", "Dense_1/*=data+model")),
        (synthetic(a__w=(6, 6, 4), b__w=(5,), c__w=()), "a=2,b=2,c=2", "fsdp", ()),
    ]
    meshes = [parse_mesh(mesh_text) for _, mesh_text, _, _ in plans]
    layouts = [
        (mesh, compute_layout(report, mesh, strategy, parse_rules(rule_texts)))
        for mesh, (report, _, strategy, rule_texts) in zip(meshes, plans, strict=True)
    ]
    assert check_on_real_devices(real_mesh, layouts) > 20


# --- the command line -------------------------------------------------------------------------


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_table_answers_the_example(capsys):
    code, out, err = run(
        capsys, "layout", "--input-dim", "8", "--features", "8", "--mesh", "model=2", "--strategy", "tensor"
    )
    assert code == 0 and err == ""
    assert "mesh: model=2 (2 devices), strategy: tensor" in out
    assert "ideal share per device         36 " in out
    assert "values per device              36\n" in out
    assert "total stored across the mesh   72 " in out
    assert "raw float32 bytes per device   144 bytes" in out
    assert "not copies on disk" in out


@pytest.mark.parametrize(
    "argv, per_device, stored, strategy",
    [
        (["--mesh", "data=4"], 72, 288, "replicated"),
        (["--mesh", "data=4", "--strategy", "fsdp"], 18, 72, "fsdp"),
        (["--mesh", "data=2,model=2", "--strategy", "tensor"], 36, 144, "tensor"),
        (["--mesh", "data=2,model=2", "--rule", "*/kernel=None,model"], 40, 160, "custom"),
        (["--mesh", "data=2", "--rule", "*=data", "--strategy", "custom"], 36, 72, "custom"),
    ],
    ids=["default-replicated", "fsdp", "tensor", "rule-implies-custom", "explicit-custom"],
)
def test_cli_json(capsys, argv, per_device, stored, strategy):
    code, out, _ = run(capsys, "layout", "--input-dim", "8", "--features", "8", "--format", "json", *argv)
    record = json.loads(out)
    assert code == 0 and record["strategy"] == strategy
    assert record["values_per_device"] == per_device and record["total_stored_values"] == stored
    for key in (
        "num_devices",
        "total_params",
        "ideal_share",
        "values_per_device",
        "raw_float32_bytes_per_device",
        "total_stored_values",
        "replication_factor",
        "arrays",
    ):
        assert key in record
    assert record["total_params"] == 72 and record["raw_float32_bytes_per_device"] == 4 * per_device


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--features", "5", "--mesh", "model=2", "--strategy", "tensor"], "`Dense_0/kernel` (shape 8x5)"),
        (["--mesh", "data=0"], "mesh axis `data` needs a size"),
        (["--mesh", "data=4", "--strategy", "tensor"], "has none"),
        (["--mesh", "data=4", "--strategy", "fsdp", "--rule", "*=data"], "rules apply only to the custom"),
        (["--mesh", "data=4", "--strategy", "custom"], "needs at least one"),
        (["--mesh", "data=4", "--rule", "(.*)*z"], "exactly one '='"),
        (["--mesh", "data=4", "--shards", "3"], "--shards does not apply to layout"),
        (["--strategy", "fsdp"], "required: --mesh"),
        (["--mesh", "data=4", "--strategy", "diagonal"], "invalid choice"),
    ],
    ids=[
        "indivisible",
        "bad-mesh",
        "no-model-axis",
        "rule-not-custom",
        "custom-no-rule",
        "regex",
        "shards",
        "no-mesh",
        "bad-strategy",
    ],
)
def test_cli_refuses_in_one_line(capsys, argv, message):
    code, out, err = run(capsys, "layout", "--input-dim", "8", *argv)
    assert code == 2 and out == ""
    assert err.startswith("dcsim: error: ") and err.count("\n") == 1
    assert message in err


@pytest.mark.slow  # a fresh interpreter: the module entry point itself
def test_cli_process_contract():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dcsim",
            "layout",
            "--input-dim",
            "8",
            "--features",
            "5",
            "--mesh",
            "model=2",
            "--strategy",
            "tensor",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("dcsim:")]
    assert done.returncode == 2 and done.stdout == ""
    assert lines == [
        "dcsim: error: `Dense_0/kernel` (shape 8x5) cannot be split as the tensor strategy (last dimension over "
        "`model`) asks: its dimension 1 has size 5, which mesh axis `model` (size 2) does not divide evenly "
        "(JAX splits a dimension only into equal parts); 1 more array cannot be placed either (`Dense_0/bias`)"
    ]
