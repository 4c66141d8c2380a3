"""The training-memory engine: parts by ZeRO stage, optax's state laid out by JAX, exact bytes."""

from __future__ import annotations

import math
from collections import Counter

import jax
import pytest
from arrays import param_report
from flax import traverse_util
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from conftest import small_preset
from dcsim.compare import Comparison, Scenario
from dcsim.links import comparisons
from dcsim.memory import budget, search
from dcsim.memory.state import compute_memory, per_device_by_shape, same_spec
from dcsim.memory.training import PARTS, STAGES, Training, parse_parts
from dcsim.model import optimizer
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import amounts
from dcsim.sharding import layout
from dcsim.sharding.meshes import abstract_mesh, parse_mesh, parse_rules

# 3 -> 4 -> 2: kernels 3x4 and 4x2, biases 4 and 2: 12 + 4 + 8 + 2 = 26 values.
TINY = count_params(ModelConfig(input_dim=3, layers=(DenseLayer(features=4), DenseLayer(features=2))))
MNIST = count_params(ModelConfig(preset="mlp-mnist"))  # 784 -> 512 -> 512 -> 10: 669,706 values
SMALL_DECODER = count_params(small_preset("llama2-7b", num_kv_heads=4, ffn_dim=128, vocab_size=256))
SMALL_MOE = count_params(small_preset("mixtral-8x7b", num_kv_heads=2, expert_ffn_dim=128, vocab_size=256))


def full_tree_state(report, mesh, specs, name, dtype):
    """optax's state for the whole parameter tree at once, laid out by JAX on an Explicit mesh:
    the reference ``compute_memory`` answers one kind of array at a time."""
    jax_mesh = abstract_mesh(mesh).update_axis_types(dict.fromkeys(mesh.names, AxisType.Explicit))
    flat = {
        tuple(row.path.split("/")): jax.ShapeDtypeStruct(
            tuple(row.shape), dtype, sharding=NamedSharding(jax_mesh, specs[row.path])
        )
        for row in report.arrays
    }
    with jax.sharding.use_abstract_mesh(jax_mesh), jax.enable_x64(dtype == "float64"):
        state = jax.eval_shape(optimizer.OPTIMIZERS[name][1]().init, traverse_util.unflatten_dict(flat))
    found = {}
    for keys, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        path = "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in keys)
        sharding = leaf.sharding if isinstance(leaf.sharding, NamedSharding) else None
        found[path] = (tuple(leaf.shape), str(leaf.dtype), sharding.spec if sharding else PartitionSpec())
    return found


@pytest.mark.parametrize("name", optimizer.OPTIMIZER_NAMES)
@pytest.mark.parametrize(
    "report, mesh, strategy, rules",
    [
        (MNIST, "data=4,model=2", "fsdp", ()),
        (SMALL_DECODER, "data=2,model=4", "tensor", ()),
        (SMALL_MOE, "data=2,expert=4", "fsdp", ()),
        (SMALL_DECODER, "data=2,model=2", "custom", ("*/kernel=model,data", "*/embedding=None,data")),
    ],
    ids=["mnist-fsdp", "decoder-tensor", "moe-expert", "decoder-custom"],
)
def test_optimizer_state_is_what_optax_makes_for_the_whole_tree(report, mesh, strategy, rules, name):
    mesh = parse_mesh(mesh)
    rules = parse_rules(list(rules))
    memory = compute_memory(report, mesh, strategy, rules, Training.stage(3, optimizer=name, param_dtype="bfloat16"))
    specs = layout.partition_specs(report, mesh, strategy, rules)
    expected = full_tree_state(report, mesh, specs, name, "bfloat16")
    rows = {row.path: row for row in memory.arrays if row.part == "optimizer"}
    assert set(rows) == set(expected)
    for path, (shape, dtype, spec) in expected.items():
        row = rows[path]
        assert (row.shape, row.dtype) == (shape, dtype), path
        assert same_spec(row.spec, spec, len(shape)), path
        held = NamedSharding(abstract_mesh(mesh), spec).shard_shape(shape)
        assert row.bytes_per_device == math.prod(held) * jax.numpy.dtype(dtype).itemsize


