"""Accelerators and their memory, as their vendors state it, in the bytes dcsim uses.

Vendors write "80GB" for memory built of 2**30-byte parts: HBM stacks and GDDR chips come in
binary sizes, and the driver reports them in MiB (``nvidia-smi`` shows 81,559 MiB for an 80GB
H100 SXM, ``rocm-smi`` 196,592 MiB for a 192GB MI300X: slightly less than the binary figure, the
rest held by firmware and the driver; the reserve is for that). Each row says what the vendor
wrote, which unit it means, the bytes dcsim takes and where the figure comes from, so a reader can
disagree with a row rather than with an unnamed constant. Google states TPU memory in GiB outright.
The rows are data, in ``catalog.json`` beside this module, each checked as it is read.

Speeds (``dcsim.speed`` reads them) are dense peaks, never the "with sparsity" figures vendors print
first, in decimal units (TB/s is 10**12 bytes a second), each device's link rate one way: a
vendor's "NVLink 900GB/s" counts both directions, so 450 GB/s each way. A row without a figure
(no FP8 on an A100, no scale-out link stated for a PCIe card) has null, and a time that needs it
is refused by name.
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
      bf16_flops_per_second, fp8_flops_per_second, int8_ops_per_second: dense peaks (null where
        the device has no such unit).
      hbm_bytes_per_second: the memory's bandwidth.
      scale_up_bytes_per_second: a device's link inside its host or pod slice (NVLink, Infinity
        Fabric, ICI), one direction.
      scale_out_bytes_per_second: a device's share of its host's network (InfiniBand, DCN), one
        direction.
      speed_source: where the speeds come from.
    """

    name: str
    title: str
    stated: str
    unit: str
    bytes: int
    source: str
    bf16_flops_per_second: int | None = None
    fp8_flops_per_second: int | None = None
    int8_ops_per_second: int | None = None
    hbm_bytes_per_second: int | None = None
    scale_up_bytes_per_second: int | None = None
    scale_out_bytes_per_second: int | None = None
    speed_source: str | None = None

    def peak_flops(self, dtype: str) -> int:
        """The dense peak for a matmul's dtype (``bfloat16``/``float16``: bf16's; ``float8``;
        ``int8``); ValueError naming the device and the dtype where the row has none."""
        column = {"bfloat16": "bf16_flops_per_second", "float16": "bf16_flops_per_second"}.get(dtype)
        column = column or {"float8": "fp8_flops_per_second", "int8": "int8_ops_per_second"}.get(dtype)
        value = None if column is None else getattr(self, column)
        if value is None:
            raise ValueError(f"the device {self.name} has no dense peak for {dtype} in dcsim's catalog")
        return int(value)

    def speed(self, column: str) -> int:
        """A speed column's figure; ValueError naming the device and the figure where it is null."""
        value = getattr(self, column)
        if value is None:
            raise ValueError(
                f"the device {self.name} has no {column.replace('_', ' ')} figure in dcsim's catalog; "
                "choose another --device"
            )
        return int(value)


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
