"""GGUF recipes as llama.cpp lays them out: each of a model's arrays as the tensor (or the part of
one) a ``llama-quantize`` run would write, with the type llama.cpp would choose for it.

People quote Q4_K_M as "4.85 bits a weight"; that figure is an average over choices llama.cpp makes
tensor by tensor. ``llama_tensor_get_type`` (``src/llama-quant.cpp``) keeps norms and biases in
F32, gives the output head Q6_K, gives ``attn_v`` and ``ffn_down`` Q6_K on the layers it deems
sensitive in the ``_M`` recipes, bumps the 70B model's shared ``attn_v`` and the 8-expert models'
``attn_k``/``attn_v``, and falls back to another type for a tensor whose rows are not a whole number
of blocks. This module ports those rules for the five recipes dcsim offers (Q8_0, Q6_K, Q5_K_M,
Q4_K_M, Q4_0) from llama.cpp at commit ``LLAMA_CPP_COMMIT``, so a file's size is known before
anyone quantizes anything.

Names and dims are those ``convert_hf_to_gguf.py`` writes: ``token_embd.weight``,
``blk.{i}.attn_q.weight``, ``blk.{i}.ffn_down_exps.weight``, ..., each tensor's dims in GGUF's order
(``ne0``, the row length, is the input features; a stacked expert tensor is ``(in, out, experts)``).
A GGUF tensor is stored row by row, each row a whole number of blocks, so its bytes are
rows x (row length / block values) x block bytes, the block sizes coming from ``gguf`` itself
(``gguf.GGML_QUANT_SIZES``), never from a table typed in here. ``gguf`` is imported only when a
table is built: a count does not pay for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from dcsim.model import registry
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quant.formats import WeightFormat
from dcsim.quant.linears import Linear, block_index, find_linears
from dcsim.quant.tables import QuantArray, QuantTable, Tensor

# The llama.cpp commit whose src/llama-quant.cpp (llama_tensor_get_type_impl, tensor_type_fallback,
# tensor_allows_quantization) these rules are ported from.
LLAMA_CPP_COMMIT = "007dbbf3fd17eefe9b47fee45f48f7ba5e62b714"

# dcsim's recipe name -> llama.cpp's file type (LLAMA_FTYPE_MOSTLY_*) and its default tensor type
# (llama_ftype_get_default_type).
RECIPES = {
    "gguf-q8_0": ("MOSTLY_Q8_0", "Q8_0"),
    "gguf-q6_k": ("MOSTLY_Q6_K", "Q6_K"),
    "gguf-q5_k_m": ("MOSTLY_Q5_K_M", "Q5_K"),
    "gguf-q4_k_m": ("MOSTLY_Q4_K_M", "Q4_K"),
    "gguf-q4_0": ("MOSTLY_Q4_0", "Q4_0"),
}


# tensor_type_fallback: the type llama.cpp uses when a row is not a whole number of the target's
# blocks. Q8_0 and Q4_0 have no entry: llama.cpp refuses such a tensor.
FALLBACKS = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}

# The type a tensor llama.cpp does not quantize keeps, which is the type convert_hf_to_gguf.py wrote:
# F32 for 1-D tensors, norms, biases (names not ending in .weight), the router (ffn_gate_inp) and
# position embeddings; its default --outtype, F16, for any other 2-D weight (in these architectures
# only Qwen-MoE's (1, d_model) shared-expert gate, which ggml counts as one dim and never quantizes).
SOURCE_FLOAT = "F16"

# dcsim path (below block_i/) -> GGUF tensor stem (below blk.{i}.), for both families.
BLOCK_TENSORS = {
    "attn_norm/scale": "attn_norm.weight",
    "attn_norm/bias": "attn_norm.bias",
    "mlp_norm/scale": "ffn_norm.weight",
    "mlp_norm/bias": "ffn_norm.bias",
    "attn_post_norm/scale": "post_attention_norm.weight",
    "mlp_post_norm/scale": "post_ffw_norm.weight",
    "attn/query/kernel": "attn_q.weight",
    "attn/query/bias": "attn_q.bias",
    "attn/key/kernel": "attn_k.weight",
    "attn/key/bias": "attn_k.bias",
    "attn/value/kernel": "attn_v.weight",
    "attn/value/bias": "attn_v.bias",
    "attn/qkv/kernel": "attn_qkv.weight",
    "attn/qkv/bias": "attn_qkv.bias",
    "attn/out/kernel": "attn_output.weight",
    "attn/out/bias": "attn_output.bias",
    "attn/query_norm/scale": "attn_q_norm.weight",
    "attn/key_norm/scale": "attn_k_norm.weight",
    "mlp/gate/kernel": "ffn_gate.weight",
    "mlp/up/kernel": "ffn_up.weight",
    "mlp/up/bias": "ffn_up.bias",
    "mlp/down/kernel": "ffn_down.weight",
    "mlp/down/bias": "ffn_down.bias",
    "mlp/gate_up/kernel": "ffn_up.weight",  # Phi-3 keeps gate and up fused in ffn_up
    "moe/router/kernel": "ffn_gate_inp.weight",
    "moe/experts/gate": "ffn_gate_exps.weight",
    "moe/experts/up": "ffn_up_exps.weight",
    "moe/experts/down": "ffn_down_exps.weight",
    "moe/shared/gate/kernel": "ffn_gate_shexp.weight",
    "moe/shared/up/kernel": "ffn_up_shexp.weight",
    "moe/shared/down/kernel": "ffn_down_shexp.weight",
    "moe/shared_gate/kernel": "ffn_gate_inp_shexp.weight",
}

TOP_TENSORS = {
    "embed/token/embedding": "token_embd.weight",
    "embed/position/embedding": "position_embd.weight",
    "final_norm/scale": "output_norm.weight",
    "final_norm/bias": "output_norm.bias",
    "lm_head/kernel": "output.weight",
    "lm_head/bias": "output.bias",
}

# GPT-2's checkpoints fuse query, key and value into one c_attn, and llama.cpp's gpt2 architecture
# keeps it fused: dcsim's three arrays are parts of attn_qkv, joined along the output features.
FUSED_QKV = {"attn_q": "attn_qkv", "attn_k": "attn_qkv", "attn_v": "attn_qkv"}


def _gguf() -> Any:
    import gguf

    return gguf


def block_bytes(type_name: str) -> tuple[int, int]:
    """(values a block, bytes a block) of a GGML type, from ``gguf.GGML_QUANT_SIZES``."""
    gguf = _gguf()
    return tuple(gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]])  # type: ignore[return-value]


def tensor_bytes(ne: tuple[int, ...], type_name: str) -> int:
    """Bytes of a tensor of dims ``ne`` (ne0 first) in ``type_name``: rows x blocks a row x bytes a
    block. Raises ValueError when a row is not a whole number of blocks."""
    values, nbytes = block_bytes(type_name)
    row = ne[0] if ne else 1
    if row % values:
        raise ValueError(f"a row of {row:,} values is not a whole number of {type_name} blocks of {values}")
    return math.prod(ne[1:]) * (row // values) * nbytes


def n_dims(ne: tuple[int, ...]) -> int:
    """ggml_n_dims: the dims up to the last one larger than 1 (a (2048, 1) tensor has one)."""
    for index in range(len(ne) - 1, 0, -1):
        if ne[index] > 1:
            return index + 1
    return 1


def decoder_arch(config: ModelConfig, hparams: Mapping[str, Any]) -> str:
    """The llama.cpp architecture convert_hf_to_gguf.py writes for a decoder-family model."""
    name = (config.preset or "").lower()
    if hparams.get("position_embedding") == "learned":
        return "gpt2"
    if hparams.get("fused_projections"):
        return "phi3"
    if hparams.get("post_norms"):
        return "gemma3" if hparams.get("qk_norm") else "gemma2"
    if hparams.get("qk_norm"):
        return "qwen3"
    if hparams.get("qkv_bias"):
        return "qwen2"
    if name.startswith("gemma"):
        return "gemma"
    return "llama"  # Llama 2 and 3, Mistral (MistralForCausalLM converts as llama)


def moe_arch(hparams: Mapping[str, Any]) -> str:
    if hparams.get("attention") != "gqa":
        raise ValueError(
            "GGUF recipes are laid out here for grouped-query attention; this model's attention is "
            f"{hparams.get('attention')!r} (latent attention is not laid out yet): choose a qwix, GPTQ or AWQ format"
        )
    if hparams.get("shared_ffn_dim"):
        return "qwen2moe"
    if hparams.get("norm") == "layernorm":
        return "phimoe"
    if hparams.get("qk_norm"):
        return "qwen3moe"
    return "llama"  # Mixtral converts as llama with llama.expert_count


def gguf_name(path: str, arch: str) -> tuple[str, int | None]:
    """The GGUF tensor an array of ``path`` is (or is a part of), and its block."""
    if path in TOP_TENSORS:
        return TOP_TENSORS[path], None
    index = block_index(path)
    if index is not None:
        rest = re.sub(r"^(?:(?:encoder|decoder)/)?block_\d+/", "", path)
        stem = BLOCK_TENSORS.get(rest)
        if stem is not None:
            base, _, kind = stem.partition(".")
            if arch == "gpt2" and base in FUSED_QKV:
                base = FUSED_QKV[base]
            return f"blk.{index}.{base}.{kind}", index
    raise ValueError(f"the array {path!r} has no GGUF tensor in llama.cpp's layout (its architecture here: {arch})")


def ne_of(path: str, shape: tuple[int, ...], linear: Linear | None) -> tuple[int, ...]:
    """An array's dims in GGUF's order: (in, out) for a linear, (in, out, experts) for an expert
    stack, (width, rows) for a table, the flattened values for anything else (biases, norms)."""
    if linear is not None:
        experts, inputs, outputs = linear.dims(shape)
        return (inputs, outputs, experts) if linear.expert_axis is not None else (inputs, outputs)
    if path.endswith("/embedding") and len(shape) == 2:
        return (shape[1], shape[0])
    return (math.prod(shape),)


def category(name: str) -> str:
    """tensor_get_category: llama.cpp's broad class of a tensor, by its name."""
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for needle, kind in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if needle in name:
            return kind
    return "other"


