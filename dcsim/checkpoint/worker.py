"""The child side of the checkpoint measurement (started as ``python -m dcsim.checkpoint.child single``).

It runs in a fresh process that ``dcsim.checkpoint`` starts with ``XLA_FLAGS`` already asking for
the virtual CPU devices, so the mesh exists before JAX starts. It initialises the configured model
concretely, born sharded, saves it with Orbax's ``StandardCheckpointer`` into a folder of its own
inside the folder it was given, measures the files, restores them onto the same shardings and
compares every shard bit for bit. Its checkpoint folder is removed before it exits, whatever
happens; the parent removes the folder around it too, in case this process is killed.

The request (JSON) holds ``config`` (the configuration file format), ``dtype`` (storage dtype),
``mesh`` (``[[axis, size], ...]``) and ``specs`` (one PartitionSpec per parameter path, each entry
``null``, an axis name or a list of axis names). The parent has validated all of it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util
from jax import monitoring
from jax.extend.core import jaxpr_as_fun
from jax.sharding import NamedSharding

from dcsim.checkpoint import prestart
from dcsim.model import modules
from dcsim.model.config import ModelConfig
from dcsim.sharding.wire import spec_from_json

# Each stage a worker reaches, as a JAX monitoring event with ``stage=NAME``: the progress stages,
# and ``writing`` (the save has begun and Orbax's thread is writing; not a progress stage). What
# listens is up to the process: the test suite's fault injector (``tests/faults.py``) does.
STAGE_EVENT = "/dcsim/checkpoint/stage"
WRITING = "writing"
# What a write says when the disk is full (ENOSPC), over quota (EDQUOT) or past a size limit (EFBIG),
# as an OSError or as text inside a TensorStore/Orbax error.
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_DISK_FULL_TEXT = tuple(os.strerror(code) for code in sorted(_DISK_FULL_ERRNOS))


def _peak_rss_bytes() -> int:
    """This process image's peak resident memory.

    Linux's ``VmHWM`` belongs to the memory map, which starts afresh at ``exec``. ``ru_maxrss``
    does not: the kernel carries the parent's peak across ``fork``/``exec``, so a child of a
    500 MB server would report at least 500 MB. It is only the fallback off Linux.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _same_bits(saved: jax.Array, restored: jax.Array) -> bool:
    """Equal dtype, shape, sharding and every shard's bytes (NaNs and -0.0 compared as bits)."""
    if saved.dtype != restored.dtype or saved.shape != restored.shape:
        return False
    if not saved.sharding.is_equivalent_to(restored.sharding, saved.ndim):
        return False
    theirs = {shard.device: shard for shard in restored.addressable_shards}
    for shard in saved.addressable_shards:
        other = theirs.get(shard.device)
        if other is None or shard.index != other.index:
            return False
        mine, yours = np.asarray(shard.data), np.asarray(other.data)
        as_bits = np.dtype(f"u{mine.dtype.itemsize}")
        if not np.array_equal(mine.view(as_bits), yours.view(as_bits)):
            return False
    return True


def _files(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root, name)
            rows.append({"path": path.relative_to(folder).as_posix(), "num_bytes": path.stat().st_size})
    return sorted(rows, key=lambda row: row["path"])


def _disk_full(err: BaseException | None) -> bool:
    """Whether an error, or one it was raised from, is a write refused for lack of space."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _DISK_FULL_ERRNOS:
            return True
        if any(text in str(err) for text in _DISK_FULL_TEXT):
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full_message(workdir: Path) -> str:
    """Why the save failed, with the room there was: free bytes, and a per-file limit if one is set."""
    try:
        free = f"{shutil.disk_usage(workdir).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = "" if limit == resource.RLIM_INFINITY else f", at most {limit:,} bytes a file"
    return f"the temporary disk filled up while saving the checkpoint ({free} in the temporary folder{cap})"


def error_message(err: BaseException, workdir: Path) -> str:
    """What a failed child reports: the room there was if a write was refused for lack of space,
    else the error's type and text."""
    return _disk_full_message(workdir) if _disk_full(err) else f"{type(err).__name__}: {err}"


