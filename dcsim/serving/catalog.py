"""Accelerators and their memory, as their vendors state it, in the bytes dcsim uses.

Vendors write "80GB" for memory built of 2**30-byte parts: HBM stacks and GDDR chips come in
binary sizes, and the driver reports them in MiB (``nvidia-smi`` shows 81,559 MiB for an 80GB
H100 SXM, ``rocm-smi`` 196,592 MiB for a 192GB MI300X: slightly less than the binary figure, the
rest held by firmware and the driver; the reserve is for that). Each row says what the vendor
wrote, which unit it means, the bytes dcsim takes and where the figure comes from, so a reader can
disagree with a row rather than with an unnamed constant. Google states TPU memory in GiB outright.
The rows are data, in ``catalog.json`` beside this module, each checked as it is read.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from dcsim import shipped
from dcsim.inputs import show


@dataclasses.dataclass(frozen=True, kw_only=True)
class Accelerator:
    """One catalog row.

    Attributes:
      name: the name ``--device`` takes (``h100-sxm``).
      title: the product's name.
      stated: the capacity as the vendor writes it (``80GB``).
      unit: what the vendor's unit means here (``GiB``: 2**30 bytes).
      bytes: the bytes dcsim uses, an exact int.
      source: where the figure comes from.
    """

    name: str
    title: str
    stated: str
    unit: str
    bytes: int
    source: str


_ROWS = shipped.as_rows(Accelerator, shipped.load(__file__, "catalog.json"), "dcsim/serving/catalog.json")

ACCELERATORS = MappingProxyType({row.name: row for row in _ROWS})
if len(ACCELERATORS) != len(_ROWS):
    raise ValueError(f"dcsim/serving/catalog.json names a device twice: {[row.name for row in _ROWS]}")
DEVICE_NAMES = tuple(ACCELERATORS)


def get_accelerator(name: object) -> Accelerator:
    """The catalog row ``name`` (``h100-sxm``), or a message listing every name."""
    if not isinstance(name, str) or name not in ACCELERATORS:
        raise ValueError(f"unknown device {show(name)}; devices: {', '.join(DEVICE_NAMES)}")
    return ACCELERATORS[name]
