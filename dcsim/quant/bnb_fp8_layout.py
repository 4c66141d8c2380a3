"""bitsandbytes and FP8 checkpoints as their tools save them: every tensor of a linear, named, shaped
and typed as in the downloaded ``model.safetensors``, for the whole model and for one device.

People size a bitsandbytes model as "4 bits a weight" and an FP8 one as "1 byte a weight". The files
also hold a float32 absmax a block of 64 (or its 8-bit code plus a nested absmax), a JSON blob a
linear, a scale a row or a 128 x 128 block, and whatever each tool leaves unquantized. Per linear
of ``in x out`` (``dcsim.quant.linears``: the axes the forward contracts), each routed expert its
own linear, stored as torch's ``(out, in)``:

- ``bnb-nf4`` / ``bnb-nf4-dq``: bitsandbytes' ``Linear4bit._save_to_state_dict`` writes ``weight``
  and then ``"weight." + key`` for every entry of ``QuantState.as_dict(packed=True)``
  (``bitsandbytes/functional.py`` and ``bitsandbytes/nn/modules.py`` at ``BNB_COMMIT``):
  ``weight`` uint8 ``(ceil(in * out / 2), 1)`` (two 4-bit codes a byte, ``quantize_4bit``'s fake
  kernel in ``bitsandbytes/_ops.py``); ``weight.absmax`` float32 ``(ceil(in * out / 64),)``;
  ``weight.quant_map`` float32 ``(16,)`` (the NF4 code); ``weight.quant_state.bitsandbytes__nf4``
  uint8, the UTF-8 bytes of ``json.dumps`` of the state's non-tensor entries (``pack_dict_to_tensor``
  in ``bitsandbytes/utils.py``): quant_type, blocksize, dtype, shape and, with double
  quantization, nested_blocksize, nested_dtype and nested_offset. With double quantization
  (``compress_statistics``, which transformers' ``bnb_4bit_use_double_quant`` turns on) absmax is
  uint8 and ``weight.nested_absmax`` float32 ``(ceil(blocks / 256),)`` and
  ``weight.nested_quant_map`` float32 ``(256,)`` are added. The offset is the mean of the layer's
  absmax, a float32 printed by Python's ``repr``, so its length depends on the values: dcsim writes
  ``NESTED_OFFSET`` (float32 0.01, 20 characters, as a typical real layer prints); a real file's
  blob may be a few bytes shorter a linear.
- ``bnb-int8``: ``Linear8bitLt._save_to_state_dict``: ``weight`` int8 ``(out, in)``, ``SCB``
  float32 ``(out,)`` and ``weight_format`` uint8 ``()`` (0, "row"; kept "for backwards
  compatibility", and read by transformers' ``Bnb8BitHfQuantizer``).
- ``fp8-block``: DeepSeek-V3's own files (its ``README_WEIGHTS.md``, ``quantization_config``
  ``weight_block_size: [128, 128]``): ``weight`` float8_e4m3fn ``(out, in)`` and
  ``weight_scale_inv`` float32 ``(ceil(out / 128), ceil(in / 128))``.
- ``fp8-channel``: compressed-tensors' FP8 dynamic scheme (llm-compressor's ``FP8_DYNAMIC``, e.g.
  RedHatAI's ``*-FP8-dynamic``): ``weight`` float8_e4m3fn and ``weight_scale`` ``(out, 1)``;
  activations are quantized per token at run time, so there is no ``input_scale``.
- ``fp8-tensor``: compressed-tensors' static FP8 scheme (llm-compressor's ``FP8``): ``weight``,
  ``weight_scale`` ``(1,)`` and, the activations being static, ``input_scale`` ``(1,)``.
  compressed-tensors makes its scales in the weight's dtype (``initialize_qparams``:
  ``scale_dtype = observed_dtype``, at ``COMPRESSED_TENSORS_COMMIT``), bfloat16 here; symmetric FP8
  saves no zero point.

What stays unquantized: the token table, the output head, norms and biases (float16 for
bitsandbytes, transformers' default dtype for it; bfloat16 for FP8). bitsandbytes replaces every
``nn.Linear`` but the head (``llm_int8_skip_modules`` defaults to it), the MoE router included,
except DeepSeek's, which transformers keeps as a plain parameter; the FP8 files keep the router in
bfloat16 (DeepSeek-V3's ``mlp.gate``, llm-compressor's ``ignore`` of ``mlp.gate``), and DeepSeek-V3's
file adds the router's float32 ``e_score_correction_bias``, a buffer dcsim's count leaves out.

One device (``bytes_on_device``): what vLLM holds of each tensor.

- vLLM refuses tensor parallelism for a pre-quantized bitsandbytes checkpoint ("Prequant
  BitsAndBytes models with tensor parallelism is not supported. Please try with pipeline
  parallelism.", ``bitsandbytes_loader.py`` at ``VLLM_COMMIT``): a quantized linear split on any
  axis but the expert axis is refused. vLLM dequantizes a double-quantized absmax to float32 at load
  (``dequantize_dq``) and parses the JSON blob on the host, so on a device a 4-bit linear is its
  packed weight, a float32 absmax a block and the 16-value code, with or without ``-dq``; an 8-bit
  one is its weight and SCB.
- FP8 block: vLLM requires each rank's slice to be whole 128 x 128 blocks
  (``validate_fp8_block_shape``: "Weight output_partition_size = ... is not divisible by weight
  quantization block_n = 128"): a split axis must leave a multiple of 128 on each device. A device
  holds ``ceil(out / 128) x ceil(in / 128)`` scales of its ``(out, in)`` slice.
- FP8 channel: the scale splits with the output rows; per tensor: both scales on every device.
"""

