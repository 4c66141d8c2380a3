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
import math
import operator
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from dcsim.inputs import as_int, check_choice, number_from_text, show
from dcsim.model import families, presets, registry
from dcsim.model.config import ModelConfig
from dcsim.model.flash import FLASH_BACKWARD, FLASH_FORWARD
from dcsim.model.forward import ATTENTION_KINDS, REMAT_POLICIES, Forward
from dcsim.model.hparams import MAX_POSITIONS
from dcsim.sharding.megatron import TENSOR_AXIS
from dcsim.sharding.meshes import MeshSpec

# The policies, by name: ``dcsim.model.forward.REMAT_POLICIES`` (MaxText's ``minimal`` keeps the
# projections the modules name with ``checkpoint_name``).
POLICIES: Mapping[str, Callable[..., Any] | None] = REMAT_POLICIES
POLICY_HELP = {
    "none": "no remat: every residual the backward pass reads is kept; no forward is recomputed",
    "full": "nothing_saveable: each block keeps only its input and recomputes its whole forward in the backward",
    "dots": "dots_saveable: the outputs of every matmul are kept (attention's score and value products too), "
    "the elementwise work between them recomputed",
    "dots-no-batch": "dots_with_no_batch_dims_saveable: the outputs of matmuls without batch dimensions (the "
    "projections) are kept; attention's batched products and the elementwise work are recomputed",
    "minimal": "MaxText's minimal: the named projections (query, key, value, out, the MLP's in and out) are kept; "
    "attention and the elementwise work are recomputed",
}
ATTENTION_HELP = {
    "flash": "a blockwise kernel (FlashAttention, cuDNN, Pallas splash): q, k, v, the output and the "
    "log-sum-exp are saved, never the s x s probabilities",
    "naive": "softmax attention as written: the s x s probabilities are saved, the term quadratic in the sequence",
}
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
MAX_MICRO_BATCH = 1 << 16  # sequences a replica a step; past any real run, small enough to trace
LOSS_DTYPE = "float32"

# What runs inside Megatron's tensor-parallel regions of a block (split over ``model`` by heads or
# by width); everything else in a block is the replicated residual stream.
TENSOR_PARALLEL_MODULES = ("attn", "mlp", "moe", "self_attn", "cross_attn", "lm_head")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_sequence(value: Any, label: str = "the sequence", shown: Any = None) -> int:
    return as_int(value, label, minimum=1, maximum=MAX_POSITIONS, why="tokens a sequence", shown=shown)


def check_micro_batch(value: Any, label: str = "the micro-batch", shown: Any = None) -> int:
    return as_int(
        value, label, minimum=1, maximum=MAX_MICRO_BATCH, why="sequences a data-parallel replica a step", shown=shown
    )


def sequence_from_text(text: str, label: str) -> int:
    """A sequence as typed (a flag, a link field), checked under ``label``: ``'4096'``, ``'4e3'``."""
    return check_sequence(number_from_text(text.strip()), label, shown=text)


def micro_batch_from_text(text: str, label: str) -> int:
    """A micro-batch as typed (a flag, a link field), checked under ``label``."""
    return check_micro_batch(number_from_text(text.strip()), label, shown=text)


