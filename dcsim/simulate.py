"""The seed exercise's function, to its exact contract.

``distributed_checkpoint_simulate`` counts one default ``flax.linen.Dense`` layer's parameters
and divides the count by a number of shards. It initialises the real layer, but under
``jax.eval_shape``, so a Dense(65,536) on an input dimension of 65,536 (4.3 billion values)
allocates nothing.

Its result is a floating JAX array, float32 unless 64-bit mode is on, so large counts round
((4096 + 1) x 16385 = 67,129,345 comes back as 67,129,344). That is the contract; dcsim's own
views use the exact integer report of ``dcsim.model.count`` instead.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dcsim.inputs import as_int
from dcsim.model.config import FIELD_LIMITS

_, _MAX_SEED, _SEED_RULE = FIELD_LIMITS["seed"]
# The largest dimension XLA can describe (its shapes are int64).
MAX_FEATURES = 2**63 - 1


def _check_x(x: Any) -> None:
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise TypeError(f"`x` must be a 2-D array of shape (B, D), got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"`x` must be a 2-D array of shape (B, D), got shape {tuple(x.shape)}")
    if 0 in x.shape:
        raise ValueError(f"`x` must have B >= 1 examples and an input dimension D >= 1, got shape {tuple(x.shape)}")
    dtype = np.dtype(x.dtype)
    if dtype == np.bool_ or not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise TypeError(f"`x` must hold real numbers (float32 expected), got dtype {dtype}")
    if not bool(jnp.all(jnp.isfinite(x))):
        raise ValueError("`x` must be finite, got an array holding NaN or infinity")


def distributed_checkpoint_simulate(seed: Any, x: Any, num_shards: Any, features: Any) -> jax.Array:
    """Count a default ``nn.Dense(features)`` on ``x`` and divide the count by ``num_shards``.

    Args:
      seed: nonnegative integer-valued scalar (int, integer-valued float, or 0-d array), at most
        2**32 - 1, the range ``jax.random.PRNGKey`` takes without wrapping. It changes the
        initial values, not their number.
      x: finite 2-D array of shape (B, D), B, D >= 1. Left unchanged.
      num_shards: positive integer-valued scalar.
      features: positive integer-valued scalar, the layer's output width F.

    Returns:
      A floating JAX array of shape (2,): ``[total_params, ideal_share]`` where
      ``total_params = (D + 1) * F`` (kernel D x F plus bias F) and
      ``ideal_share = total_params / num_shards``, unrounded.

    Raises:
      TypeError: an argument of the wrong kind (a bool or string for a number, a non-array x).
      ValueError: a value outside the contract, with the rule and the value in the message.
    """
    seed = as_int(seed, "seed", minimum=0, maximum=_MAX_SEED, why=_SEED_RULE)
    features = as_int(features, "features", maximum=MAX_FEATURES)
    num_shards = as_int(num_shards, "num_shards")
    _check_x(x)

    variables = jax.eval_shape(nn.Dense(features).init, jax.random.PRNGKey(seed), x)
    params = variables["params"]
    total_params = params["kernel"].size + params["bias"].size
    ideal_share = total_params / num_shards
    return jnp.asarray([float(total_params), ideal_share])