class Progress:
    """A worker's stages as it reaches them: a line each in the progress file (the parent shows
    them), the peak memory so far as each begins (where the memory went, stage by stage), and a
    JAX monitoring event (``STAGE_EVENT``, with the stage and the process's id in its group)."""

    def __init__(self, file: Any, process_id: int = 0) -> None:
        self.file = file
        self.process_id = process_id
        self.peaks: dict[str, int] = {}

    def __call__(self, name: str) -> None:
        self.peaks[name] = _peak_rss_bytes()
        self.file.write(name + "\n")
        self.file.flush()
        monitoring.record_event(STAGE_EVENT, stage=name, process_id=self.process_id)


# --- the steps both workers share (this one and ``dcsim.checkpoint.multiprocess_worker``) ---


class TracedInit(NamedTuple):
    """A model's init program traced to a jaxpr (shapes only, no values): ``trace_init``'s result."""

    config: dict[str, Any]  # the ``ModelConfig.to_dict()`` it was traced for
    dtype: str
    jaxpr: Any  # the ClosedJaxpr from the key to the flat list of parameter arrays
    params: Any  # the parameters' tree of ShapeDtypeStructs

    def matches(self, config: ModelConfig, dtype: Any) -> bool:
        return self.config == config.to_dict() and self.dtype == str(jnp.dtype(dtype))


def trace_init(config: ModelConfig, dtype: Any) -> TracedInit:
    """Trace the model's init, in ``dtype``, to a jaxpr: shapes only, no array is made and JAX's
    backend need not have started (so a pre-started child can do it while it waits for the mesh)."""
    module, inputs = modules.build(config)

    def init(key: jax.Array) -> Any:
        # Zeros as traced constants: no input array outlives the init. Parameters only: the
        # `params` collection is what `total_params` counts and what this measurement saves.
        params = module.init(key, *(jnp.zeros(x.shape, x.dtype) for x in inputs))["params"]
        return jax.tree.map(lambda leaf: leaf.astype(dtype), params)

    key = jax.eval_shape(jax.random.PRNGKey, config.seed)
    jaxpr, params = jax.make_jaxpr(init, return_shape=True)(key)
    return TracedInit(config.to_dict(), str(jnp.dtype(dtype)), jaxpr, params)


class Initialised(NamedTuple):
    """What ``init_params`` made and measured."""

    params: Any
    shardings: Any
    init_seconds: float
    raw_payload_bytes: int  # every value once, in the storage dtype
    device_bytes: int  # what this process's devices hold, replicas included
    compilation_cache: str  # hit, miss or off: see ``_cache_status``


def init_params(
    config: ModelConfig,
    dtype: Any,
    mesh: jax.sharding.Mesh,
    specs: dict[str, list[Any]],
    traced: TracedInit | None = None,
) -> Initialised:
    """The model's ``params``, initialised for real in ``dtype`` and born sharded on ``mesh``, timed
    and weighed.

    ``specs`` maps each parameter path (``Dense_0/kernel``) to its PartitionSpec as JSON;
    ``traced``, ``trace_init``'s result if it was traced already (for another model or dtype it is
    traced again). Returns the parameters, their shardings (the same tree), the time the init
    took, the raw payload (every value once), the bytes this process's devices hold (replicas
    included) and whether XLA's compilation cache served the init program (``hit``, ``miss`` or
    ``off``). On a mesh that spans several processes, each process materialises only the shards of
    its own devices.
    """
    if traced is None or not traced.matches(config, dtype):
        traced = trace_init(config, dtype)
    flat_specs = {tuple(path.split("/")): spec_from_json(entries) for path, entries in specs.items()}
    if set(flat_specs) != set(traverse_util.flatten_dict(traced.params)):
        raise RuntimeError("the PartitionSpecs do not name the model's parameter arrays")
    shardings = traverse_util.unflatten_dict({key: NamedSharding(mesh, spec) for key, spec in flat_specs.items()})
    program, tree = jaxpr_as_fun(traced.jaxpr), jax.tree.structure(traced.params)

    def init(key: jax.Array) -> Any:  # the traced program, replayed: the same values as tracing again
        return jax.tree.unflatten(tree, program(key))

    key = jax.random.PRNGKey(config.seed)
    started = time.perf_counter()
    # Born sharded: each device materialises only its own shards, never a whole replica first.
    with _compilation_cache_events() as events:
        params = jax.jit(init, out_shardings=shardings)(key)
    jax.block_until_ready(params)
    init_seconds = time.perf_counter() - started
    leaves = traverse_util.flatten_dict(params).values()
    raw_payload_bytes = sum(int(leaf.size) * leaf.dtype.itemsize for leaf in leaves)
    device_bytes = sum(int(shard.data.nbytes) for leaf in leaves for shard in leaf.addressable_shards)
    return Initialised(params, shardings, init_seconds, raw_payload_bytes, device_bytes, _cache_status(events))


