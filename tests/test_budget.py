"""The budget question: hand-checkable answers, the non-monotone search, and the typed budget."""

import hypothesis.strategies as hs
import pytest
from arrays import array
from hypothesis import given, settings

from conftest import examples
from dcsim.memory import budget
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import ParamReport, count_params
from dcsim.quantities import amounts
from dcsim.sharding import layout, meshes

SEED = count_params(ModelConfig())  # Dense(4) on input 4: kernel 4x4 + bias 4 = 20 values


def values_budget(amount, strategy="fsdp", training=None):
    return budget.Budget(amount=amount, unit="values", strategy=strategy, training=training)


@pytest.mark.parametrize(
    ("need", "amount", "shards"),
    [(20, 7, 3), (20, 10, 2), (20, 20, 1), (20, 21, 1), (20, 1, 20), (21, 7, 3), (22, 7, 4), (0, 5, 1)],
)
def test_ideal_shards_is_the_ceiling_of_need_over_budget(need, amount, shards):
    assert budget.ideal_shards(need, amount) == shards


def test_twenty_values_under_seven_need_three_shards_on_average_but_four_devices_for_real():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(7))
    assert answer.need == 20
    assert answer.ideal_shards == 3  # 20 / 3 = 6.67 <= 7
    # fsdp: 1 device holds 20, 2 hold 10 each, 3 cannot split a 4x4 kernel or a 4-bias so each
    # holds all 20, 4 hold a 1x4 row and one bias value: 5.
    assert answer.held[:5] == (20, 10, 20, 5, 20)
    assert answer.devices == 4 and answer.per_device == 5


def test_the_search_is_not_monotone_and_says_which_larger_counts_fail():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(10))
    assert answer.devices == 2
    assert answer.fails_above[:3] == (3, 5, 6)  # 3 replicates; 4 splits; 5 and 6 replicate again
    assert 4 not in answer.fails_above
    assert len(answer.fails_above) == 4096 - 2 - 1  # every N above 2 but 4 holds all 20 values


def test_nothing_fits_when_replicated_and_the_budget_is_below_the_total():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(19, "replicated"))
    assert answer.devices is None and answer.per_device is None and answer.fails_above == ()
    assert answer.ideal_shards == 2


def test_tensor_searches_model_n_and_counts_impossible_meshes():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(5, "tensor"))
    # last dimension 4 over model=N: N=1, 2, 4 divide it (20, 10, 5 values); every other N cannot.
    assert answer.held[:4] == (20, 10, None, 5)
    assert answer.devices == 4
    assert answer.num_impossible == 4096 - 3


def test_bytes_use_the_scenario_dtype():
    demand = budget.demand(SEED, "bfloat16")
    assert demand.num_bytes == 40
    answer = budget.answer(demand, budget.Budget(amount=10, unit="bytes"))
    assert answer.need == 40 and answer.ideal_shards == 4
    assert answer.devices == 4 and answer.per_device == 10  # 5 values x 2 bytes


def test_training_adds_gradients_and_real_adam_state():
    demand = budget.demand(SEED, "float32", "adam")
    # 20 parameters + 20 gradients + Adam's mu (20) and nu (20) + its int32 step count (1)
    assert demand.num_values == 81
    assert demand.num_bytes == 80 * 4 + 4
    answer = budget.answer(demand, values_budget(21, training="adam"))
    assert answer.held[3] == 21  # on 4 devices: 5 + 5 + 5 + 5, and the step count whole
    assert answer.devices == 4


def test_grouped_layout_equals_compute_layout_on_real_presets():
    """The sweep's per-shape layout is compute_layout's, array by array, on several meshes."""
    for config in (ModelConfig(preset="gpt2-small"), ModelConfig(preset="resnet18")):
        report = count_params(config)
        shapes = [tuple(row.shape) for row in report.arrays]
        for strategy, axis in (("fsdp", "data"), ("replicated", "data"), ("tensor", "model")):
            for devices in (1, 2, 3, 4, 6, 8, 12, 64, 96, 768):
                mesh = meshes.MeshSpec(((axis, devices),))
                try:
                    full = layout.compute_layout(report, mesh, strategy)
                except layout.LayoutError:
                    with pytest.raises(layout.LayoutError, match="cannot be split as the tensor strategy asks"):
                        layout.shard_values_by_shape(shapes, mesh, strategy)
                    continue
                grouped = layout.shard_values_by_shape(shapes, mesh, strategy)
                assert [grouped[tuple(row.shape)] for row in full.arrays] == [
                    row.values_per_shard for row in full.arrays
                ], (config.preset, strategy, devices)


