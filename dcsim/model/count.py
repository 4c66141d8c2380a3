"""Exact parameter counts from real Flax modules, initialised abstractly.

``jax.eval_shape`` runs a module's real ``init`` but records only shapes and dtypes, so a
70-billion-value configuration costs what a 20-value one does: counting depends on the number of
layers, never on their widths. Counts are Python ints end to end (``math.prod`` of shapes): JAX's
int32 would overflow and float32 would round them.

"Parameters" means the ``params`` collection only. Other collections (BatchNorm statistics, say)
are variables too, and are reported apart, never added to the parameter total.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar, Protocol, TypeVar

import flax.linen as nn
import jax
from flax import traverse_util

from dcsim.model import families, modules, presets
from dcsim.model.config import ModelConfig
from dcsim.model.moe import EXPERTS
from dcsim.model.totals import ArrayTotals

PARAMS = "params"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayRow:
    """One array of a variable collection.

    Attributes:
      collection: the Flax collection, ``params`` for parameters.
      path: the array's path, e.g. ``Dense_0/kernel``.
      module: the path of the module that owns it, e.g. ``Dense_0``.
      kind: the array's own name, e.g. ``kernel``, ``bias``, ``scale``, ``mean``.
      shape: its shape.
      dtype: its dtype's name, e.g. ``float32``.
      num_values: how many scalar values it holds, as an exact int.
    """

    collection: str
    path: str
    module: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    num_values: int


def is_routed_expert(row: ArrayRow) -> bool:
    """Whether an array holds routed experts, stacked on dimension 0 (``block_3/moe/experts/gate``:
    its module is ``dcsim.model.moe.EXPERTS``)."""
    return row.module.rpartition("/")[2] == EXPERTS


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerRow:
    """The parameters one module owns directly."""

    path: str
    num_arrays: int
    num_params: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParamReport(ArrayTotals):
    """What a model holds, array by array, with exact totals.

    Attributes:
      arrays: the ``params`` arrays, in the order the modules were created.
      other: arrays of every other collection (e.g. ``batch_stats``), reported apart.
    """

    arrays: tuple[ArrayRow, ...]
    other: tuple[ArrayRow, ...] = ()

    @property
    def total_other_values(self) -> int:
        return sum(row.num_values for row in self.other)

    @property
    def layers(self) -> tuple[LayerRow, ...]:
        """Per-module subtotals, one row per module that owns parameters, in array order."""
        totals: dict[str, list[int]] = {}
        for row in self.arrays:
            entry = totals.setdefault(row.module, [0, 0])
            entry[0] += 1
            entry[1] += row.num_values
        return tuple(
            LayerRow(path=path, num_arrays=arrays, num_params=params) for path, (arrays, params) in totals.items()
        )


def report_from_variables(variables: Any) -> ParamReport:
    """Build a report from a variables tree of arrays or ``jax.ShapeDtypeStruct`` leaves.

    Rows keep the tree's order, which for a fresh ``init`` is the order Flax created them in.
    """
    rows = []
    for key, leaf in traverse_util.flatten_dict(variables).items():
        collection, *path = (str(part) for part in key)
        shape = tuple(int(dim) for dim in leaf.shape)
        rows.append(
            ArrayRow(
                collection=collection,
                path="/".join(path),
                module="/".join(path[:-1]),
                kind=path[-1],
                shape=shape,
                dtype=str(leaf.dtype),
                num_values=math.prod(shape),
            )
        )
    return ParamReport(
        arrays=tuple(row for row in rows if row.collection == PARAMS),
        other=tuple(row for row in rows if row.collection != PARAMS),
    )


def abstract_variables(module: nn.Module, *inputs: Any, seed: int = 0) -> Any:
    """Run ``module.init`` under ``jax.eval_shape``: every shape and dtype, no values.

    The tree comes back in the order Flax created the variables (kernel before bias, Dense_2
    before Dense_10). ``eval_shape`` returns dicts with sorted keys, so the creation order is
    recorded while tracing and restored.
    """
    created: list[tuple[str, ...]] = []

    def init(key: jax.Array, *args: Any) -> Any:
        variables = module.init(key, *args)
        created.extend(traverse_util.flatten_dict(variables))
        return variables

    flat = traverse_util.flatten_dict(jax.eval_shape(init, jax.random.PRNGKey(seed), *inputs))
    return traverse_util.unflatten_dict({key: flat[key] for key in created})


def count_module(module: nn.Module, *inputs: Any, seed: int = 0) -> ParamReport:
    """Count the variables a Flax module creates when initialised on ``inputs``."""
    return report_from_variables(abstract_variables(module, *inputs, seed=seed))


# The counts most recently asked for, by configuration: a page, a comparison or a serving report
# asks for the same model's count several times (Serving counts it for the weights and again for
# its capacity curve), and a report is frozen, so sharing it is safe. Bounded: a few megabytes at
# most (DeepSeek-V3's report is the largest, a few thousand rows).
MAX_CACHED_COUNTS = 64


@functools.lru_cache(maxsize=MAX_CACHED_COUNTS)
def count_params(config: ModelConfig) -> ParamReport:
    """Count the parameters of a configuration by abstractly initialising its Flax modules.

    A preset's runs of identical blocks are traced up to their second block and that block's rows
    repeated for the rest (``dcsim.model.families.traced_hparams``): tracing then costs the same for 80
    blocks as for 2, and every row is the one the full init gives (the tests compare the two).
    """
    family = config.family
    if family is None:
        module, inputs = modules.build(config)
        return count_module(module, *inputs, seed=config.seed)
    hparams, runs = families.traced_hparams(family, presets.resolved_hparams(config))
    module, inputs = families.build_family(family, hparams, config.batch_size)
    report = count_module(module, *inputs, seed=config.seed)
    return ParamReport(arrays=expand_repeats(report.arrays, runs), other=expand_repeats(report.other, runs))


class Placed(Protocol):
    """A row with a path and its module's path, a frozen dataclass (``ArrayRow``, a serving cache
    array): what ``expand_repeats`` renames."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def path(self) -> str: ...

    @property
    def module(self) -> str: ...