def test_tiny_model_by_hand_for_every_stage():
    """26 values on data=2 fsdp: every array's largest dimension is even, so a split part is half.

    adam in bfloat16 with a float32 master copy: params 52 bytes, grads 52, master 104, and the
    moments in the master's dtype, 2 x 104, plus the int32 step count (4 bytes, whole)."""
    mesh = parse_mesh("data=2")
    whole = {"params": 52, "grads": 52, "master": 104, "optimizer": 208 + 4}
    halves = {"params": 26, "grads": 26, "master": 52, "optimizer": 104 + 4}
    for zero, split in STAGES.items():
        setup = Training.stage(zero, optimizer="adam", param_dtype="bfloat16", master_dtype="float32")
        memory = compute_memory(TINY, mesh, "fsdp", (), setup)
        got = {part: memory.part_bytes(part) for part in PARTS}
        assert got == {part: (halves if part in split else whole)[part] for part in PARTS}, zero
        assert memory.total_bytes == sum(whole.values())
        assert memory.per_device["total_bytes"] == sum(got.values()) == memory.total_bytes_per_device


def test_zero_zero_holds_everything_whatever_the_strategy():
    setup = Training.stage(0, optimizer="adam", param_dtype="float32")
    memory = compute_memory(MNIST, parse_mesh("data=8"), "fsdp", (), setup)
    assert memory.total_bytes_per_device == memory.total_bytes == 4 * (4 * 669_706) + 4  # params, grads, mu, nu
    assert all(row.spec == PartitionSpec() for row in memory.arrays)
    assert "ZeRO-0 does not split the params" in memory.largest.note


def test_shard_parts_freely_equals_the_stage():
    mesh = parse_mesh("data=4")
    by_stage = compute_memory(MNIST, mesh, "fsdp", (), Training.stage(2, optimizer="lion"))
    by_parts = compute_memory(
        MNIST, mesh, "fsdp", (), Training.sharding(parse_parts("grads,optimizer"), optimizer="lion")
    )
    assert by_stage.per_device == by_parts.per_device
    only_params = compute_memory(MNIST, mesh, "fsdp", (), Training.sharding(frozenset({"params"}), optimizer="lion"))
    assert only_params.part_bytes("params") < only_params.part_bytes("grads")


def test_master_copy_puts_the_optimizer_state_in_its_dtype():
    memory = compute_memory(
        TINY, parse_mesh("data=1"), "fsdp", (), Training.stage(3, optimizer="adam", master_dtype="float32")
    )
    moments = [row for row in memory.arrays if row.part == "optimizer" and row.shape]
    assert {row.dtype for row in moments} == {"float32"}
    assert {row.dtype for row in memory.arrays if row.part == "params"} == {"bfloat16"}
    plain = compute_memory(TINY, parse_mesh("data=1"), "fsdp", (), Training.stage(3, optimizer="adam"))
    assert {row.dtype for row in plain.arrays if row.part == "optimizer" and row.shape} == {"bfloat16"}
    assert not [row for row in plain.arrays if row.part == "master"]


def test_float64_state_is_float64():
    memory = compute_memory(TINY, parse_mesh("data=1"), "fsdp", (), Training.stage(3, param_dtype="float64"))
    assert {row.dtype for row in memory.arrays if row.part == "optimizer" and row.shape} == {"float64"}


def test_adafactor_factored_moments_follow_their_parameter_without_the_reduced_dimension():
    mesh = parse_mesh("data=4")
    memory = compute_memory(MNIST, mesh, "fsdp", (), Training.stage(3, optimizer="adafactor", param_dtype="float32"))
    rows = {row.path: row for row in memory.arrays}
    kernel = rows["hidden_0/kernel"]  # 784x512: fsdp splits 784 over data
    assert kernel.spec == PartitionSpec("data")
    v_col = rows["0/v_col/hidden_0/kernel"]  # the 512 columns reduced away: 784 left, split
    v_row = rows["0/v_row/hidden_0/kernel"]  # the 784 rows reduced away: 512 left, whole
    assert (v_col.shape, v_col.shard_shape) == ((784,), (196,))
    assert (v_row.shape, v_row.shard_shape) == ((512,), (512,))
    assert "factored moment" in v_row.note


