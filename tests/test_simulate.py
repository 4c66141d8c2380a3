"""The seed exercise's function, to its exact contract."""

import flax.linen as nn
import hypothesis.strategies as hs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from conftest import examples
from dcsim import distributed_checkpoint_simulate as simulate

X = jnp.ones((3, 4), jnp.float32)


def test_seed_example():
    result = simulate(0, X, 2, 4)
    assert result.shape == (2,)
    assert jnp.issubdtype(result.dtype, jnp.floating)
    assert result.tolist() == [20.0, 10.0]


def test_six_values_over_four_shards_is_one_and_a_half():
    assert simulate(0, jnp.ones((1, 2)), 4, 2).tolist() == [6.0, 1.5]


def test_share_is_plain_division_not_rounded():
    total, share = simulate(0, X, 3, 4).tolist()
    assert total == 20.0 and share == pytest.approx(20 / 3, rel=1e-7)


@pytest.mark.parametrize(
    "seed, num_shards, features",
    [
        (0.0, 2.0, 4.0),
        (np.float64(0), np.float32(2), np.int64(4)),
        (np.array(0), np.array(2.0), np.array(4)),
        (jnp.asarray(0), jnp.asarray(2.0), jnp.asarray(4)),
    ],
    ids=["python-floats", "numpy-scalars", "0d-numpy", "0d-jax"],
)
def test_integer_valued_floats_and_0d_arrays_are_converted(seed, num_shards, features):
    assert simulate(seed, X, num_shards, features).tolist() == [20.0, 10.0]


def test_batch_size_and_seed_change_no_count():
    assert simulate(7, jnp.ones((64, 4)), 2, 4).tolist() == simulate(0, X, 2, 4).tolist()


def test_initialises_a_real_default_dense_layer(monkeypatch):
    # Output values cannot prove a Dense layer was initialised; watching Flax can.
    seen = []
    real_call = nn.Dense.__call__

    def spy(self, inputs):
        seen.append((self.features, self.use_bias, inputs.shape))
        return real_call(self, inputs)

    monkeypatch.setattr(nn.Dense, "__call__", spy)
    simulate(0, X, 2, 4)
    assert seen == [(4, True, (3, 4))]


@pytest.mark.slow  # a concrete initialisation
@given(
    batch=hs.integers(1, 8),
    input_dim=hs.integers(1, 64),
    features=hs.integers(1, 64),
    num_shards=hs.integers(1, 1000),
    seed=hs.integers(0, 2**32 - 1),
)
@settings(max_examples=examples(40), deadline=None)
def test_matches_a_concrete_initialisation(batch, input_dim, features, num_shards, seed):
    x = jnp.ones((batch, input_dim), jnp.float32)
    params = nn.Dense(features).init(jax.random.PRNGKey(seed), x)["params"]
    concrete_total = params["kernel"].size + params["bias"].size
    total, share = simulate(seed, x, num_shards, features).tolist()
    assert total == concrete_total == (input_dim + 1) * features
    assert share == pytest.approx(concrete_total / num_shards, rel=1e-7)
    assert share * num_shards == pytest.approx(total, rel=1e-6)


def test_x_is_left_unchanged():
    x_numpy = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = x_numpy.copy()
    simulate(0, x_numpy, 2, 4)
    np.testing.assert_array_equal(x_numpy, before)
    x_jax = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    simulate(0, x_jax, 2, 4)
    np.testing.assert_array_equal(np.asarray(x_jax), before)


def test_a_4_3_billion_value_layer_is_counted_without_allocating_it():
    total, share = simulate(0, jnp.ones((1, 65_536)), 2, 65_536).tolist()
    # float32 holds (65536 + 1) * 65536 = 4,295,032,832 to 24 bits: the contract's own rounding.
    assert total == float(np.float32(4_295_032_832))
    assert share == float(np.float32(4_295_032_832 / 2))