def allows_quantization(name: str, ne: tuple[int, ...]) -> bool:
    """tensor_allows_quantization, for the tensors these architectures have."""
    if n_dims(ne) < 2 or not name.endswith("weight") or "_norm.weight" in name:
        return False
    return "ffn_gate_inp.weight" not in name and name not in ("position_embd.weight", "token_types.weight")


def source_type(name: str, ne: tuple[int, ...]) -> str:
    """The type convert_hf_to_gguf.py writes a tensor llama.cpp then leaves unquantized in."""
    forced = ("ffn_gate_inp.weight", "position_embd.weight", "token_types.weight")
    if len(ne) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") or name.endswith(forced):
        return "F32"
    return SOURCE_FLOAT


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """The layers llama.cpp's _M recipes give more bits (C integer division, as in llama.cpp)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


class _Model:
    """What llama_tensor_get_type reads of the model: hparams and the running counters."""

    def __init__(self, *, arch: str, n_layer: int, n_head: int, n_head_kv: int, n_expert: int, tied: bool) -> None:
        self.arch = arch
        self.n_layer = n_layer
        self.n_expert = n_expert
        self.tied = tied
        # llm_type 70B, as llama-model.cpp's load_hparams names it for these architectures.
        self.is_70b = n_layer == 80 and ((arch == "llama" and n_expert != 8 and n_head != n_head_kv) or arch == "qwen2")
        self.n_attention_wv = 0
        self.i_attention_wv = 0
        self.i_ffn_down = 0


def _chosen_type(model: _Model, ftype: str, default: str, name: str, ne: tuple[int, ...]) -> str:
    """llama_tensor_get_type_impl for the five recipes (IQ, Q2/Q3 and MXFP4 branches left out: no
    recipe here reaches them)."""
    kind = category(name)
    new_type = default
    if kind == "output" or (model.tied and kind == "token_embd"):
        values, _ = block_bytes(new_type)
        if model.arch == "falcon" or ne[0] % values:
            new_type = "Q8_0"
        elif new_type != "Q8_0":
            new_type = "Q6_K"
    elif kind == "token_embd":
        pass  # the recipe's base type (llama.cpp changes it only for IQ and ternary recipes)
    elif kind in ("attn_v", "attn_qkv", "attn_kv_b"):  # category_is_attn_v
        if ftype in ("MOSTLY_Q4_K_M", "MOSTLY_Q5_K_M") and use_more_bits(model.i_attention_wv, model.n_attention_wv):
            new_type = "Q6_K"
        if model.is_70b and new_type in ("Q3_K", "Q4_K"):
            new_type = "Q5_K"  # 8 heads share each attn_v: more bits for a tensor 8x smaller
        if model.n_expert == 8:
            new_type = "Q8_0"
        model.i_attention_wv += 1
    elif kind == "attn_k":
        if model.n_expert == 8:
            new_type = "Q8_0"
    elif kind == "ffn_down":
        i_layer = model.i_ffn_down
        if model.n_expert > 1:  # experts' tensors are not in layer order: read the layer from the name
            i_layer = int(name.split(".")[1])
        if ftype in ("MOSTLY_Q4_K_M", "MOSTLY_Q5_K_M") and use_more_bits(i_layer, model.n_layer):
            new_type = "Q6_K"
        model.i_ffn_down += 1
    elif kind == "attn_output" and model.n_expert == 8 and ftype == "MOSTLY_Q4_K_M":
        new_type = "Q5_K"
    return new_type


def _fallback(name: str, ne: tuple[int, ...], target: str, notes: list[str]) -> str:
    """tensor_type_fallback: another type when a row is not a whole number of the target's blocks."""
    values, _ = block_bytes(target)
    if ne[0] % values == 0:
        return target
    if target not in FALLBACKS:
        raise ValueError(
            f"the GGUF tensor {name} has rows of {ne[0]:,} values, not a multiple of {target}'s block of "
            f"{values}, and llama.cpp has no fallback for {target}: it refuses this model in this recipe"
        )
    chosen = FALLBACKS[target]
    if ne[0] % block_bytes(chosen)[0]:
        chosen = "F16"
    notes.append(
        f"{name}: rows of {ne[0]:,} values are not a multiple of {target}'s block of {values}; "
        f"llama.cpp falls back to {chosen} for this tensor"
    )
    return chosen


