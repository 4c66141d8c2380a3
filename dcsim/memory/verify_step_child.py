"""The child of ``dcsim.memory.verify_step``: ``python -m dcsim.memory.verify_step_child REQUEST RESULT PROGRESS``.

It builds the model's whole training step (the unrolled model with its blocks under the remat
policy, the flash or naive attention, the float32 cross-entropy, ``jax.value_and_grad``, the optax
update, a master copy when the setup keeps one) on a real ``jax.sharding.Mesh`` of virtual CPU
devices, with the state's shardings from dcsim's layout and the batch split over the data axes,
the state donated; it lowers and compiles the step, never runs it, and reports
``compiled.memory_analysis()``'s argument, output, temporary and aliased bytes of one device, with
the largest buffers of its optimised HLO (``dcsim.memory.buffers``), its ``cost_analysis()``
FLOPs (one device's program) and its collectives (``dcsim.memory.hlo_collectives``).

The request: ``config`` (the configuration's JSON), ``step`` (``dcsim.memory.activations.Step``'s
fields), ``training`` (optimizer, param, grad and master dtypes), ``mesh`` ``[[axis, size], ...]``
and ``specs``: ``{part: {path: spec}}`` for params and master, each spec entry null, an axis name
or a list of names; ``optimizer_split``: whether the optimizer state follows its parameter's spec.
"""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from dcsim.memory import buffers, hlo_collectives
from dcsim.runtime import workers
from dcsim.sharding.wire import device_mesh, spec_from_json

MODULE = "dcsim.memory.verify_step_child"
STAGES = ("building", "lowering", *workers.ANALYSIS_STAGES)
TENSOR_AXIS = "model"


def _path(keys: Any) -> str:
    return "/".join(str(key.key) for key in keys if hasattr(key, "key"))


def _tensor_split(spec: PartitionSpec) -> PartitionSpec:
    """``spec`` with only its tensor-parallel axis left: the parameter as a step computes with it,
    gathered over every other axis."""

    def kept(entry: Any) -> Any:
        names = tuple(name for name in ((entry,) if isinstance(entry, str) else entry or ()) if name == TENSOR_AXIS)
        return names[0] if names else None

    return PartitionSpec(*(kept(entry) for entry in spec))


def step_memory(request: dict[str, Any], progress: TextIO) -> dict[str, Any]:
    """Compile the training step the request describes; XLA's memory analysis of one device."""
    import optax

    from dcsim.memory.activations import Step, cross_entropy
    from dcsim.model import families, optimizer, presets
    from dcsim.model.config import ModelConfig
    from dcsim.model.forward import Forward

    workers.write_stage(progress, STAGES[0])
    config = ModelConfig.from_json(request["config"])
    step = Step(**request["step"])
    training = request["training"]
    mesh = device_mesh(request["mesh"])
    whole = NamedSharding(mesh, PartitionSpec())
    family = config.family
    if family is None:
        raise ValueError("the Dense stack has no training step here")
    forward = Forward(
        attention=step.attention,
        dispatch="dropless" if step.capacity_factor is None else "capacity",
        capacity_factor=step.capacity_factor or 1.0,
        remat=step.remat,
    )
    hparams = presets.resolved_hparams(config)
    module, init_inputs = families.build_family(family, hparams, 1, forward=forward)
    abstract = jax.eval_shape(module.init, jax.random.PRNGKey(0), *init_inputs)["params"]
    compute = jnp.dtype(step.compute_dtype)

    def laid_out(tree: Any, part: str, dtype: str) -> Any:
        specs = request["specs"][part]

        def leaf(keys: Any, value: Any) -> Any:
            sharding = NamedSharding(mesh, spec_from_json(specs[_path(keys)]))
            return jax.ShapeDtypeStruct(value.shape, jnp.dtype(dtype), sharding=sharding)

        return jax.tree_util.tree_map_with_path(leaf, tree)

    params = laid_out(abstract, "params", training["param_dtype"])
    master_dtype = training["master_dtype"]
    master = None if master_dtype is None else laid_out(abstract, "master", master_dtype)
    tx = optimizer.OPTIMIZERS[training["optimizer"]][1]()
    held = master if master is not None else params
    state = jax.eval_shape(tx.init, held)
    param_specs = {
        _path(keys): (value.shape, value.sharding) for keys, value in jax.tree_util.tree_leaves_with_path(held)
    }

    def state_leaf(keys: Any, value: Any) -> Any:
        found = param_specs.get(_path(keys))
        split = request["optimizer_split"] and found is not None and found[0] == value.shape
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=found[1] if split and found else whole)

    state = jax.tree_util.tree_map_with_path(state_leaf, state)
    replicas = [name for name in mesh.axis_names if name != TENSOR_AXIS]
    batch = step.micro_batch * math.prod(mesh.shape[name] for name in replicas)
    tokens = jax.ShapeDtypeStruct(
        (batch, step.sequence),
        jnp.int32,
        sharding=NamedSharding(mesh, PartitionSpec(tuple(replicas) if replicas else None)),
    )
    grad_dtype = jnp.dtype(training["grad_dtype"] or training["param_dtype"])

    # ZeRO-3 and fsdp gather each parameter where it is used and keep the batch split. Left to
    # itself, GSPMD followed the parameters' data-axis split instead and gathered the activations:
    # GPT-2 small's float32 logits then held the whole global batch on every device.
    gathered = jax.tree_util.tree_map(lambda leaf: NamedSharding(mesh, _tensor_split(leaf.sharding.spec)), params)

    def loss_of(p: Any, ids: Any) -> Any:
        cast = jax.tree_util.tree_map(
            lambda leaf, where: jax.lax.with_sharding_constraint(leaf.astype(compute), where), p, gathered
        )
        logits: Any = module.apply({"params": cast}, ids)
        return cross_entropy(logits, ids)

    def train_step(p: Any, m: Any, s: Any, ids: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_of)(p, ids)
        grads = jax.tree_util.tree_map(lambda g: g.astype(grad_dtype), grads)
        target = p if m is None else m
        grads = jax.tree_util.tree_map(lambda g, t: g.astype(t.dtype), grads, target)
        updates, s = tx.update(grads, s, target)
        target = optax.apply_updates(target, updates)
        if m is None:
            return target, None, s, loss
        return jax.tree_util.tree_map(lambda t, q: t.astype(q.dtype), target, p), target, s, loss

    def shardings(tree: Any) -> Any:
        return None if tree is None else jax.tree_util.tree_map(lambda leaf: leaf.sharding, tree)

    out_shardings = (shardings(params), shardings(master), shardings(state), whole)
    workers.write_stage(progress, STAGES[1])
    lowered = jax.jit(train_step, out_shardings=out_shardings, donate_argnums=(0, 1, 2)).lower(
        params, master, state, tokens
    )
    analysis, compiled = workers.compiled_memory_analysis(lowered, progress, "the compiled step")
    text = compiled.as_text() or ""
    largest = buffers.largest_buffers(text)
    cost = compiled.cost_analysis() or {}
    found = hlo_collectives.collectives(text, [(name, int(mesh.shape[name])) for name in mesh.axis_names])
    return {
        **analysis,
        "largest_buffers": [buffers.buffer_record(buffer) for buffer in largest],
        "flops": int(cost.get("flops", -1)),
        "collectives": [hlo_collectives.collective_record(row) for row in found],
        "num_devices": mesh.size,
        "global_batch": batch,
    }


def main(argv: list[str]) -> int:
    return workers.check_child_main(argv, MODULE, step_memory, "XLA could not compile the training step")


if __name__ == "__main__":
    workers.exit_child(main(sys.argv[1:]))
