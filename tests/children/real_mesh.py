"""A child with eight virtual CPU devices that places arrays for real, for the whole test session.

Started once by the ``real_mesh`` fixture (conftest) with ``XLA_FLAGS`` asking for eight host
devices: each line on stdin is a JSON list of cases (a mesh, a partition spec, a shape), answered
by one JSON line on stdout with what JAX itself made of each: the devices holding a shard, the
shard shapes, the sharding's own shard shape and the copies of each distinct shard. One JAX import
serves every layout test that checks dcsim's arithmetic against real devices.
"""

import json
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


def place(case):
    names = [name for name, _ in case["mesh"]]
    sizes = [size for _, size in case["mesh"]]
    devices = jax.devices()[: int(np.prod(sizes))]
    mesh = jax.make_mesh(sizes, names, devices=devices)
    spec = PartitionSpec(*(entry if entry is None else tuple(entry) for entry in case["spec"]))
    sharding = NamedSharding(mesh, spec)
    array = jax.device_put(np.zeros(case["shape"], np.float32), sharding)
    shapes = sorted({tuple(shard.data.shape) for shard in array.addressable_shards})
    copies = {}
    for index in sharding.devices_indices_map(tuple(case["shape"])).values():
        key = repr(index)
        copies[key] = copies.get(key, 0) + 1
    return {
        "num_devices": len(array.addressable_shards),
        "shard_shapes": [list(shape) for shape in shapes],
        "sharding_shard_shape": list(sharding.shard_shape(tuple(case["shape"]))),
        "copies": sorted(set(copies.values())),
    }


for line in sys.stdin:
    print(json.dumps([place(case) for case in json.loads(line)]), flush=True)
