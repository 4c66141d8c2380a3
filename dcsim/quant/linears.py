"""The model's linear layers, as JAX sees them: which arrays a forward contracts, and along which axes.

A quantized format stores a linear's weight in groups, tiles or blocks *along its input features*,
the axes the forward's ``dot_general`` or ``einsum`` contracts. dcsim does not guess them from
names: qwix's post-training quantization intercepts every contraction of the real Flax forward and
records, for each kernel, the axes it keeps per channel (``HowToQuantize.channelwise_axes``); the
others are the contraction. A routed-expert stack keeps its expert axis per channel too; dcsim's
count marks it (``dcsim.model.count.is_routed_expert``: dimension 0).

Repeated blocks are traced once, as counting does (``dcsim.model.families.traced_hparams``): the
blocks of a set are the same module on the same input shape, so every member's linears are its
traced template's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

from dcsim.model import registry
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport, is_routed_expert
from dcsim.quant.names import FileName
from dcsim.quant.tables import Tensor, element_tensor


@dataclasses.dataclass(frozen=True)
class Linear:
    """A parameter array the forward contracts.

    Attributes:
      path: its path (``block_0/attn/out/kernel``).
      shape: its shape as counted.
      in_axes: the axes contracted (the input features).
      expert_axis: the routed-expert axis of a stacked expert array (0), else None.
    """

    path: str
    shape: tuple[int, ...]
    in_axes: tuple[int, ...]
    expert_axis: int | None = None

    def dims(self, shape: tuple[int, ...] | None = None) -> tuple[int, int, int]:
        """(experts, input features, output features) of ``shape`` (this array's, or a shard's)."""
        shape = tuple(shape or self.shape)
        experts = shape[self.expert_axis] if self.expert_axis is not None else 1
        inputs = math.prod(shape[axis] for axis in self.in_axes)
        outputs = math.prod(
            size for axis, size in enumerate(shape) if axis not in self.in_axes and axis != self.expert_axis
        )
        return experts, inputs, outputs


def template_path(path: str, runs: tuple[Any, ...]) -> str:
    """The traced block's path for an array of a block that was not traced (its set's last traced
    member's), else ``path``."""
    from dcsim.model import families

    for run in runs:
        traced = min(len(run.members), families.TRACED_PER_RUN)
        for index in range(traced, len(run.members)):
            start = run.path(index) + "/"
            if path.startswith(start):
                return run.path(traced - 1) + "/" + path[len(start) :]
    return path


@functools.lru_cache(maxsize=32)
def _traced(config: ModelConfig, qtype: str, tile: int | None, exclude: str) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """qwix's quantized abstract params of ``config``'s traced model (flat, by path), and the
    runs to expand. Bounded cache: a page run asks for the same model repeatedly."""
    import jax
    import qwix
    from flax import traverse_util

    from dcsim.model import families, presets

    family = config.family
    # qwix quantizes a convolution (ResNet's; ViT's and the vision towers' patch embeddings) only
    # together with its activations.
    if family is None or registry.get(family).convolutions:
        raise ValueError(
            f"quantized formats apply to transformer families; {family or 'a Dense stack'} "
            + ("has convolutions, which qwix quantizes only with their activations" if family else "is not one")
            + ": choose a plain format (bfloat16, float16, float32)"
        )
    hparams, runs = families.traced_hparams(family, presets.resolved_hparams(config))
    module, inputs = families.build_family(family, hparams, 1)
    rule = qwix.QuantizationRule(module_path=exclude, weight_qtype=qtype, tile_size=tile)
    quantized = qwix.quantize_model(module, qwix.PtqProvider([rule]))
    key = jax.random.PRNGKey(0)
    try:
        abstract = jax.eval_shape(quantized.init, key, *inputs)["params"]
        plain = jax.eval_shape(module.init, key, *inputs)["params"]
        params = jax.eval_shape(lambda p: qwix.quantize_params(p, abstract), plain)
    except ValueError as error:  # qwix's refusal of a tile that does not divide a kernel's contraction
        raise ValueError(
            f"the tile of {tile} does not divide every kernel's input features, and qwix refuses such a tile "
            f"(qwix: {str(error).strip()}): choose a tile that divides them (--tile 64, 128, ...)"
        ) from None
    flat = traverse_util.flatten_dict(params, sep="/", is_leaf=lambda _, leaf: type(leaf).__name__ == "WithAux")
    return flat, tuple(runs)


