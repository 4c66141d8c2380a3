"""The child process of ``dcsim.serving.verify``: ``python -m dcsim.serving.verify_child REQUEST RESULT PROGRESS``.

It builds the model in decode mode (``dcsim.model.cache.Decode``), gives every parameter and
cache array its ``NamedSharding`` on a real ``jax.sharding.Mesh`` of virtual CPU devices, and
compiles, never runs, one decoding step: a new token for every sequence, against the cache at the
context, the cache donated (a server updates it in place). It reports XLA's memory analysis per
device: the arguments (weights, cache, fixed state and the step's tokens) and the temporaries (the
decode workspace of a CPU compile). The device count must be set before JAX starts, so this runs
in a fresh interpreter.

The request: ``config`` (the model, as ``ModelConfig.to_dict`` writes it), ``hparams`` (what the
layout changed: the vocabulary padded, the KV heads repeated to the tensor size), ``decode``,
``sequences``, ``mesh`` (``[[axis, size], ...]``), ``replicas`` (the axes the sequences split over),
``weights`` (the weights' dtype) and ``specs`` (``{path: spec}`` for every parameter and cache array,
each entry null, an axis or a list of axes). The result is XLA's bytes of one device,
``{"argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"}``, and ``num_arrays``, or
``{"error": message}``.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import jax
import jax.numpy as jnp
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from dcsim.model import families, presets
from dcsim.model.cache import CACHE, Decode
from dcsim.model.config import ModelConfig
from dcsim.runtime import workers
from dcsim.sharding.wire import device_mesh, spec_from_json

MODULE = "dcsim.serving.verify_child"
STAGES = ("building", "lowering", *workers.ANALYSIS_STAGES)
PARAMS = "params"


def step_bytes(request: dict[str, Any], progress: TextIO) -> dict[str, Any]:
    """Compile the decoding step the request describes; XLA's bytes per device."""
    workers.write_stage(progress, STAGES[0])
    config = ModelConfig.from_dict(request["config"])
    hparams = presets.resolved_hparams(config) | dict(request["hparams"])
    decode = Decode(**request["decode"])
    sequences = int(request["sequences"])
    module, inputs = families.build_family(config.family or "", hparams, sequences, decode=decode)
    abstract = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)
    mesh = device_mesh(request["mesh"])
    specs = request["specs"]
    weights = jnp.dtype(request["weights"])

    def placed(collection: str, tree: Any) -> Any:
        flat = traverse_util.flatten_dict(tree)
        out = {}
        for key, leaf in flat.items():
            path = "/".join(str(part) for part in key)
            spec = spec_from_json(specs[path]) if path in specs else PartitionSpec()
            if collection != CACHE and path not in specs and collection == PARAMS:
                raise RuntimeError(f"the layout has no spec for the parameter `{path}`")
            dtype = weights if collection == PARAMS else leaf.dtype
            out[key] = jax.ShapeDtypeStruct(leaf.shape, dtype, sharding=NamedSharding(mesh, spec))
        return traverse_util.unflatten_dict(out)

    fixed = {name: placed(name, tree) for name, tree in abstract.items() if name != CACHE}
    cache = placed(CACHE, abstract[CACHE])
    replicas = request["replicas"]
    token_spec = PartitionSpec(tuple(replicas) if len(replicas) > 1 else (replicas[0] if replicas else None))
    token = jax.ShapeDtypeStruct((sequences, 1), jnp.int32, sharding=NamedSharding(mesh, token_spec))
    tokens = (token,) * len(inputs)  # T5 takes the source too: one token stands for it (its encoder does not run)

    def step(fixed: Any, cache: Any, *tokens: Any) -> Any:
        return module.apply({**fixed, CACHE: cache}, *tokens, mutable=[CACHE])

    workers.write_stage(progress, STAGES[1])
    # keep_unused: a decoding step does not read the encoder (T5), but the server holds its weights
    lowered = jax.jit(step, donate_argnums=(1,), keep_unused=True).lower(fixed, cache, *tokens)
    analysis = workers.memory_analysis(lowered, progress, "the decoding step")
    return {
        **analysis,
        "num_arrays": len(jax.tree.leaves(fixed)) + len(jax.tree.leaves(cache)),
    }


def main(argv: list[str]) -> int:
    """Run one check; returns the exit code (0: a result, 1: an error message in the result)."""
    return workers.check_child_main(argv, MODULE, step_bytes, "XLA could not compile the decoding step")


if __name__ == "__main__":
    workers.exit_child(main(sys.argv[1:]))
