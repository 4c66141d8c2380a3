"""Training activations per device, exact from JAX's own autodiff: the residuals the forward pass
saves for the backward pass, under the remat policy the training code applies.

Why not a formula: the published ones (Korthikanti et al. 2022, and the calculators built on them)
assume GPT blocks (GeLU over 4h, dropout, LayerNorm, every head its own keys and values) and know
nothing of SwiGLU, grouped-query attention, routed experts or the remat policy actually used. JAX
knows: ``jax.vjp`` returns a closure whose leaves are exactly what the backward pass will read.
``jax.make_jaxpr`` of a function returning those leaves traces the forward abstractly (no memory
for values, no device) and names each residual's producer, so dcsim keeps the ones that depend on
the batch: the parameters, and everything computed from them alone (a cast norm scale, a
transposed tied table), are state, not activations, and would make the figure not linear in the
micro-batch. (``jax._src.ad_checkpoint.saved_residuals`` traces the same jaxpr; it labels
residuals but does not follow what they are computed from.)

How a step is traced:

- **Per block, once a set.** A decoder's blocks are built alike, so one block of each set is traced
  (``dcsim.model.families.traced_hparams``, as counting does) and its figure repeated: Llama 2
  70B's 80 blocks cost one (two members built and fed alike are traced once). A block is traced
  alone, as ``nn.remat(Block, policy=...)`` applies the policy, on the input the model gives it.
- **Outside the blocks**: the embedding, the final norm and the output projection, traced as the
  same model without blocks; the output projection's logits go to **the loss**, traced apart:
  the logits cast to float32 and optax's softmax cross-entropy on integer labels, the usual recipe.
- **The compute dtype**: the parameters (in the state's dtype) are cast to it inside the traced
  step, so the residual stream is kept in it; the casts depend on the parameters alone and are
  not counted.
- **Per device**: the micro-batch is per data-parallel replica, so data and fsdp axes change
  nothing. A ``model`` axis of size t is Megatron's tensor parallelism: each device traces the
  block it runs, with heads, KV heads (at least one each), the feed-forward widths and the
  vocabulary divided by t. ``sequence_parallel`` splits the rest (the residual stream, norms,
  embeddings and the inputs of the first projections, everything produced outside the attention,
  MLP and expert modules) over the sequence too.

Bytes are Python ints: each residual's values times its dtype's size.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

# The step's request and its checks are JAX-free (``dcsim.memory.step``), the paper's formula too
# (``dcsim.memory.formula``), and the jaxpr's residuals and FLOPs are ``dcsim.memory.residuals``';
# their names stay importable from here, where the trace that uses them is.
from dcsim.memory.flops import StepFlops
from dcsim.memory.formula import formula_note as formula_note
from dcsim.memory.formula import korthikanti_bytes as korthikanti_bytes
from dcsim.memory.residuals import Dim as Dim
from dcsim.memory.residuals import Residual as Residual
from dcsim.memory.residuals import Saved as Saved
from dcsim.memory.residuals import _size as _size
from dcsim.memory.residuals import jaxpr_flops as jaxpr_flops
from dcsim.memory.residuals import saved_shapes as saved_shapes
from dcsim.memory.residuals import step_flops as step_flops
from dcsim.memory.step import ATTENTION_HELP as ATTENTION_HELP
from dcsim.memory.step import ATTENTION_KINDS as ATTENTION_KINDS
from dcsim.memory.step import COMPUTE_DTYPES as COMPUTE_DTYPES
from dcsim.memory.step import MAX_MICRO_BATCH as MAX_MICRO_BATCH
from dcsim.memory.step import POLICY_HELP as POLICY_HELP
from dcsim.memory.step import Step as Step
from dcsim.memory.step import check_capacity_factor as check_capacity_factor
from dcsim.memory.step import check_choice as check_choice
from dcsim.memory.step import check_for_model, split_hparams
from dcsim.memory.step import check_micro_batch as check_micro_batch
from dcsim.memory.step import check_sequence as check_sequence
from dcsim.memory.step import micro_batch_from_text as micro_batch_from_text
from dcsim.memory.step import sequence_from_text as sequence_from_text
from dcsim.model import families, presets, registry
from dcsim.model.config import ModelConfig
from dcsim.model.forward import REMAT_POLICIES
from dcsim.sharding.megatron import TENSOR_AXIS
from dcsim.sharding.meshes import MeshSpec

# The policies, by name: ``dcsim.model.forward.REMAT_POLICIES`` (MaxText's ``minimal`` keeps the
# projections the modules name with ``checkpoint_name``).
POLICIES: Mapping[str, Callable[..., Any] | None] = REMAT_POLICIES
LOSS_DTYPE = "float32"

# What runs inside Megatron's tensor-parallel regions of a block (split over ``model`` by heads or
# by width); everything else in a block is the replicated residual stream.
TENSOR_PARALLEL_MODULES = ("attn", "mlp", "moe", "self_attn", "cross_attn", "lm_head")


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """The loss as the usual recipe computes it: the logits cast to float32, optax's softmax
    cross-entropy on integer labels, the mean over tokens."""
    import optax  # loaded with the first trace, not with the command line

    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()


# --- the model's step ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockRow:
    """What one block (or the part outside the blocks) keeps for the backward pass on a device."""

    path: str
    residuals: int
    bytes: int

    @classmethod
    def of(cls, path: str, saved: tuple[Residual, ...]) -> BlockRow:
        """The row of the residuals ``saved`` at ``path``: how many, and their bytes on a device."""
        return cls(path=path, residuals=len(saved), bytes=sum(r.bytes_per_device for r in saved))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActivationReport:
    """The activations of one training step on the most-loaded device.

    Attributes:
      step: the step traced.
      tensor_parallel: the ``model`` axis size t the blocks were split over (1: none).
      blocks: every block, in order, then ``outside`` (the embedding, final norm and output
        projection): bytes and residuals a device keeps.
      outside: the row outside the blocks.
      loss_bytes: the loss's residuals (the float32 logits and what cross-entropy keeps).
      traced: the residuals of each block traced, by path (the others repeat them).
      korthikanti_bytes: Korthikanti et al.'s formula for the same step, or None where the paper
        has no counterpart (dots, dots-no-batch, minimal).
      formula_note: why the two differ for this model, in a line.
      seconds: the time the traces took.
    """

    step: Step
    tensor_parallel: int
    blocks: tuple[BlockRow, ...]
    outside: BlockRow
    loss_bytes: int
    loss_residuals: tuple[Residual, ...]
    traced: Mapping[str, tuple[Residual, ...]]
    korthikanti_bytes: int | None
    formula_note: str
    seconds: float
    routed: bool = False  # the model has routed experts (dispatched as ``step.dispatch_text`` says)
    recompute_fraction: float | None = None  # the policy's extra block FLOPs over the no-remat step's
    flops: StepFlops | None = None  # the device's step by part (``with_recompute``)
    # each block's FLOPs in order and those outside the blocks with the loss (``with_recompute``)
    flops_parts: tuple[tuple[StepFlops, ...], StepFlops] | None = None

    @property
    def blocks_bytes(self) -> int:
        return sum(row.bytes for row in self.blocks)

    @property
    def bytes_per_device(self) -> int:
        """Everything a device keeps for the backward pass: the blocks, outside them, the loss."""
        return self.blocks_bytes + self.outside.bytes + self.loss_bytes


def tensor_parallel_size(mesh: MeshSpec | None) -> int:
    """The ``model`` axis's size (1 without one)."""
    if mesh is None:
        return 1
    return dict(mesh.axes).get(TENSOR_AXIS, 1)