OUTSIDE_THE_CONTRACT = {
    "seed-fraction": ((2.5, X, 2, 4), ValueError, r"`seed` must be an integer from 0 to 4,294,967,295 .*got 2\.5"),
    "seed-negative": ((-1, X, 2, 4), ValueError, r"`seed` must be an integer from 0 .*got -1"),
    "seed-2**32": ((2**32, X, 2, 4), ValueError, r"`seed` .*jax\.random\.PRNGKey.*got 4294967296"),
    "seed-2**64": ((2**64, X, 2, 4), ValueError, r"`seed` .*got 18446744073709551616"),
    "seed-nan": ((float("nan"), X, 2, 4), ValueError, r"`seed` .*got nan"),
    "seed-bool": ((True, X, 2, 4), TypeError, r"`seed` .*got the bool True"),
    "seed-str": (("0", X, 2, 4), TypeError, r"`seed` .*got '0'"),
    "shards-zero": ((0, X, 0, 4), ValueError, r"`num_shards` must be a positive integer, got 0"),
    "shards-negative": ((0, X, -2, 4), ValueError, r"`num_shards` must be a positive integer, got -2"),
    "shards-fraction": ((0, X, 2.5, 4), ValueError, r"`num_shards` must be a positive integer, got 2\.5"),
    "shards-inf": ((0, X, float("inf"), 4), ValueError, r"`num_shards` must be a positive integer, got inf"),
    "shards-bool": ((0, X, False, 4), TypeError, r"`num_shards` .*bool False"),
    "features-zero": ((0, X, 2, 0), ValueError, r"`features` must be an integer from 1 to .*, got 0"),
    "features-fraction": ((0, X, 2, 4.5), ValueError, r"`features` .*got 4\.5"),
    "features-str": ((0, X, 2, "4"), TypeError, r"`features` .*got '4'"),
    "features-none": ((0, X, 2, None), TypeError, r"`features` .*got NoneType None"),
    "shards-vector": (
        (0, X, np.array([2, 3]), 4),
        TypeError,
        r"`num_shards` must be a scalar, got an array of shape \(2,\)",
    ),
    "x-1d": ((0, jnp.ones(4), 2, 4), ValueError, r"`x` must be a 2-D array of shape \(B, D\), got shape \(4,\)"),
    "x-3d": ((0, jnp.ones((2, 3, 4)), 2, 4), ValueError, r"`x` must be a 2-D array .*got shape \(2, 3, 4\)"),
    "x-empty-batch": ((0, jnp.ones((0, 4)), 2, 4), ValueError, r"`x` must have B >= 1 .*got shape \(0, 4\)"),
    "x-empty-dim": ((0, jnp.ones((3, 0)), 2, 4), ValueError, r"`x` must have B >= 1 .*got shape \(3, 0\)"),
    "x-nan": ((0, X.at[1, 2].set(jnp.nan), 2, 4), ValueError, r"`x` must be finite"),
    "x-inf": ((0, X.at[0, 0].set(jnp.inf), 2, 4), ValueError, r"`x` must be finite"),
    "x-list": ((0, [[1.0, 2.0]], 2, 4), TypeError, r"`x` must be a 2-D array of shape \(B, D\), got list"),
    "x-bool": ((0, jnp.ones((2, 2), bool), 2, 4), TypeError, r"`x` must hold real numbers .*got dtype bool"),
    "x-complex": ((0, jnp.ones((2, 2), jnp.complex64), 2, 4), TypeError, r"`x` must hold real numbers"),
}


@pytest.mark.parametrize("args, error, message", list(OUTSIDE_THE_CONTRACT.values()), ids=list(OUTSIDE_THE_CONTRACT))
def test_inputs_outside_the_contract_are_rejected(args, error, message):
    with pytest.raises(error, match=message):
        simulate(*args)


def test_seed_zero_is_allowed():
    assert simulate(0, X, 2, 4).tolist() == [20.0, 10.0]
