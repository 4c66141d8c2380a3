"""Raw payload bytes: the number of values times the bytes one value takes in a dtype.

This is an estimate of the arrays' bare contents, and only that. A real checkpoint adds metadata
and often optimizer state, may compress, and may store another dtype: its size on disk is a
different figure, which dcsim measures separately.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from dcsim.inputs import as_int

# Storage dtypes of the byte figures (bytes per shard, raw payloads), float32 first: Flax's default
# parameter dtype and the headline raw estimate.
DTYPES = ("float32", "bfloat16", "float16", "int8", "float64")
RAW_DTYPES = DTYPES
# The most shards a figure divides by: far past any mesh, small enough to read.
MAX_SHARDS = 1 << 20
CHECKPOINT_DIFFERS = (
    "a real checkpoint adds metadata and often optimizer state, may compress, and may store another dtype"
)
NOT_CHECKPOINT_SIZE = f"raw payload estimate (values x bytes per value), not the checkpoint size: {CHECKPOINT_DIFFERS}"


def bytes_per_value(dtype: str) -> int:
    """Bytes one value takes in ``dtype``, as NumPy/ml_dtypes define it."""
    if dtype not in RAW_DTYPES:
        raise ValueError(f"`dtype` must be one of {', '.join(RAW_DTYPES)}, got {dtype!r}")
    return _itemsize(dtype)


def _itemsize(dtype: str) -> int:
    """JAX's size of one value of ``dtype``. JAX is imported here, when a size is first asked for,
    not with the module: ``dcsim.model.config`` reads ``DTYPES`` from it, and ``python -m dcsim
    --help``, ``presets`` and a refused flag must start without JAX (tests/test_cli.py)."""
    import jax.numpy as jnp

    return jnp.dtype(dtype).itemsize


def raw_bytes(num_values: int, dtype: str = "float32") -> int:
    """Exact raw payload in bytes of ``num_values`` values stored as ``dtype``."""
    return as_int(num_values, "num_values", minimum=0) * bytes_per_value(dtype)


def bytes_per_shard(num_values: int, num_shards: int, dtype: str) -> Fraction:
    """The raw bytes of an ideal share, exactly: values x bytes a value / shards. An average, not
    a layout (no shard holds a fraction of a value), and not the checkpoint size: Llama 2 70B on
    64 shards in bfloat16 is 68,976,648,192 x 2 / 64 = 2,155,520,256 bytes a shard."""
    return Fraction(raw_bytes(num_values, dtype), as_int(num_shards, "num_shards", maximum=MAX_SHARDS))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RawPayload:
    """The raw payload of ``num_values`` values in one dtype."""

    dtype: str
    bytes_per_value: int
    num_bytes: int


def raw_payloads(num_values: int) -> tuple[RawPayload, ...]:
    """The raw payload in every dtype of ``RAW_DTYPES``, float32 first."""
    return tuple(
        RawPayload(dtype=dtype, bytes_per_value=bytes_per_value(dtype), num_bytes=raw_bytes(num_values, dtype))
        for dtype in RAW_DTYPES
    )


def raw_bytes_as(num_values: int, dtype: str) -> int:
    """Raw payload of ``num_values`` in any dtype JAX knows (an optimizer's int32 step count, say),
    not only the headline ``RAW_DTYPES``."""
    try:
        itemsize = _itemsize(dtype)
    except TypeError:
        raise ValueError(f"`dtype` must be a dtype name JAX knows, got {dtype!r}") from None
    return as_int(num_values, "num_values", minimum=0) * itemsize
