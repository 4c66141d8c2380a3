"""The ideal share: a model's total divided evenly over N checkpoint shards.

It is an average, kept exact as a fraction (20 values over 3 shards is 20/3, not 6.666...67). No
shard holds a fraction of a value, and a quotient cannot say whether an even split is possible or
what is replicated: that is a layout's job, not this module's.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from dcsim.inputs import as_int
from dcsim.model.config import MAX_SHARDS


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdealShare:
    """``total_params / num_shards``, exactly.

    Attributes:
      total_params: the number of parameter values divided.
      num_shards: the number of hypothetical shards.
    """

    total_params: int
    num_shards: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_params", as_int(self.total_params, "total_params", minimum=0))
        object.__setattr__(self, "num_shards", as_int(self.num_shards, "num_shards", maximum=MAX_SHARDS))

    @property
    def exact(self) -> Fraction:
        """The share as an exact fraction."""
        return Fraction(self.total_params, self.num_shards)

    @property
    def value(self) -> float:
        """The share as the nearest float (exact whenever the fraction has a finite binary form
        and fits in 53 bits)."""
        return self.total_params / self.num_shards

    @property
    def fraction(self) -> str:
        """The exact share in lowest terms, e.g. ``"20/3"``, or ``"10"`` when it is whole."""
        return str(self.exact)

    @property
    def values_at_most(self) -> int:
        """What the fullest shard holds in the most even split of a flat vector: the share rounded
        up, since no shard holds a fraction of a value."""
        return -(-self.total_params // self.num_shards)

    @property
    def is_whole(self) -> bool:
        return self.exact.denominator == 1


def ideal_share(total_params: int, num_shards: int) -> IdealShare:
    return IdealShare(total_params=total_params, num_shards=num_shards)


def sweep(total_params: int, shard_counts: list[int] | range) -> tuple[IdealShare, ...]:
    """The ideal share at each shard count, e.g. ``sweep(total, powers_of_two(4096))``."""
    return tuple(ideal_share(total_params, count) for count in shard_counts)


def powers_of_two(up_to: int) -> list[int]:
    """1, 2, 4, ... up to and including the largest power of two not above ``up_to``."""
    up_to = as_int(up_to, "up_to", maximum=MAX_SHARDS)
    return [1 << bit for bit in range(up_to.bit_length())]
