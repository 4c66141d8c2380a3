"""One process of a group that saves a local-tier checkpoint, loses a host and restores from the rest.

Run as ``python -m local_tier REQUEST RESULT PROGRESS`` by ``dcsim.runtime.workers.run_workers``
(``tests/test_checkpoint_local_tier.py`` starts the group once): P processes join JAX's distributed
runtime on loopback exactly as ``checkpoint --processes`` does (``multiprocess_worker``'s own
connect), so they share one mesh. For each case (arrays, their shapes and PartitionSpecs) each
process:

1. makes the arrays from values every process draws alike (numpy's generator, a seed an array),
   each process materialising only its own devices' shards;
2. saves them the way Orbax's emergency checkpointing saves its local tier: a
   ``PyTreeCheckpointHandler`` whose ``ArrayHandler`` has ``primary_host=None``, ``replica_id=None``
   and ``use_replica_parallel=False`` (every addressable shard, replicas included), into a folder of
   its own (``ROOT/CASE/process_<id>``), with only itself as the active process; zstd off, so each
   stored chunk is its raw bytes;
3. lists the chunks it stored (``stored_chunks``);
4. the process ``lost_process`` removes its folder: its host and disk are gone, and it stands for the
   replacement that takes its place;
5. each process restores its own shards, one array at a time, with real Orbax onto the same mesh:
   from its own folder, or, when that is gone, from the first surviving process's folder, which
   stands for the peer that would send its copies. A chunk no folder it reads holds makes Orbax fail
   (tensorstore's NOT_FOUND names the chunk's key); every restored shard is compared bit for bit.

The case ``shared_case`` names is also saved the persistent way, by every process into one folder
(``ROOT/shared``, ``dcsim.checkpoint.worker.save_params``), for the test to restore on fewer processes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util
from jax.experimental import multihost_utils

from dcsim.checkpoint.multiprocess_worker import connect
from dcsim.checkpoint.worker import save_params, stored_chunks
from dcsim.runtime import workers
from dcsim.sharding.wire import spec_from_json

MESSAGE_CHARS = 400  # of each error in the chain


def _handler(process_id: int) -> tuple[ocp.PyTreeCheckpointHandler, Any]:
    """The local tier's handler (``orbax.checkpoint.experimental.emergency.checkpoint_manager``'s
    ``_local_checkpoint_handler``), zstd off, with this process alone active."""
    options = ocp.options.MultiprocessingOptions(
        primary_host=None, active_processes={process_id}, barrier_sync_key_prefix=f"local-{process_id}"
    )
    handler = ocp.type_handlers.ArrayHandler(primary_host=None, replica_id=None, use_replica_parallel=False)
    registry = ocp.type_handlers.create_type_handler_registry((jax.Array, handler))
    pytree = ocp.PyTreeCheckpointHandler(
        use_ocdbt=True,
        use_zarr3=True,
        use_compression=False,
        multiprocessing_options=options,
        type_handler_registry=registry,
    )
    return pytree, options


def _chain(err: BaseException) -> str:
    """The error and its causes, the innermost first: Orbax wraps tensorstore's NOT_FOUND, which
    names the missing chunk, in an error whose text is mostly the store's whole spec."""
    texts = []
    seen: BaseException | None = err
    while seen is not None and len(texts) < 8:
        texts.append(f"{type(seen).__name__}: {str(seen)[:MESSAGE_CHARS]}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(reversed(texts))


def _run_case(
    name: str, case: dict[str, Any], mesh: jax.sharding.Mesh, root: Path, request: dict[str, Any], progress: Any
) -> dict[str, Any]:
    process_id, lost = int(request["process_id"]), int(request["lost_process"])
    shardings, values = {}, {}
    for index, array in enumerate(case["arrays"]):
        key = tuple(array["path"].split("/"))
        shardings[key] = jax.sharding.NamedSharding(mesh, spec_from_json(array["spec"]))
        values[key] = np.random.default_rng(index).standard_normal(array["shape"]).astype(array["dtype"])
    params = traverse_util.unflatten_dict(
        {
            key: jax.make_array_from_callback(value.shape, shardings[key], lambda index, value=value: value[index])
            for key, value in values.items()
        }
    )
    handler, options = _handler(process_id)
    folder = root / name / f"process_{process_id}"
    workers.write_stage(progress, f"{name}: saving")
    with ocp.Checkpointer(handler, multiprocessing_options=options) as checkpointer:
        checkpointer.save(folder, args=ocp.args.PyTreeSave({"params": params}))
    stored = stored_chunks(folder)
    multihost_utils.sync_global_devices(f"local tier {name}: saved")

    if process_id == lost:
        shutil.rmtree(folder)
    multihost_utils.sync_global_devices(f"local tier {name}: host lost")

    survivors = [p for p in range(int(request["num_processes"])) if p != lost]
    source = folder if folder.exists() else root / name / f"process_{survivors[0]}"
    workers.write_stage(progress, f"{name}: restoring")
    arrays = {}
    for key, value in values.items():
        target = {
            "params": traverse_util.unflatten_dict(
                {key: jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=shardings[key])}
            )
        }
        entry: dict[str, Any] = {"restored": False, "same_bits": None, "error": None}
        try:
            with ocp.Checkpointer(handler, multiprocessing_options=options) as checkpointer:
                restored = checkpointer.restore(
                    source,
                    args=ocp.args.PyTreeRestore(
                        target,
                        restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                        partial_restore=True,
                    ),
                )
            array = traverse_util.flatten_dict(restored["params"])[key]
            entry["restored"] = True
            entry["same_bits"] = all(
                np.array_equal(np.asarray(shard.data).view(np.uint8), value[shard.index].view(np.uint8))
                and shard.data.shape == value[shard.index].shape
                for shard in array.addressable_shards
            )
        except Exception as err:  # the restore of this array failed: say why, go on with the next
            entry["error"] = _chain(err)
        arrays["/".join(key)] = entry
    multihost_utils.sync_global_devices(f"local tier {name}: restored")
    if name == request.get("shared_case"):
        # The same state saved to shared storage, as ``checkpoint --processes --policy`` saves it
        # (every process into one folder, zstd off), for a restore elsewhere after the group ends.
        workers.write_stage(progress, f"{name}: saving to shared storage")
        save_params(root / "shared", params, "replica-parallel")
    return {"stored": stored, "source": source.name, "arrays": arrays}


def work(request: dict[str, Any], progress: Any) -> dict[str, Any]:
    workers.write_stage(progress, "connecting")
    process_id, num_processes = int(request["process_id"]), int(request["num_processes"])
    connect(process_id, num_processes, int(request["port"]), int(request["connect_timeout_seconds"]))
    axes = [(str(name), int(size)) for name, size in request["mesh"]]
    mesh = jax.make_mesh([size for _, size in axes], [name for name, _ in axes])
    if jax.device_count() != mesh.size or jax.local_device_count() * num_processes != mesh.size:
        raise RuntimeError(
            f"asked for {mesh.size} devices over {num_processes} processes, JAX has {jax.device_count()}"
        )
    root = Path(request["root"])
    cases = {name: _run_case(name, case, mesh, root, request, progress) for name, case in request["cases"].items()}
    jax.distributed.shutdown()
    workers.write_stage(progress, "done")
    return {"process_id": process_id, "cases": cases}


if __name__ == "__main__":
    workers.exit_child(workers.check_child_main(sys.argv[1:], "local_tier", work, "the local-tier group failed"))