def exclusion(quantize_head: bool) -> str:
    """qwix's module-path rule: every module but the output head (unless it is asked for too)."""
    return ".*" if quantize_head else r"^(?!lm_head$).*"


def find_linears(config: ModelConfig, report: ParamReport) -> dict[str, Linear]:
    """Every array the forward contracts, by path, with its contraction axes (see the module's
    text). The token table is a lookup, and a tied head's contraction is the table's: neither is
    a linear here."""
    flat, runs = _traced(config, "int8", None, ".*")
    found: dict[str, Linear] = {}
    for row in report.arrays:
        leaf = flat.get(template_path(row.path, runs))
        if leaf is None or type(leaf).__name__ != "WithAux" or row.path.startswith("embed/"):
            continue
        channelwise = set(leaf.how.channelwise_axes)
        in_axes = tuple(axis for axis in range(len(row.shape)) if axis not in channelwise)
        expert = 0 if is_routed_expert(row) else None
        found[row.path] = Linear(path=row.path, shape=tuple(row.shape), in_axes=in_axes, expert_axis=expert)
    return found


def qwix_arrays(config: ModelConfig, qtype: str, tile: int | None, quantize_head: bool) -> tuple[dict[str, Any], tuple]:
    """qwix's quantized params of ``config`` (flat, by traced path) and the runs to expand."""
    return _traced(config, qtype, tile, exclusion(quantize_head))


_BLOCK = re.compile(r"^(?:(?:encoder|decoder)/)?block_(\d+)/")


def block_index(path: str) -> int | None:
    """The block an array belongs to (``block_3/...``, ``decoder/block_3/...``), else None."""
    match = _BLOCK.match(path)
    return int(match.group(1)) if match else None


def hparams_of(config: ModelConfig) -> dict[str, Any]:
    """The resolved hyperparameters of a family's model; none for a Dense stack."""
    from dcsim.model import presets

    return dict(presets.resolved_hparams(config)) if config.family is not None else {}


def kept_tensor(path: str, shape: tuple[int, ...], name: FileName, linear: Linear | None, dtype: str) -> Tensor:
    """The file tensor of an array a format leaves unquantized, in ``dtype``: a linear as torch's
    ``(out, in)`` weight, another array of more than two dims flattened, a fused bias 1-D."""
    if linear is not None:
        _, inputs, outputs = linear.dims(shape)
        shape = (outputs, inputs)
    elif len(shape) > 2:
        shape = (math.prod(shape),)
    concat = 0 if name.part is not None else None
    if name.part is not None and len(shape) > 1:  # a fused bias (GPT-2's c_attn) is 1-D
        shape = (math.prod(shape),)
    return element_tensor(name.tensor(), shape, dtype, concat_axis=concat)


def file_layout(
    config: ModelConfig, report: ParamReport, fmt_name: str
) -> tuple[list[str], dict[str, Linear], dict[str, FileName], str]:
    """What a format that names its tensors as the downloaded files do needs of a model: the
    arrays' paths, its linears, each path's file name and the naming scheme. Raises ValueError for
    a model with no transformer linears (a Dense stack)."""
    from dcsim.quant import names as naming

    paths = [row.path for row in report.arrays]
    scheme = naming.scheme_of(config.family, hparams_of(config), paths)
    if scheme == "dcsim" and config.family is None:
        raise ValueError(
            f"{fmt_name} lays out transformer linears; a Dense stack is not one: choose a plain format or qwix's int8"
        )
    return paths, find_linears(config, report), naming.file_names(scheme, paths), scheme
