"""The weight formats a model can be stored or served in, and their options, checked once here.

A format is a name: a plain dtype (``bfloat16``, ``float16``, ``float32``: a value is its dtype's
bytes), qwix's JAX-native post-training quantization (``int8`` per channel; ``int4``, ``fp8`` and
``nf4`` in tiles along the contraction axis), the layouts people download (``gptq-int4``,
``awq-int4``, bitsandbytes' ``bnb-nf4``/``bnb-nf4-dq``/``bnb-int8``, the FP8 files ``fp8-block``,
``fp8-channel``, ``fp8-tensor``) or a GGUF recipe (``gguf-q4_k_m``, ...). Its options are the group
(GPTQ, AWQ), the bits (GPTQ: 4 or 8), the tile (qwix's tiled formats) and whether the output head is
quantized too. The bitsandbytes and FP8 layouts have none: their blocks are fixed by their tools.

Double quantization is a format of its own (``bnb-nf4-dq``), not a flag: it changes the file's
tensors (absmax in uint8, a nested absmax and code table) as a different download does, and a name
travels through ``--weights``, the links and the pages without a new option threaded through each.
A format refuses an option it has no use for, naming the flag, so nobody believes a group changed
a GGUF file.

Pure Python: the command line and the links read this table without JAX. The layouts themselves
are in ``dcsim.quant.layouts`` (which imports qwix and gguf only when a format needs them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.inputs import as_bool, as_int, show

PLAIN = ("bfloat16", "float16", "float32")
QWIX = ("int8", "int4", "fp8", "nf4")
GROUPED = ("gptq-int4", "awq-int4")
BNB = ("bnb-nf4", "bnb-nf4-dq", "bnb-int8")
FP8 = ("fp8-block", "fp8-channel", "fp8-tensor")
GGUF = ("gguf-q8_0", "gguf-q6_k", "gguf-q5_k_m", "gguf-q4_k_m", "gguf-q4_0")
FORMATS = (*PLAIN, *QWIX, *GROUPED, *BNB, *FP8, *GGUF)
DEFAULT_GROUP = 128
DEFAULT_TILE = 128
MAX_GROUP = 1 << 16
GPTQ_BITS = (4, 8)

# qwix's qtype for each of its formats (qwix.QuantizationRule's weight_qtype).
QWIX_QTYPES = {"int8": "int8", "int4": "int4", "fp8": "float8_e4m3fn", "nf4": "nf4"}

SUMMARIES = {
    "bfloat16": "2 bytes a value, nothing quantized",
    "float16": "2 bytes a value, nothing quantized",
    "float32": "4 bytes a value, nothing quantized",
    "int8": "qwix int8, a float32 scale per output channel",
    "int4": "qwix int4 in tiles along the contraction axis, a float32 scale per tile and channel",
    "fp8": "qwix float8_e4m3fn in tiles along the contraction axis, a float32 scale per tile and channel",
    "nf4": "qwix NF4 (4-bit normal float, emulated) in tiles, a float32 scale per tile and channel",
    "gptq-int4": "GPTQ (AutoGPTQ/GPTQModel): packed int32 qweight, qzeros, float16 scales a group, g_idx",
    "awq-int4": "AWQ GEMM (AutoAWQ): packed int32 qweight and qzeros, float16 scales a group",
    "bnb-nf4": "bitsandbytes NF4 (transformers load_in_4bit): packed 4-bit, a float32 absmax a block of 64",
    "bnb-nf4-dq": "bitsandbytes NF4 with double quantization: absmax in 8 bits, a float32 one per 256 blocks",
    "bnb-int8": "bitsandbytes LLM.int8 (transformers load_in_8bit): int8 weights, a float32 scale per row (SCB)",
    "fp8-block": "FP8 as DeepSeek-V3 ships it: float8_e4m3fn, a float32 weight_scale_inv a 128 x 128 block",
    "fp8-channel": "compressed-tensors FP8 dynamic (llm-compressor): float8_e4m3fn, a scale per output channel",
    "fp8-tensor": "compressed-tensors FP8 static (llm-compressor): float8_e4m3fn, a weight and an input scale a tensor",
    "gguf-q8_0": "GGUF Q8_0 (llama.cpp): 8-bit blocks of 32",
    "gguf-q6_k": "GGUF Q6_K (llama.cpp): 6-bit super-blocks of 256",
    "gguf-q5_k_m": "GGUF Q5_K_M (llama.cpp): Q5_K, with Q6_K where llama.cpp gives more bits",
    "gguf-q4_k_m": "GGUF Q4_K_M (llama.cpp): Q4_K, with Q6_K where llama.cpp gives more bits",
    "gguf-q4_0": "GGUF Q4_0 (llama.cpp): 4-bit blocks of 32",
}


@dataclasses.dataclass(frozen=True)
class WeightFormat:
    """A weight format with its options, each checked (``check_format`` builds one from flags).

    Attributes:
      name: one of ``FORMATS``.
      group: the group of ``gptq-int4``/``awq-int4`` (input features sharing a scale and zero).
      bits: GPTQ's bits a weight (4 or 8); 4 for AWQ.
      tile: qwix's tile along the contraction axis (``int4``, ``fp8``, ``nf4``).
      quantize_head: quantize the output head too (qwix, GPTQ and AWQ leave it unquantized).
    """

    name: str = "bfloat16"
    group: int | None = None
    bits: int | None = None
    tile: int | None = None
    quantize_head: bool = False

    @property
    def kind(self) -> str:
        """``plain``, ``qwix``, ``gptq``, ``awq``, ``bnb``, ``fp8`` or ``gguf``."""
        if self.name in PLAIN:
            return "plain"
        if self.name in QWIX:  # qwix's own ``fp8`` is qwix's, not an FP8 file
            return "qwix"
        if self.name in GGUF:
            return "gguf"
        if self.name in BNB:
            return "bnb"
        if self.name in FP8:
            return "fp8"
        return self.name.split("-")[0]

    @property
    def quantized(self) -> bool:
        return self.kind != "plain"

    @property
    def label(self) -> str:
        """The format as a person reads it: ``gptq-int4 (group 128)``, ``int4 (tile 128)``."""
        options = []
        if self.kind == "gptq" and self.bits == 8:
            options.append("8 bits")
        if self.group is not None:
            options.append(f"group {self.group}")
        if self.tile is not None:
            options.append(f"tile {self.tile}")
        if self.quantize_head:
            options.append("head quantized")
        return self.name + (f" ({', '.join(options)})" if options else "")

    @property
    def summary(self) -> str:
        if self.kind == "gptq" and self.bits == 8:
            return SUMMARIES[self.name].replace("GPTQ", "GPTQ 8-bit")
        return SUMMARIES[self.name]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_format(
    name: Any,
    *,
    group: Any = None,
    bits: Any = None,
    tile: Any = None,
    quantize_head: Any = False,
    names: tuple[str, str, str, str, str] = ("weights", "group", "bits", "tile", "quantize_head"),
) -> WeightFormat:
    """A ``WeightFormat`` from a name and its options, each checked. ``names`` are the options'
    names as the caller's person knows them (``--group`` on the command line), in the order
    weights, group, bits, tile, quantize_head. An option the format has no use for is refused."""
    weights_name, group_name, bits_name, tile_name, head_name = names
    if not isinstance(name, str) or name not in FORMATS:
        raise ValueError(
            f"`{weights_name}` must be a weight format: {', '.join(PLAIN)} (plain); {', '.join(QWIX)} (qwix); "
            f"{', '.join(GROUPED)} (grouped int4); {', '.join(BNB)} (bitsandbytes); {', '.join(FP8)} (FP8); "
            f"{', '.join(GGUF)} (GGUF recipes); got {show(name)}"
        )
    fmt = WeightFormat(name=name)
    kind = fmt.kind
    if group is not None:
        if kind not in ("gptq", "awq"):
            raise ValueError(
                f"`{group_name}` applies to gptq-int4 and awq-int4 only; {name} has no groups "
                f"({SUMMARIES[name]}): leave it out"
            )
        group = as_int(group, group_name)
        if not 1 <= group <= MAX_GROUP or group & (group - 1):
            raise ValueError(
                f"`{group_name}` must be a power of two from 1 to {MAX_GROUP:,} (GPTQ and AWQ groups: 32, 64, "
                f"128, ...), got {show(group)}"
            )
    elif kind in ("gptq", "awq"):
        group = DEFAULT_GROUP
    if bits is not None:
        bits = as_int(bits, bits_name)
        allowed = GPTQ_BITS if kind == "gptq" else (4,) if kind == "awq" else ()
        if not allowed:
            raise ValueError(f"`{bits_name}` applies to gptq-int4 (4 or 8) only; {name} has a fixed width")
        if bits not in allowed:
            widths = " or ".join(str(width) for width in allowed)
            raise ValueError(f"`{bits_name}` of {name} must be {widths}, got {show(bits)}")
    elif kind in ("gptq", "awq"):
        bits = 4
    if tile is not None:
        if kind != "qwix" or name == "int8":
            why = "int8 is per channel" if name == "int8" else SUMMARIES[name]
            raise ValueError(f"`{tile_name}` applies to qwix's int4, fp8 and nf4 only ({name}: {why}): leave it out")
        tile = as_int(tile, tile_name)
        if not 1 <= tile <= MAX_GROUP:
            raise ValueError(
                f"`{tile_name}` must be a whole number of values from 1 to {MAX_GROUP:,}, got {show(tile)}"
            )
    elif kind == "qwix" and name != "int8":
        tile = DEFAULT_TILE
    head = as_bool(quantize_head, head_name)
    if head and kind in ("plain", "gguf", "bnb", "fp8"):
        why = {
            "plain": "quantizes nothing",
            "gguf": "chooses the head's type by llama.cpp's rules",
            "bnb": "keeps the head in float16 as transformers does (llm_int8_skip_modules)",
            "fp8": "keeps the head in bfloat16 as its files do (DeepSeek-V3's; llm-compressor's ignore of lm_head)",
        }[kind]
        raise ValueError(f"`{head_name}` applies to qwix, GPTQ and AWQ formats; {name} {why}")
    return WeightFormat(name=name, group=group, bits=bits, tile=tile, quantize_head=head)


def plain_bytes(name: str) -> int:
    """Bytes a value of a plain format."""
    return {"bfloat16": 2, "float16": 2, "float32": 4}[name]