def _order(name: str) -> tuple[int, str]:
    """llama_model_loader's weight_name_comparer: by block (tensors outside blocks first), then name."""
    match = re.match(r"blk\.(\d+)\.", name)
    return (int(match.group(1)) if match else -1, name)


def gguf_table(config: ModelConfig, report: ParamReport, fmt: WeightFormat) -> QuantTable:
    """Every array of ``report`` as the GGUF recipe ``fmt`` stores it (see the module's text)."""
    from dcsim.model import presets

    if fmt.name not in RECIPES:
        raise ValueError(f"{fmt.name} is not a GGUF recipe; GGUF recipes: {', '.join(RECIPES)}")
    family = registry.family_of(config)
    if family.naming is None:  # the families with the Hub's tensor names: decoder, moe
        raise ValueError(
            "GGUF recipes are laid out for decoder-only transformer families (decoder, moe); "
            f"{config.family or 'a Dense stack'} is not one: choose a qwix, GPTQ or AWQ format"
        )
    hparams = presets.resolved_hparams(config)
    arch = moe_arch(hparams) if family.experts else decoder_arch(config, hparams)
    ftype, default = RECIPES[fmt.name]
    linears = find_linears(config, report)

    # Each array's tensor and dims; parts of one tensor (GPT-2's attn_qkv) are joined along the
    # output features (ne1) in the order q, k, v, as c_attn holds them.
    placed: list[tuple[Any, str, tuple[int, ...]]] = []
    joined: dict[str, list[int]] = {}
    for row in report.arrays:
        name, _ = gguf_name(row.path, arch)
        ne = ne_of(row.path, tuple(row.shape), linears.get(row.path))
        placed.append((row, name, ne))
        if name in joined:
            total = joined[name]
            if len(ne) != len(total) or (len(ne) > 1 and ne[0] != total[0]):
                raise ValueError(f"the parts of the GGUF tensor {name} do not share a row length")
            axis = 1 if len(ne) > 1 else 0
            total[axis] += ne[axis]
        else:
            joined[name] = list(ne)
    whole = {name: tuple(ne) for name, ne in joined.items()}

    model = _Model(
        arch=arch,
        n_layer=int(hparams["num_layers"]),
        n_head=int(hparams["num_heads"]),
        n_head_kv=int(hparams["num_kv_heads"]),
        n_expert=int(hparams.get("num_experts", 0) or 0),
        tied="output.weight" not in whole,
    )
    model.n_attention_wv = sum(1 for name in whole if category(name) in ("attn_v", "attn_qkv", "attn_kv_b"))
    notes: list[str] = []
    types: dict[str, str] = {}
    for name in sorted(whole, key=_order):
        ne = whole[name]
        if allows_quantization(name, ne):
            types[name] = _fallback(name, ne, _chosen_type(model, ftype, default, name, ne), notes)
        else:
            types[name] = source_type(name, ne)

    arrays = []
    for row, name, ne in placed:
        kind = types[name]
        shared = tuple(ne) != whole[name]
        tensor = Tensor(
            name=name,
            shape=tuple(ne),
            dtype=kind,
            nbytes=tensor_bytes(tuple(ne), kind),
            concat_axis=(1 if len(ne) > 1 else 0) if shared else None,
            block=block_bytes(kind),
        )
        arrays.append(
            QuantArray(
                path=row.path,
                shape=tuple(row.shape),
                num_values=int(row.num_values),
                quantized=kind not in ("F32", "F16"),
                tensors=(tensor,),
            )
        )
    notes.append(
        f"Types chosen by llama.cpp's llama_tensor_get_type for {ftype.removeprefix('MOSTLY_')} "
        f"(src/llama-quant.cpp at {LLAMA_CPP_COMMIT[:10]}); norms, biases and the router stay F32 as the "
        "converter writes them."
    )
    notes.append(
        "The file dcsim writes carries no tokenizer (tokenizer.ggml.* metadata): a downloaded GGUF adds "
        "its vocabulary, 723,296 bytes for Llama 2's 32,000 tokens."
    )
    if hparams.get("rope_scaling"):
        rope = "rope_factors_long/short" if arch in ("phi3", "phimoe") else "rope_freqs"
        notes.append(
            f"llama.cpp's converter also writes {rope}.weight (a few hundred bytes of float32 frequency "
            "factors for the scaled rotary embedding), which is no parameter dcsim counts: not in this table."
        )
    return QuantTable(
        format=fmt, arrays=tuple(arrays), notes=tuple(notes), metadata=gguf_metadata(config, hparams, arch, ftype)
    )