def _cast(tree: Any, dtype: Any) -> Any:
    return jax.tree_util.tree_map(lambda leaf: leaf.astype(dtype), tree)


def _abstract(tree: Any, dtype: str) -> Any:
    return jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, jnp.dtype(dtype)), tree)


def check_traceable(config: ModelConfig, step: Step, mesh: MeshSpec | None = None) -> dict[str, Any]:
    """The model's hyperparameters, once the step is checked against them and the mesh's ``model``
    axis (``dcsim.memory.step.check_for_model``). Raises ValueError naming the rule and the value."""
    return check_for_model(config, step, (TENSOR_AXIS, tensor_parallel_size(mesh)))


def local_hparams(family: registry.Family, hparams: Mapping[str, Any], t: int) -> dict[str, Any]:
    """The block one device of a ``model`` axis of ``t`` runs (``dcsim.memory.step.split_hparams``)."""
    return split_hparams(family, hparams, TENSOR_AXIS, t)


def trace_activations(
    config: ModelConfig,
    step: Step,
    param_dtype: str = "bfloat16",
    mesh: MeshSpec | None = None,
    with_recompute: bool = False,
) -> ActivationReport:
    """The residuals a training step of ``config`` keeps on the most-loaded device of ``mesh``:
    each set of blocks built alike traced once (its first two members, as counting does, the second
    skipped when it is built and fed as the first is), the part
    outside the blocks and the loss traced apart, every figure from the model's real trace.
    ``with_recompute``: also what the policy recomputes, as a fraction of a block's forward and
    backward FLOPs without remat (``step_flops``; two more traces of one block, symbolic as the
    rest where the model allows).

    The trace is shape-polymorphic where the model allows: the micro-batch and the sequence are
    the symbols ``b`` and ``s``, the residuals' sizes polynomials in them, so one trace (kept for
    the process) gives every sequence and micro-batch exactly, and a page's new sequence costs no
    new trace. A model whose forward needs them concrete (a chunked attention's reshape) is traced
    at the step's own values."""
    start = time.perf_counter()
    hparams = check_traceable(config, step, mesh)
    t = tensor_parallel_size(mesh)
    traced = _symbolic_trace(config, _shapeless(step), param_dtype, t, with_recompute)
    if traced is None:
        traced = _trace_step(config, step, param_dtype, t, step.micro_batch, step.sequence, with_recompute)
    b, s = step.micro_batch, step.sequence
    blocks = {path: tuple(row.at(b, s) for row in saved) for path, saved in traced.blocks.items()}
    rows: dict[int, BlockRow] = {}
    for run in traced.runs:
        last = min(len(run.members), families.TRACED_PER_RUN) - 1
        for index, member in enumerate(run.members):
            saved = blocks[run.path(min(index, last))]
            rows[member] = BlockRow.of(run.path(index), saved)
    outside = tuple(row.at(b, s) for row in traced.outside)
    loss = tuple(row.at(b, s) for row in traced.loss)
    return ActivationReport(
        step=step,
        tensor_parallel=t,
        blocks=tuple(rows[index] for index in sorted(rows)),
        outside=BlockRow.of(traced.outside_names, outside),
        loss_bytes=sum(r.bytes_per_device for r in loss),
        loss_residuals=loss,
        traced=blocks,
        korthikanti_bytes=korthikanti_bytes(hparams, step, t),
        formula_note=formula_note(registry.family_of(config), hparams, step),
        seconds=time.perf_counter() - start,
        routed=registry.family_of(config).trains_experts,
        recompute_fraction=traced.recompute_at(b, s),
        flops=traced.flops_at(b, s),
        flops_parts=traced.flops_parts_at(b, s),
    )


