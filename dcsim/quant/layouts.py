"""Each format's tensors of each array, for the whole model and for one device's shard.

- **Plain** (``bfloat16``, ``float16``, ``float32``): one tensor an array, its dtype's bytes.
- **qwix** (``int8``, ``int4``, ``fp8``, ``nf4``): qwix's own post-training quantization of dcsim's
  real Flax model, initialised abstractly: ``qwix.quantize_model`` with a ``PtqProvider`` and one
  rule, then ``qwix.quantize_params`` under ``jax.eval_shape``. Each quantized kernel is qwix's
  ``QArray``: ``qvalue`` (the kernel's shape in the narrow dtype) and ``scale`` (float32), shapes and
  dtypes as qwix makes them. What the rule leaves out (the output head, unless asked; the token
  table, a lookup qwix does not intercept; norms and biases) stays in bfloat16.
- **GPTQ** (AutoGPTQ/GPTQModel, ``gptq`` format) and **AWQ** (AutoAWQ, GEMM): every linear inside
  the blocks but the MoE router, each routed expert separately; embeddings, the head, norms and
  biases in float16. A linear of ``in x out`` (in: the axes the forward contracts,
  ``dcsim.quant.linears``) with group G and b bits:

  ======  ==============================  ==========================
  tensor  GPTQ                            AWQ (GEMM)
  ======  ==============================  ==========================
  qweight int32 (in * b / 32, out)        int32 (in, out / 8)
  qzeros  int32 (in / G, out * b / 32)    int32 (in / G, out / 8)
  scales  float16 (in / G, out)           float16 (in / G, out)
  g_idx   int32 (in,)                     none
  ======  ==============================  ==========================

  Tensors are named as the downloaded files name them (``dcsim.quant.names``), fusion included:
  GPT-2's query, key and value are one ``c_attn``, with one ``g_idx``.
- **GGUF** recipes: ``dcsim.quant.gguf_layout``.
- **bitsandbytes** (``bnb-nf4``, ``bnb-nf4-dq``, ``bnb-int8``) and **FP8** files (``fp8-block``,
  ``fp8-channel``, ``fp8-tensor``): ``dcsim.quant.bnb_fp8_layout``.

A device's bytes: the format applied to the device's shard, as vLLM loads a quantized checkpoint
(each tensor-parallel rank quantizes, groups and indexes its own slice; a group must divide the
slice) and as JAX lays out qwix's arrays (a scale split where its kernel is, whole where it has a
single entry).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quant import linears as lin
from dcsim.quant import names as naming
from dcsim.quant.formats import QWIX_QTYPES, WeightFormat, plain_bytes
from dcsim.quant.tables import QuantArray, QuantTable, Tensor, dtype_bits, element_tensor

_KEPT_DTYPE = {"qwix": "bfloat16", "gptq": "float16", "awq": "float16"}


def weight_table(config: ModelConfig, report: ParamReport, fmt: WeightFormat) -> QuantTable:
    """``config``'s arrays (``report``, its count) in ``fmt``; see the module's text.

    Raises ValueError naming the array and the rule when the format cannot lay an array out (a
    group that does not divide its input features, a family a format has no layout for)."""
    if fmt.kind == "plain":
        size = plain_bytes(fmt.name)
        arrays = tuple(
            QuantArray(
                path=row.path,
                shape=tuple(row.shape),
                num_values=row.num_values,
                quantized=False,
                tensors=(Tensor(name=row.path, shape=tuple(row.shape), dtype=fmt.name, nbytes=row.num_values * size),),
            )
            for row in report.arrays
        )
        return QuantTable(format=fmt, arrays=arrays)
    if fmt.kind == "qwix":
        return _qwix_table(config, report, fmt)
    if fmt.kind == "gguf":
        from dcsim.quant import gguf_layout

        return gguf_layout.gguf_table(config, report, fmt)
    if fmt.kind in ("bnb", "fp8"):
        from dcsim.quant import bnb_fp8_layout

        return bnb_fp8_layout.bnb_fp8_table(config, report, fmt)
    return _grouped_table(config, report, fmt)


# ----------------------------------------------------------------------------------------- qwix


def _qwix_table(config: ModelConfig, report: ParamReport, fmt: WeightFormat) -> QuantTable:
    if fmt.quantize_head and _tied(config):
        raise ValueError(
            "the output head of this model is its token table (tied embeddings), a lookup qwix keeps "
            "unquantized: leave out quantize_head"
        )
    flat, runs = lin.qwix_arrays(config, QWIX_QTYPES[fmt.name], fmt.tile, fmt.quantize_head)
    arrays = []
    for row in report.arrays:
        leaf = flat.get(lin.template_path(row.path, runs))
        shape = tuple(row.shape)
        if leaf is not None and type(leaf).__name__ == "WithAux" and not row.path.startswith("embed/"):
            qarray = leaf.array
            tensors = [
                element_tensor(f"{row.path}/qvalue", tuple(qarray.qvalue.shape), str(qarray.qvalue.dtype)),
                element_tensor(f"{row.path}/scale", tuple(qarray.scale.shape), str(qarray.scale.dtype)),
            ]
            if qarray.zero_point is not None:
                zero = qarray.zero_point
                tensors.append(element_tensor(f"{row.path}/zero_point", tuple(zero.shape), str(zero.dtype)))
            arrays.append(QuantArray(row.path, shape, row.num_values, True, tuple(tensors)))
        else:
            arrays.append(
                QuantArray(row.path, shape, row.num_values, False, (element_tensor(row.path, shape, "bfloat16"),))
            )
    kept = "the output head, " if not fmt.quantize_head and any(a.path.startswith("lm_head/") for a in arrays) else ""
    notes = (
        f"qwix {fmt.name}: every kernel the forward contracts is quantized by qwix's own rule; {kept}the token "
        "table (a lookup), norms and biases stay in bfloat16, scales in float32 as qwix makes them",
    )
    return QuantTable(format=fmt, arrays=tuple(arrays), notes=notes)


def _tied(config: ModelConfig) -> bool:
    from dcsim.model import presets

    return config.family is not None and bool(presets.resolved_hparams(config).get("tied_embeddings"))


def qwix_bytes_on_device(array: QuantArray, stored_shape: tuple[int, ...], shard_shape: tuple[int, ...]) -> int:
    """One device's bytes of a qwix array: ``qvalue`` as its kernel's shard; ``scale`` split where
    the kernel is split along a dimension the scale keeps (per channel: the same split; in tiles:
    the tiles split, which must be whole), whole on the dimensions it reduces to one entry."""
    total = 0
    shape = tuple(array.shape)
    for tensor in array.tensors:
        if tensor.name.endswith("/qvalue") or not array.quantized:
            dims = tuple(shard_shape)
        else:
            dims = tuple(_scale_shard(array.path, tensor, shape, stored_shape, shard_shape))
        total += -(-math.prod(dims) * dtype_bits(tensor.dtype) // 8)
    return total


def _scale_shard(
    path: str, tensor: Tensor, shape: tuple[int, ...], stored: tuple[int, ...], shard: tuple[int, ...]
) -> list[int]:
    dims = []
    for axis, size in enumerate(tensor.shape):
        full, local = shape[axis], shard[axis]
        if size == full:  # per channel: split (or repeated, as megatron repeats KV heads) with the kernel
            dims.append(local)
        elif size == 1:  # reduced to one entry: whole on every device
            dims.append(1)
        else:  # tiles along the contraction: a device holds its shard's tiles, which must be whole
            tile = full // size
            if local % tile:
                raise ValueError(
                    f"{path}: a device holds {local:,} of its {full:,} values on axis {axis}, not a whole number "
                    f"of qwix tiles of {tile:,}; choose a tile that divides {local:,} or split this axis over "
                    "fewer devices"
                )
            dims.append(local // tile)
    return dims


# ------------------------------------------------------------------------------------ GPTQ, AWQ


def _grouped_table(config: ModelConfig, report: ParamReport, fmt: WeightFormat) -> QuantTable:
    paths, found, names, scheme = lin.file_layout(config, report, fmt.name)
    kept = _KEPT_DTYPE[fmt.kind]
    arrays = []
    for row in report.arrays:
        shape = tuple(row.shape)
        name = names[row.path]
        linear = found.get(row.path)
        if linear is not None and quantizes(fmt, row.path):
            tensors = grouped_tensors(fmt, linear, shape, name)
            arrays.append(QuantArray(row.path, shape, row.num_values, True, tensors))
        else:
            kept_tensor = lin.kept_tensor(row.path, shape, name, linear, kept)
            arrays.append(QuantArray(row.path, shape, row.num_values, False, (kept_tensor,)))
    tool = "AutoGPTQ/GPTQModel" if fmt.kind == "gptq" else "AutoAWQ"
    routed = any(linear.expert_axis is not None for linear in found.values())
    kept_parts = ["the token table"]
    if any(path.startswith("lm_head/") for path in paths) and not fmt.quantize_head:
        kept_parts.append("the output head")
    kept_parts += ["norms", "biases"] + (["the router"] if routed else [])
    notes = [
        f"{fmt.label}: every linear inside the blocks is quantized as {tool} does"
        + (", each routed expert on its own" if routed else "")
        + f"; {', '.join(kept_parts)} stay in {kept}",
    ]
    if scheme == "dcsim":
        notes.append(
            f"No published {fmt.name} naming is known for the {config.family} family: tensors are named by dcsim's "
            "paths; the bytes are the format's"
        )
    return QuantTable(format=fmt, arrays=tuple(arrays), notes=tuple(notes))


def quantizes(fmt: WeightFormat, path: str) -> bool:
    """Whether a grouped format quantizes the linear at ``path``: the blocks' linears but the MoE
    router (and its shared-expert gate); the head only when asked."""
    if path.startswith("lm_head/"):
        return fmt.quantize_head
    if lin.block_index(path) is None:
        return False
    return "/moe/router/" not in path and "/moe/shared_gate/" not in path


def grouped_tensors(
    fmt: WeightFormat, linear: lin.Linear, shape: tuple[int, ...], name: naming.FileName
) -> tuple[Tensor, ...]:
    """The GPTQ or AWQ tensors of a linear of ``shape`` (the array's, or one device's shard)."""
    experts, inputs, outputs = linear.dims(shape)
    group = fmt.group or 0
    bits = fmt.bits or 4
    pack = 32 // bits
    what = f"{linear.path} ({inputs:,} input features x {outputs:,} outputs"
    what += f", each of {experts:,} experts)" if linear.expert_axis is not None else ")"
    if inputs % group:
        raise ValueError(
            f"{what}: the group of {group:,} does not divide its {inputs:,} input features, and {fmt.name}'s tools "
            f"refuse such a layer: choose a group that divides {inputs:,} (--group)"
        )
    if outputs % pack or (fmt.kind == "gptq" and inputs % pack):
        raise ValueError(
            f"{what}: {fmt.name} packs {pack} values in an int32, which must divide its "
            + ("outputs" if outputs % pack else "input features")
        )
    fused = 1 if name.part is not None else None
    out: list[Tensor] = []
    for expert in range(experts) if linear.expert_axis is not None else (None,):
        if fmt.kind == "gptq":
            out.append(element_tensor(name.tensor("qweight", expert), (inputs // pack, outputs), "int32", fused))
        else:
            out.append(element_tensor(name.tensor("qweight", expert), (inputs, outputs // pack), "int32", fused))
        out.append(element_tensor(name.tensor("qzeros", expert), (inputs // group, outputs // pack), "int32", fused))
        out.append(element_tensor(name.tensor("scales", expert), (inputs // group, outputs), "float16", fused))
        if fmt.kind == "gptq" and name.part in (None, 0):
            out.append(element_tensor(name.tensor("g_idx", expert), (inputs,), "int32"))
    return tuple(out)


# ----------------------------------------------------------------------------------- per device


def device_bytes(table: QuantTable, config: ModelConfig, report: ParamReport) -> Callable[[Any], int]:
    """A function giving one device's bytes of an array laid out (a ``dcsim.sharding.layout.ArrayLayout``)
    in the table's format; see the module's text. The model's linears and names are found once."""
    fmt: WeightFormat = table.format
    arrays = {array.path: array for array in table.arrays}
    found: dict[str, lin.Linear] = {}
    names: dict[str, naming.FileName] = {}
    if fmt.kind in ("gptq", "awq"):
        _, found, names, _ = lin.file_layout(config, report, fmt.name)
    elif fmt.kind in ("gguf", "bnb", "fp8"):
        found = lin.find_linears(config, report)

    def on_device(row: Any) -> int:
        array = arrays[row.path]
        if fmt.kind == "gguf":
            linear = found.get(row.path)
            return _gguf(array, row, linear.in_axes if linear is not None else None)
        if not array.quantized:  # any tensor beside the array's own (a routing bias) is whole on every device
            extra = sum(tensor.nbytes for tensor in array.tensors[1:])
            return -(-row.values_per_shard * dtype_bits(array.tensors[0].dtype) // 8) + extra
        if fmt.kind == "qwix":
            return qwix_bytes_on_device(array, tuple(row.stored_shape), tuple(row.shard_shape))
        if fmt.kind in ("bnb", "fp8"):
            from dcsim.quant import bnb_fp8_layout

            try:
                return bnb_fp8_layout.bytes_on_device(fmt, array, found[row.path], tuple(row.shard_shape))
            except ValueError as error:
                raise ValueError(f"one device's shard of {error}") from None
        try:
            tensors = grouped_tensors(fmt, found[row.path], tuple(row.shard_shape), names[row.path])
        except ValueError as error:
            raise ValueError(f"one device's shard of {error}") from None
        return sum(tensor.nbytes for tensor in tensors)

    return on_device


def _gguf(array: QuantArray, row: Any, in_axes: tuple[int, ...] | None) -> int:
    from dcsim.quant import gguf_layout

    stored = tuple(row.stored_shape)
    if stored != tuple(array.shape):  # megatron's padded vocabulary: the padding rows are held too
        array = dataclasses.replace(array, shape=stored)
    return gguf_layout.gguf_bytes_on_device(array, tuple(row.shard_shape), in_axes)
