"""A GGUF file of a table (``dcsim.quant.gguf_layout``): its size predicted from the GGUF spec, the
real file written with llama.cpp's own ``gguf.GGUFWriter``, and read back with ``gguf.GGUFReader``.

The prediction is arithmetic on the spec (version 3, little-endian), not a measurement: a 24-byte
header (magic, version, tensor count, key-value count); each key-value pair as a length-prefixed
key, a uint32 value type and the value; each tensor's info as a length-prefixed name, a uint32 rank,
a uint64 per dim (ne0 first), a uint32 type and a uint64 offset; padding to the alignment (32, or
``general.alignment``); then each tensor's data, each padded to the alignment. Writing the file and
weighing it on disk is the check that the arithmetic and the writer agree to the byte.

The written values are zeros (``numpy.zeros`` maps untouched pages to the zero page, so a tensor
costs its bytes only as the writer streams it out), one tensor at a time: the writer holds only the
tensor infos, never the model.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from dcsim.quant.tables import QuantTable

GGUF_HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, tensor count, key-value count
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
# The largest file ``write`` makes unless told otherwise: the page offers a written file for
# models up to about 2 GB in the format.
MAX_WRITE_BYTES = 2 * 10**9


def value_type(value: Any) -> str:
    """The GGUF value type a metadata value is written as: strings as STRING, bools as BOOL, ints
    as UINT32 (as llama.cpp's converter writes counts), floats as FLOAT32."""
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, int):
        if not 0 <= value < 2**32:
            raise ValueError(f"a GGUF uint32 value must be from 0 to 2**32 - 1, got {value}")
        return "UINT32"
    if isinstance(value, float):
        return "FLOAT32"
    raise TypeError(f"no GGUF value type for {type(value).__name__} values")


VALUE_BYTES = {"BOOL": 1, "UINT32": 4, "FLOAT32": 4}


def _string_bytes(text: str) -> int:
    return 8 + len(text.encode("utf-8"))


def _pad(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def alignment_of(table: QuantTable) -> int:
    for key, value in table.metadata:
        if key == "general.alignment":
            return int(value)
    return DEFAULT_ALIGNMENT


def predicted_file_bytes(table: QuantTable) -> int:
    """The whole file's bytes, header, metadata, tensor infos and padding included (see the
    module's text)."""
    alignment = alignment_of(table)
    size = GGUF_HEADER_BYTES
    for key, value in table.metadata:
        kind = value_type(value)
        size += _string_bytes(key) + 4
        size += _string_bytes(value) if kind == "STRING" else VALUE_BYTES[kind]
    tensors = table.file_tensors()
    for name, shape, _, _ in tensors:
        size += _string_bytes(name) + 4 + 8 * len(shape) + 4 + 8
    size = _pad(size, alignment)
    return size + sum(_pad(nbytes, alignment) for _, _, _, nbytes in tensors)


def file_name(table: QuantTable) -> str:
    """``<model>.<RECIPE>.gguf``, as llama.cpp's tools and the Hub name them."""
    name = dict(table.metadata).get("general.name", "model")
    recipe = table.format.name.removeprefix("gguf-").upper()
    safe = "".join(char if char.isalnum() or char in "-_." else "-" for char in str(name))
    return f"{safe}.{recipe}.gguf"


def write(table: QuantTable, directory: str | Path, *, max_bytes: int = MAX_WRITE_BYTES) -> Path:
    """Write ``table``'s GGUF file into ``directory`` with ``gguf.GGUFWriter`` and return its path.

    Refuses (ValueError) a file predicted above ``max_bytes`` before writing anything; removes a
    partly written file on any failure.
    """
    import gguf
    import numpy as np

    predicted = predicted_file_bytes(table)
    if predicted > max_bytes:
        raise ValueError(
            f"the GGUF file would be {predicted:,} bytes, above the limit of {max_bytes:,} bytes for a written file"
        )
    metadata = dict(table.metadata)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError("a GGUF table's metadata must name general.architecture")
    path = Path(directory) / file_name(table)
    tensors = table.file_tensors()
    writer = gguf.GGUFWriter(path, arch)
    try:
        for key, value in table.metadata:
            if key == "general.architecture":
                continue  # the writer adds it first, from ``arch``
            if key == "general.alignment":
                writer.add_custom_alignment(int(value))  # the key, and the padding the writer uses
                continue
            kind = value_type(value)
            if kind == "STRING":
                writer.add_string(key, value)
            elif kind == "UINT32":
                writer.add_uint32(key, value)
            elif kind == "FLOAT32":
                writer.add_float32(key, value)
            else:
                writer.add_bool(key, value)
        shapes: list[tuple[tuple[int, ...], Any]] = []
        for name, ne, type_name, nbytes in tensors:
            qtype = gguf.GGMLQuantizationType[type_name]
            numpy_shape = tuple(reversed(ne))  # numpy's order is ne reversed: rows first
            if type_name == "F32":
                shapes.append((numpy_shape, np.float32))
                writer.add_tensor_info(name, numpy_shape, np.dtype(np.float32), nbytes)
            else:
                byte_shape = tuple(gguf.quant_shape_to_byte_shape(numpy_shape, qtype))
                shapes.append((byte_shape, np.uint8))
                writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for shape, dtype in shapes:
            writer.write_tensor_data(np.zeros(shape, dtype))
        writer.close()
    except BaseException:
        writer.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        raise
    return path


def read_back(path: str | Path) -> list[tuple[str, tuple[int, ...], str]]:
    """Every tensor of a GGUF file as ``gguf.GGUFReader`` reads it: (name, dims ne0 first, type)."""
    import gguf

    reader = gguf.GGUFReader(path)
    return [(str(t.name), tuple(int(d) for d in t.shape), t.tensor_type.name) for t in reader.tensors]


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The file's key-value pairs as ``gguf.GGUFReader`` reads them (strings decoded, scalars as
    Python numbers)."""
    import gguf

    reader = gguf.GGUFReader(path)
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's own view of the header
        kind = field.types[0] if field.types else None
        part = field.parts[field.data[0]] if field.data else None
        if part is None:
            continue
        if kind == gguf.GGUFValueType.STRING:
            out[name] = bytes(part).decode("utf-8")
        else:
            out[name] = part.tolist()[0] if math.prod(part.shape) == 1 else part.tolist()
    return out