from __future__ import annotations

import json
from typing import Any

from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quant import linears as lin
from dcsim.quant import names as naming
from dcsim.quant.formats import WeightFormat
from dcsim.quant.tables import QuantArray, QuantTable, Tensor, element_tensor

BNB_COMMIT = "95f9af309d4d5793847169c39288dcd3fcbdf564"  # bitsandbytes-foundation/bitsandbytes
VLLM_COMMIT = "0406fb9fb92d0e562d3c8201b7f1940e088be3f4"  # vllm-project/vllm
COMPRESSED_TENSORS_COMMIT = "027d00c87ca61726eda216a7b239b88c095f19b4"  # vllm-project/compressed-tensors

BNB_BLOCK = 64  # quantize_4bit's default blocksize, which transformers keeps
NESTED_BLOCK = 256  # quantize_blockwise's blocksize for the absmax (compress_statistics)
NF4_CODE = 16  # values of the NF4 code (quant_map)
DYNAMIC_CODE = 256  # values of the 8-bit dynamic code (nested_quant_map)
FP8_BLOCK = 128  # DeepSeek-V3's weight_block_size, both axes
NESTED_OFFSET = 0.009999999776482582  # float32(0.01) as Python prints it: a typical absmax mean

KEPT_DTYPE = {"bnb": "float16", "fp8": "bfloat16"}
SCALE_DTYPE = "bfloat16"  # compressed-tensors' scales: the bfloat16 weight's dtype


def quant_state_blob(outputs: int, inputs: int, nested: bool, dtype: str = "float16") -> bytes:
    """The bytes of ``weight.quant_state.bitsandbytes__nf4``: ``json.dumps`` of the entries
    ``QuantState.as_dict(packed=True)`` packs, in its order (dtype as ``str(torch.float16)
    .strip("torch.")`` gives it; shape torch's ``(out, in)``)."""
    state: dict[str, Any] = {"quant_type": "nf4", "blocksize": BNB_BLOCK, "dtype": dtype, "shape": [outputs, inputs]}
    if nested:
        state |= {"nested_blocksize": NESTED_BLOCK, "nested_dtype": "float32", "nested_offset": NESTED_OFFSET}
    return json.dumps(state).encode()


def quantizes(fmt: WeightFormat, path: str, latent: bool) -> bool:
    """Whether the format quantizes the linear at ``path``: the blocks' linears, never the head;
    the router and Qwen's shared-expert gate only under bitsandbytes (an ``nn.Linear`` there),
    except DeepSeek's router (``latent``: a plain parameter in transformers)."""
    if lin.block_index(path) is None:
        return False
    router = "/moe/router/" in path or "/moe/shared_gate/" in path
    return not router or (fmt.kind == "bnb" and not latent)


