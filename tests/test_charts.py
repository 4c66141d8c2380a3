"""Chart builders, checked on the Vega-Lite they produce: encodings, scales, titles, alt text."""

import dataclasses
import re

import pandas as pd
import pytest

from conftest import hand_checkpoint_report
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.report import (
    chart_axes,
    checkpoint_charts,
    compare_charts,
    layout_charts,
    memory_charts,
    model_charts,
    tables,
)

MNIST = ModelConfig(input_dim=784, layers=(DenseLayer(features=512), DenseLayer(features=512), DenseLayer(features=10)))


@pytest.fixture(scope="module")
def report():
    return count_params(MNIST)


def layers_of(spec):
    return spec.get("layer", [spec])


def test_params_by_layer_keeps_model_order_and_exact_tooltips(report):
    spec = model_charts.params_by_layer(tables.layers_frame(report)).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["y"]["sort"] == ["Dense_0", "Dense_1", "Dense_2"]
    assert spec["encoding"]["x"]["field"] == "num_params"
    assert spec["encoding"]["x"]["scale"]["zero"] is True
    assert "Parameters" in spec["encoding"]["x"]["axis"]["title"]
    assert spec["title"]["text"] == "Parameters per layer"
    assert spec["description"]
    rows = next(iter(spec["datasets"].values()))
    assert [row["params_text"] for row in rows] == ["401,920", "262,656", "5,130"]


def test_share_sweep_is_log_log_without_bars(report):
    sweep = tables.share_sweep_frame(report.total_params, 3)
    spec = model_charts.share_sweep(sweep, 3).to_dict()
    marks = [layer["mark"]["type"] for layer in layers_of(spec)]
    # Bars would start at 0, which a log axis cannot draw: lines and points need no baseline.
    assert "bar" not in marks
    assert set(marks) == {"line", "point"}
    encoding = spec["layer"][0]["encoding"]
    assert encoding["x"]["scale"] == {"type": "log", "base": 2}
    assert encoding["y"]["scale"] == {"type": "log"}
    assert "(log)" in encoding["x"]["axis"]["title"]
    assert "values, log" in encoding["y"]["axis"]["title"]
    assert encoding["y"]["axis"]["values"] == [100.0, 1000.0, 10000.0, 100000.0, 1000000.0]
    assert "3 shards" in spec["title"]["subtitle"]
    assert spec["description"]


def test_share_sweep_tooltips_carry_the_exact_share(report):
    sweep = tables.share_sweep_frame(report.total_params, 3)
    spec = model_charts.share_sweep(sweep, 3).to_dict()
    for layer in spec["layer"]:
        tooltips = {tip["title"]: tip["field"] for tip in layer["encoding"]["tooltip"]}
        assert tooltips["Ideal share (exact)"] == "ideal_share_text"
    rows = [row for data in spec["datasets"].values() for row in data if row["num_shards"] == 3]
    assert {row["ideal_share_text"] for row in rows} == {"223,235.33333333334 (669,706/3)"}


@pytest.mark.parametrize(("low", "high", "ticks"), [(0.0049, 20, [0.001, 0.01, 0.1, 1, 10, 100]), (10, 10, [10])])
def test_decades_cover_the_data(low, high, ticks):
    assert chart_axes.decades(low, high) == pytest.approx(ticks)


def test_raw_bytes_charts_say_they_are_not_the_checkpoint_size(report):
    payloads = tables.payload_frame(report.total_params)
    payloads["raw_bytes_text"] = payloads["raw_bytes"].map(units.bytes_exact)
    for chart in (
        model_charts.raw_bytes_by_dtype(payloads),
        model_charts.raw_bytes_by_layer(tables.layer_bytes_frame(report)),
    ):
        spec = chart.to_dict()
        assert "(bytes)" in spec["title"]["text"]
        assert "not the checkpoint size" in spec["title"]["subtitle"]
        assert "not a checkpoint size" in spec["description"]
        assert spec["encoding"]["x"]["axis"]["labelExpr"] == chart_axes.BYTE_LABELS
    spec = model_charts.raw_bytes_by_dtype(payloads).to_dict()
    assert spec["encoding"]["y"]["sort"][0] == "float32"


