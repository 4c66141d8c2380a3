"""One process of a multi-process checkpoint (started as ``python -m dcsim.checkpoint.child group``).

``dcsim.checkpoint.multiprocess`` starts P of these at once, as a real multi-host job runs one per host. Each
joins JAX's distributed runtime (process 0 runs the coordinator, on 127.0.0.1 and a port the
parent chose for this run), so the P processes see one global mesh with N/P virtual CPU devices
each, and CPU collectives run over gloo, also on loopback. Then each does what the single-process
worker does, with the same functions (``dcsim.checkpoint.worker``): initialise the parameters
born sharded, so it materialises only its own devices' shards; save them with Orbax's
``StandardCheckpointer`` into the one folder the parent owns (Orbax writes
``ocdbt.process_<id>/`` per process and process 0 commits); restore onto the same shardings and
compare its own shards bit for bit. With a ``policy`` it saves through the ``ArrayHandler`` that
policy names, zstd off, and reports the bytes of the chunks it stored (``chunk_bytes``).

The request (JSON) holds what the single-process worker's does (``config``, ``dtype``, ``mesh``,
``specs``) plus ``process_id``, ``num_processes``, ``port``, ``checkpoint`` (the folder to save
into), ``connect_timeout_seconds`` and ``policy`` (None: Orbax's defaults). The parent has
validated all of it, removes the folder, and ends every process of the group if any one fails or
the group overruns its time limit.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from dcsim.checkpoint.worker import (
    Progress,
    _files,
    _peak_rss_bytes,
    init_params,
    restore_params,
    same_tree,
    save_params,
    stored_chunk_bytes,
)
from dcsim.model.config import ModelConfig

LOOPBACK = "127.0.0.1"
# Written into a failure's message when process 0 could not listen on the chosen port (another
# program took it after the parent's probe): the parent then tries again on a fresh port.
PORT_TAKEN = "coordinator port taken"
# A peer that stops answering is declared dead after this long (JAX's default is 100 s). The
# parent ends the whole group at once anyway; this bounds how long a group orphaned by a killed
# parent can wait on a dead peer.
HEARTBEAT_TIMEOUT_SECONDS = 30
_PARENT_POLL_SECONDS = 0.5


class CoordinatorPortTaken(RuntimeError):
    """Process 0 could not start the coordinator on the port it was given."""


def _watch_parent() -> None:
    """Exit if the parent dies: this process runs in a session of its own, so nobody else would end it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_SECONDS)
        os._exit(3)

    threading.Thread(target=watch, name="dcsim-parent-watch", daemon=True).start()


def _gloo_on_loopback() -> None:
    """Make gloo listen on 127.0.0.1, whatever this machine's host name resolves to.

    With ``jax_cpu_collectives_implementation=gloo`` JAX creates gloo without an address, and
    gloo then listens on the address the host name resolves to (a LAN address on many machines).
    JAX offers no public setting for it, so the CPU backend is registered again, before any
    backend starts, with gloo given the loopback address (jax 0.10's private API; see NOTES).
    """
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax

    def cpu_client() -> Any:
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname=LOOPBACK
        )
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)


def connect(process_id: int, num_processes: int, port: int, timeout_seconds: int) -> None:
    """Join JAX's distributed runtime as process ``process_id`` of ``num_processes``, the coordinator
    on 127.0.0.1:``port`` (process 0 runs it) and gloo on loopback; ``CoordinatorPortTaken`` if
    process 0 cannot listen there."""
    address = f"{LOOPBACK}:{port}"
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    _gloo_on_loopback()
    try:
        jax.distributed.initialize(
            coordinator_address=address,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_seconds,
            # JAX's default binds the coordinator to every interface ([::]:port): loopback only.
            coordinator_bind_address=address,
            heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_SECONDS,
        )
    except Exception as err:
        if process_id == 0 and "Failed to start RPC server" in str(err):
            raise CoordinatorPortTaken(f"{PORT_TAKEN}: could not listen on {address} ({err})") from None
        raise


def measure(request: dict[str, Any], progress: Any) -> dict[str, Any]:
    process_id = int(request["process_id"])
    num_processes = int(request["num_processes"])
    stage = Progress(progress, process_id)
    _watch_parent()
    stage("connecting")
    connect(process_id, num_processes, int(request["port"]), int(request["connect_timeout_seconds"]))

    config = ModelConfig.from_dict(request["config"])
    dtype = jnp.dtype(request["dtype"])
    axes = [(str(name), int(size)) for name, size in request["mesh"]]
    num_devices = int(np.prod([size for _, size in axes]))
    if jax.device_count() != num_devices or jax.local_device_count() * num_processes != num_devices:
        raise RuntimeError(
            f"asked for {num_devices} CPU devices over {num_processes} processes, JAX has {jax.device_count()} "
            f"with {jax.local_device_count()} on this process (XLA_FLAGS not applied?)"
        )
    # The idle baseline: imports done, the distributed runtime and the CPU backend up.
    baseline_rss = _peak_rss_bytes()
    mesh = jax.make_mesh([size for _, size in axes], [name for name, _ in axes])

    stage("initialising")
    initialised = init_params(config, dtype, mesh, request["specs"])
    params, shardings = initialised.params, initialised.shardings
    # Everyone starts the save together, so the group's save time is the save, not a peer's init.
    multihost_utils.sync_global_devices("dcsim: before save")

    path = Path(request["checkpoint"])
    stage("saving")
    # CLOCK_MONOTONIC is one clock for every process on this machine: the parent compares them.
    save_started = time.monotonic()
    policy = request.get("policy")
    save_params(path, params, policy)
    save_ended = time.monotonic()

    stage("measuring")
    # Orbax has committed on every process; process 0 lists the whole folder once for the group.
    files = _files(path) if process_id == 0 else []
    # With a policy (zstd off), the chunks this process stored in its own OCDBT database.
    chunk_bytes = None if policy is None else stored_chunk_bytes(path / f"ocdbt.process_{process_id}")

    stage("restoring")
    multihost_utils.sync_global_devices("dcsim: before restore")
    restore_started = time.monotonic()
    restored = restore_params(path, params, shardings)
    restore_ended = time.monotonic()

    stage("verifying")
    verified = same_tree(params, restored)
    del restored
    multihost_utils.sync_global_devices("dcsim: verified")
    jax.distributed.shutdown()
    stage("done")
    return {
        "process_id": process_id,
        "num_processes": num_processes,
        "num_devices": num_devices,
        "num_local_devices": jax.local_device_count(),
        "raw_payload_bytes": int(initialised.raw_payload_bytes),
        "device_bytes": int(initialised.device_bytes),
        "files": files,
        "chunk_bytes": chunk_bytes,
        "init_seconds": initialised.init_seconds,
        "save_seconds": save_ended - save_started,
        "restore_seconds": restore_ended - restore_started,
        "save_started": save_started,
        "save_ended": save_ended,
        "restore_started": restore_started,
        "restore_ended": restore_ended,
        "restore_verified": bool(verified),
        "baseline_rss_bytes": baseline_rss,
        "peak_rss_bytes": _peak_rss_bytes(),
        "peak_rss_before_stage": stage.peaks,
        "versions": {"jax": jax.__version__, "orbax-checkpoint": ocp.__version__},
    }