def check_capacity_factor(value: Any, label: str = "the capacity factor") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{label} must be a number from 0.01 to 64 (or none: dropless), got {show(value)}")
    if not 0.01 <= value <= 64:
        raise ValueError(f"{label} must be a number from 0.01 to 64 (or none: dropless), got {show(value)}")
    return float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One training step's shape and how it is computed.

    Attributes:
      sequence: tokens a sequence.
      micro_batch: sequences a data-parallel replica a step (not the global batch).
      remat: a key of ``POLICIES``, applied to every block.
      attention: ``flash`` or ``naive`` (``ATTENTION_HELP``).
      compute_dtype: the dtype the forward runs in, and so the residual stream's.
      capacity_factor: routed experts: None for dropless dispatch, else GShard's capacity factor.
      sequence_parallel: Megatron's sequence parallelism beside the ``model`` axis.
    """

    sequence: int
    micro_batch: int = 1
    remat: str = "none"
    attention: str = "flash"
    compute_dtype: str = "bfloat16"
    capacity_factor: float | None = None
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        check_sequence(self.sequence, "sequence")
        check_micro_batch(self.micro_batch, "micro_batch")
        check_choice(self.remat, tuple(POLICIES), "the remat policy")
        check_choice(self.attention, ATTENTION_KINDS, "the attention kind")
        check_choice(self.compute_dtype, COMPUTE_DTYPES, "the compute dtype")
        check_capacity_factor(self.capacity_factor)
        if not isinstance(self.sequence_parallel, bool):
            raise TypeError(f"`sequence_parallel` must be true or false, got {show(self.sequence_parallel)}")

    @property
    def forward(self) -> Forward:
        dispatch = "dropless" if self.capacity_factor is None else "capacity"
        return Forward(attention=self.attention, dispatch=dispatch, capacity_factor=self.capacity_factor or 1.0)

    @property
    def dispatch_text(self) -> str:
        if self.capacity_factor is None:
            return "dropless (each token's chosen experts only, jax.lax.ragged_dot, as MaxText)"
        return f"GShard capacity, factor {self.capacity_factor:g} (tokens past an expert's capacity dropped)"


# --- the residuals of one traced function -----------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Residual:
    """One array the backward pass reads, kept from the forward.

    Attributes:
      shape, dtype: as saved.
      where: the module that produced it (``attn/query``, ``mlp_norm``), or ``input``.
      bytes: the whole array's bytes.
      bytes_per_device: what one device keeps of it (split over the sequence under sequence
        parallelism when it sits outside the tensor-parallel modules).
    """

    shape: tuple[int, ...]
    dtype: str
    where: str
    bytes: int
    bytes_per_device: int


def _where(eqn: Any) -> str:
    """The module path of an equation's name stack (``jvp(TransformerBlock)/attn/query`` ->
    ``attn/query``): transformations and einsum specs dropped."""
    parts = [part for part in str(eqn.source_info.name_stack).split("/") if _NAME.fullmatch(part)]
    return "/".join(parts)


def _inner_jaxpr(eqn: Any) -> Any:
    """The jaxpr an equation calls with its own inputs and outputs (jit, a custom derivative's
    primal, a checkpoint), or None."""
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        sub = eqn.params.get(name)
        inner = getattr(sub, "jaxpr", sub)
        if (
            isinstance(inner, jax_core.Jaxpr)
            and len(inner.invars) == len(eqn.invars)
            and len(inner.outvars) == len(eqn.outvars)
        ):
            return inner
    return None


def _depends(jaxpr: Any, marked: tuple[bool, ...], top: dict[Any, Any] | None = None) -> list[bool]:
    """Which outputs of ``jaxpr`` depend on the inputs ``marked``; follows calls into their jaxprs,
    so a jitted helper's output computed from the parameters alone stays unmarked. ``top``
    collects, for the outer jaxpr, each variable's producing equation."""
    dependent = {var for var, mark in zip(jaxpr.invars, marked, strict=True) if mark}
    for eqn in jaxpr.eqns:
        if top is not None:
            for var in eqn.outvars:
                top[var] = eqn
        ins = tuple(not isinstance(var, jax_core.Literal) and var in dependent for var in eqn.invars)
        if not any(ins):
            continue
        inner = _inner_jaxpr(eqn)
        outs = [True] * len(eqn.outvars) if inner is None else _depends(inner, ins)
        dependent.update(var for var, out in zip(eqn.outvars, outs, strict=True) if out)
    return [not isinstance(var, jax_core.Literal) and var in dependent for var in jaxpr.outvars]


def _canonical(jaxpr: Any) -> dict[Any, Any]:
    """Each variable of the outer jaxpr mapped to the first one computed the same way (the same
    primitive, parameters and inputs): the traced forward converts a norm's input to float32 once
    for its statistics and once to normalise, and XLA keeps one copy; so does the count."""
    canon: dict[Any, Any] = {}
    seen: dict[Any, Any] = {}
    for eqn in jaxpr.eqns:
        if eqn.effects or any(_inner_jaxpr_of(value) for value in eqn.params.values()):
            continue
        try:
            key = (
                eqn.primitive,
                tuple(
                    ("literal", repr(var.val), str(var.aval))
                    if isinstance(var, jax_core.Literal)
                    else canon.get(var, var)
                    for var in eqn.invars
                ),
                tuple(sorted((name, repr(value)) for name, value in eqn.params.items())),
            )
            hash(key)
        except TypeError:
            continue
        if key in seen:
            for var, first in zip(eqn.outvars, seen[key].outvars, strict=True):
                canon[var] = canon.get(first, first)
        else:
            seen[key] = eqn
    return canon