def test_the_layer_chart_is_titled_and_drawn_in_the_dtype_the_page_shows(report):
    # issue 46: /bytes?dtype=bfloat16 titled its chart "Raw float32 payload per layer"
    spec = model_charts.raw_bytes_by_layer(tables.layer_bytes_frame(report), "bfloat16").to_dict()
    assert spec["title"]["text"] == "Raw bfloat16 payload per layer (bytes)"
    assert spec["title"]["subtitle"] == "2 bytes a value; not the checkpoint size"
    assert spec["encoding"]["x"]["field"] == "bfloat16"
    assert spec["encoding"]["tooltip"][1]["field"] == "bfloat16_text"


def checkpoint_sizes_frame(dtype, disk_bytes):
    """``checkpoint.sizes_frame`` of a hand-made report: Dense(1024) on 1024, 1,049,600 values."""
    from dcsim.checkpoint.records import sizes_frame

    return sizes_frame(hand_checkpoint_report(dtype, disk_bytes))


@pytest.mark.parametrize(
    ("dtype", "disk_bytes", "payload_text"),
    [
        ("float32", 3_889_613, "4,198,400 bytes (4.00 MiB)"),
        ("bfloat16", 1_650_000, "2,099,200 bytes (2.00 MiB)"),
    ],
    ids=["float32", "bfloat16"],
)
def test_checkpoint_sizes_puts_the_measured_disk_beside_both_estimates(dtype, disk_bytes, payload_text):
    spec = checkpoint_charts.checkpoint_sizes(checkpoint_sizes_frame(dtype, disk_bytes), dtype).to_dict()
    assert spec["mark"]["type"] == "bar"
    # Linear from zero: bar lengths compare, and no log scale leaves bars undrawn.
    assert spec["encoding"]["x"]["scale"] == {"zero": True}
    assert spec["encoding"]["x"]["axis"]["labelExpr"] == chart_axes.BYTE_LABELS
    assert "(bytes)" in spec["title"]["text"]
    assert "disk" in spec["description"] and "raw float32" in spec["description"]
    labels = ["Raw float32 (estimate)", f"Raw payload, {dtype} (estimate)", "On disk (measured)"]
    assert spec["encoding"]["y"]["sort"] == labels
    rows = next(iter(spec["datasets"].values()))
    assert [row["label"] for row in rows] == labels
    assert [row["kind"] for row in rows] == ["estimate", "estimate", "measured"]
    assert [row["num_bytes_text"] for row in rows] == [
        "4,198,400 bytes (4.00 MiB)",
        payload_text,
        units.bytes_exact(disk_bytes),
    ]
    assert [tooltip["field"] for tooltip in spec["encoding"]["tooltip"]] == ["label", "num_bytes_text"]


# --- Layout page ----------------------------------------------------------------------------

DENSE_8_8 = ModelConfig(input_dim=8, layers=(DenseLayer(features=8),))


def layout_strategies(mesh_text):
    from dcsim.sharding import meshes
    from dcsim.ui import layout as layout_widgets

    return layout_widgets.strategy_frame(DENSE_8_8, meshes.parse_mesh(mesh_text), ())


def test_layout_vs_ideal_bars_start_at_a_baseline_on_the_log_axis():
    spec = layout_charts.layout_vs_ideal(layout_strategies("data=4"), "fsdp").to_dict()
    bars, rule = spec["layer"]
    assert bars["mark"]["type"] == "bar" and rule["mark"]["type"] == "rule"
    x = bars["encoding"]["x"]
    assert x["scale"]["type"] == "log"
    # 18 (fsdp, ideal) and 72 (replicated): bars start at 10, the power of ten below the smallest figure
    assert bars["encoding"]["x2"] == {"datum": 10.0}
    assert x["scale"]["domain"] == [10.0, 100.0]
    assert x["axis"]["values"] == [10.0, 100.0]
    assert "log" in x["axis"]["title"]
    assert rule["encoding"]["x"]["field"] == "ideal_share"
    assert bars["encoding"]["y"]["sort"] == ["replicated", "fsdp", "tensor"]
    assert "red: fsdp" in " ".join(spec["title"]["subtitle"]) and "(values, log)" in spec["title"]["text"]
    assert spec["description"]


def test_layout_vs_ideal_tooltips_are_exact_and_refused_strategies_have_no_bar():
    spec = layout_charts.layout_vs_ideal(layout_strategies("data=3"), "replicated").to_dict()
    tips = {tip["title"]: tip["field"] for tip in spec["layer"][0]["encoding"]["tooltip"]}
    assert tips == {
        "Strategy": "strategy",
        "Values per device (exact)": "values_text",
        "Ideal share (exact)": "ideal_share_text",
    }
    rows = spec["datasets"][spec["layer"][0]["data"]["name"]]
    assert [row["strategy"] for row in rows] == ["replicated", "fsdp"]  # tensor needs `model`
    assert {row["ideal_share_text"] for row in rows} == {"24"}
    assert [row["chosen"] for row in rows] == [True, False]