def test_grouped_layout_of_llama2_70b_matches_on_a_few_device_counts():
    report = count_params(ModelConfig(preset="llama2-70b"))
    shapes = [tuple(row.shape) for row in report.arrays]
    for devices in (1, 3, 7, 16, 1000, 4096):
        mesh = meshes.MeshSpec((("data", devices),))
        full = layout.compute_layout(report, mesh, "fsdp")
        grouped = layout.shard_values_by_shape(shapes, mesh, "fsdp")
        assert sum(grouped[tuple(row.shape)] for row in report.arrays) == full.values_per_device


def test_custom_rules_cannot_be_grouped_by_shape():
    with pytest.raises(ValueError, match="custom rules match array paths"):
        layout.shard_values_by_shape([(4, 4)], meshes.parse_mesh("data=2"), "custom")


@pytest.mark.parametrize(
    ("text", "unit", "amount"),
    [
        ("80 GiB", "bytes", 80 * 2**30),
        ("80GiB", "bytes", 80 * 2**30),
        ("80 gb", "bytes", 80 * 10**9),
        ("1.5 TiB", "bytes", 3 * 2**39),
        ("85899345920", "bytes", 85899345920),
        ("12,000", "bytes", 12000),
        ("7e9", "values", 7 * 10**9),
        ("7B", "values", 7 * 10**9),
        ("500M", "values", 500 * 10**6),
        ("7", "values", 7),
    ],
)
def test_typed_budgets_are_exact(text, unit, amount):
    assert amounts.parse_amount(text, unit) == amount


@pytest.mark.parametrize(
    ("text", "unit", "match"),
    [
        ("1e400", "bytes", r"from 1 to 1,000,000,000,000,000,000, got '1e400'"),
        ("nan", "bytes", "must be a number of bytes"),
        ("inf", "values", "must be a number of values"),
        ("-5", "bytes", "must be a number of bytes"),
        ("0", "values", "from 1 to"),
        ("1.5", "values", "whole number of values"),
        ("80 GiB", "values", "must be a number of values"),
        ("8 KB", "bytes", None),
        ("1,5", "bytes", "must be a number of bytes"),
        ("9" * 40, "bytes", "at most 32 characters"),
        ("80 \u202egib", "bytes", "must be a number of bytes"),
    ],
)
def test_bad_budgets_say_the_rule_and_the_value(text, unit, match):
    if match is None:  # KB is read as the decimal kB, as it is written on drives
        assert amounts.parse_amount(text, unit) == 8000
        return
    with pytest.raises(ValueError, match=match):
        amounts.parse_amount(text, unit)


def test_a_budget_refuses_unknown_settings():
    with pytest.raises(ValueError, match="one of bytes, values"):
        budget.Budget(unit="GiB")
    with pytest.raises(ValueError, match="optimizer, one of sgd"):
        budget.Budget(training="rmsprop")
    with pytest.raises(ValueError, match="fsdp, replicated, tensor"):
        budget.Budget(strategy="custom")


def test_a_deep_dense_stack_searches_quickly_enough_to_sweep_every_count():
    report = count_params(ModelConfig(input_dim=8, layers=(DenseLayer(features=8),) * 64))
    answer = budget.answer(budget.demand(report, "float32"), values_budget(10**9))
    assert answer.devices == 1 and len(answer.held) == 4096


@settings(max_examples=examples(150))
@given(
    shapes=hs.lists(
        hs.lists(hs.sampled_from([1, 2, 3, 4, 6, 8, 12, 30, 64]), max_size=3).map(tuple), min_size=1, max_size=6
    ),
    axes=hs.lists(hs.integers(1, 12), min_size=1, max_size=2),
    strategy=hs.sampled_from(["fsdp", "replicated", "tensor"]),
)
def test_grouped_layout_equals_compute_layout_on_any_shapes_and_meshes(shapes, axes, strategy):
    rows = tuple(array(f"a{index}/kernel", shape) for index, shape in enumerate(shapes))
    names = ["model", "data"] if strategy == "tensor" else ["data", "model"]
    mesh = meshes.MeshSpec(tuple(zip(names, axes, strict=False)))
    try:
        full = layout.compute_layout(ParamReport(arrays=rows), mesh, strategy)
    except layout.LayoutError:
        with pytest.raises(layout.LayoutError, match="tensor strategy"):
            layout.shard_values_by_shape(shapes, mesh, strategy)
        return
    grouped = layout.shard_values_by_shape(shapes, mesh, strategy)
    assert [grouped[row.shape] for row in full.arrays] == [row.values_per_shard for row in full.arrays]


