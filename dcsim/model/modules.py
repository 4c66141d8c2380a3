"""The Flax modules dcsim counts.

Counting initialises these real modules (abstractly, see ``dcsim.model.count``) rather than applying a
formula, so what dcsim reports is what Flax would allocate.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from dcsim.model import families, presets
from dcsim.model.config import DenseLayer, ModelConfig


class DenseStack(nn.Module):
    """``nn.Dense`` layers in sequence, ReLU between them; named ``Dense_0``, ``Dense_1``, ..."""

    layers: tuple[DenseLayer, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for index, layer in enumerate(self.layers):
            if index:
                x = nn.relu(x)
            x = nn.Dense(layer.features, use_bias=layer.use_bias)(x)
        return x


def build(config: ModelConfig) -> tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]:
    """The module a configuration describes and the inputs it is initialised with.

    ``module.init(key, *inputs)`` is the whole initialisation: every family takes positional
    inputs only, so the counter, the layout and the checkpoint measurement can treat them alike.
    """
    if config.family is not None:
        return families.build_family(config.family, presets.resolved_hparams(config), config.batch_size)
    module = DenseStack(layers=config.layers)
    x = jax.ShapeDtypeStruct((config.batch_size, config.input_dim), jax.numpy.float32)
    return module, (x,)