def gguf_metadata(
    config: ModelConfig, hparams: Mapping[str, Any], arch: str, ftype: str
) -> tuple[tuple[str, Any], ...]:
    """The key-value pairs the file carries, in order: ints are written as uint32, strings as
    strings (``dcsim.quant.gguf_file`` writes and weighs them with the same types)."""
    gguf = _gguf()
    d_model = int(hparams["d_model"])
    heads = int(hparams["num_heads"])
    head_dim = int(hparams.get("head_dim") or 0) or d_model // heads
    ffn = int(hparams.get("ffn_dim") or 0)
    pairs: list[tuple[str, Any]] = [
        ("general.architecture", arch),
        ("general.name", config.preset or f"dcsim {config.family}"),
        (f"{arch}.context_length", int(hparams.get("max_positions") or 0)),
        (f"{arch}.embedding_length", d_model),
        (f"{arch}.block_count", int(hparams["num_layers"])),
        (f"{arch}.feed_forward_length", ffn),
        (f"{arch}.attention.head_count", heads),
        (f"{arch}.attention.head_count_kv", int(hparams["num_kv_heads"])),
    ]
    if arch != "gpt2":
        pairs.append((f"{arch}.rope.dimension_count", head_dim))
    if hparams.get("num_experts"):
        pairs.append((f"{arch}.expert_count", int(hparams["num_experts"])))
        pairs.append((f"{arch}.expert_used_count", int(hparams["experts_per_token"])))
        if arch != "llama":
            pairs.append((f"{arch}.expert_feed_forward_length", int(hparams["expert_ffn_dim"])))
    pairs.append(("general.file_type", int(gguf.LlamaFileType[ftype].value)))
    pairs.append(("general.quantization_version", int(gguf.GGML_QUANT_VERSION)))
    return tuple(pairs)