# --- what the front ends show: the counts worth drawing and the answer in words ----------------------


def test_the_counts_a_team_buys_are_powers_of_two_and_three_times_them():
    assert budget.bought_counts(64) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert budget.bought_counts()[-3:] == (2048, 3072, 4096) and len(budget.bought_counts()) == 24


def test_the_counts_shown_add_the_answer_and_the_ideal_share_count():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(7), up_to=64)
    assert (answer.devices, answer.ideal_shards) == (4, 3)  # both bought already
    assert budget.shown_counts(answer) == budget.bought_counts(64)
    answer = budget.answer(budget.demand(count_params(ModelConfig(input_dim=5)), "float32"), values_budget(5), up_to=64)
    # 5x4 kernel + 4 bias = 24 values: ideal 5 shards; fsdp splits only over 2 and 4 (4 holds 5 + 1 = 6)
    assert answer.ideal_shards == 5 and answer.devices is None
    assert 5 in budget.shown_counts(answer) and 7 not in budget.shown_counts(answer)


def test_larger_counts_that_fit_and_fail_split_every_count_searched():
    answer = budget.answer(budget.demand(SEED, "float32"), values_budget(10))
    assert answer.searched == 4096 and answer.fits_above == (4,)
    assert len(answer.fits_above) + len(answer.fails_above) == 4096 - answer.devices


@pytest.mark.parametrize(
    ("amount", "strategy", "said"),
    [
        (
            10,
            "fsdp",
            "Fits on 2 devices (data=2), 10 values each. Of the 4,094 larger counts up to 4,096, 1 also fits (4); "
            "the other 4,093 do not, e.g. 3, 6 and 8: fsdp keeps an array whole on every device when the count "
            "divides none of its dimensions, so 3 devices would hold 20 values each.",
        ),
        (
            5,
            "tensor",
            "Fits on 4 devices (model=4), 5 values each. None of the 4,092 larger counts up to 4,096 fits, e.g. 6, 8 "
            "and 12: tensor must split every array's last dimension over model=N, and 6 does not divide them all, "
            "so it cannot lay the model out there.",
        ),
        (20, "fsdp", "Fits on 1 device (data=1), 20 values each. Every larger count up to 4,096 fits too."),
        (
            19,
            "replicated",
            "Fits on no device count from 1 to 4,096: even the emptiest layout, on 1 device (data=1), holds 20 "
            "values a device, over the budget of 19 values.",
        ),
    ],
    ids=["some-larger-fit", "tensor-none-larger", "all-fit", "none-fits"],
)
def test_the_answer_in_words_by_hand(amount, strategy, said):
    spec = values_budget(amount, strategy)
    assert budget.summary(budget.answer(budget.demand(SEED, "float32"), spec), spec) == said


def test_llama2_70b_with_adam_fits_on_8_and_its_powers_of_two_and_says_why_not_12():
    """The sentence a capacity planner reads, on the model from the issue: 80 GiB a device, bfloat16."""
    spec = budget.Budget(amount=80 * 2**30, training="adam")
    answer = budget.answer(budget.demand(count_params(ModelConfig(preset="llama2-70b")), "bfloat16", "adam"), spec)
    assert answer.fits_above == (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    assert budget.summary(answer, spec) == (
        "Fits on 8 devices (data=8), 68,976,648,196 bytes (64.24 GiB) each. Of the 4,088 larger counts up to 4,096, "
        "9 also fit (16, 32, 64, 128, 256, 512, 1,024, 2,048 and 4,096); the other 4,079 do not, e.g. 12, 24 and "
        "48: fsdp keeps an array whole on every device when the count divides none of its dimensions, so 12 "
        "devices would hold 551,813,185,540 bytes (513.92 GiB) each."
    )


def test_a_long_list_is_cut_and_says_so():
    counts = tuple(range(1, 20))
    assert budget._counts_text(counts) == "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, …"
    assert budget._counts_text((3,)) == "3" and budget._counts_text((3, 5)) == "3 and 5"
