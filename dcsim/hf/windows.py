"""What a config.json says about serving that changes no count: which blocks attend within a
sliding window and how wide it is, how many positions the model was trained for, and whether its
rotary positions are scaled. The Serving page's cache is only as right as these.

Read the way transformers' own configuration classes read them, so each ``model_type`` means what
it means there:

- ``layer_types`` (transformers 4.53 on writes it for every model with local layers): the blocks
  marked ``sliding_attention`` are local, with ``sliding_window`` tokens.
- Without it: Gemma 2 alternates, even blocks local (``Gemma2Config``); Gemma 3 makes every block
  local but each ``sliding_window_pattern``-th (6: five local to one global, ``Gemma3TextConfig``);
  Qwen2 and its MoE and Qwen3 kin use a window only with ``use_sliding_window``, and then on the
  blocks from ``max_window_layers`` on; every other type (Mistral, Mixtral, Phi-3, ...) applies a
  ``sliding_window`` it sets to every block.
- ``rope_scaling`` (or transformers 5's ``rope_parameters``) with a ``rope_type``/``type`` other
  than ``default``: the positions are scaled, and a context past ``max_position_embeddings`` is
  allowed with a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcsim.inputs import as_bool, as_int, show
from dcsim.model import registry, schemas

SLIDING = "sliding_attention"
_QWEN_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
_GEMMA3_TYPES = frozenset({"gemma3", "gemma3_text"})
GEMMA3_PATTERN = 6  # Gemma3TextConfig's sliding_window_pattern


def _window(data: Mapping[str, Any], default: int | None = None) -> int | None:
    value = data.get("sliding_window", default)
    if value is None or value == 0:  # Qwen1.5-MoE writes 0 for none
        return None
    return as_int(value, "sliding_window", minimum=1, maximum=schemas.MAX_VOCAB)


def _chunked_blocks(data: Mapping[str, Any], num_layers: int) -> tuple[int | None, tuple[int, ...]]:
    """Llama 4's chunked-attention blocks (``layer_types``' ``chunked_attention``; without it, the
    rotary ones of ``no_rope_layers``, a NoPE block every fourth) as local blocks whose window is
    ``attention_chunk_size``: a chunked block attends to at most that many tokens, so a ring buffer
    of that many holds what it reads (vLLM sizes its chunked local attention so too)."""
    chunk = data.get("attention_chunk_size", 8192)
    if chunk is None:
        return None, ()
    chunk = as_int(chunk, "attention_chunk_size", maximum=schemas.MAX_VOCAB)
    types = data.get("layer_types")
    if types is None:
        rope = data.get("no_rope_layers") or [int((index + 1) % 4 != 0) for index in range(num_layers)]
        types = ["chunked_attention" if used else "full_attention" for used in rope]
    if not isinstance(types, list) or len(types) < num_layers:
        raise ValueError(f"`layer_types` must list one attention type a block ({num_layers:,}), got {show(types)}")
    return chunk, tuple(index for index in range(num_layers) if types[index] == "chunked_attention")


def _local_blocks(data: Mapping[str, Any], model_type: str, num_layers: int) -> tuple[int | None, tuple[int, ...]]:
    if model_type == "llama4_text":
        return _chunked_blocks(data, num_layers)
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers or not all(isinstance(t, str) for t in types):
            raise ValueError(
                f"`layer_types` must list one attention type a block ({num_layers:,} names such as "
                f"{SLIDING!r} or 'full_attention'), got {show(types)}"
            )
        local = tuple(index for index, kind in enumerate(types) if kind == SLIDING)
        window = _window(data) if local else None
        if local and window is None:
            raise ValueError(f"`layer_types` marks {len(local):,} blocks {SLIDING!r} but `sliding_window` is not set")
        return window, local
    if model_type == "gemma2":
        window = _window(data, 4096)
        return window, tuple(range(0, num_layers, 2)) if window else ()
    if model_type in _GEMMA3_TYPES:
        raw = data.get("sliding_window_pattern", data.get("_sliding_window_pattern", GEMMA3_PATTERN))
        pattern = as_int(raw, "sliding_window_pattern", minimum=1, maximum=schemas.MAX_BLOCKS)
        window = _window(data, 4096)
        return window, tuple(i for i in range(num_layers) if (i + 1) % pattern) if window else ()
    if model_type in _QWEN_TYPES:
        if not as_bool(data.get("use_sliding_window", False) or False, "use_sliding_window"):
            return None, ()
        start = as_int(data.get("max_window_layers", num_layers), "max_window_layers", minimum=0)
        window = _window(data)
        return window, tuple(range(start, num_layers)) if window else ()
    window = _window(data)
    return window, tuple(range(num_layers)) if window else ()


def _rope_scaled(data: Mapping[str, Any]) -> bool:
    for key in ("rope_scaling", "rope_parameters"):
        value = data.get(key)
        if isinstance(value, Mapping):
            kind = value.get("rope_type", value.get("type", "default"))
            if kind not in (None, "default"):
                return True
    return False


def serving_hparams(
    data: Mapping[str, Any], model_type: str, family: str, hparams: Mapping[str, Any]
) -> dict[str, Any]:
    """The serving-only hyperparameters of a file (``schemas.SERVING_ONLY``, and the positions of a
    model whose rotary positions hold no table), given what its reader took (``hparams``); empty
    for a family that does not decode with them."""
    windowed = registry.get(family)
    if not windowed.windows or "num_layers" not in hparams:
        return {}
    window, local = _local_blocks(data, model_type, hparams["num_layers"])
    found: dict[str, Any] = {"sliding_window": window or 0, "local_layers": local if window else ()}
    found["rope_scaling"] = _rope_scaled(data)
    positions = data.get("max_position_embeddings")
    rotary = windowed.rotary(hparams)
    # Rotary lengths change no count; past the positions hyperparameter's range they are passed over,
    # as the readers pass them over (the family's default then caps a served context).
    fits_range = isinstance(positions, int) and not isinstance(positions, bool) and 1 <= positions <= schemas.MAX_VOCAB
    if rotary and fits_range and "max_positions" not in hparams:
        found["max_positions"] = positions
    return found