def test_layout_vs_ideal_baseline_goes_below_a_share_under_one():
    from dcsim.sharding import meshes
    from dcsim.ui import layout as layout_widgets

    strategies = layout_widgets.strategy_frame(DENSE_8_8, meshes.parse_mesh("data=4096"), ())
    spec = layout_charts.layout_vs_ideal(strategies, "fsdp").to_dict()
    # ideal share 72 / 4096 = 0.0176: the axis and the baseline reach 0.01
    assert spec["layer"][0]["encoding"]["x2"]["datum"] == pytest.approx(0.01)


def test_layout_sweep_is_log_log_lines_with_the_layout_marked():
    from dcsim.ui import layout as layout_widgets

    sweep = layout_widgets.sweep_frame(count_params(DENSE_8_8))
    spec = layout_charts.layout_sweep(sweep, 4, 18).to_dict()
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
    assert "bar" not in marks and marks.count("point") == 2 and "line" in marks
    encoding = spec["layer"][0]["encoding"]
    assert encoding["x"]["scale"] == {"type": "log", "base": 2}
    assert encoding["y"]["scale"] == {"type": "log"}
    assert encoding["strokeDash"]["field"] == "ideal"
    tips = {tip["title"]: tip["field"] for tip in encoding["tooltip"]}
    assert tips["Values per device (exact)"] == "values_text"
    marked = spec["datasets"][spec["layer"][2]["data"]["name"]]
    assert marked == [{"devices": 4, "values_per_device": 18.0, "values_text": "18", "series": "this layout"}]
    assert spec["title"]["subtitle"] == ["Meshes data=N (tensor: model=N)", "Dashed: the ideal share; red: this layout"]
    assert spec["description"]
    # The plot keeps its height and only the width fits the column: fitting both squeezed the plot
    # under the two-row legend and cut the title off at the top.
    assert spec["height"] == 260 and spec["autosize"] == {"type": "fit-x", "contains": "padding"}


def test_layout_sweep_ticks_cover_a_layout_beyond_the_sweep():
    from dcsim.ui import layout as layout_widgets

    sweep = layout_widgets.sweep_frame(count_params(DENSE_8_8))
    without = layout_charts.layout_sweep(sweep).to_dict()
    assert len(without["layer"]) == 2
    spec = layout_charts.layout_sweep(sweep, 1 << 20, 72).to_dict()
    ticks = spec["layer"][0]["encoding"]["y"]["axis"]["values"]
    assert ticks[0] <= 72 / 4096 and ticks[-1] >= 72


@pytest.mark.parametrize(
    ("low", "high", "baseline"),
    [(18, 72, 10.0), (10, 72, 1.0), (0.0176, 72, 0.01)],
    ids=["between", "on-a-decade", "below-one"],
)
def test_layout_bars_baseline_lies_below_every_figure(low, high, baseline):
    start, ticks = chart_axes.log_baseline(low, high)
    assert start == pytest.approx(baseline) and start < low
    assert ticks[0] == start and ticks[-1] >= high


# --- Compare page charts ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def comparison_tables():
    from dcsim import compare
    from dcsim.compare import tables
    from dcsim.memory import budget

    comparison = compare.Comparison(
        scenarios=(
            compare.Scenario(name="seed <b>", config=ModelConfig()),
            compare.Scenario(name="mnist", config=dataclasses.replace(MNIST, num_shards=1024)),
        ),
        budget=budget.Budget(amount=10, unit="values"),
    )
    reports = [count_params(s.config) for s in comparison.scenarios]
    answers = [
        budget.answer(budget.demand(r, s.dtype), comparison.budget, up_to=64)
        for r, s in zip(reports, comparison.scenarios, strict=True)
    ]
    return (
        tables.comparison_frame(comparison, reports),
        tables.sweep_frame(comparison, reports),
        tables.held_frame(comparison, answers),
    )


def test_compare_bars_are_grouped_and_start_at_a_log_baseline_below_every_figure(comparison_tables):
    table, _, _ = comparison_tables
    spec = compare_charts.compare_bars(table).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["xOffset"]["field"] == "measure"
    assert spec["encoding"]["x"]["sort"] == ["seed <b>", "mnist"]
    assert spec["encoding"]["y"]["scale"]["type"] == "log"
    baseline = spec["encoding"]["y2"]["datum"]
    rows = next(iter(spec["datasets"].values()))
    # mnist over 1,024 shards: 669,706 / 1,024 = 654.0..., the seed's share 10: the bars start at 1
    assert baseline == 1.0 and min(row["values"] for row in rows) > baseline
    assert {row["exact"] for row in rows} >= {"669,706", "20", "10"}
    assert spec["description"]


