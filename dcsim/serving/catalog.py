"""Accelerators and their memory, as their vendors state it, in the bytes dcsim uses.

Vendors write "80GB" for memory built of 2**30-byte parts: HBM stacks and GDDR chips come in
binary sizes, and the driver reports them in MiB (``nvidia-smi`` shows 81,559 MiB for an 80GB
H100 SXM, ``rocm-smi`` 196,592 MiB for a 192GB MI300X: slightly less than the binary figure, the
rest held by firmware and the driver; the reserve is for that). Each row says what the vendor
wrote, which unit it means, the bytes dcsim takes and where the figure comes from, so a reader can
disagree with a row rather than with an unnamed constant. Google states TPU memory in GiB outright.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from dcsim.inputs import show

GIB = 1 << 30


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


_HBM = "vendor's GB are GiB here: {parts}"
_ROWS = (
    Accelerator(
        name="h100-sxm",
        title="NVIDIA H100 SXM5 80GB",
        stated="80GB",
        unit="GiB",
        bytes=80 * GIB,
        source="NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 80GB HBM3); "
        + _HBM.format(parts="five 16 GiB HBM3 stacks"),
    ),
    Accelerator(
        name="h100-nvl",
        title="NVIDIA H100 NVL 94GB",
        stated="94GB",
        unit="GiB",
        bytes=94 * GIB,
        source="NVIDIA H100 Tensor Core GPU datasheet (H100 NVL: 94GB HBM3); "
        + _HBM.format(parts="HBM3 stacks of binary size"),
    ),
    Accelerator(
        name="h200",
        title="NVIDIA H200 141GB",
        stated="141GB",
        unit="GiB",
        bytes=141 * GIB,
        source="NVIDIA H200 Tensor Core GPU datasheet (141GB HBM3e); " + _HBM.format(parts="HBM3e stacks"),
    ),
    Accelerator(
        name="b200",
        title="NVIDIA B200 180GB (DGX B200)",
        stated="180GB",
        unit="GiB",
        bytes=180 * GIB,
        source="NVIDIA DGX B200 datasheet (1,440GB total GPU memory over 8 GPUs); " + _HBM.format(parts="HBM3e"),
    ),
    Accelerator(
        name="a100-40gb",
        title="NVIDIA A100 40GB",
        stated="40GB",
        unit="GiB",
        bytes=40 * GIB,
        source="NVIDIA A100 Tensor Core GPU datasheet (40GB HBM2); " + _HBM.format(parts="five 8 GiB HBM2 stacks"),
    ),
    Accelerator(
        name="a100-80gb",
        title="NVIDIA A100 80GB",
        stated="80GB",
        unit="GiB",
        bytes=80 * GIB,
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB HBM2e); "
        + _HBM.format(parts="five 16 GiB HBM2e stacks; nvidia-smi shows 81,920 MiB"),
    ),
    Accelerator(
        name="l4",
        title="NVIDIA L4 24GB",
        stated="24GB",
        unit="GiB",
        bytes=24 * GIB,
        source="NVIDIA L4 Tensor Core GPU datasheet (24GB GDDR6); vendor's GB are GiB here: GDDR6 chips",
    ),
    Accelerator(
        name="l40s",
        title="NVIDIA L40S 48GB",
        stated="48GB",
        unit="GiB",
        bytes=48 * GIB,
        source="NVIDIA L40S datasheet (48GB GDDR6 with ECC); vendor's GB are GiB here: GDDR6 chips",
    ),
    Accelerator(
        name="rtx-4090",
        title="NVIDIA GeForce RTX 4090 24GB",
        stated="24GB",
        unit="GiB",
        bytes=24 * GIB,
        source="NVIDIA GeForce RTX 4090 specifications (24GB GDDR6X); vendor's GB are GiB here: twelve 2 GiB chips",
    ),
    Accelerator(
        name="mi300x",
        title="AMD Instinct MI300X 192GB",
        stated="192GB",
        unit="GiB",
        bytes=192 * GIB,
        source="AMD Instinct MI300X data sheet (192GB HBM3); " + _HBM.format(parts="eight 24 GiB HBM3 stacks"),
    ),
    Accelerator(
        name="mi325x",
        title="AMD Instinct MI325X 256GB",
        stated="256GB",
        unit="GiB",
        bytes=256 * GIB,
        source="AMD Instinct MI325X data sheet (256GB HBM3E); " + _HBM.format(parts="eight 32 GiB HBM3E stacks"),
    ),
    Accelerator(
        name="tpu-v4",
        title="Google Cloud TPU v4 (per chip)",
        stated="32 GiB",
        unit="GiB",
        bytes=32 * GIB,
        source="Google Cloud TPU documentation, TPU v4 system architecture (32 GiB HBM2 per chip)",
    ),
    Accelerator(
        name="tpu-v5e",
        title="Google Cloud TPU v5e (per chip)",
        stated="16 GiB",
        unit="GiB",
        bytes=16 * GIB,
        source="Google Cloud TPU documentation, TPU v5e system architecture (16 GiB HBM2 per chip)",
    ),
    Accelerator(
        name="tpu-v5p",
        title="Google Cloud TPU v5p (per chip)",
        stated="95 GiB",
        unit="GiB",
        bytes=95 * GIB,
        source="Google Cloud TPU documentation, TPU v5p system architecture (95 GiB HBM2e per chip)",
    ),
    Accelerator(
        name="tpu-v6e",
        title="Google Cloud TPU v6e Trillium (per chip)",
        stated="32 GiB",
        unit="GiB",
        bytes=32 * GIB,
        source="Google Cloud TPU documentation, TPU v6e system architecture (32 GiB HBM per chip)",
    ),
)

ACCELERATORS = MappingProxyType({row.name: row for row in _ROWS})
DEVICE_NAMES = tuple(ACCELERATORS)


def get_accelerator(name: object) -> Accelerator:
    """The catalog row ``name`` (``h100-sxm``), or a message listing every name."""
    if not isinstance(name, str) or name not in ACCELERATORS:
        raise ValueError(f"unknown device {show(name)}; devices: {', '.join(DEVICE_NAMES)}")
    return ACCELERATORS[name]