@dataclasses.dataclass(frozen=True)
class _StepTrace:
    """A step's residuals as traced, before their sizes are evaluated (``Saved``)."""

    runs: tuple[Any, ...]  # families.traced_hparams' runs: which traced block each member repeats
    blocks: Mapping[str, tuple[Saved, ...]]
    outside: tuple[Saved, ...]
    outside_names: str
    loss: tuple[Saved, ...]
    recompute_flops: tuple[Dim, Dim] | None  # a block's step FLOPs without and with the policy, if asked
    # Each traced block's (forward, step without remat, step with the policy) FLOPs, and the part
    # outside the blocks with the loss (forward, step), if asked; the policy applies to blocks only.
    block_flops: Mapping[str, tuple[Dim, Dim, Dim]] | None = None
    outside_flops: tuple[Dim, Dim] | None = None
    tensor_parallel: int = 1

    def flops_at(self, micro_batch: int, sequence: int) -> StepFlops | None:
        """The whole step's FLOPs on a device, every block counted (each repeats its traced one)."""
        parts = self.flops_parts_at(micro_batch, sequence)
        if parts is None:
            return None
        blocks, outside = parts
        return StepFlops(
            forward=outside.forward + sum(block.forward for block in blocks),
            backward=outside.backward + sum(block.backward for block in blocks),
            recompute=outside.recompute + sum(block.recompute for block in blocks),
            tokens=micro_batch * sequence,
            tensor_parallel=self.tensor_parallel,
        )

    def flops_parts_at(self, micro_batch: int, sequence: int) -> tuple[tuple[StepFlops, ...], StepFlops] | None:
        """Each block's FLOPs on a device, in the model's order, and those outside the blocks with
        the loss: what a pipeline stage adds up for its own blocks (``dcsim.speed.pipeline``)."""
        if self.block_flops is None or self.outside_flops is None:
            return None
        env = {"b": micro_batch, "s": sequence}
        tokens = micro_batch * sequence

        def flops(forward: int, plain: int, remat: int) -> StepFlops:
            return StepFlops(
                forward=forward,
                backward=plain - forward,
                recompute=remat - plain,
                tokens=tokens,
                tensor_parallel=self.tensor_parallel,
            )

        outside = flops(*(_size(counted, env) for counted in self.outside_flops + self.outside_flops[1:]))
        rows: dict[int, StepFlops] = {}
        for run in self.runs:
            last = min(len(run.members), families.TRACED_PER_RUN) - 1
            for index, member in enumerate(run.members):
                rows[member] = flops(*(_size(counted, env) for counted in self.block_flops[run.path(min(index, last))]))
        return tuple(rows[index] for index in sorted(rows)), outside

    def recompute_at(self, micro_batch: int, sequence: int) -> float | None:
        """What the policy recomputes, as a fraction of a block's step FLOPs without remat."""
        if self.recompute_flops is None:
            return None
        env = {"b": micro_batch, "s": sequence}
        plain, remat = (_size(flops, env) for flops in self.recompute_flops)
        return (remat - plain) / plain if plain else 0.0