_CACHE_HIT = "/jax/compilation_cache/cache_hits"


@contextlib.contextmanager
def _compilation_cache_events() -> Iterator[list[str]]:
    """JAX's persistent compilation cache's hits while the block runs."""
    seen: list[str] = []

    def listen(event: str, **_: Any) -> None:
        if event == _CACHE_HIT:
            seen.append(event)

    monitoring.register_event_listener(listen)
    try:
        yield seen
    finally:
        monitoring.unregister_event_listener(listen)


def _cache_status(events: list[str]) -> str:
    """``hit`` (the init program was read from the cache), ``miss`` (compiled; kept if it took a
    second or more) or ``off`` (no cache: see ``dcsim.runtime.workers.compilation_cache_env``)."""
    if not getattr(jax.config, "jax_compilation_cache_dir", None):  # a flag JAX sets up at run time
        return "off"
    return "hit" if _CACHE_HIT in events else "miss"


def save_params(path: Path, params: Any, policy: str | None = None) -> None:
    """Save with Orbax's ``StandardCheckpointer`` and wait until the checkpoint is committed; with a
    ``policy`` (``single-replica`` or ``replica-parallel``), with the ``ArrayHandler`` it names and
    zstd off instead, so each stored chunk is the arrays' raw bytes (``stored_chunk_bytes``).

    Between the start of the save and its commit (the writes go on in Orbax's background thread)
    it records the ``writing`` stage event.
    """
    if policy is not None:
        _save_with_policy(path, params, policy)
        return
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, params)
        monitoring.record_event(STAGE_EVENT, stage=WRITING, process_id=jax.process_index())
        checkpointer.wait_until_finished()


def _save_with_policy(path: Path, params: Any, policy: str) -> None:
    """The save ``StandardCheckpointer`` makes (OCDBT, the per-process array metadata), through a
    ``PyTreeCheckpointHandler`` whose ``ArrayHandler`` has ``use_replica_parallel`` set, with zstd
    off. The restore needs nothing of this: the zarr metadata says there is no compressor."""
    from orbax.checkpoint._src.metadata import array_metadata_store

    handler = ocp.type_handlers.ArrayHandler(
        use_replica_parallel=policy == "replica-parallel", array_metadata_store=array_metadata_store.Store()
    )
    registry = ocp.type_handlers.create_type_handler_registry((jax.Array, handler))
    pytree = ocp.PyTreeCheckpointHandler(use_compression=False, type_handler_registry=registry)
    with ocp.AsyncCheckpointer(pytree) as checkpointer:
        checkpointer.save(path, args=ocp.args.PyTreeSave(params))
        monitoring.record_event(STAGE_EVENT, stage=WRITING, process_id=jax.process_index())
        checkpointer.wait_until_finished()


def stored_chunk_bytes(store: Path) -> int:
    """The bytes of the array chunks in one OCDBT database (a process's ``ocdbt.process_<id>``),
    read back through tensorstore: every stored value but the zarr metadata (``.zarray``,
    ``.zattrs``, ``zarr.json``). With zstd off each is a chunk's raw bytes."""
    return sum(stored_chunks(store).values())


def stored_chunks(store: Path) -> dict[str, int]:
    """Each array chunk an OCDBT database holds (its key, e.g. ``params.Dense_0.kernel/c/1/0``) and
    its stored bytes, as ``stored_chunk_bytes`` counts them."""
    import tensorstore as ts

    kvstore = ts.KvStore.open({"driver": "ocdbt", "base": store.resolve().as_uri()}).result()
    chunks = {}
    for key in kvstore.list().result():
        name = key.decode().rsplit("/", 1)[-1]
        if name.startswith(".") or name == "zarr.json":
            continue
        chunks[key.decode()] = len(kvstore.read(key).result().value)
    return chunks


def restore_params(path: Path, params: Any, shardings: Any) -> Any:
    """Restore the checkpoint at ``path`` onto ``params``' shapes, dtypes and ``shardings``."""
    targets = jax.tree.map(
        lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding), params, shardings
    )
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(path, targets)
    jax.block_until_ready(restored)
    return restored