def _inner_jaxpr_of(value: Any) -> bool:
    return isinstance(getattr(value, "jaxpr", value), jax_core.Jaxpr)


def _held(shape: tuple[Dim, ...], split: int, sequence: Dim, micro_batch: Dim) -> tuple[Dim, ...]:
    """What a device holds of a residual split ``split`` ways over the sequence (a (batch,
    sequence, ...) array, or a flattened (batch x sequence, ...) one); else the whole."""
    if split == 1:
        return shape
    if len(shape) >= 2 and shape[0] == micro_batch and shape[1] == sequence:
        return (shape[0], shape[1] // split, *shape[2:])
    if shape and shape[0] == micro_batch * sequence:
        return (shape[0] // split, *shape[1:])
    return shape


# A dimension as traced: an int, or a polynomial in the step's symbolic micro-batch and sequence.
Dim = Any


@dataclasses.dataclass(frozen=True)
class Saved:
    """A residual as traced, before its sizes are known: ``shape`` and ``held`` (what a device keeps
    of it) may be polynomials in the symbols ``b`` and ``s`` (``jax.export.symbolic_shape``)."""

    shape: tuple[Dim, ...]
    dtype: str
    where: str
    held: tuple[Dim, ...]

    def at(self, micro_batch: int, sequence: int) -> Residual:
        """This residual at one micro-batch and sequence: exact ints."""
        env = {"b": micro_batch, "s": sequence}
        shape = tuple(_size(dim, env) for dim in self.shape)
        held = tuple(_size(dim, env) for dim in self.held)
        itemsize = np.dtype(self.dtype).itemsize
        return Residual(
            shape=shape,
            dtype=self.dtype,
            where=self.where,
            bytes=math.prod(shape) * itemsize,
            bytes_per_device=math.prod(held) * itemsize,
        )


def _size(dim: Dim, env: Mapping[str, int]) -> int:
    """A traced dimension's value, exactly: an int as it is; a symbolic one evaluated at ``env`` in
    Python ints. JAX's own evaluation (the private ``_evaluate`` its export uses) computes in int32
    and wraps past 2**31 (a block's FLOPs at 512 tokens already do), so the polynomial is read term
    by term: its private ``_sorted_terms``, each a product of factors (a symbol, or a floor division,
    a remainder, a max or a min of polynomials). Tests hold every symbolic figure to a concrete
    trace's, at sizes past int32."""
    if isinstance(dim, int):
        return dim
    return sum(int(coefficient) * _term(term, env) for term, coefficient in dim._sorted_terms)


def _term(term: Any, env: Mapping[str, int]) -> int:
    return math.prod(_factor(factor, env) ** power for factor, power in term._factors)


# The operations a dimension polynomial's factor may apply (``shape_poly._DimFactor``'s names).
_OPERATIONS: Mapping[str, Callable[[int, int], int]] = {
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "max": max,
    "min": min,
}


def _factor(factor: Any, env: Mapping[str, int]) -> int:
    if factor.var is not None:
        return env[factor.var]
    left, right = (_size(operand, env) for operand in factor.operands)
    return _OPERATIONS[factor.operation](left, right)


def saved_shapes(
    fn: Callable[..., Any],
    params: Any,
    *inputs: jax.ShapeDtypeStruct,
    split: Callable[[str], int] = lambda where: 1,
    sequence: Dim = 0,
    micro_batch: Dim = 0,
) -> tuple[Saved, ...]:
    """The residuals ``jax.vjp`` of ``fn(params, *inputs)`` keeps that depend on the inputs (the
    batch): never the parameters, nor anything computed from them alone. Gradients are taken
    with respect to the parameters and the floating-point inputs (integer inputs, token ids, are
    data). Each residual is counted once, however many times the closure holds it. ``split(where)``:
    how many ways a device splits a residual produced in module ``where`` over the sequence.

    The sizes are left as traced: the inputs' shapes, ``sequence`` and ``micro_batch`` may be the
    symbols ``s`` and ``b``, so that one trace serves every sequence; ``Saved.at`` evaluates a row."""
    floating = [jnp.issubdtype(x.dtype, jnp.floating) for x in inputs]

    def residual_leaves(params: Any, *args: Any) -> list[Any]:
        def step(p: Any, *diff: Any) -> Any:
            given = iter(diff)
            return fn(p, *(next(given) if is_float else x for x, is_float in zip(args, floating, strict=True)))

        _, pullback = jax.vjp(step, params, *(x for x, is_float in zip(args, floating, strict=True) if is_float))
        return jax.tree_util.tree_leaves(pullback)

    closed = jax.make_jaxpr(residual_leaves)(params, *inputs)
    jaxpr = closed.jaxpr
    num_params = len(jax.tree_util.tree_leaves(params))
    marked = tuple(index >= num_params for index in range(len(jaxpr.invars)))
    producers: dict[Any, Any] = {}
    dependent = _depends(jaxpr, marked, producers)
    canon = _canonical(jaxpr)
    seen: set[Any] = set()
    rows = []
    for var, is_activation in zip(jaxpr.outvars, dependent, strict=True):
        if not is_activation or canon.get(var, var) in seen:
            continue
        seen.add(canon.get(var, var))
        shape = tuple(var.aval.shape)
        where = _where(producers[var]) if var in producers else "input"
        held = _held(shape, split(where), sequence, micro_batch)
        rows.append(Saved(shape=shape, dtype=str(var.aval.dtype), where=where, held=held))
    return tuple(rows)


_ELEMENTWISE = frozenset(
    {"add", "sub", "mul", "div", "exp", "log", "tanh", "logistic", "rsqrt", "sqrt", "max", "min", "neg", "integer_pow"}
)


def jaxpr_flops(jaxpr: Any) -> Dim:
    """Floating-point operations of a jaxpr, counted from its equations: a matmul 2 x its output x
    its contracted size, an elementwise op its output, a sum its input; calls followed into, a scan's
    body once an iteration. An int, or a polynomial in the symbols of a shape-polymorphic trace."""
    total: Dim = 0
    for eqn in jaxpr.eqns:
        if eqn.params.get("name") == FLASH_BACKWARD:
            # the kernel's five products: q.k again, dv = p.do, dp = do.v, dq = ds.k, dk = ds.q
            query, key, value = (var.aval.shape for var in eqn.invars[:3])
            total += 2 * math.prod(query[:-1]) * key[-3] * (3 * query[-1] + 2 * value[-1])
            continue
        inner = [getattr(value, "jaxpr", value) for value in eqn.params.values()]
        subs = [sub for sub in inner if isinstance(sub, jax_core.Jaxpr)]
        if subs:
            # a scan runs its body once an iteration (flash attention's backward, a block of keys each)
            repeats = eqn.params["length"] if eqn.primitive.name == "scan" else 1
            total += repeats * sum(jaxpr_flops(sub) for sub in subs[:1])
            continue
        name = eqn.primitive.name
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in contract)
        elif name == "ragged_dot_general" or name == "ragged_dot":
            lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            total += 2 * math.prod(lhs) * rhs[-1]
        elif name == FLASH_FORWARD:  # the kernel's two products: q.k and p.v
            query, key, value = (var.aval.shape for var in eqn.invars[:3])
            total += 2 * math.prod(query[:-1]) * key[-3] * (query[-1] + value[-1])
        elif name in _ELEMENTWISE:
            total += math.prod(eqn.outvars[0].aval.shape)
        elif name == "reduce_sum":
            total += math.prod(eqn.invars[0].aval.shape)
    return total


def step_flops(fn: Callable[..., Any], params: Any, x: jax.ShapeDtypeStruct) -> Dim:
    """The floating-point operations of ``fn``'s forward and backward pass together (one vjp and
    its pullback applied to a cotangent), from the traced jaxpr: under a remat policy the pullback
    recomputes what was not kept, so the difference to no remat is the recomputation."""

    def whole(p: Any, value: Any) -> Any:
        out, pullback = jax.vjp(fn, p, value)
        return pullback(jnp.ones_like(out))

    return jaxpr_flops(jax.make_jaxpr(whole)(params, x).jaxpr)


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


def _split_over(value: int, t: int, what: str) -> int:
    if value % t:
        raise ValueError(
            f"the mesh's {TENSOR_AXIS} axis ({t}) must divide {what} ({value:,}) to split it as Megatron does"
        )
    return value // t


def local_hparams(family: registry.Family, hparams: Mapping[str, Any], t: int) -> dict[str, Any]:
    """The block one device of a ``model`` axis of ``t`` runs: heads, KV heads, the feed-forward
    widths and the vocabulary divided by t (KV heads fewer than t are repeated, one a device, as
    Megatron and vLLM do; the vocabulary is padded up to a multiple of t, as Megatron pads it)."""
    h = dict(hparams)
    if t == 1:
        return h
    heads = h["num_heads"]
    if not family.latent(h):
        h["head_dim"] = h.get("head_dim") or h["d_model"] // heads
        kv = h["num_kv_heads"]
        if kv % t == 0:
            h["num_kv_heads"] = kv // t
        elif t % kv == 0:
            h["num_kv_heads"] = 1
        else:
            raise ValueError(
                f"the mesh's {TENSOR_AXIS} axis ({t}) must divide the KV heads ({kv:,}) or be a multiple of them "
                "to split attention as Megatron does"
            )
    h["num_heads"] = _split_over(heads, t, "the attention heads")
    for name, what in family.tensor_widths(h):
        h[name] = _split_over(h[name], t, what)
    h["vocab_size"] = -(-h["vocab_size"] // t)
    return h


def _cast(tree: Any, dtype: Any) -> Any:
    return jax.tree_util.tree_map(lambda leaf: leaf.astype(dtype), tree)


def _abstract(tree: Any, dtype: str) -> Any:
    return jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, jnp.dtype(dtype)), tree)