def _shapeless(step: Step) -> Step:
    """The step as the symbolic trace's cache key: its micro-batch and sequence set to 1 (they are
    symbols in the trace)."""
    return dataclasses.replace(step, micro_batch=1, sequence=1)


@functools.lru_cache(maxsize=64)
def _symbolic_trace(
    config: ModelConfig, step: Step, param_dtype: str, t: int, with_recompute: bool
) -> _StepTrace | None:
    """The step traced once with a symbolic micro-batch and sequence, or None where the forward
    needs them concrete (JAX refuses a shape it cannot decide symbolically: a reshape into chunks,
    a comparison with a window)."""
    from jax import export

    b, s = export.symbolic_shape("b, s")
    try:
        return _trace_step(config, step, param_dtype, t, b, s, with_recompute)
    except Exception:  # whatever a symbolic shape breaks, the concrete trace is exact
        return None


def _trace_step(
    config: ModelConfig, step: Step, param_dtype: str, t: int, b: Dim, s: Dim, with_recompute: bool
) -> _StepTrace:
    """Trace ``config``'s training step on a device of a ``model`` axis of size ``t`` for a
    micro-batch ``b`` of sequences ``s`` tokens long (ints, or ``jax.export`` symbols)."""
    hparams = presets.resolved_hparams(config)
    family = config.family
    assert family is not None  # check_traceable refuses the Dense stack
    local = local_hparams(registry.get(family), hparams, t)
    forward = step.forward
    compute = jnp.dtype(step.compute_dtype)
    sp = t if step.sequence_parallel else 1

    def block_split(where: str) -> int:
        return 1 if where.split("/", 1)[0] in TENSOR_PARALLEL_MODULES else sp

    traced_h, runs = families.traced_hparams(family, local)
    module, inputs = families.build_family(family, traced_h, 1, forward=forward)
    wanted = {run.path(i) for run in runs for i in range(min(len(run.members), families.TRACED_PER_RUN))}
    found: dict[str, tuple[nn.Module, tuple[Any, ...]]] = {}

    def capture(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
        path = "/".join(context.module.path)
        if context.method_name == "__call__" and path in wanted and path not in found:
            found[path] = (context.module.clone(parent=None, name=None), tuple(args))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(capture):
        variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)
    params = _abstract(variables["params"], param_dtype)
    # Other collections (DeepSeek-V3's router bias in ``buffers``) go in as they are: read, not
    # trained, and never batch-dependent, so never activations.
    others = {name: tree for name, tree in variables.items() if name != "params"}
    policy = POLICIES[step.remat]
    traced: dict[str, tuple[Saved, ...]] = {}
    recompute: tuple[Dim, Dim] | None = None
    # Members built the same (equal modules on equal inputs: a decoder's first block and its
    # second) are traced once; counting's rule traces both in case the first differs.
    alike: dict[Any, tuple[Saved, ...]] = {}
    alike_of: dict[str, Any] = {}
    block_flops: dict[str, tuple[Dim, Dim, Dim]] = {}
    for path, (block, args) in found.items():
        same = (block, tuple((arg.shape, str(arg.dtype)) for arg in args), jax.tree_util.tree_structure(params[path]))
        if same in alike:
            traced[path] = alike[same]
            if with_recompute:
                block_flops[path] = next(block_flops[other] for other in block_flops if alike_of[other] == same)
            alike_of[path] = same
            continue
        alike_of[path] = same

        def apply(p: Any, x: Any, block: nn.Module = block) -> Any:
            return block.apply({**p[1], "params": _cast(p[0], compute)}, x)

        x = jax.ShapeDtypeStruct((b, s, *args[0].shape[2:]), compute)
        fn = apply if policy is None else jax.checkpoint(apply, policy=policy)
        held = (params[path], {name: tree[path] for name, tree in others.items() if path in tree})
        traced[path] = alike[same] = saved_shapes(fn, held, x, split=block_split, sequence=s, micro_batch=b)
        if with_recompute:
            plain = step_flops(apply, held, x)
            remat = plain if policy is None else step_flops(fn, held, x)
            block_flops[path] = (jaxpr_flops(jax.make_jaxpr(apply)(held, x).jaxpr), plain, remat)
            if recompute is None:
                recompute = (0, 0) if policy is None else (plain, remat)
    # Outside the blocks: the same model with none (the embedding, the final norm, the output layer).
    bare = registry.get(family).without_blocks(local)
    outer, _ = families.build_family(family, bare, 1, forward=forward)
    outer_params = _abstract(jax.eval_shape(outer.init, jax.random.PRNGKey(0), *inputs)["params"], param_dtype)
    tokens = jax.ShapeDtypeStruct((b, s), jnp.int32)

    def logits_of(p: Any, ids: Any) -> Any:
        return outer.apply({"params": _cast(p, compute)}, ids)

    outside = saved_shapes(logits_of, outer_params, tokens, split=lambda where: sp, sequence=s, micro_batch=b)
    logits = jax.eval_shape(logits_of, outer_params, tokens)
    loss = saved_shapes(
        lambda _, z, labels: cross_entropy(z, labels),
        {},
        jax.ShapeDtypeStruct(logits.shape, logits.dtype),
        tokens,
        sequence=s,
        micro_batch=b,
    )
    names = ", ".join(name for name in ("embed", "final_norm", "lm_head") if name in outer_params)
    outside_flops = None
    if with_recompute:

        def head_loss(p: Any, ids: Any) -> Any:
            return cross_entropy(logits_of(p, ids), ids)

        def head_step(p: Any, ids: Any) -> Any:
            loss_value, pullback = jax.vjp(lambda q: head_loss(q, ids), p)
            return pullback(jnp.ones_like(loss_value))

        outside_flops = (
            jaxpr_flops(jax.make_jaxpr(head_loss)(outer_params, tokens).jaxpr),
            jaxpr_flops(jax.make_jaxpr(head_step)(outer_params, tokens).jaxpr),
        )
    return _StepTrace(
        runs=tuple(runs),
        blocks=traced,
        outside=outside,
        outside_names=names,
        loss=loss,
        recompute_flops=recompute,
        block_flops=block_flops if with_recompute else None,
        outside_flops=outside_flops,
        tensor_parallel=t,
    )


