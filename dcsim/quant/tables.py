"""What a weight format stores for each of a model's arrays: its tensors, shapes, dtypes and exact bytes.

Every format (``dcsim.quant.formats``) turns each parameter array dcsim counts into one or more
*tensors* of its file: a GPTQ linear becomes ``qweight``, ``qzeros``, ``scales`` and ``g_idx``; a
qwix kernel its ``qvalue`` and ``scale``; a GGUF tensor one array of blocks; an array left
unquantized one tensor of the format's plain dtype. Tensors are named as the format's files name
them (``model.layers.0.self_attn.q_proj.qweight``), so several arrays can share one file tensor
(GPT-2's fused ``c_attn``): each array then holds its *part* of it, concatenated along
``concat_axis`` in the file.

Bytes are exact ints. Sub-byte dtypes are counted by bit width (a packed int4 is half a byte), never
by numpy's ``itemsize``, which reports 1 for int4.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

from dcsim.model.totals import ArrayTotals

# Bits a value of each element dtype a format stores. GGUF's block types are not here: their
# tensors are arrays of blocks whose bytes come from gguf.GGML_QUANT_SIZES (``Tensor.block``).
DTYPE_BITS = {
    "float64": 64,
    "float32": 32,
    "int32": 32,
    "uint32": 32,
    "float16": 16,
    "bfloat16": 16,
    "int16": 16,
    "int8": 8,
    "uint8": 8,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "int4": 4,
    "uint4": 4,
}


def dtype_bits(dtype: str) -> int:
    """Bits a value of ``dtype`` (an element dtype, not a GGUF block type)."""
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise ValueError(f"no bit width known for the dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}") from None


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One tensor of a format's file, or an array's part of one.

    Attributes:
      name: the tensor's name in the file.
      shape: the shape of this part (the whole tensor unless several arrays share it).
      dtype: its element dtype (``int32``, ``float16``, ``int4``) or GGUF type name (``Q4_K``).
      nbytes: its exact bytes.
      concat_axis: where several arrays' parts of ``name`` are joined in the file; None when this
        array holds the whole tensor.
      block: for a GGUF block type, (values a block, bytes a block) from ``gguf.GGML_QUANT_SIZES``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    concat_axis: int | None = None
    block: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "bytes": self.nbytes}


def element_tensor(name: str, shape: tuple[int, ...], dtype: str, concat_axis: int | None = None) -> Tensor:
    """A tensor of an element dtype: values x bits / 8, rounded up to a whole byte (a packed int4
    array of an odd size still takes its last byte)."""
    bits = math.prod(shape) * dtype_bits(dtype)
    return Tensor(name=name, shape=tuple(shape), dtype=dtype, nbytes=-(-bits // 8), concat_axis=concat_axis)


@dataclasses.dataclass(frozen=True)
class QuantArray:
    """One parameter array as a format stores it.

    Attributes:
      path: the array's path as dcsim counts it (``block_0/attn/query/kernel``).
      shape: its shape as counted.
      num_values: its values.
      quantized: True when the format quantized it (False: kept in a plain dtype).
      tensors: its tensors (or parts of shared ones) in the file.
    """

    path: str
    shape: tuple[int, ...]
    num_values: int
    quantized: bool
    tensors: tuple[Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "tensors": [tensor.name for tensor in self.tensors],
            "shape": list(self.shape),
            "dtype": ", ".join(dict.fromkeys(tensor.dtype for tensor in self.tensors)),
            "bytes": self.nbytes,
            "quantized": self.quantized,
            "parts": [tensor.to_dict() for tensor in self.tensors],
        }


@dataclasses.dataclass(frozen=True)
class QuantTable(ArrayTotals):
    """A model's arrays in a format, in the order they are counted.

    Attributes:
      format: the format and its options (``dcsim.quant.formats.WeightFormat``).
      arrays: one ``QuantArray`` an array the count has.
      notes: what the format left unquantized and why, each a sentence.
      metadata: what the format's file carries beside its tensors (GGUF's key-value pairs).
    """

    format: Any
    arrays: tuple[QuantArray, ...]
    notes: tuple[str, ...] = ()
    metadata: tuple[tuple[str, Any], ...] = ()

    @property
    def payload_bytes(self) -> int:
        """Bytes of every tensor's data (the file less its header)."""
        return sum(array.nbytes for array in self.arrays)

    @property
    def bits_per_weight(self) -> Fraction:
        """Payload bits a parameter, exactly: the figure people quote (4.5, 4.85), derived here
        from the exact bytes, never used to make them."""
        return Fraction(self.payload_bytes * 8, max(self.total_params, 1))

    def bytes_per_shard(self, num_shards: int) -> Fraction:
        """The payload over ``num_shards``, exactly: an average, not a layout."""
        return Fraction(self.payload_bytes, num_shards)

    @property
    def quantized_params(self) -> int:
        return sum(array.num_values for array in self.arrays if array.quantized)

    def array(self, path: str) -> QuantArray:
        for array in self.arrays:
            if array.path == path:
                return array
        raise KeyError(path)

    def file_tensors(self) -> list[tuple[str, tuple[int, ...], str, int]]:
        """The file's tensors, parts joined: (name, shape, dtype, bytes), in order of first
        appearance. Raises ValueError when parts of one name disagree (a bug in a layout)."""
        joined: dict[str, list[Tensor]] = {}
        for array in self.arrays:
            for tensor in array.tensors:
                joined.setdefault(tensor.name, []).append(tensor)
        out = []
        for name, parts in joined.items():
            first = parts[0]
            shape = list(first.shape)
            for part in parts[1:]:
                if part.dtype != first.dtype or part.concat_axis is None or part.concat_axis != first.concat_axis:
                    raise ValueError(f"the parts of the tensor {name!r} cannot be joined")
                shape[part.concat_axis] += part.shape[part.concat_axis]
            out.append((name, tuple(shape), first.dtype, sum(part.nbytes for part in parts)))
        return out


def weights_record(table: QuantTable, num_shards: int | None = None) -> dict[str, Any]:
    """The table as JSON keys (docs/cli.md): the format, the payload, bits a weight, every array."""
    record: dict[str, Any] = {
        "weights_format": table.format.name,
        "weights_options": table.format.to_dict(),
        "weights_bytes": table.payload_bytes,
        "bits_per_weight": round(float(table.bits_per_weight), 4),
        "quantized_params": table.quantized_params,
        "weights_notes": list(table.notes),
    }
    if num_shards is not None:
        share = table.bytes_per_shard(num_shards)
        record["weights_bytes_per_shard"] = float(share)
        record["weights_bytes_per_shard_fraction"] = str(share)
    record["weights_arrays"] = [
        {key: value for key, value in array.to_dict().items() if key != "parts"} for array in table.arrays
    ]
    return record


def group_bytes(table: QuantTable, group_of: Any) -> list[tuple[str, int, int, int]]:
    """(group, arrays, parameters, bytes in the format) a group, in order of first appearance;
    ``group_of`` maps a path to its group (``dcsim.model.breakdown.group_of``)."""
    groups: dict[str, list[int]] = {}
    for array in table.arrays:
        totals = groups.setdefault(group_of(array.path), [0, 0, 0])
        totals[0] += 1
        totals[1] += array.num_values
        totals[2] += array.nbytes
    return [(name, arrays, params, size) for name, (arrays, params, size) in groups.items()]