def same_tree(saved: Any, restored: Any) -> bool:
    """The same arrays under the same paths, each equal bit for bit on this process's shards."""
    leaves, flat_restored = traverse_util.flatten_dict(saved), traverse_util.flatten_dict(restored)
    return set(flat_restored) == set(leaves) and all(
        _same_bits(leaf, flat_restored[key]) for key, leaf in leaves.items()
    )


def measure(
    request: dict[str, Any],
    workdir: Path,
    progress: Any,
    *,
    set_device_count: bool = False,
    traced: TracedInit | None = None,
) -> dict[str, Any]:
    stage = Progress(progress)
    config = ModelConfig.from_dict(request["config"])
    dtype = jnp.dtype(request["dtype"])
    axes = [(str(name), int(size)) for name, size in request["mesh"]]
    num_devices = int(np.prod([size for _, size in axes]))
    if set_device_count:
        # Pre-started (``dcsim.checkpoint.prestart``): the mesh was unknown when this process started; JAX's
        # backend has not started yet, so the device count can still be set.
        jax.config.update("jax_num_cpu_devices", num_devices)
    if jax.device_count() != num_devices:
        raise RuntimeError(
            f"asked for {num_devices} CPU devices, JAX has {jax.device_count()} (XLA_FLAGS not applied?)"
        )
    # The idle baseline: JAX, Flax and Orbax imported and the CPU backend up, nothing allocated.
    baseline_rss = _peak_rss_bytes()
    mesh = jax.make_mesh([size for _, size in axes], [name for name, _ in axes])

    stage("initialising")
    initialised = init_params(config, dtype, mesh, request["specs"], traced)
    params, shardings = initialised.params, initialised.shardings

    folder = Path(tempfile.mkdtemp(prefix="save-", dir=workdir))
    try:
        path = folder / "checkpoint"
        stage("saving")
        started = time.perf_counter()
        save_params(path, params)
        save_seconds = time.perf_counter() - started

        stage("measuring")
        files = _files(path)

        stage("restoring")
        started = time.perf_counter()
        restored = restore_params(path, params, shardings)
        restore_seconds = time.perf_counter() - started

        stage("verifying")
        verified = same_tree(params, restored)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stage("done")
    return {
        "num_devices": num_devices,
        "raw_payload_bytes": int(initialised.raw_payload_bytes),
        "device_bytes": int(initialised.device_bytes),
        "files": files,
        "init_seconds": initialised.init_seconds,
        "compilation_cache": initialised.compilation_cache,
        "save_seconds": save_seconds,
        "restore_seconds": restore_seconds,
        "restore_verified": bool(verified),
        "baseline_rss_bytes": baseline_rss,
        "peak_rss_bytes": _peak_rss_bytes(),
        "peak_rss_before_stage": stage.peaks,
        "versions": {"jax": jax.__version__, "orbax-checkpoint": ocp.__version__},
    }


_WAIT_POLL_SECONDS = 0.01


class Waited(NamedTuple):
    """How ``wait_for_request`` ended: whether the request came, and the init it traced meanwhile."""

    requested: bool
    traced: TracedInit | None


def wait_for_request(path: Path, *, wait_seconds: float) -> Waited:
    """Wait (pre-started by ``dcsim.checkpoint.prestart``) until the request file exists; not ``requested``
    if the parent died or ``wait_seconds`` passed first. Nothing of JAX's backend has started yet.

    If the parent previews the model first (``prestart.PREVIEW_FILE`` beside the request: the
    configuration and dtype, written as soon as it has them, before its own count and layout),
    its init is traced while the parent plans, so the request finds it done. A preview that
    cannot be traced is left for the request to trace again and report.
    """
    # The parent's pid as the parent gave it: by the time this runs (after the imports) the parent
    # may already be gone and this process adopted by another.
    parent = int(os.environ.get(prestart.PARENT_ENV) or os.getppid())
    deadline = time.monotonic() + wait_seconds
    preview, previewed, traced = path.parent / prestart.PREVIEW_FILE, False, None
    while not path.exists():
        if os.getppid() != parent or time.monotonic() > deadline:
            return Waited(False, None)
        if not previewed and preview.exists():
            previewed = True
            with contextlib.suppress(Exception):  # the request will trace it again and say what failed
                shown = json.loads(preview.read_text())
                traced = trace_init(ModelConfig.from_dict(shown["config"]), shown["dtype"])
            continue
        time.sleep(_WAIT_POLL_SECONDS)
    return Waited(True, traced)
