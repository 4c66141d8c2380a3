"""The Layout page's pure helpers: rules text, outcomes that keep what can be placed, the
per-array table, and the strategy and device-count sweeps, checked by hand."""

from fractions import Fraction

import hypothesis.strategies as hs
import pytest
from hypothesis import given, settings

from conftest import examples
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding import layout, meshes
from dcsim.ui import layout as lw


def dense(input_dim, *widths):
    return ModelConfig(input_dim=input_dim, layers=tuple(DenseLayer(features=width) for width in widths))


DENSE_8_8 = dense(8, 8)


@pytest.mark.parametrize(
    "text, rules",
    [
        ("*/kernel=None,model", ["*/kernel=None,model"]),
        ("  */kernel = data , model \n\n*/bias=\n", ["*/kernel=data,model", "*/bias="]),
        ("a=data+model\r\nb=None", ["a=data+model", "b=None"]),
    ],
    ids=["one", "blank-lines-and-spaces", "crlf"],
)
def test_rules_text_is_one_rule_a_line(text, rules):
    parsed = lw.parse_rules_text(text)
    assert [rule.text for rule in parsed] == rules
    assert lw.rules_text(parsed) == "\n".join(rules)
    assert lw.parse_rules_text(lw.rules_text(parsed)) == parsed


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "needs at least one PATTERN=SPEC rule"),
        ("\n \n", "needs at least one PATTERN=SPEC rule"),
        ("*/kernel", "exactly one '='"),
        ("x" * 5000, "at most 4,096 characters in all, got 5,000"),
        ("\n".join(["*=data"] * 65), "at most 64 rules"),
    ],
    ids=["empty", "blank", "no-spec", "too-long", "too-many"],
)
def test_bad_rules_text(text, message):
    with pytest.raises(ValueError, match=message):
        lw.parse_rules_text(text)


def test_parse_strategy():
    assert [lw.parse_strategy(name) for name in layout.STRATEGIES] == list(layout.STRATEGIES)
    with pytest.raises(ValueError, match=r"one of replicated, fsdp, tensor, megatron, custom; got 'FSDP'"):
        lw.parse_strategy("FSDP")


def test_outcome_of_a_layout_that_works():
    outcome = lw.lay_out(count_params(DENSE_8_8), meshes.parse_mesh("model=2"), "tensor")
    assert outcome.error is None and outcome.problems == () and outcome.placed is None
    assert outcome.layout.values_per_device == 36


def test_outcome_keeps_the_arrays_that_can_be_placed():
    report = count_params(dense(8, 8, 5))
    outcome = lw.lay_out(report, meshes.parse_mesh("model=2"), "tensor")
    assert outcome.layout is None
    assert [path for path, _ in outcome.problems] == ["Dense_1/kernel", "Dense_1/bias"]
    assert "`Dense_1/kernel` (shape 8x5)" in outcome.error
    assert [row.path for row in outcome.placed.arrays] == ["Dense_0/kernel", "Dense_0/bias"]
    table = lw.array_table(report, outcome)
    assert list(table["status"]) == [lw.SPLIT, lw.SPLIT, lw.IMPOSSIBLE, lw.IMPOSSIBLE]
    assert list(table["values_per_shard"])[:2] == [32, 4]
    assert table["values_per_shard"].isna().tolist() == [False, False, True, True]
    assert table["note"].iloc[3].startswith("`Dense_1/bias` (shape 5)")
    text = lw.table_text(table)
    assert list(text["status"]) == ["split", "split", "✖ cannot be placed", "✖ cannot be placed"]
    assert list(text["values_per_shard"]) == ["32", "4", "", ""]


def test_outcome_of_a_request_refused_as_a_whole():
    report = count_params(DENSE_8_8)
    outcome = lw.lay_out(report, meshes.parse_mesh("data=4"), "tensor")
    assert outcome.layout is None and outcome.placed is None and outcome.problems == ()
    assert "mesh axis named `model`" in outcome.error
    assert set(lw.array_table(report, outcome)["status"]) == {lw.NOT_LAID_OUT}


def test_array_table_statuses_and_csv():
    report = count_params(DENSE_8_8)
    outcome = lw.lay_out(report, meshes.parse_mesh("data=2"), "custom", meshes.parse_rules(["*/kernel=data"]))
    table = lw.array_table(report, outcome)
    assert list(table["status"]) == [lw.SPLIT, lw.FALLBACK]
    replicated = lw.array_table(report, lw.lay_out(report, meshes.parse_mesh("data=2"), "replicated"))
    assert list(replicated["status"]) == [lw.REPLICATED, lw.REPLICATED]
    csv = table.to_csv(index=False).splitlines()
    assert (
        csv[0] == "path,status,shape,partition_spec,shard_shape,values_per_shard,replication_factor,stored_values,note"
    )
    assert csv[1] == "Dense_0/kernel,split,8x8,\"P('data',)\",4x8,32,1,64,rule */kernel=data"


