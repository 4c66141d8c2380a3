"""Grouped and depth roll-ups of the exact rows, and the pure-Python schema modules."""

import ast
from pathlib import Path

import pytest

from dcsim.model import breakdown
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "path, group",
    [
        ("embed/token", "embeddings"),
        ("embed", "embeddings"),
        ("block_3/attn/query", "blocks"),
        ("block_3/attn_norm", "blocks"),
        ("stage_2/block_1/conv_1", "blocks"),
        ("hidden_0", "blocks"),
        ("Dense_4", "blocks"),
        ("final_norm", "norms"),
        ("embed_norm", "norms"),
        ("stem/conv", "stem"),
        ("lm_head", "head"),
        ("pooler", "head"),
        ("something", "other"),
    ],
    ids=lambda value: value,
)
def test_groups_follow_the_module_paths(path, group):
    assert breakdown.group_of(path) == group


def test_dense_stack_rolls_up_by_hand():
    config = ModelConfig(input_dim=9, layers=(DenseLayer(features=4), DenseLayer(features=2)))
    report = count_params(config)
    frame = breakdown.breakdown_frame(report)
    assert frame.to_dict("list") == {
        "group": ["blocks"],
        "num_arrays": [4],
        "num_params": [50],
        "percent_of_total": [100.0],
    }
    depth = breakdown.depth_frame(report, 1)
    assert list(depth["path"]) == ["Dense_0", "Dense_1"] and list(depth["num_params"]) == [40, 10]
    with pytest.raises(ValueError, match=r"`depth` must be an integer from 1 to 64, got 0"):
        breakdown.depth_frame(report, 0)


def test_repeated_blocks_roll_up_to_runs_that_still_sum_to_the_total():
    config = ModelConfig(input_dim=4, layers=(DenseLayer(features=4),) * 3 + (DenseLayer(features=2),))
    report = count_params(config)
    frame = breakdown.repeated_frame(report)
    assert frame.to_dict("list") == {
        "path": ["Dense_0..Dense_2", "Dense_3"],
        "group": ["blocks", "blocks"],
        "times": [3, 1],
        "each": [20, 10],  # Dense(4) on width 4: 16 + 4; Dense(2): 8 + 2
        "num_arrays": [6, 2],
        "num_params": [60, 10],
        "percent_of_total": [6000 / 70, 1000 / 70],
    }
    # ResNet's stages differ in width and depth: none collapses.
    resnet = count_params(ModelConfig(preset="resnet18"))
    assert list(breakdown.repeated_frame(resnet)["path"]) == list(breakdown.depth_frame(resnet, 1)["path"])


def test_other_frame_lists_batchnorm_statistics_apart():
    report = count_params(ModelConfig(preset="resnet18", overrides={"stage_blocks": [1]}))
    other = breakdown.other_frame(report)
    assert set(other["collection"]) == {"batch_stats"}
    assert list(other["path"][:2]) == ["stem/norm/mean", "stem/norm/var"]
    assert other["num_values"].sum() == report.total_other_values == 2 * (64 + 64 + 64)
    assert breakdown.breakdown_frame(report)["num_params"].sum() == report.total_params


@pytest.mark.parametrize(
    "module", ["dcsim/inputs.py", "dcsim/model/config.py", "dcsim/model/schemas.py", "dcsim/model/presets.py"]
)
def test_schema_modules_stay_pure_python(module):
    # The links codec and the dashboard's forms read these cheaply: no JAX, Flax or optax import.
    tree = ast.parse((ROOT / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"jax", "flax", "optax", "numpy", "pandas"}
