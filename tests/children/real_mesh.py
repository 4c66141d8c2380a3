"""A child with eight virtual CPU devices that places arrays for real, for the whole test session.

Started once by the ``real_mesh`` fixture (conftest) with ``XLA_FLAGS`` asking for eight host
devices: each line on stdin is a JSON list of cases (a mesh, a partition spec, a shape), answered
by one JSON line on stdout with what JAX itself made of each: the devices holding a shard, the
shard shapes, the sharding's own shard shape and the copies of each distinct shard. One JAX import
serves every layout test that checks dcsim's arithmetic against real devices. A line that is a JSON
object ``{"slices": [cases]}`` asks instead what Orbax's own replica-slice rule has each device
write of a real array (tests/test_checkpoint_plan.py checks dcsim's port against it); one that is
``{"restore": case}`` saves real arrays on one mesh and restores them onto others
(tests/test_checkpoint_verify.py), and ``{"restore_from": case}`` restores a checkpoint a group of
processes saved (tests/test_checkpoint_local_tier.py).
"""

import json
import sys
from pathlib import Path

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


def slices(case):
    """What Orbax's own ``replica_slices.get_replica_slices`` has each device write of a real array
    (replica_id 0, as ``ArrayHandler`` passes it), in the mesh's flat device order: its bytes, the
    global slices and JAX's ``replica_id`` of its shard."""
    from orbax.checkpoint._src.serialization import replica_slices

    names = [name for name, _ in case["mesh"]]
    sizes = [size for _, size in case["mesh"]]
    mesh = jax.make_mesh(sizes, names, devices=jax.devices()[: int(np.prod(sizes))])
    order = {device.id: flat for flat, device in enumerate(mesh.devices.flat)}
    spec = PartitionSpec(*(entry if entry is None else tuple(entry) for entry in case["spec"]))
    array = jax.device_put(np.zeros(case["shape"], case["dtype"]), NamedSharding(mesh, spec))
    found = replica_slices.get_replica_slices(
        array,
        replica_id=0,
        use_replica_parallel=case["replica_parallel"],
        min_slice_bytes_for_replica_parallel=case.get("min_slice_bytes"),
        max_replicas_for_replica_parallel=case.get("max_replicas"),
    )
    devices = [{"bytes": 0, "slices": [], "replica_id": None} for _ in order]
    for shard in array.addressable_shards:
        devices[order[shard.device.id]]["replica_id"] = shard.replica_id
    itemsize = np.dtype(case["dtype"]).itemsize
    for piece in found.replica_slices:
        (device,) = piece.unsliced_data.sharding.device_set
        index = [
            [part.start or 0, part.stop if part.stop is not None else dim]
            for part, dim in zip(piece.index, case["shape"], strict=True)
        ]
        entry = devices[order[device.id]]
        entry["slices"].append(index)
        entry["bytes"] += int(np.prod([stop - start for start, stop in index])) * itemsize
    return devices


def _mesh(axes):
    sizes = [size for _, size in axes]
    return jax.make_mesh(sizes, [name for name, _ in axes], devices=jax.devices()[: int(np.prod(sizes))])


def _sharding(mesh, entries):
    return NamedSharding(mesh, PartitionSpec(*(entry if entry is None else tuple(entry) for entry in entries)))


def _bits(values):
    return np.asarray(values).view(f"u{values.dtype.itemsize}")


def restore(case):
    """Save arrays of random values laid out on one mesh into ``folder`` (as ``checkpoint --policy
    replica-parallel`` saves: zstd off), then restore them onto each of other meshes and layouts:
    whether every value came back bit for bit, each device's shard (its index and bytes) in the
    restore mesh's order, and the bytes tensorstore read from the files for the restore."""
    import orbax.checkpoint as ocp

    rng = np.random.default_rng(0)
    values = {a["name"]: rng.standard_normal(a["shape"]).astype(a["dtype"]) for a in case["arrays"]}
    import tensorstore as ts

    from dcsim.checkpoint.worker import save_params

    def bytes_read():  # what tensorstore has read from files in this process so far
        (metric,) = ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/bytes_read")
        return sum(int(value["value"]) for value in metric["values"])

    mesh = _mesh(case["mesh"])
    saved = {name: jax.device_put(v, _sharding(mesh, case["specs"][name])) for name, v in values.items()}
    save_params(Path(case["folder"]), saved, "replica-parallel")  # zstd off: a chunk read is its raw bytes
    found = []
    for target in case["restores"]:
        other = _mesh(target["mesh"])
        order = {device.id: flat for flat, device in enumerate(other.devices.flat)}
        targets = {
            name: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=_sharding(other, target["specs"][name]))
            for name, v in values.items()
        }
        before = bytes_read()
        with ocp.StandardCheckpointer() as checkpointer:
            restored = checkpointer.restore(case["folder"], targets)
        jax.block_until_ready(restored)
        arrays = {"bytes_read": bytes_read() - before}
        arrays |= _restored(restored, values, {name: t.sharding for name, t in targets.items()}, order)
        found.append(arrays)
    return found


