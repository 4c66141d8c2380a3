"""The parameter total every table of a model's arrays adds up the same way.

The count (``dcsim.model.count``), the layout on a mesh (``dcsim.sharding.layout``) and a weight
format's table (``dcsim.quant.tables``) each hold one row an array, with the values it holds; their
``total_params`` is those rows added up, as an exact Python int, so the three cannot drift apart.
Plain Python (no JAX), so that the formats' tables stay importable without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class CountedArray(Protocol):
    """A row of one array: how many scalar values it holds."""

    @property
    def num_values(self) -> int: ...


class ArrayTotals:
    """A table of a model's arrays, ``arrays``, and their parameter total."""

    arrays: Sequence[CountedArray]

    @property
    def total_params(self) -> int:
        return sum(row.num_values for row in self.arrays)
