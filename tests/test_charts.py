"""Chart builders, checked on the Vega-Lite they produce: encodings, scales, titles, alt text."""

import pytest

from dcsim import charts, tables, units
from dcsim.config import DenseLayer, ModelConfig
from dcsim.count import count_params

MNIST = ModelConfig(input_dim=784, layers=(DenseLayer(features=512), DenseLayer(features=512), DenseLayer(features=10)))


@pytest.fixture(scope="module")
def report():
    return count_params(MNIST)


def layers_of(spec):
    return spec.get("layer", [spec])


def test_params_by_layer_keeps_model_order_and_exact_tooltips(report):
    spec = charts.params_by_layer(tables.layers_frame(report)).to_dict()
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
    spec = charts.share_sweep(sweep, 3).to_dict()
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
    spec = charts.share_sweep(sweep, 3).to_dict()
    for layer in spec["layer"]:
        tooltips = {tip["title"]: tip["field"] for tip in layer["encoding"]["tooltip"]}
        assert tooltips["Ideal share (exact)"] == "ideal_share_text"
    rows = [row for data in spec["datasets"].values() for row in data if row["num_shards"] == 3]
    assert {row["ideal_share_text"] for row in rows} == {"223,235.33333333334 (669,706/3)"}


@pytest.mark.parametrize(("low", "high", "ticks"), [(0.0049, 20, [0.001, 0.01, 0.1, 1, 10, 100]), (10, 10, [10])])
def test_decades_cover_the_data(low, high, ticks):
    assert charts.decades(low, high) == pytest.approx(ticks)


def test_raw_bytes_charts_say_they_are_not_the_checkpoint_size(report):
    payloads = tables.payload_frame(report.total_params)
    payloads["raw_bytes_text"] = payloads["raw_bytes"].map(units.bytes_exact)
    for chart in (charts.raw_bytes_by_dtype(payloads), charts.raw_bytes_by_layer(tables.layer_bytes_frame(report))):
        spec = chart.to_dict()
        assert "(bytes)" in spec["title"]["text"]
        assert "not the checkpoint size" in spec["title"]["subtitle"]
        assert "not a checkpoint size" in spec["description"]
        assert spec["encoding"]["x"]["axis"]["labelExpr"] == charts.BYTE_LABELS
    spec = charts.raw_bytes_by_dtype(payloads).to_dict()
    assert spec["encoding"]["y"]["sort"][0] == "float32"
