"""Meshes and PartitionSpecs as JSON, for the requests a parent writes to a child process.

The checkpoint measurement and XLA's checks of memory and serving lay arrays out here, abstractly,
and have a child in a fresh interpreter place them on real virtual CPU devices. The parent writes
the mesh as ``[[axis, size], ...]`` (``mesh_json``) and each PartitionSpec as a list whose entries
are null, an axis name or a list of names (``spec_json``); the child reads them back with
``device_mesh`` and ``spec_from_json``. One codec, so the two sides cannot drift apart.

It imports JAX and NumPy only, which a child has loaded anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

if TYPE_CHECKING:
    from dcsim.sharding.meshes import MeshSpec


def mesh_json(mesh: MeshSpec) -> list[list[Any]]:
    """A mesh as JSON: ``[[axis, size], ...]``."""
    return [[name, size] for name, size in mesh.axes]


def spec_json(spec: PartitionSpec) -> list[Any]:
    """A PartitionSpec as JSON: each entry null, an axis name or a list of names."""
    return [entry if entry is None or isinstance(entry, str) else list(entry) for entry in spec]


def spec_from_json(entries: Sequence[Any]) -> PartitionSpec:
    """The PartitionSpec ``spec_json`` wrote."""
    return PartitionSpec(*(tuple(entry) if isinstance(entry, list) else entry for entry in entries))


def device_mesh(axes: Sequence[Sequence[Any]]) -> Mesh:
    """The mesh ``mesh_json`` wrote, over this process's first devices.

    Raises RuntimeError if JAX started with too few: the parent sets the device count in
    ``XLA_FLAGS`` before JAX starts, and it did not take effect."""
    names = tuple(str(name) for name, _ in axes)
    sizes = tuple(int(size) for _, size in axes)
    num_devices = math.prod(sizes)
    devices = jax.devices()
    if len(devices) < num_devices:
        raise RuntimeError(
            f"JAX started with {len(devices):,} CPU devices and the mesh needs {num_devices:,} "
            "(XLA_FLAGS did not take effect)"
        )
    return Mesh(np.array(devices[:num_devices]).reshape(sizes), names)