def check_traceable(config: ModelConfig, step: Step, mesh: MeshSpec | None = None) -> dict[str, Any]:
    """The model's hyperparameters, once the step is checked against them: a family with a
    training forward, a sequence within the positions, a sequence the sequence-parallel axis
    divides. Raises ValueError naming the rule and the value."""
    family = registry.family_of(config)
    if not family.trains:
        what = "the Dense stack" if config.family is None else f"the {config.family} family"
        raise ValueError(
            f"activations are traced for decoder-only language models (families "
            f"{', '.join(families.TRAINING_FORWARDS)}); {what} has no training forward here"
        )
    hparams = presets.resolved_hparams(config)
    positions = hparams.get("max_positions")
    if positions and step.sequence > positions and not hparams.get("rope_scaling"):
        raise ValueError(
            f"the sequence ({step.sequence:,} tokens) must be at most the model's positions "
            f"(max_positions {positions:,})"
        )
    t = tensor_parallel_size(mesh)
    if step.sequence_parallel and step.sequence % t:
        raise ValueError(
            f"sequence parallelism splits the sequence over the mesh's {TENSOR_AXIS} axis ({t}), which must divide "
            f"it; got a sequence of {step.sequence:,} tokens"
        )
    local_hparams(family, hparams, t)  # refuses what the model axis cannot split
    return hparams


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
            rows[member] = BlockRow(
                path=run.path(index), residuals=len(saved), bytes=sum(r.bytes_per_device for r in saved)
            )
    outside = tuple(row.at(b, s) for row in traced.outside)
    loss = tuple(row.at(b, s) for row in traced.loss)
    return ActivationReport(
        step=step,
        tensor_parallel=t,
        blocks=tuple(rows[index] for index in sorted(rows)),
        outside=BlockRow(
            path=traced.outside_names, residuals=len(outside), bytes=sum(r.bytes_per_device for r in outside)
        ),
        loss_bytes=sum(r.bytes_per_device for r in loss),
        loss_residuals=loss,
        traced=blocks,
        korthikanti_bytes=korthikanti_bytes(hparams, step, t),
        formula_note=formula_note(registry.family_of(config), hparams, step),
        seconds=time.perf_counter() - start,
        routed=registry.family_of(config).trains_experts,
        recompute_fraction=traced.recompute_at(b, s),
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
    for path, (block, args) in found.items():
        same = (block, tuple((arg.shape, str(arg.dtype)) for arg in args), jax.tree_util.tree_structure(params[path]))
        if same in alike:
            traced[path] = alike[same]
            continue

        def apply(p: Any, x: Any, block: nn.Module = block) -> Any:
            return block.apply({**p[1], "params": _cast(p[0], compute)}, x)

        x = jax.ShapeDtypeStruct((b, s, *args[0].shape[2:]), compute)
        fn = apply if policy is None else jax.checkpoint(apply, policy=policy)
        held = (params[path], {name: tree[path] for name, tree in others.items() if path in tree})
        traced[path] = alike[same] = saved_shapes(fn, held, x, split=block_split, sequence=s, micro_batch=b)
        if with_recompute and recompute is None:
            recompute = (0, 0)  # no policy: nothing recomputed
            if policy is not None:
                recompute = (step_flops(apply, held, x), step_flops(fn, held, x))
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
    return _StepTrace(
        runs=tuple(runs),
        blocks=traced,
        outside=outside,
        outside_names=names,
        loss=loss,
        recompute_flops=recompute,
    )


# --- the paper's formula, beside it ----------------------------------------------------------------


def korthikanti_bytes(hparams: Mapping[str, Any], step: Step, t: int = 1) -> int | None:
    """Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models",
    bytes for s, b, h = d_model, a = heads, L = blocks (16-bit activations, dropout masks 1 byte):

    - no recomputation, naive attention: s*b*h*L*(34 + 5*a*s/h); with tensor parallelism over t
      only: s*b*h*L*(10 + 24/t + 5*a*s/(h*t)); with tensor and sequence parallelism: the first / t;
    - no recomputation, flash attention (their selective recomputation of the attention core):
      34*s*b*h*L; 10 + 24/t under tensor parallelism only; / t with sequence parallelism;
    - full recomputation: 2*s*b*h*L (each block's input), / t with sequence parallelism;
    - None for dots, dots-no-batch and minimal: the paper has no counterpart.

    Rounded down to whole bytes where t does not divide."""
    s, b, L = step.sequence, step.micro_batch, hparams["num_layers"]
    h, a = hparams["d_model"], hparams["num_heads"]
    sp = step.sequence_parallel and t > 1
    quadratic = 5 * a * s if step.attention == "naive" else 0  # per s*b*L: 5*a*s^2*b*L
    if step.remat == "none":
        if sp or t == 1:
            total = s * b * L * (34 * h + quadratic)
            return total // t
        return (s * b * L * (10 * h * t + 24 * h + quadratic)) // t
    if step.remat == "full":
        return (2 * s * b * h * L) // (t if sp else 1)
    return None


def formula_note(family: registry.Family, hparams: Mapping[str, Any], step: Step) -> str:
    """Why the exact figure differs from the formula for this model, in one line."""
    h, a = hparams["d_model"], hparams["num_heads"]
    reasons = []
    if family.experts:
        k, e = hparams["experts_per_token"], hparams["num_experts"]
        reasons.append(f"routed experts ({k} of {e} a token) where the formula has one dense MLP of 4h")
    elif hparams.get("gated_mlp"):
        reasons.append(f"a SwiGLU MLP {hparams['ffn_dim']:,} wide (gate, up, down) where the formula has GeLU over 4h")
    elif hparams.get("ffn_dim") != 4 * h:
        reasons.append(f"an MLP {hparams['ffn_dim']:,} wide, not 4h = {4 * h:,}")
    kv = hparams.get("num_kv_heads", a)
    if family.latent(hparams):
        reasons.append("latent attention (DeepSeek's MLA) where the formula has plain heads")
    elif kv != a:
        reasons.append(f"grouped-query attention ({kv} KV heads for {a} query heads)")
    reasons.append("no dropout (the formula keeps 1-byte masks)")
    if hparams.get("norm") == "rmsnorm":
        reasons.append("RMSNorm with float32 statistics")
    if step.attention == "flash":
        reasons.append("flash attention's float32 log-sum-exp")
    reasons.append("the embedding, output layer and float32 loss, which the formula leaves out")
    return "The formula assumes GPT blocks; this model has " + "; ".join(reasons) + "."


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
