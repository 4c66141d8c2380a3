"""The time charts (``dcsim.report.speed_charts``) on their Vega-Lite specs: a training step four
ways, each bar stacked by what makes it and ending at its figure, and the decode speed's
throughput-against-latency curve. Figures chosen by hand, so each bar's sum is checked in one's head."""

from types import SimpleNamespace

from dcsim.report import speed_charts
from dcsim.speed.serving import CurvePoint

# compute 2 s, memory 1 s, communication 1.5 s of which 0.5 s exposed: the point is max(2, 1) + 0.5.
TIME = SimpleNamespace(
    compute_seconds=2.0,
    memory_seconds=1.0,
    comm_seconds=1.5,
    exposed_comm_seconds=0.5,
    roofline_seconds=1.8,
    step_seconds_low=2.0,
    step_seconds_high=4.5,
    step_seconds=2.5,
    bubble_fraction=0.0,
)


def by_bar(frame):
    return {
        bar: list(zip(rows["part"], rows["seconds"], strict=True)) for bar, rows in frame.groupby("bar", sort=False)
    }


def test_each_bar_is_stacked_by_its_parts_and_sums_to_its_figure():
    frame = speed_charts.step_time_frame(TIME)
    assert by_bar(frame) == {
        "Roofline (100% of every peak)": [("Roofline", 1.8)],
        "Full overlap": [("Compute", 2.0)],
        "Point estimate": [("Compute", 2.0), ("Exposed communication", 0.5)],
        "No overlap": [("Compute", 2.0), ("Memory (HBM)", 1.0), ("Communication", 1.5)],
    }
    sums = frame.groupby("bar")["seconds"].sum()
    totals = frame.groupby("bar")["total"].first()
    assert (abs(sums - totals) < 1e-12).all()
    assert frame.loc[frame["bar"] == "No overlap", "text"].tolist() == ["2 s", "1 s", "1.5 s"]


def test_a_pipelined_step_ends_each_bar_with_its_bubble():
    """A bubble of 1/4 (3 stages, 8 micro-batches, 1f1b: 2/8) makes each figure 1.25 times its parts:
    roofline 1.8 x 1.25 = 2.25, of which 0.45 bubble; the point 2.5 x 1.25 = 3.125."""
    piped = SimpleNamespace(
        **(
            vars(TIME)
            | {
                "bubble_fraction": 0.25,
                "roofline_seconds": 2.25,
                "step_seconds_low": 2.5,
                "step_seconds": 3.125,
                "step_seconds_high": 5.625,
            }
        )
    )
    frame = speed_charts.step_time_frame(piped)
    bars = by_bar(frame)
    assert bars["Roofline (100% of every peak)"] == [("Roofline", 1.8), ("Pipeline bubble", 0.45)]
    assert bars["Point estimate"] == [("Compute", 2.0), ("Exposed communication", 0.5), ("Pipeline bubble", 0.625)]
    assert bars["No overlap"][-1] == ("Pipeline bubble", 1.125)
    sums = frame.groupby("bar")["seconds"].sum()
    totals = frame.groupby("bar")["total"].first()
    assert (abs(sums - totals) < 1e-12).all()


def test_a_memory_bound_step_stacks_memory_under_the_exposed_communication():
    memory_bound = SimpleNamespace(
        **(vars(TIME) | {"memory_seconds": 3.0, "step_seconds": 3.5, "step_seconds_low": 3.0})
    )
    bars = by_bar(speed_charts.step_time_frame(memory_bound))
    assert bars["Point estimate"] == [("Memory (HBM)", 3.0), ("Exposed communication", 0.5)]
    assert bars["Full overlap"] == [("Memory (HBM)", 3.0)]


def test_the_bars_spec_stacks_in_order_and_labels_each_bars_end():
    spec = speed_charts.step_time_bars(speed_charts.step_time_frame(TIME)).to_dict()
    bars, labels = spec["layer"]
    assert bars["mark"]["type"] == "bar"
    assert bars["encoding"]["x"] == {
        "aggregate": "sum",
        "field": "seconds",
        "title": "seconds a step (estimate)",
        "type": "quantitative",
    }
    assert bars["encoding"]["order"]["field"] == "order"
    assert bars["encoding"]["y"]["sort"] == list(speed_charts.BARS)
    assert bars["encoding"]["color"]["scale"]["domain"] == [
        "Roofline",
        "Compute",
        "Memory (HBM)",
        "Communication",
        "Exposed communication",
    ]
    assert labels["mark"]["type"] == "text" and labels["encoding"]["x"]["field"] == "total"
    data = spec["datasets"][labels["data"]["name"]]
    assert [(row["bar"], row["label"]) for row in data] == [
        ("Roofline (100% of every peak)", "1.8 s"),
        ("Full overlap", "2 s"),
        ("Point estimate", "2.5 s"),
        ("No overlap", "4.5 s"),
    ]
    assert spec["title"]["text"] == speed_charts.STEP_TITLE


def test_the_curve_draws_every_point_in_the_concurrencys_order_and_marks_the_chosen_one():
    points = [
        CurvePoint(
            concurrency=1,
            inter_token_latency_seconds=0.010,
            tokens_per_second_per_sequence=100.0,
            tokens_per_second_per_device=50.0,
        ),
        CurvePoint(
            concurrency=2,
            inter_token_latency_seconds=0.0105,
            tokens_per_second_per_sequence=95.2,
            tokens_per_second_per_device=95.2,
        ),
        CurvePoint(
            concurrency=4,
            inter_token_latency_seconds=0.012,
            tokens_per_second_per_sequence=83.3,
            tokens_per_second_per_device=166.7,
        ),
    ]
    frame = speed_charts.speed_curve_frame(points, chosen=2)
    assert frame["latency_ms"].round(6).tolist() == [10.0, 10.5, 12.0]
    assert frame["chosen"].tolist() == [False, True, False]
    spec = speed_charts.speed_curve_chart(frame).to_dict()
    line, chosen = spec["layer"]
    assert line["mark"] == {"type": "line", "point": {"color": "#4c78a8"}, "color": "#4c78a8"}
    assert line["encoding"]["order"]["field"] == "concurrency"
    assert (line["encoding"]["x"]["field"], line["encoding"]["y"]["field"]) == ("latency_ms", "per_device")
    assert (
        chosen["mark"]["color"] == "#d1242f"
        and chosen["mark"]["opacity"] == 1
        and chosen["transform"] == [{"filter": "datum.chosen"}]
    )
    assert [row["per_device"] for row in spec["datasets"][spec["data"]["name"]]] == [50.0, 95.2, 166.7]