def _restored(restored, values, shardings, order):
    """Each restored array: whether its bits are the saved ones, whether its sharding is the one
    asked, and each device's shard (its index and bytes, in the mesh's device order)."""
    arrays = {}
    for name, array in restored.items():
        shards = [None] * len(order)
        for shard in array.addressable_shards:
            index = [
                [part.start or 0, part.stop if part.stop is not None else dim]
                for part, dim in zip(shard.index, array.shape, strict=True)
            ]
            shards[order[shard.device.id]] = {"index": index, "bytes": int(shard.data.nbytes)}
        arrays[name] = {
            "same_bits": bool(np.array_equal(_bits(np.asarray(array)), _bits(values[name]))),
            "same_sharding": array.sharding.is_equivalent_to(shardings[name], array.ndim),
            "shards": shards,
        }
    return arrays


def _tree(flat):
    tree = {}
    for path, value in flat.items():
        *parents, leaf = path.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _flat(tree, prefix=""):
    found = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            found |= _flat(value, f"{prefix}{key}/")
        else:
            found[prefix + key] = value
    return found


def restore_from(case):
    """Restore a checkpoint another group saved (``folder``; array ``i`` of ``arrays`` holds
    ``default_rng(i).standard_normal``, as ``local_tier.py`` draws it) onto each of ``restores``'
    meshes in this one process: bit for bit, the sharding asked, each device's shard. Then each of
    ``refusals``' targets (arrays named, shaped and typed as given): Orbax's error, or the dtypes it
    restored when it did not fail."""
    import orbax.checkpoint as ocp

    values = {
        a["name"]: np.random.default_rng(i).standard_normal(a["shape"]).astype(a["dtype"])
        for i, a in enumerate(case["arrays"])
    }
    found = {"restores": [], "refusals": []}
    for target in case["restores"]:
        mesh = _mesh(target["mesh"])
        order = {device.id: flat for flat, device in enumerate(mesh.devices.flat)}
        shardings = {name: _sharding(mesh, target["specs"][name]) for name in values}
        targets = {name: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings[name]) for name, v in values.items()}
        with ocp.StandardCheckpointer() as checkpointer:
            restored = _flat(checkpointer.restore(case["folder"], _tree(targets)))
        found["restores"].append(_restored(restored, values, shardings, order))
    for target in case["refusals"]:
        mesh = _mesh(target["mesh"])
        targets = {
            a["name"]: jax.ShapeDtypeStruct(tuple(a["shape"]), a["dtype"], sharding=_sharding(mesh, a["spec"]))
            for a in target["arrays"]
        }
        try:
            with ocp.StandardCheckpointer() as checkpointer:
                restored = _flat(checkpointer.restore(case["folder"], _tree(targets)))
            found["refusals"].append({"error": None, "dtypes": {n: str(a.dtype) for n, a in restored.items()}})
        except Exception as err:  # what Orbax said
            found["refusals"].append({"error": f"{type(err).__name__}: {err}"[:2_000], "dtypes": None})
    return found


for line in sys.stdin:
    request = json.loads(line)
    if isinstance(request, dict) and "restore_from" in request:  # {"restore_from": case}: another's save
        print(json.dumps(restore_from(request["restore_from"])), flush=True)
    elif isinstance(request, dict) and "restore" in request:  # {"restore": case}: a save restored elsewhere
        print(json.dumps(restore(request["restore"])), flush=True)
    elif isinstance(request, dict):  # {"slices": [cases]}: Orbax's writers
        print(json.dumps([slices(case) for case in request["slices"]]), flush=True)
    else:
        print(json.dumps([place(case) for case in request]), flush=True)
