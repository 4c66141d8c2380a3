"""The training state's tables (``dcsim.report.memory_tables``), which the CLI and the Memory page
both render, against a hand calculation.

The model is the Dense stack 8 -> 16 -> 4: arrays of 8x16, 16, 16x4 and 4 values, 212 in all. On
``data=4`` with a float32 master copy, fsdp splits each four ways: bfloat16 params and grads hold
53 values (106 bytes) a device, the float32 master 212 bytes, Adam's float32 moments 424 and its
int32 step count 4, whole on every device: 852 bytes a device.
"""

from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.report.memory_tables import ARRAY_COLUMNS, state_arrays_csv, state_arrays_frame, state_parts_frame
from dcsim.sharding.meshes import parse_mesh

MLP = ModelConfig(input_dim=8, layers=(DenseLayer(features=16), DenseLayer(features=4)))


def memory(training):
    return compute_memory(count_params(MLP), parse_mesh("data=4"), "fsdp", (), training)


def test_the_parts_by_hand():
    frame = state_parts_frame(memory(Training.stage(3, master_dtype="float32")))
    assert frame.to_dict("list") == {
        "part": ["params", "grads", "master", "optimizer"],
        "title": ["Parameters", "Gradients", "Master copy", "Optimizer state"],
        "dtype": ["bfloat16", "bfloat16", "float32", "int32, float32"],  # the step count comes first
        "split": ["split", "split", "split", "split"],
        "num_arrays": [4, 4, 4, 9],
        "total_bytes": [424, 424, 848, 2 * 848 + 4],
        "bytes_per_device": [106, 106, 212, 428],
        "percent_of_device": [100 * 106 / 852, 100 * 106 / 852, 100 * 212 / 852, 100 * 428 / 852],
    }


def test_a_part_left_whole_and_an_optimizer_with_no_state():
    frame = state_parts_frame(memory(Training.stage(1, optimizer="sgd")))
    assert list(frame["part"]) == ["params", "grads", "optimizer"]
    assert list(frame["split"]) == ["whole", "whole", "split"]
    assert list(frame["bytes_per_device"]) == [424, 424, 0]  # plain SGD keeps no state
    assert list(frame["dtype"]) == ["bfloat16", "bfloat16", "none"]


def test_the_arrays_table_and_its_csv():
    held = memory(Training.stage(3))
    frame = state_arrays_frame(held.arrays)
    assert tuple(frame.columns) == ARRAY_COLUMNS
    assert len(frame) == held.num_arrays == 4 + 4 + 9
    first = frame.iloc[0].to_dict()
    assert first == {
        "path": "Dense_0/kernel",
        "part": "params",
        "shape": "8x16",
        "dtype": "bfloat16",
        "partition_spec": "P(None, 'data')",
        "shard_shape": "8x4",
        "bytes_per_device": 64,  # 8 x 4 values of 2 bytes
        "note": first["note"],
    }
    assert "split over all 4 devices" in first["note"]
    count = frame[frame["path"] == "0/count"].iloc[0]
    assert (count["shape"], count["partition_spec"], count["bytes_per_device"]) == ("scalar", "P()", 4)
    assert frame["bytes_per_device"].sum() == held.total_bytes_per_device
    csv = state_arrays_csv(held.arrays)
    assert csv.splitlines()[0] == ",".join(ARRAY_COLUMNS)
    assert "Dense_0/kernel,params,8x16,bfloat16,\"P(None, 'data')\",8x4,64," in csv
