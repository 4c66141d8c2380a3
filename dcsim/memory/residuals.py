"""The residuals a traced function keeps for its backward pass, and its FLOPs, read from JAX's
jaxpr: which outputs of ``jax.vjp``'s closure depend on the batch (never the parameters, nor
anything computed from them alone), each counted once, with the module that produced it; sizes left
as traced (polynomials in the symbolic micro-batch ``b`` and sequence ``s``) and evaluated exactly
in Python ints. ``dcsim.memory.activations`` traces a model's step with them.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from dcsim.model.flash import FLASH_BACKWARD, FLASH_FORWARD

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
