"""Exact counts from abstract initialisation of real Flax modules."""

import dataclasses

import flax.linen as nn
import hypothesis.strategies as hs
import jax
import jax.numpy as jnp
import pytest
from flax import traverse_util
from hypothesis import given, settings

from conftest import examples
from dcsim.model import modules
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import abstract_variables, count_module, count_params, report_from_variables


def dense_stack(input_dim, *widths, use_bias=True, **fields):
    layers = tuple(DenseLayer(features=width, use_bias=use_bias) for width in widths)
    return ModelConfig(input_dim=input_dim, layers=layers, **fields)


@pytest.mark.parametrize(
    "config, total",
    [
        (dense_stack(4, 4), 20),  # the seed example: 4x4 kernel + 4 bias
        (dense_stack(2, 2), 6),
        (dense_stack(9, 4, 2), 50),  # (9+1)*4 + (4+1)*2
        (dense_stack(9, 4, 2, use_bias=False), 44),
        (dense_stack(784, 512, 512, 10), 669_706),  # the MNIST MLP everyone quotes
        (dense_stack(65_536, 65_536), 4_295_032_832),  # past int32 and float32's exact range
    ],
    ids=["seed-example", "six", "two-layers", "no-bias", "mnist-mlp", "4.3-billion"],
)
def test_golden_totals(config, total):
    report = count_params(config)
    assert report.total_params == total
    assert type(report.total_params) is int


def test_rows_name_each_array_in_creation_order():
    report = count_params(dense_stack(9, 4, 2))
    assert [(row.path, row.module, row.kind, row.shape, row.dtype, row.num_values) for row in report.arrays] == [
        ("Dense_0/kernel", "Dense_0", "kernel", (9, 4), "float32", 36),
        ("Dense_0/bias", "Dense_0", "bias", (4,), "float32", 4),
        ("Dense_1/kernel", "Dense_1", "kernel", (4, 2), "float32", 8),
        ("Dense_1/bias", "Dense_1", "bias", (2,), "float32", 2),
    ]
    assert [(row.path, row.num_arrays, row.num_params) for row in report.layers] == [
        ("Dense_0", 2, 40),
        ("Dense_1", 2, 10),
    ]


def test_layers_past_ten_stay_in_order():
    # Flax and jax.eval_shape return dicts sorted by key, which would put Dense_10 before Dense_2.
    report = count_params(dense_stack(3, *([3] * 12)))
    assert [row.path for row in report.layers] == [f"Dense_{index}" for index in range(12)]


small_configs = hs.builds(
    dense_stack,
    hs.integers(1, 40),
    hs.integers(1, 40),
    hs.integers(1, 40),
    use_bias=hs.booleans(),
    batch_size=hs.integers(1, 5),
    seed=hs.integers(0, 2**32 - 1),
    num_shards=hs.integers(1, 64),
)


@pytest.mark.slow  # a concrete initialisation
@given(small_configs)
@settings(max_examples=examples(25), deadline=None)
def test_abstract_and_concrete_initialisation_agree(config):
    module, inputs = modules.build(config)
    zeros = [jnp.zeros(spec.shape, spec.dtype) for spec in inputs]
    concrete = module.init(jax.random.PRNGKey(config.seed), *zeros)
    assert report_from_variables(concrete) == count_params(config)


@given(small_configs)
@settings(max_examples=examples(50), deadline=None)
def test_rows_and_layers_sum_to_the_total(config):
    report = count_params(config)
    assert sum(row.num_values for row in report.arrays) == report.total_params
    assert sum(row.num_params for row in report.layers) == report.total_params
    expected, width = 0, config.input_dim
    for layer in config.layers:  # the seed's (D + 1) * F per layer, checked against Flax
        expected += (width + layer.use_bias) * layer.features
        width = layer.features
    assert report.total_params == expected


@given(small_configs, hs.integers(1, 1 << 20), hs.integers(0, 2**32 - 1))
@settings(max_examples=examples(25), deadline=None)
def test_batch_size_and_seed_change_no_count(config, batch_size, seed):
    changed = dataclasses.replace(config, batch_size=batch_size, seed=seed)
    assert count_params(changed) == count_params(config)


def test_other_collections_are_reported_apart():
    class WithBatchNorm(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(3)(x)
            return nn.BatchNorm(use_running_average=False)(x)

    report = count_module(WithBatchNorm(), jax.ShapeDtypeStruct((2, 4), jnp.float32))
    assert report.total_params == 4 * 3 + 3 + 3 + 3  # Dense kernel and bias, BatchNorm scale and bias
    assert [(row.collection, row.path) for row in report.other] == [
        ("batch_stats", "BatchNorm_0/mean"),
        ("batch_stats", "BatchNorm_0/var"),
    ]
    assert report.total_other_values == 6


def test_counting_allocates_no_values():
    # A concrete init of this stack would need over 34 GB, more than the machine has: counting it
    # finishes only because every leaf is a shape, never an array.
    config = dense_stack(65_536, 65_536, 65_536)
    module, inputs = modules.build(config)
    leaves = traverse_util.flatten_dict(abstract_variables(module, *inputs)).values()
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    assert count_params(config).total_params == 2 * 4_295_032_832