def test_compare_sweep_has_one_line_per_scenario_and_marks_each_own_count(comparison_tables):
    table, sweep, _ = comparison_tables
    spec = compare_charts.compare_sweep(sweep, table).to_dict()
    line, marked = spec["layer"]
    assert line["mark"]["type"] == "line" and line["encoding"]["color"]["field"] == "name"
    assert line["encoding"]["x"]["scale"] == {"type": "log", "base": 2}
    assert line["encoding"]["y"]["scale"]["type"] == "log"
    marks = spec["datasets"][marked["data"]["name"]]
    assert [(row["name"], row["num_shards"]) for row in marks] == [("seed <b>", 2), ("mnist", 1024)]


def test_budget_sweep_draws_the_counts_a_team_buys_not_every_count_searched(comparison_tables):
    _, _, held = comparison_tables
    spec = compare_charts.budget_sweep(held, 10, "values").to_dict()
    trend, points, rule = spec["layer"]
    assert rule["mark"]["type"] == "rule" and spec["datasets"][rule["data"]["name"]][0]["budget"] == 10.0
    rows = spec["datasets"][points["data"]["name"]]
    seed = {row["devices"]: (row["held"], row["verdict"]) for row in rows if row["name"] == "seed <b>"}
    # up to 64: 1, 2, 3, 4, 6, 8 ... 48, 64 and the ideal share's 2 shards; never 5, 7 or 63
    assert sorted(seed) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert seed[2] == (10.0, "Fits the budget") and seed[3] == (20.0, "Over the budget")
    assert points["mark"]["type"] == "point" and points["encoding"]["shape"]["field"] == "verdict"
    assert points["encoding"]["shape"]["scale"]["range"] == ["circle", "cross"]
    assert points["encoding"]["size"]["condition"]["test"] == "datum.is_answer"
    # the line joins the powers of two only: a line through 3 or 6 would draw the spikes again
    line_counts = {row["devices"] for row in spec["datasets"][trend["data"]["name"]] if row["name"] == "seed <b>"}
    assert line_counts == {1, 2, 4, 8, 16, 32, 64} and trend["mark"]["type"] == "line"
    assert "Fullest device (values" in points["encoding"]["y"]["axis"]["title"]
    assert points["encoding"]["x"]["axis"]["values"] == [1, 2, 4, 8, 16, 32, 64]
    assert "Dot: fits; cross: over the budget" in " ".join(spec["title"]["subtitle"])


def test_compare_line_charts_fit_the_width_only(comparison_tables):
    # With "fit" in both directions a two-row legend squeezed the plot to a few pixels in Chromium.
    table, sweep, held = comparison_tables
    for chart in (compare_charts.compare_sweep(sweep, table), compare_charts.budget_sweep(held, 10, "values")):
        spec = chart.to_dict()
        assert spec["autosize"] == {"type": "fit-x", "contains": "padding"} and spec["height"] == 300


# --- checkpoints across processes -------------------------------------------------------------------


def sweep_frames():
    """A sweep's two frames as dcsim.checkpoint.multiprocess builds them, with figures chosen by hand."""
    import pandas as pd

    sweep = pd.DataFrame(
        {
            "num_processes": pd.array([1, 2, 4], dtype="int64"),
            "save_seconds": [0.5, 0.75, 1.25],
            "restore_seconds": [0.25, 0.5, 0.5],
        }
    )
    per_process = pd.DataFrame(
        {
            "num_processes": pd.array([1, 2, 2, 4, 4, 4, 4], dtype="int64"),
            "process": pd.array([0, 0, 1, 0, 1, 2, 3], dtype="int64"),
            "num_bytes": pd.array([4_000_000, 2_000_001, 1_999_999, 1_000_000, 1_000_000, 999_999, 1_000_001]),
            "peak_rss_bytes": pd.array([400 * 2**20, 300 * 2**20, 300 * 2**20] + [250 * 2**20] * 4, dtype="int64"),
        }
    )
    return sweep, per_process


