"""Tables and records that every front end renders."""

from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.report.records import count_record
from dcsim.report.tables import arrays_frame, layers_frame, payload_frame

CONFIG = ModelConfig(input_dim=9, layers=(DenseLayer(features=4), DenseLayer(features=2)), num_shards=3)


def test_arrays_frame():
    frame = arrays_frame(count_params(CONFIG))
    assert frame.to_dict("list") == {
        "path": ["Dense_0/kernel", "Dense_0/bias", "Dense_1/kernel", "Dense_1/bias"],
        "module": ["Dense_0", "Dense_0", "Dense_1", "Dense_1"],
        "kind": ["kernel", "bias", "kernel", "bias"],
        "shape": ["9x4", "4", "4x2", "2"],
        "dtype": ["float32"] * 4,
        "num_params": [36, 4, 8, 2],
    }


def test_layers_frame_shares_sum_to_100_percent():
    frame = layers_frame(count_params(CONFIG))
    assert frame["num_params"].tolist() == [40, 10]
    assert frame["percent_of_total"].tolist() == [80.0, 20.0]


def test_payload_frame():
    assert payload_frame(50)["raw_bytes"].tolist() == [200, 100, 100, 50, 400]


def test_count_record_is_exact_and_consistent():
    record = count_record(CONFIG, count_params(CONFIG))
    assert record["total_params"] == 50
    assert record["ideal_share_fraction"] == "50/3"
    assert record["ideal_share"] == 50 / 3
    assert record["raw_float32_bytes"] == 200
    assert sum(row["num_params"] for row in record["layers"]) == 50
    assert sum(row["num_params"] for row in record["arrays"]) == 50
    assert ModelConfig.from_dict(record["config"]) == CONFIG