def gguf_bytes_on_device(
    array: QuantArray, shard_shape: tuple[int, ...], in_axes: tuple[int, ...] | None = None
) -> int:
    """Bytes of ``array``'s GGUF tensors that a device holding ``shard_shape`` of it holds.

    A GGUF tensor is stored a row at a time, a row a whole number of blocks: a device holding some
    rows holds those rows' blocks; a split along the row (the input features, ``in_axes`` of the
    array as ``dcsim.quant.linears.Linear`` gives them; by default its last axis, as for a token
    table or a 1-D array) must leave each device whole blocks, else ValueError naming the array.
    Pure: a function of the array's tensors and the shard's shape only.
    """
    shape = tuple(array.shape)
    shard = tuple(shard_shape)
    if len(shard) != len(shape) or any(
        not 1 <= part <= size or size % part for part, size in zip(shard, shape, strict=True)
    ):
        raise ValueError(f"the shard shape {shard} does not divide the shape {shape} of the array {array.path!r}")
    if in_axes is None:
        if len(shape) > 2:
            raise ValueError(
                f"the array {array.path!r} has {len(shape)} axes: give its input axes "
                "(dcsim.quant.linears.Linear.in_axes)"
            )
        # A 1-D array is one row; a token table (rows, width) is stored a token a row; a Flax Dense
        # kernel is (in, out).
        in_axes = (1,) if len(shape) == 2 and array.path.endswith("/embedding") else (0,)
    row = math.prod(shard[axis] for axis in in_axes)
    rows = math.prod(part for axis, part in enumerate(shard) if axis not in in_axes)
    total = 0
    for tensor in array.tensors:
        values, nbytes = tensor.block or block_bytes(tensor.dtype)
        if row % values:
            raise ValueError(
                f"a device's share of the array {array.path!r} has rows of {row:,} values, not whole "
                f"{tensor.dtype} blocks of {values}: split it along its output features instead"
            )
        total += rows * (row // values) * nbytes
    return total