def test_save_time_by_processes_is_a_line_per_figure_over_categories():
    sweep, _ = sweep_frames()
    spec = checkpoint_charts.save_time_by_processes(sweep).to_dict()
    assert {layer["mark"]["type"] for layer in spec["layer"]} == {"line", "point"}
    encoding = spec["layer"][0]["encoding"]
    assert encoding["x"]["field"] == "num_processes" and encoding["x"]["type"] == "ordinal"
    assert encoding["y"]["scale"]["zero"] is True
    assert encoding["color"]["scale"]["domain"] == ["Save", "Restore"]
    assert spec["title"]["text"] == "Save time against processes (s)"
    assert spec["description"]
    rows = next(iter(spec["datasets"].values()))
    assert {(row["num_processes"], row["figure"], row["seconds_text"]) for row in rows} >= {
        (1, "Save", "0.500 s"),
        (4, "Save", "1.250 s"),
        (2, "Restore", "0.500 s"),
    }
    assert len(rows) == 6


@pytest.mark.parametrize(
    "builder, field, title",
    [
        (checkpoint_charts.bytes_per_process, "num_bytes", "Bytes written per process"),
        (checkpoint_charts.memory_per_process, "peak_rss_bytes", "Peak memory per process"),
    ],
    ids=["bytes", "memory"],
)
def test_per_process_charts_group_one_bar_per_process_from_zero(builder, field, title):
    _, per_process = sweep_frames()
    spec = builder(per_process).to_dict()
    assert spec["mark"]["type"] == "bar"
    encoding = spec["encoding"]
    assert encoding["x"]["field"] == "num_processes" and encoding["x"]["type"] == "ordinal"
    assert encoding["xOffset"]["field"] == "process_name"
    assert encoding["xOffset"]["sort"] == ["Process 0", "Process 1", "Process 2", "Process 3"]
    assert encoding["y"]["field"] == field and encoding["y"]["scale"]["zero"] is True
    assert spec["title"]["text"] == title and spec["description"]
    rows = next(iter(spec["datasets"].values()))
    assert len(rows) == 7
    exact = {(row["num_processes"], row["process"]): row["value_text"] for row in rows}
    if field == "num_bytes":
        assert exact[(2, 0)] == "2,000,001 bytes (1.91 MiB)"
        assert exact[(4, 2)] == "999,999 bytes (976.56 KiB)"
    else:
        assert exact[(1, 0)] == "419,430,400 bytes (400.00 MiB)"


def test_every_title_subtitle_and_legend_label_starts_in_upper_case(report, comparison_tables):
    """A chart's words are captions too: each line of a title or subtitle starts with a capital or a
    digit (names the reader types, such as fsdp or data=N, go after it), and so do legend labels
    that are words rather than names (Save, Process 0, Ideal share)."""
    from dcsim.sharding import meshes
    from dcsim.ui import layout as layout_widgets

    table, sweep, held = comparison_tables
    payloads = tables.payload_frame(report.total_params)
    payloads["raw_bytes_text"] = payloads["raw_bytes"].map(units.bytes_exact)
    runs, per_process = sweep_frames()
    layout_sweep = layout_widgets.sweep_frame(count_params(DENSE_8_8))
    built = [
        model_charts.params_by_layer(tables.layers_frame(report)),
        model_charts.params_by_group(tables.layers_frame(report).rename(columns={"path": "group"})),
        model_charts.share_sweep(tables.share_sweep_frame(report.total_params, 4), 4),
        model_charts.raw_bytes_by_dtype(payloads),
        model_charts.raw_bytes_by_layer(tables.layer_bytes_frame(report)),
        checkpoint_charts.checkpoint_sizes(checkpoint_sizes_frame("float32", 4_000_000), "float32"),
        layout_charts.layout_vs_ideal(
            layout_widgets.strategy_frame(DENSE_8_8, meshes.parse_mesh("data=4"), ()), "fsdp"
        ),
        layout_charts.layout_sweep(layout_sweep, 4, 18),
        compare_charts.compare_bars(table),
        compare_charts.compare_sweep(sweep, table),
        compare_charts.budget_sweep(held, 10, "values"),
        checkpoint_charts.save_time_by_processes(runs),
        checkpoint_charts.bytes_per_process(per_process),
        checkpoint_charts.memory_per_process(per_process),
    ]
    for chart in built:
        title = chart.to_dict()["title"]
        subtitle = title.get("subtitle", [])
        for line in [title["text"], *([subtitle] if isinstance(subtitle, str) else subtitle)]:
            assert line[0].isupper() or line[0].isdigit(), line
    assert set(layout_sweep["series"]) >= {"Ideal share"}
    assert checkpoint_charts.save_time_by_processes(runs).to_dict()["layer"][0]["encoding"]["color"]["sort"] == [
        "Save",
        "Restore",
    ]