def test_flagged_reasons_are_written_once_for_arrays_of_one_shape():
    report = count_params(dense(8, 5, 5, 5))  # Dense_1 and Dense_2 share their shapes (5x5, 5)
    table = lw.array_table(report, lw.lay_out(report, meshes.parse_mesh("model=2"), "tensor"))
    reasons = lw.flagged_reasons(table)
    # Dense_0/kernel 8x5 and every 5-wide array cannot split over model=2: one reason a shape.
    assert list(reasons["num_arrays"]) == [1, 3, 2]
    assert list(reasons["paths"])[1] == ["Dense_0/bias", "Dense_1/bias", "Dense_2/bias"]
    texts = [lw.reason_text(reason, len(table)) for reason in reasons.itertuples()]
    assert texts[0].startswith("✖ Cannot be placed, 1 of 6 arrays (Dense_0/kernel): The array (shape 8x5)")
    assert "`Dense_0/kernel`" not in texts[0]  # named in the list, not in the sentence
    assert texts[1].startswith("✖ Cannot be placed, 3 of 6 arrays (Dense_0/bias, Dense_1/bias, Dense_2/bias): ")
    assert "dimension 0 has size 5" in texts[1]


def test_a_reason_for_every_array_names_none_and_a_fallback_says_why_once():
    report = count_params(DENSE_8_8)
    refused = lw.array_table(report, lw.lay_out(report, meshes.parse_mesh("data=4"), "tensor"))
    (reason,) = lw.flagged_reasons(refused).itertuples()
    assert lw.reason_text(reason, 2).startswith("✖ Not laid out, all 2 arrays: The tensor strategy splits")
    fallback = lw.array_table(report, lw.lay_out(report, meshes.parse_mesh("data=3"), "fsdp"))
    texts = [lw.reason_text(reason, 2) for reason in lw.flagged_reasons(fallback).itertuples()]
    assert texts == [
        "⚠ Replicated (fallback), 1 of 2 arrays (Dense_0/kernel): No dimension of 8x8 splits evenly into 3 parts.",
        "⚠ Replicated (fallback), 1 of 2 arrays (Dense_0/bias): No dimension of 8 splits evenly into 3 parts.",
    ]
    split = lw.array_table(report, lw.lay_out(report, meshes.parse_mesh("data=2"), "fsdp"))
    assert lw.flagged_reasons(split).empty


def test_sweep_by_hand():
    sweep = lw.sweep_frame(count_params(DENSE_8_8))
    values = {(row.devices, row.series): row.values_text for row in sweep.itertuples()}
    assert values[(1, "Ideal share")] == "72"
    assert values[(4, "replicated (data=N)")] == "72"
    assert values[(4, "fsdp (data=N)")] == "18"  # kernel 2x8 + bias 2
    assert values[(8, "tensor (model=N)")] == "9"  # kernel 8x1 + bias 1
    assert (16, "tensor (model=N)") not in values  # 8 columns do not split 16 ways
    assert values[(16, "fsdp (data=N)")] == "72"  # nothing splits 16 ways: replicated
    assert values[(4096, "Ideal share")] == "0.017578125 (9/512)"
    assert sweep["devices"].max() == 4096


def test_strategy_frame_says_which_strategies_refuse():
    config = DENSE_8_8
    frame = lw.strategy_frame(config, meshes.parse_mesh("data=4"), ())
    assert list(frame["strategy"]) == ["replicated", "fsdp", "tensor"]
    assert list(frame["values_text"]) == ["72", "18", "cannot be laid out"]
    assert frame["values_per_device"].isna().tolist() == [False, False, True]
    assert "mesh axis named `model`" in frame["status"].iloc[2]
    assert set(frame["ideal_share"]) == {float(Fraction(72, 4))}
    custom = lw.strategy_frame(config, meshes.parse_mesh("data=4"), meshes.parse_rules(["*=data"]))
    assert list(custom["strategy"])[-1] == "custom"


def test_mesh_frame_is_readable():
    frame = lw.mesh_frame(meshes.parse_mesh("data=4096,model=2"))
    assert frame.to_dict("list") == {"axis": ["data", "model"], "size": ["4,096", "2"]}


@settings(max_examples=examples(40))
@given(
    input_dim=hs.integers(1, 12),
    widths=hs.lists(hs.integers(1, 12), min_size=1, max_size=3),
    sizes=hs.lists(hs.integers(1, 6), min_size=1, max_size=2),
    strategy=hs.sampled_from(["replicated", "fsdp", "tensor"]),
)
def test_the_table_always_has_every_array_and_adds_up(input_dim, widths, sizes, strategy):
    names = ["data", "model"][: len(sizes)]
    mesh = meshes.MeshSpec(tuple(zip(names, sizes, strict=True)))
    report = count_params(dense(input_dim, *widths))
    outcome = lw.lay_out(report, mesh, strategy)
    table = lw.array_table(report, outcome)
    assert list(table["path"]) == [row.path for row in report.arrays]
    if outcome.layout is not None:
        assert outcome.error is None
        assert int(table["values_per_shard"].sum()) == outcome.layout.values_per_device
        assert int(table["stored_values"].sum()) == outcome.layout.total_stored_values
        assert not set(table["status"]) & {lw.IMPOSSIBLE, lw.NOT_LAID_OUT}
    else:
        assert outcome.error
        flagged = set(table.loc[table["status"] == lw.IMPOSSIBLE, "path"])
        assert flagged == {path for path, _ in outcome.problems}
        placed = table[~table["status"].isin([lw.IMPOSSIBLE, lw.NOT_LAID_OUT])]
        assert placed["values_per_shard"].notna().all()
