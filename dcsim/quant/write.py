"""A format's real file, written by the format's own library and weighed against dcsim's prediction.

The values are zeros of the right shapes and dtypes (``numpy.zeros``, whose pages the operating
system maps lazily, so a 2 GB file costs little memory); the point is the file's size and its
table of tensors, not its values. The file is written into a temporary directory beside its
destination and moved in only once it is complete and read back: every tensor's name, shape and
dtype is checked against dcsim's table, and the bytes on disk against the prediction of the whole
file, header included. On any failure nothing is left behind.

- GPTQ, AWQ, bitsandbytes and FP8 files are safetensors, written with ``safetensors``
  (``model.safetensors``, metadata ``{"format": "pt"}`` as transformers writes it). Its header is
  8 bytes of length, then compact JSON: ``__metadata__``, then the tensors sorted by dtype (widest
  first, the library's own order) and then by name, each with its ``data_offsets``; the JSON is
  padded with spaces to a multiple of 8 bytes.
- GGUF files are written with ``gguf.GGUFWriter`` (``dcsim.quant.gguf_file``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dcsim.quant.tables import QuantTable

MAX_WRITE_BYTES = 2 * 1024**3  # a file of at most 2 GiB: a small model, written in seconds
SAFETENSORS_METADATA = {"format": "pt"}
# safetensors' dtype names, in the library's sort order (widest first; checked by the tests).
_SAFETENSORS_DTYPES = {
    "float64": "F64",
    "uint32": "U32",
    "int32": "I32",
    "float32": "F32",
    "bfloat16": "BF16",
    "float16": "F16",
    "int16": "I16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "int8": "I8",
    "uint8": "U8",
}
# The Rust enum's order, descending: the order the library writes tensors in.
_ORDER: tuple[str, ...] = ("U64", "I64", "F64", "F32", "U32", "I32", "BF16", "F16", "U16", "I16", "F8_E8M0")
_ORDER += ("F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL")


@dataclasses.dataclass(frozen=True)
class Written:
    """A file written and weighed: the JSON ``written`` key."""

    path: str
    file_bytes: int
    predicted_file_bytes: int
    tensors_checked: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def file_name(table: QuantTable) -> str:
    """``model.safetensors``, or GGUF's ``<model>.<RECIPE>.gguf`` as llama.cpp's tools name it."""
    if table.format.kind == "gguf":
        from dcsim.quant import gguf_file

        return gguf_file.file_name(table)
    return "model.safetensors"


def _safetensors_entries(table: QuantTable) -> list[tuple[str, str, tuple[int, ...], int]]:
    entries = []
    for name, shape, dtype, nbytes in table.file_tensors():
        if dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"{table.format.name} stores {name} as {dtype}, which safetensors has no dtype for")
        entries.append((name, _SAFETENSORS_DTYPES[dtype], shape, nbytes))
    # safetensors sorts by dtype (Rust's enum order, widest first), then by name
    return sorted(entries, key=lambda entry: (_rank(entry[1]), entry[0]))


def _rank(code: str) -> int:
    return _ORDER.index(code) if code in _ORDER else len(_ORDER)


def safetensors_header(table: QuantTable) -> bytes:
    """The header the library writes for ``table``'s file: the length, then the padded JSON."""
    header: dict[str, Any] = {"__metadata__": SAFETENSORS_METADATA}
    offset = 0
    for name, code, shape, nbytes in _safetensors_entries(table):
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def predicted_file_bytes(table: QuantTable) -> int:
    """dcsim's prediction of the whole file's bytes, header included."""
    if table.format.kind == "gguf":
        from dcsim.quant import gguf_file

        return gguf_file.predicted_file_bytes(table)
    return len(safetensors_header(table)) + table.payload_bytes


def write(table: QuantTable, directory: str | os.PathLike[str], limit: int = MAX_WRITE_BYTES) -> Written:
    """Write ``table``'s file into ``directory`` (created if missing), read it back and weigh it.

    Raises ValueError, in the person's terms, for a file above ``limit`` bytes, a format with no
    file layout (qwix's arrays are JAX arrays, not a download), a destination that exists, or a
    file that does not read back as predicted; nothing is left behind."""
    kind = table.format.kind
    if kind in ("plain", "qwix"):
        raise ValueError(
            "--write writes the files people download (gptq-int4, awq-int4, bnb-*, fp8-*, gguf-*); "
            f"{table.format.name} "
            + (
                "is a plain dtype (the Checkpoint page writes a real Orbax checkpoint)"
                if kind == "plain"
                else "is qwix's JAX arrays, served from memory, with no file format of its own"
            )
        )
    predicted = predicted_file_bytes(table)
    if predicted > limit:
        raise ValueError(
            f"the {table.format.name} file of this model would be {predicted:,} bytes, above the {limit:,}-byte "
            "limit of --write: write a smaller model (the prediction above is the figure)"
        )
    target_dir = Path(directory)
    if target_dir.exists() and not target_dir.is_dir():
        raise ValueError(f"--write {str(directory)!r} is a file; give a directory")
    target = target_dir / file_name(table)
    if target.exists():
        raise ValueError(f"{str(target)!r} exists; --write does not overwrite: choose another directory")
    target_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".dcsim-write-", dir=target_dir))
    try:
        path = scratch / target.name
        if kind == "gguf":
            from dcsim.quant import gguf_file

            gguf_file.write(table, scratch, max_bytes=limit)
            found = gguf_file.read_back(path)
            expected = [(name, tuple(shape), dtype) for name, shape, dtype, _ in table.file_tensors()]
        else:
            _write_safetensors(table, path)
            found = _read_safetensors(path)
            expected = [(name, tuple(shape), code) for name, code, shape, _ in _safetensors_entries(table)]
        _compare(sorted(found), sorted(expected))
        size = path.stat().st_size
        if size != predicted:
            raise ValueError(f"the file written is {size:,} bytes, dcsim predicted {predicted:,}: a bug to report")
        os.replace(path, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Written(path=str(target), file_bytes=size, predicted_file_bytes=predicted, tensors_checked=len(found))


def _compare(found: list[tuple[str, tuple[int, ...], str]], expected: list[tuple[str, tuple[int, ...], str]]) -> None:
    if found != expected:
        missing = sorted(set(expected) - set(found))[:3]
        extra = sorted(set(found) - set(expected))[:3]
        raise ValueError(f"the file does not read back as dcsim's table: missing {missing}, unexpected {extra}")


def _write_safetensors(table: QuantTable, path: Path) -> None:
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file

    numpy_dtypes = {
        "F64": np.float64,
        "U32": np.uint32,
        "I32": np.int32,
        "F32": np.float32,
        "BF16": ml_dtypes.bfloat16,
        "F16": np.float16,
        "I16": np.int16,
        "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2,
        "I8": np.int8,
        "U8": np.uint8,
    }
    tensors = {name: np.zeros(shape, numpy_dtypes[code]) for name, code, shape, _ in _safetensors_entries(table)}
    save_file(tensors, str(path), metadata=SAFETENSORS_METADATA)


def _read_safetensors(path: Path) -> list[tuple[str, tuple[int, ...], str]]:
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return [(name, tuple(info["shape"]), info["dtype"]) for name, info in header.items()]
