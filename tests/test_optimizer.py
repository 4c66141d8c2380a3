"""Optimizer state from real optax optimizers, initialised on abstract parameters."""

import jax
import jax.numpy as jnp
import pytest

from dcsim.model import modules, optimizer
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params

MNIST = ModelConfig(preset="mlp-mnist")
P = 669_706


@pytest.mark.parametrize(
    "name, num_values, by_dtype",
    [
        ("sgd", 0, {}),  # plain SGD keeps no state
        ("momentum", P, {"float32": 4 * P}),  # one momentum buffer
        ("adam", 2 * P + 1, {"int32": 4, "float32": 8 * P}),  # mu, nu and an int32 step count
        ("adamw", 2 * P + 1, {"int32": 4, "float32": 8 * P}),  # weight decay adds no state
        ("lion", P + 1, {"int32": 4, "float32": 4 * P}),
        # Factored second moments: a row and a column per matrix with both sides >= 128, a full
        # moment otherwise, and one-value placeholders for the unused slots, by hand:
        # hidden_0 784+512+1, its bias 1+1+512, hidden_1 512+512+1, its bias 514,
        # head (10 < 128, not factored) 1+1+5120, its bias 1+1+10, the step count 1.
        ("adafactor", 1297 + 514 + 1025 + 514 + 5122 + 12 + 1, {"int32": 4, "float32": 4 * 8484}),
    ],
    ids=["sgd", "momentum", "adam", "adamw", "lion", "adafactor"],
)
def test_mnist_state_by_hand(name, num_values, by_dtype):
    (state,) = optimizer.optimizer_states(MNIST, (name,))
    assert state.num_values == num_values and type(state.num_values) is int
    assert state.raw_bytes_by_dtype == by_dtype
    assert state.raw_bytes == sum(by_dtype.values())


def test_state_is_apart_from_the_parameter_total():
    before = count_params(MNIST)
    optimizer.optimizer_states(MNIST)
    assert count_params(MNIST) == before and before.total_params == P


@pytest.mark.slow  # a concrete optimizer init
@pytest.mark.parametrize("name", optimizer.OPTIMIZER_NAMES)
def test_abstract_state_matches_a_concrete_init(name):
    config = ModelConfig(
        preset="gpt2-small",
        overrides={"vocab_size": 130, "d_model": 8, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "ffn_dim": 16},
    )
    module, inputs = modules.build(config)
    params = module.init(jax.random.PRNGKey(0), *[jnp.zeros(s.shape, s.dtype) for s in inputs])["params"]
    concrete = optimizer.state_of(name, params)
    assert concrete == optimizer.state_of(name, optimizer.abstract_params(config))


def test_abstract_params_are_the_full_init_tree():
    config = ModelConfig(preset="resnet50", overrides={"stage_blocks": (3, 1)})
    module, inputs = modules.build(config)
    full = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)["params"]
    assert optimizer.abstract_params(config) == full


def test_llama2_70b_adam_state_costs_no_memory():
    (adam,) = optimizer.optimizer_states(ModelConfig(preset="llama2-70b"), ("adam",))
    assert adam.num_values == 2 * 68_976_648_192 + 1
    assert adam.raw_bytes_by_dtype["float32"] == 8 * 68_976_648_192
    assert any(row.path == "0/mu/block_79/attn/key/kernel" for row in adam.arrays)


def test_state_record_is_json_ready():
    (momentum,) = optimizer.optimizer_states(MNIST, ("momentum",))
    record = optimizer.state_record(momentum, P)
    assert record == {
        "optimizer": "momentum",
        "description": momentum.description,
        "num_values": P,
        "values_per_param": 1.0,
        "raw_bytes": 4 * P,
        "raw_bytes_by_dtype": {"float32": 4 * P},
    }


def test_unknown_optimizer_is_named():
    with pytest.raises(
        ValueError, match=r"unknown optimizer 'rmsprop'; optimizers: sgd, momentum, adam, adamw, adafactor, lion"
    ):
        optimizer.state_of("rmsprop", {})