# --- the paper's formula, beside it ----------------------------------------------------------------


# --- records --------------------------------------------------------------------------------------


def activations_record(report: ActivationReport) -> dict[str, Any]:
    """The ``activations`` JSON object (keys in docs/memory.md)."""
    step = report.step
    return {
        "bytes_per_device": report.bytes_per_device,
        "policy": step.remat,
        "attention": step.attention,
        "sequence": step.sequence,
        "micro_batch": step.micro_batch,
        "compute_dtype": step.compute_dtype,
        "sequence_parallel": step.sequence_parallel,
        "tensor_parallel": report.tensor_parallel,
        "capacity_factor": step.capacity_factor,
        "dispatch": step.dispatch_text if report.routed else None,
        "korthikanti_bytes_per_device": report.korthikanti_bytes,
        "formula_note": report.formula_note,
        "loss_bytes_per_device": report.loss_bytes,
        "recompute_fraction": None if report.recompute_fraction is None else round(report.recompute_fraction, 4),
        "loss": f"logits cast to {LOSS_DTYPE}, softmax cross-entropy on integer labels (optax)",
        "blocks": [
            {"path": row.path, "residuals": row.residuals, "bytes": row.bytes}
            for row in (*report.blocks, report.outside)
        ],
        "seconds": round(report.seconds, 3),
    }


def cached_trace(
    config: ModelConfig, step: Step, param_dtype: str, mesh: MeshSpec | None, with_recompute: bool = False
) -> ActivationReport:
    """``trace_activations``, remembered: a budget search asks for the same figure on many meshes,
    and only the ``model`` axis changes it."""
    return _trace_on(config, step, param_dtype, tensor_parallel_size(mesh), with_recompute)


@functools.lru_cache(maxsize=64)
def _trace_on(config: ModelConfig, step: Step, param_dtype: str, t: int, with_recompute: bool) -> ActivationReport:
    return trace_activations(config, step, param_dtype, MeshSpec(((TENSOR_AXIS, t),)), with_recompute)