@pytest.mark.parametrize("name", ["adam", "adafactor", "sgd"])
@pytest.mark.parametrize("strategy, axis", [("fsdp", "data"), ("replicated", "data"), ("tensor", "model")])
@pytest.mark.parametrize("zero", [0, 1, 3])
def test_sweep_by_shape_equals_the_full_layout(name, strategy, axis, zero):
    setup = Training.stage(zero, optimizer=name, param_dtype="bfloat16", master_dtype="float32")
    shapes = Counter(tuple(row.shape) for row in SMALL_DECODER.arrays)
    for devices in (1, 2, 3, 4, 6, 8, 16, 64):
        mesh = parse_mesh(f"{axis}={devices}")
        try:
            memory = compute_memory(SMALL_DECODER, mesh, strategy, (), setup)
        except layout.LayoutError:
            with pytest.raises(layout.LayoutError):
                per_device_by_shape(shapes, mesh, strategy, setup)
            continue
        fast = per_device_by_shape(shapes, mesh, strategy, setup)
        assert {part: size for part, (_, size) in fast.items()} == {
            part: memory.part_bytes(part) for part in setup.parts if memory.part_bytes(part) or part in fast
        }


def test_compare_budget_is_the_memory_engines_zero_three():
    """One answer: what Compare's training budget says a device holds on data=N is ``dcsim memory
    --zero 3`` on the same mesh, for every N searched here."""
    spec = budget.Budget(amount=10**12, unit="bytes", training="adafactor", strategy="fsdp")
    answer = budget.answer(budget.demand(SMALL_DECODER, "bfloat16", "adafactor"), spec, up_to=48)
    for devices, held in enumerate(answer.held, start=1):
        memory = compute_memory(
            SMALL_DECODER,
            parse_mesh(f"data={devices}"),
            "fsdp",
            (),
            Training.stage(3, optimizer="adafactor", param_dtype="bfloat16"),
        )
        assert held == memory.total_bytes_per_device, devices
    assert answer.need == memory.total_bytes