RowT = TypeVar("RowT", bound=Placed)


def expand_repeats(rows: tuple[RowT, ...], runs: tuple[families.Repeat, ...]) -> tuple[RowT, ...]:
    """Rows traced with only the first ``TRACED_PER_RUN`` members of each set of blocks built alike,
    with every other member's rows added: its set's last traced block's rows, renamed. Sets that
    share a namespace (a Mixture-of-Experts model's dense and MoE blocks, both ``block_``) are laid
    out together, block by block in index order, where their traced rows were (a module creates its
    blocks' variables in order)."""
    namespaces: dict[str, list[families.Repeat]] = {}
    for run in runs:
        namespaces.setdefault(run.namespace, []).append(run)
    for namespace, group in namespaces.items():
        blocks: dict[int, tuple[RowT, ...]] = {}
        positions: list[int] = []
        for run in group:
            traced = min(len(run.members), families.TRACED_PER_RUN)
            for index in range(traced):
                start = run.path(index) + "/"
                found = [at for at, row in enumerate(rows) if row.path.startswith(start)]
                blocks[run.members[index]] = tuple(rows[at] for at in found)
                positions += found
            template = run.path(traced - 1) + "/"
            for index in range(traced, len(run.members)):
                blocks[run.members[index]] = tuple(
                    _moved(row, template, run.path(index) + "/") for row in blocks[run.members[traced - 1]]
                )
        if not positions:  # this collection has nothing in these blocks (no batch_stats in a transformer)
            continue
        first, last = min(positions), max(positions)
        if sorted(positions) != list(range(first, last + 1)):
            raise RuntimeError(f"the rows of the {namespace!r} blocks are not contiguous; cannot expand them")
        laid_out = tuple(row for index in sorted(blocks) for row in blocks[index])
        rows = rows[:first] + laid_out + rows[last + 1 :]
    return rows


def _moved(row: RowT, old: str, new: str) -> RowT:
    """``row`` with its path (and its module's) moved from the prefix ``old`` to ``new``."""
    module = new + row.module[len(old) :] if row.module.startswith(old) else new.rstrip("/")
    return dataclasses.replace(row, path=new + row.path[len(old) :], module=module)