def test_log_ticks_are_the_ones_a_reader_expects():
    # issue 46: Vega-Lite's own pick on the remat chart read 1, 5, 9, 40, 80
    assert chart_axes.one_two_five(1.3, 80) == pytest.approx([1, 2, 5, 10, 20, 50, 100])
    assert chart_axes.one_two_five(20, 20) == pytest.approx([20])


def test_policies_that_keep_the_same_bytes_share_one_line():
    points = pd.DataFrame(
        {
            "sequence": [1024, 2048] * 4,
            "policy": ["none"] * 2 + ["dots"] * 2 + ["minimal"] * 2 + ["full"] * 2,
            "bytes": [400, 800, 200, 400, 200, 400, 50, 100],
        }
    )
    lines = memory_charts.policy_lines(points)
    assert sorted(set(lines["policy"])) == ["dots = minimal", "full", "none"]
    spec = memory_charts.activations_by_sequence(points, state_bytes=2**30, budget_bytes=2 * 2**30).to_dict()
    curves, budget, label = spec["layer"]
    assert label["mark"]["type"] == "text" and label["encoding"]["text"]["field"] == "text"
    assert spec["datasets"][label["data"]["name"]][0]["text"] == "budget 2.00 GiB"  # the line named on the plot
    rows = spec["datasets"][curves["data"]["name"]]
    assert len(rows) == 6 and min(row["gib"] for row in rows) == 1 + 50 / 2**30  # the state is added
    assert curves["encoding"]["y"]["axis"]["values"] == [1.0, 2.0]
    assert curves["encoding"]["x"]["axis"]["values"] == [1024, 2048]
    assert spec["datasets"][budget["data"]["name"]][0]["gib"] == 2.0


# d3's format '~s' (SI prefix, zeros trimmed) at powers of ten, as d3 documents it, for reading count axes'
# labelExpr by hand below (Vega runs only in the browser).
D3_SI = {10.0**power: text for power, text in enumerate(["1", "10", "100", "1k", "10k", "100k", "1M", "10M", "100M"])}
D3_SI |= {1e9: "1G", 1e10: "10G", 1e11: "100G", 1e12: "1T", 1e13: "10T"}


def count_label(expression: str, value: float) -> str:
    """What a count axis's ``labelExpr`` (``datum.value >= 1000 ? <replaces of format '~s'> :
    format '~g'``) shows at ``value``: the d3 text, then each ``replace`` in the order it nests."""
    condition, _, branches = expression.partition(" ? ")
    counts, _, small = branches.rpartition(" : ") if branches else (expression, "", "")
    if branches and not value >= float(condition.split(">=")[1]):
        assert small == "format(datum.value, '~g')"
        return f"{value:g}"
    text = D3_SI[value]
    for old, new in re.findall(r"(?<=\)), '([^']*)', '([^']*)'\)", counts):
        text = text.replace(old, new)
    return text


def test_the_layout_pages_count_axes_read_as_counts_not_bytes():
    from dcsim.report.chart_axes import SHARE_LABELS

    # issue 46, item 7: "10B/100B" beside the byte axes read as bytes; Llama 2 7B replicated is 6.7 bn values a device
    from dcsim.sharding import meshes
    from dcsim.ui import layout as layout_widgets

    config = ModelConfig(preset="llama2-7b")
    report = count_params(config)
    specs = [
        layout_charts.layout_vs_ideal(layout_widgets.strategy_frame(config, meshes.parse_mesh("data=8"), ()), "fsdp"),
        layout_charts.layout_sweep(layout_widgets.sweep_frame(report), 8, report.total_params // 8),
    ]
    labels = {}
    for spec in (chart.to_dict() for chart in specs):
        for layer in spec["layer"]:
            for channel in layer.get("encoding", {}).values():
                axis = channel.get("axis") if isinstance(channel, dict) else None
                if axis and "values" in axis and "Values" in axis.get("title", ""):
                    labels |= {value: count_label(axis["labelExpr"], value) for value in axis["values"]}
    assert labels[1e10] == "10 bn" and labels[1e9] == "1 bn" and labels[1e8] == "100 M"
    assert count_label(SHARE_LABELS, 2e4 / 2) == "10 k" and count_label(SHARE_LABELS, 0.01) == "0.01"
    assert not [label for label in labels.values() if label.endswith("B") or "G" in label]