def test_a_version_one_comparison_keeps_sgd_with_momentum():
    old = comparisons.decode({"cv": ["1"], "s": ["float32~n=a"], "btrain": ["sgd"]})
    assert old.comparison.budget.training == "momentum" and not old.problems
    new = comparisons.decode({"cv": ["2"], "s": ["float32~n=a"], "btrain": ["sgd"]})
    assert new.comparison.budget.training == "sgd"
    data = Comparison(scenarios=(Scenario(name="a", config=ModelConfig()),)).to_dict()
    data.update(version=1, budget={"amount": 10, "unit": "bytes", "training": "sgd", "strategy": "fsdp"})
    assert Comparison.from_dict(data).budget.training == "momentum"


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Training(optimizer="rmsprop"), r"unknown optimizer 'rmsprop'; optimizers: sgd, momentum, adam"),
        (lambda: Training.stage(4), r"ZeRO stage must be 0, 1, 2 or 3"),
        (lambda: Training.stage(True), r"ZeRO stage must be 0, 1, 2 or 3"),
        (lambda: Training(param_dtype="float8"), r"param dtype must be one of float32, bfloat16"),
        (lambda: Training(master_dtype="fp32"), r"master dtype must be one of"),
        (lambda: parse_parts("params,weights"), r"unknown part 'weights' to shard; parts: params, grads"),
        (lambda: parse_parts(" , "), r"name the parts to shard"),
        (lambda: Training(shard=frozenset({"grads"}), zero=3), r"ZeRO stage 3 shards params,grads,master,optimizer"),
        (lambda: amounts.parse_budget("80"), r"the budget needs a unit: B, KB"),
        (lambda: amounts.parse_budget("80 GiBs"), r"the budget must be a number of bytes"),
    ],
)
def test_bad_requests_name_the_rule(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_tensor_layout_without_model_is_refused_only_when_something_is_split():
    mesh = parse_mesh("data=4")
    with pytest.raises(ValueError, match="tensor strategy splits each array's last dimension"):
        compute_memory(MNIST, mesh, "tensor", (), Training.stage(1))
    with pytest.raises(ValueError, match="tensor strategy"):
        compute_memory(MNIST, mesh, "tensor", (), Training.stage(0))


def test_budget_search_gives_both_answers_over_the_meshes_shape():
    setup = Training.stage(3, optimizer="adam", param_dtype="float32")
    whole = compute_memory(MNIST, parse_mesh("data=1"), "fsdp", (), setup).total_bytes  # 4 x 4 x 669,706 + 4
    assert whole == 10_715_300
    found = search.fit(MNIST, parse_mesh("data=8,model=1"), "fsdp", (), setup, whole // 3)
    assert [c.mesh.text for c in found.candidates][:4] == [
        "data=1,model=1",
        "data=2,model=1",
        "data=4,model=1",
        "data=8,model=1",
    ]
    assert found.min_ideal_devices == 4  # 10,715,300 / 3,571,766 = 3.0000006...
    assert found.ideal is not None and found.ideal.num_devices == 4
    # The real layout: every array's largest dimension splits over 4 devices but the 10-value bias, so
    # a device holds just over a quarter, and 4 devices fit.
    assert found.real is not None and found.real.mesh.num_devices == 4
    assert (
        found.real.total_bytes_per_device
        == compute_memory(MNIST, parse_mesh("data=4,model=1"), "fsdp", (), setup).total_bytes_per_device
    )
    record = search.fit_record(found)
    assert record["real"]["devices"] == 4 and record["ideal"]["devices"] == 4


def test_one_sweep_answers_every_budget_and_step_as_a_fresh_search_does():
    """The layouts are swept once; a new budget or a step's activations answer on them."""
    setup = Training.stage(3, optimizer="adam", param_dtype="float32")
    mesh = parse_mesh("data=8,model=1")
    swept = search.sweep(MNIST, mesh, "fsdp", (), setup)
    per_mesh = {c.mesh: 1_000 * c.mesh.num_devices for c in swept.states}
    for amount in (10**6, 3_571_766, 10**8):
        for activations in (None, per_mesh.__getitem__):
            assert search.answer(swept, amount, activations) == search.fit(
                MNIST, mesh, "fsdp", (), setup, amount, activations=activations
            )
    counted = search.answer(swept, 10**8, per_mesh.__getitem__)
    assert [c.activations_bytes_per_device for c in counted.candidates] == list(per_mesh.values())


def test_budget_search_reports_impossible_meshes():
    found = search.fit(MNIST, parse_mesh("model=2"), "tensor", (), Training.stage(3), 10**12)
    by_devices = {c.mesh.num_devices: c for c in found.candidates}
    assert by_devices[1].error is None
    assert by_devices[1024].error is not None and "does not divide" in by_devices[1024].error  # 10 % 1024
    assert found.real is not None and found.real.mesh.num_devices == 1


# --- the layout composes as in Megatron-LM and DeepSpeed (issue 45) --------------------------------

_COMPOSED = {
    "embed/token/embedding": (128, 8),  # 128 rows: a multiple of 64, so megatron pads nothing
    "block_0/mlp/up/kernel": (8, 32),
    "block_0/mlp/down/kernel": (32, 8),
    "block_0/norm/scale": (8,),
    "lm_head/kernel": (8, 128),
}


@pytest.mark.parametrize("zero", [0, 1, 2, 3], ids=["zero0", "zero1", "zero2", "zero3"])
def test_megatron_splits_every_part_over_model_at_every_zero_stage(zero):
    """By hand, float32 (4 bytes) on data=2,model=2: the embedding and head 128 x 8 = 1,024 values,
    halved over `model`: 2,048 bytes each; up and down 256 values halved: 512 bytes each; the norm's
    8 values whole: 32 bytes. 2,048 + 512 + 512 + 32 + 2,048 = 5,152 bytes a part; Adam's two moments
    twice that and its int32 count 4: 10,308. The megatron strategy never splits over `data`, so
    every ZeRO stage holds the same (before this composition ZeRO-0 held 4 x 2,312 = 9,248 bytes of
    params: every part whole)."""
    memory = compute_memory(
        param_report(_COMPOSED),
        parse_mesh("data=2,model=2"),
        "megatron",
        (),
        Training.stage(zero, param_dtype="float32"),
    )
    assert memory.per_device == {
        "params_bytes": 5_152,
        "grads_bytes": 5_152,
        "master_bytes": 0,
        "optimizer_bytes": 10_308,
        "total_bytes": 20_612,
    }
    rows = {(row.part, row.path): row for row in memory.arrays}
    up = rows[("grads", "block_0/mlp/up/kernel")]
    assert up.spec == PartitionSpec(None, "model") and up.shard_shape == (8, 16)
    norm = rows[("params", "block_0/norm/scale")]
    assert norm.spec == PartitionSpec() and norm.bytes_per_device == 32
    if zero < 2:
        assert up.note == (
            "column-parallel: outputs (dimension 1) over `model`; whole over `data`: "
            f"ZeRO-{zero} does not split the grads"
        )
        assert memory.part_layout("grads") == "whole over data"
        assert norm.note == f"whole on every device: ZeRO-{zero} does not split the params"
    else:
        assert memory.part_layout("grads") == "split"


def test_tensor_keeps_its_model_split_and_drops_the_data_axes():
    """The tensor strategy on data=2,model=2 at ZeRO-0, float32, Dense 4 -> 8 (kernel 32 values, bias 8):
    the last dimension over `model` halves both: (32 + 8) / 2 x 4 = 80 bytes of params; a sweep by
    shape (``per_device_by_shape``) agrees."""
    mesh = parse_mesh("data=2,model=2")
    training = Training.stage(0, param_dtype="float32")
    report = param_report({"dense/kernel": (4, 8), "dense/bias": (8,)})
    memory = compute_memory(report, mesh, "tensor", (), training)
    assert memory.part_bytes("params") == 80 and memory.part_bytes("grads") == 80
    assert memory.part_bytes("optimizer") == 2 * 80 + 4
    by_shape = per_device_by_shape({(4, 8): 1, (8,): 1}, mesh, "tensor", training)
    assert by_shape["params"] == (20, 80) and by_shape["optimizer"] == (40 + 1, 2 * 80 + 4)


@pytest.mark.parametrize("strategy", ["fsdp", "replicated"])
def test_data_parallel_strategies_keep_unsplit_parts_whole(strategy):
    """fsdp and replicated split over the data axes alone (fsdp over every axis at once): a part the
    ZeRO stage does not split is whole on every device, as before: (32 + 8) x 4 = 160 bytes."""
    report = param_report({"dense/kernel": (4, 8), "dense/bias": (8,)})
    memory = compute_memory(
        report, parse_mesh("data=2,model=2"), strategy, (), Training.stage(0, param_dtype="float32")
    )
    assert memory.part_bytes("params") == 160 and memory.part_layout("params") == "whole"


def test_custom_rules_keep_their_model_axes_only():
    """A custom rule splitting dimension 0 over data and model together: at ZeRO-0 only `model`
    survives, (32 + 8) / 2 x 4 = 80 bytes; at ZeRO-3 all four devices, 40 bytes."""
    report = param_report({"dense/kernel": (4, 8), "dense/bias": (8,)})
    rules = parse_rules(["*=data+model"])
    mesh = parse_mesh("data=2,model=2")
    zero0 = compute_memory(report, mesh, "custom", rules, Training.stage(0, param_dtype="float32"))
    zero3 = compute_memory(report, mesh, "custom", rules, Training.stage(3, param_dtype="float32"))
    assert zero0.part_bytes("params") == 80 and zero3.part_bytes("params") == 40
    assert {row.spec for row in zero0.part_arrays("params")} == {PartitionSpec("model")}


def test_expert_parallelism_is_kept_below_zero_3_and_the_note_names_the_axes_left_whole():
    """The tensor strategy on data=2,expert=2,model=2 at ZeRO-0, float32: 4 experts of 8 x 16 over
    `expert` and their last dimension over `model`, 2 x 8 x 8 = 128 values (512 bytes); the norm's 8
    values over `model`, 4 (16 bytes). The norm, a dense array, is copied over `expert` too."""
    report = param_report({"block_0/moe/experts/up": (4, 8, 16), "block_0/norm/scale": (8,)})
    memory = compute_memory(
        report, parse_mesh("data=2,expert=2,model=2"), "tensor", (), Training.stage(0, param_dtype="float32")
    )
    rows = {row.path: row for row in memory.part_arrays("params")}
    assert rows["block_0/moe/experts/up"].bytes_per_device == 512 and rows["block_0/norm/scale"].bytes_per_device == 16
    assert rows["block_0/moe/experts/up"].note.endswith("; whole over `data`: ZeRO-0 does not split the params")
    assert rows["block_0/norm/scale"].note.endswith("; whole over `data`, `expert`: ZeRO-0 does not split the params")
