"""Optimizer state: what a training checkpoint may hold beside the parameters.

Each optimizer is a real optax one, initialised on the abstract parameters with
``jax.eval_shape(optimizer.init, params)``: the state's every shape and dtype, no memory for its
values, so Adam's moments for a 70-billion-value model cost what a tiny one's do. The counts are
exact Python ints; the bytes are the raw state arrays' payload (values x their dtype's size). It is
reported apart from the parameter total and is not part of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import jax
import optax
import pandas as pd
from flax import traverse_util

from dcsim.inputs import show
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import payload

# Learning rates and decay constants change no shape; these are the libraries' usual defaults.
OPTIMIZERS: MappingProxyType[str, tuple[str, Callable[[], optax.GradientTransformation]]] = MappingProxyType(
    {
        "sgd": ("plain SGD (no state: the update is the scaled gradient)", lambda: optax.sgd(1e-3)),
        "momentum": (
            "SGD with momentum 0.9 (one momentum buffer per parameter)",
            lambda: optax.sgd(1e-3, momentum=0.9),
        ),
        "adam": ("Adam (first and second moments, and a step count)", lambda: optax.adam(1e-3)),
        "adamw": ("AdamW (Adam's state; weight decay adds none)", lambda: optax.adamw(1e-3)),
        "adafactor": (
            "Adafactor (factored second moments: a row and a column vector per large matrix)",
            lambda: optax.adafactor(1e-3),
        ),
        "lion": ("Lion (one momentum buffer per parameter)", lambda: optax.lion(1e-4)),
    }
)
OPTIMIZER_NAMES = tuple(OPTIMIZERS)
STATE_NOTE = "optimizer state: held beside the parameters in a training checkpoint, not part of the parameter total"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateRow:
    """One array of an optimizer's state, e.g. ``0/mu/block_0/attn/query/kernel``."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    num_values: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerState:
    """The state a real optax optimizer allocates for a model's parameters.

    Attributes:
      optimizer: its name, a key of ``OPTIMIZERS``.
      description: what the state holds, in one line.
      arrays: every state array, in optax's tree order.
    """

    optimizer: str
    description: str
    arrays: tuple[StateRow, ...]

    @property
    def num_values(self) -> int:
        return sum(row.num_values for row in self.arrays)

    @property
    def raw_bytes_by_dtype(self) -> dict[str, int]:
        """Raw payload of the state per dtype it is stored in (float32 moments, an int32 step count)."""
        totals: dict[str, int] = {}
        for row in self.arrays:
            totals[row.dtype] = totals.get(row.dtype, 0) + payload.raw_bytes_as(row.num_values, row.dtype)
        return totals

    @property
    def raw_bytes(self) -> int:
        return sum(self.raw_bytes_by_dtype.values())


def key_path(keys: Sequence[Any]) -> str:
    """A pytree key path as dcsim writes array paths: ``0/mu/block_0/attn/query/kernel`` (JAX's
    ``keystr`` in its simple form: dict keys, attribute names and indices as they are)."""
    return jax.tree_util.keystr(tuple(keys), simple=True, separator="/")


def abstract_params(config: ModelConfig) -> Any:
    """The ``params`` tree of a configuration, every leaf a ``jax.ShapeDtypeStruct``.

    Rebuilt from ``count_params``'s rows, which are the full init's arrays (a preset's repeated
    blocks are traced once, see ``dcsim.model.count.count_params``), so llama2-70b's 80 blocks cost what
    two do here too."""
    report = count_params(config)
    flat = {tuple(row.path.split("/")): jax.ShapeDtypeStruct(row.shape, row.dtype) for row in report.arrays}
    return traverse_util.unflatten_dict(flat)


def check_optimizer(name: Any) -> str:
    """A key of ``OPTIMIZERS``; otherwise ValueError listing them."""
    if not isinstance(name, str) or name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {show(name)}; optimizers: {', '.join(OPTIMIZER_NAMES)}")
    return name


def state_of(name: str, params: Any) -> OptimizerState:
    """Initialise optimizer ``name`` abstractly on ``params`` (arrays or ``ShapeDtypeStruct``s)."""
    description, make = OPTIMIZERS[check_optimizer(name)]
    state = jax.eval_shape(make().init, params)
    rows = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        shape = tuple(int(dim) for dim in leaf.shape)
        rows.append(
            StateRow(
                path=key_path(path),
                shape=shape,
                dtype=str(leaf.dtype),
                num_values=math.prod(shape),
            )
        )
    return OptimizerState(optimizer=name, description=description, arrays=tuple(rows))


def optimizer_states(config: ModelConfig, names: tuple[str, ...] = OPTIMIZER_NAMES) -> tuple[OptimizerState, ...]:
    """The state of each optimizer in ``names`` for ``config``'s parameters (one abstract init)."""
    params = abstract_params(config)
    return tuple(state_of(name, params) for name in names)


def states_frame(states: tuple[OptimizerState, ...] | list[OptimizerState], total_params: int) -> pd.DataFrame:
    """One row per optimizer: ``optimizer``, ``num_values``, ``num_scalars`` (values of 0-d arrays
    such as a step count), ``values_per_param`` (the other state values per parameter value,
    exact: Adam's 2, not 2.000... for its step count), ``raw_bytes`` and
    ``raw_bytes_with_float32_params`` (the state plus the parameters' raw float32 payload: what a
    training checkpoint's arrays come to)."""
    params_bytes = payload.raw_bytes(total_params, "float32")
    scalars = [sum(row.num_values for row in state.arrays if not row.shape) for state in states]
    return pd.DataFrame(
        {
            "optimizer": [state.optimizer for state in states],
            "num_values": pd.array([state.num_values for state in states], dtype="int64"),
            "num_scalars": pd.array(scalars, dtype="int64"),
            "values_per_param": [
                Fraction(state.num_values - scalar, total_params) if total_params else Fraction(0)
                for state, scalar in zip(states, scalars, strict=True)
            ],
            "raw_bytes": pd.array([state.raw_bytes for state in states], dtype="int64"),
            "raw_bytes_with_float32_params": pd.array(
                [state.raw_bytes + params_bytes for state in states], dtype="int64"
            ),
        }
    )


def state_record(state: OptimizerState, total_params: int) -> dict[str, Any]:
    """One optimizer's state as a JSON-ready object: ``optimizer``, ``description``,
    ``num_values``, ``values_per_param`` (state values per parameter value, a float),
    ``raw_bytes`` and ``raw_bytes_by_dtype``."""
    return {
        "optimizer": state.optimizer,
        "description": state.description,
        "num_values": state.num_values,
        "values_per_param": state.num_values / total_params if total_params else 0.0,
        "raw_bytes": state.raw_bytes,
        "raw_bytes_by_dtype": state.raw_bytes_by_dtype,
    }
