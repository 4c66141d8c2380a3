"""The readings of Llama 4 that its table entries (``dcsim.hf.table``) cannot say: which blocks
have experts, and the multimodal file's nested ``text_config`` and ``vision_config``.

``Llama4TextConfig`` puts experts in the blocks of ``moe_layers``, or, when that is null, in every
``interleave_moe_layer_step``-th block (Scout: 1, every block; Maverick: 2, every other one); the
others are dense, ``intermediate_size_mlp`` wide. The multimodal ``Llama4Config`` nests the language
model's fields in ``text_config`` (read by the ``llama4_text`` entry itself) and the tower's in
``vision_config`` (``Llama4VisionConfig``'s defaults when absent). See ``dcsim.hf.readers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dcsim.hf.fields import Fields
from dcsim.hf.kinds import size_table
from dcsim.hf.language import ModelType
from dcsim.hf.table import MODEL_TYPES
from dcsim.inputs import as_int, show
from dcsim.model import schemas

# (hyperparameter, vision_config field, Llama4VisionConfig's default), from sizes.json beside this module
VISION_FIELDS = size_table("llama4_vision")


def _moe_layers(fields: Fields) -> None:
    """The dense blocks: those not in ``moe_layers`` (numbers past the last block build nothing, as
    in transformers), else not each ``interleave_moe_layer_step``-th."""
    layers = fields.hparams["num_layers"]
    listed = fields.data.get("moe_layers")
    if listed is None:
        step = as_int(
            fields.data.get("interleave_moe_layer_step", 1), "interleave_moe_layer_step", maximum=schemas.MAX_BLOCKS
        )
        moe = set(range(step - 1, layers, step))
    elif not isinstance(listed, list) or len(listed) > schemas.MAX_BLOCKS:
        raise TypeError(f"`moe_layers` must be a list of block numbers, got {show(listed)}")
    else:
        moe = {as_int(entry, f"moe_layers[{index}]", minimum=0) for index, entry in enumerate(listed)}
    dense = tuple(index for index in range(layers) if index not in moe)
    fields.set(dense_layers=dense)
    fields.source["dense_layers"] = "moe_layers"
    fields.text["blocks"] = (
        "routed experts and a shared expert in every block"
        if not dense
        else f"routed experts and a shared expert in {layers - len(dense):,} blocks, a dense MLP in {len(dense):,}"
    )


def _nested(fields: Fields, key: str) -> Mapping[str, Any]:
    value = fields.data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"`{key}` must be a JSON object of the model's fields, got {show(value)}")
    return value


def multimodal(fields: Fields, read: Callable[[ModelType, Fields], str]) -> None:
    """``Llama4Config``: the language model from ``text_config``, read (by ``read``, the readers'
    own) as a ``llama4_text`` file; the tower from ``vision_config``; each field's source named
    inside its object."""
    text = Fields(_nested(fields, "text_config"), fields.family)
    fields.text["text"] = read(MODEL_TYPES["llama4_text"], text).partition("; ")[0]
    fields.notes += text.notes
    vision = Fields(_nested(fields, "vision_config"), fields.family)
    for name, key, default in VISION_FIELDS:
        vision.take(name, key, default)
    for part, prefix in ((text, "text_config"), (vision, "vision_config")):
        fields.set(**part.hparams)
        fields.source |= {name: f"{prefix}.{key}" for name, key in part.source.items()}
    fields.text["vision"] = f"{fields.hparams['vision_layers']:,}"


QUIRKS: Mapping[str, Callable[[Fields], None]] = {"llama4_moe_layers": _moe_layers}