def linear_tensors(
    fmt: WeightFormat, linear: lin.Linear, shape: tuple[int, ...], name: naming.FileName, fused_outputs: int
) -> tuple[Tensor, ...]:
    """The format's tensors of a linear of ``shape``. A part of a fused tensor (GPT-2's c_attn)
    holds its rows of ``weight`` (and of a per-row scale); the first part holds what the fused
    tensor has once, sized for all ``fused_outputs`` rows."""
    experts, inputs, outputs = linear.dims(shape)
    concat = 0 if name.part is not None else None
    whole = name.part in (None, 0)
    rows = fused_outputs if name.part is not None else outputs
    out: list[Tensor] = []
    for expert in range(experts) if linear.expert_axis is not None else (None,):

        def tensor(
            suffix: str, dims: tuple[int, ...], dtype: str, joined: bool = False, expert: int | None = expert
        ) -> None:
            out.append(element_tensor(name.tensor(suffix, expert), dims, dtype, concat if joined else None))

        if fmt.kind == "bnb" and fmt.name != "bnb-int8":
            nested = fmt.name == "bnb-nf4-dq"
            tensor("weight", (-(-outputs * inputs // 2), 1), "uint8", joined=True)
            if whole:
                blocks = -(-rows * inputs // BNB_BLOCK)
                tensor("weight.absmax", (blocks,), "uint8" if nested else "float32")
                tensor("weight.quant_map", (NF4_CODE,), "float32")
                if nested:
                    tensor("weight.nested_absmax", (-(-blocks // NESTED_BLOCK),), "float32")
                    tensor("weight.nested_quant_map", (DYNAMIC_CODE,), "float32")
                blob = quant_state_blob(rows, inputs, nested, KEPT_DTYPE["bnb"])
                tensor("weight.quant_state.bitsandbytes__nf4", (len(blob),), "uint8")
        elif fmt.name == "bnb-int8":
            tensor("weight", (outputs, inputs), "int8", joined=True)
            tensor("SCB", (outputs,), "float32", joined=True)
            if whole:
                tensor("weight_format", (), "uint8")
        else:
            tensor("weight", (outputs, inputs), "float8_e4m3fn", joined=True)
            if fmt.name == "fp8-block":
                if whole:
                    grid = (-(-rows // FP8_BLOCK), -(-inputs // FP8_BLOCK))
                    tensor("weight_scale_inv", grid, "float32")
            elif fmt.name == "fp8-channel":
                tensor("weight_scale", (outputs, 1), SCALE_DTYPE, joined=True)
            elif whole:
                tensor("weight_scale", (1,), SCALE_DTYPE)
                tensor("input_scale", (1,), SCALE_DTYPE)
    return tuple(out)


def bnb_fp8_table(config: ModelConfig, report: ParamReport, fmt: WeightFormat) -> QuantTable:
    """``config``'s arrays (``report``, its count) in a bitsandbytes or FP8 format; see the module's
    text. Raises ValueError for a model that has no transformer linears (a Dense stack)."""
    paths, found, names, scheme = lin.file_layout(config, report, fmt.name)
    latent = any("/attn/kv_down/" in path for path in paths)
    kept = KEPT_DTYPE[fmt.kind]
    quantized = {path for path in found if quantizes(fmt, path, latent)}
    fused: dict[str, int] = {}  # a fused module's rows: the sum of its parts' outputs
    for path in quantized:
        if names[path].part is not None:
            fused[names[path].module] = fused.get(names[path].module, 0) + found[path].dims()[2]
    arrays = []
    for row in report.arrays:
        shape = tuple(row.shape)
        name = names[row.path]
        linear = found.get(row.path)
        if row.path in quantized and linear is not None:
            tensors = linear_tensors(fmt, linear, shape, name, fused.get(name.module, 0))
            arrays.append(QuantArray(row.path, shape, row.num_values, True, tensors))
            continue
        own = [lin.kept_tensor(row.path, shape, name, linear, kept)]
        if fmt.name == "fp8-block" and "/moe/router/kernel" in row.path and lin.hparams_of(config).get("router_bias"):
            experts = shape[-1]  # DeepSeek-V3's routing bias, a float32 buffer of its file
            own.append(element_tensor(name.tensor("e_score_correction_bias"), (experts,), "float32"))
        arrays.append(QuantArray(row.path, shape, row.num_values, False, tuple(own)))
    return QuantTable(format=fmt, arrays=tuple(arrays), notes=_notes(fmt, scheme, config, paths, found, latent))


def _notes(
    fmt: WeightFormat, scheme: str, config: ModelConfig, paths: list[str], found: dict[str, lin.Linear], latent: bool
) -> tuple[str, ...]:
    routed = any(linear.expert_axis is not None for linear in found.values())
    router = any("/moe/router/" in path for path in paths)
    tool = {
        "bnb": "transformers with bitsandbytes saves it",
        "fp8": "DeepSeek-V3's files have it" if fmt.name == "fp8-block" else "llm-compressor saves it",
    }[fmt.kind]
    kept = ["the token table"]
    if any(path.startswith("lm_head/") for path in paths):
        kept.append("the output head")
    kept += ["norms", "biases"]
    bnb_router = fmt.kind == "bnb" and not latent
    if router and not bnb_router:
        kept.append("the router")
    notes = [
        f"{fmt.name}: every linear inside the blocks is quantized as {tool}"
        + (", each routed expert on its own" if routed else "")
        + (", the router too (an nn.Linear, which bitsandbytes replaces)" if router and bnb_router else "")
        + f"; {', '.join(kept)} stay in {KEPT_DTYPE[fmt.kind]}",
    ]
    if fmt.name == "bnb-nf4-dq":
        notes.append(
            "Each linear's quant_state blob holds the mean of its absmax as Python prints it; dcsim writes a "
            f"20-character {NESTED_OFFSET!r}, so a real file may be a few bytes smaller a linear"
        )
    if scheme == "dcsim":
        notes.append(
            f"No published {fmt.name} naming is known for the {config.family} family: tensors are named by dcsim's "
            "paths; the bytes are the format's"
        )
    return tuple(notes)


def bytes_on_device(fmt: WeightFormat, array: QuantArray, linear: lin.Linear, shard_shape: tuple[int, ...]) -> int:
    """One device's bytes of a quantized linear whose shard is ``shard_shape``, as vLLM holds it
    (see the module's text). Raises ValueError naming the array when vLLM would refuse the split."""
    experts, inputs, outputs = linear.dims()
    local_experts, local_in, local_out = linear.dims(shard_shape)
    what = f"{array.path} ({inputs:,} input features x {outputs:,} outputs)"
    if fmt.kind == "bnb":
        if (local_in, local_out) != (inputs, outputs):
            raise ValueError(
                f"{what}: a device would hold {local_out:,} x {local_in:,} of it, and vLLM refuses tensor parallelism "
                f"for a pre-quantized bitsandbytes checkpoint ({fmt.name}): serve it on one device per stage "
                "(pipeline parallelism) or choose another format"
            )
        values = inputs * outputs
        if fmt.name == "bnb-int8":
            per_expert = values + 4 * outputs  # weight_format is read on the host
        else:  # the absmax dequantized to float32 at load (dequantize_dq), the blob parsed on the host
            per_expert = -(-values // 2) + 4 * -(-values // BNB_BLOCK) + 4 * NF4_CODE
        return local_experts * per_expert
    for axis, local, full in (("input features", local_in, inputs), ("outputs", local_out, outputs)):
        if fmt.name == "fp8-block" and local != full and local % FP8_BLOCK:
            raise ValueError(
                f"{what}: a device holds {local:,} of its {full:,} {axis}, not whole {FP8_BLOCK} x {FP8_BLOCK} "
                f"blocks, and vLLM refuses such a split (block_{'k' if axis == 'input features' else 'n'} = "
                f"{FP8_BLOCK}): split this axis over fewer devices"
                + (", or hold whole experts a device (expert parallelism)" if linear.expert_axis is not None else "")
            )
    weight = local_in * local_out
    if fmt.name == "fp8-block":
        scales = 4 * -(-local_out // FP8_BLOCK) * -(-local_in // FP8_BLOCK)
    elif fmt.name == "fp8-channel":
        scales = 2 * local_out
    else:
        scales = sum(t.nbytes for t in array.tensors if not t.name.endswith(".weight")) // max(experts, 1)
    return local_experts * (weight + scales)
