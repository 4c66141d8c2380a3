"""The weight format a page shows bytes in: its widgets, its link keys and its table.

Link keys, each checked when a link arrives (``frame.seeded_setting``: a bad value is named in a
warning and replaced by its default): ``weights`` (a format of ``dcsim.quant.formats.FORMATS``, or
``none`` on the Model page: the storage dtype alone), ``group`` (GPTQ and AWQ), ``bits`` (GPTQ),
``tile`` (qwix's tiled formats) and ``qhead`` (``true``: the output head quantized too). An option
is in the link only when the format has it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from dcsim.model import breakdown
from dcsim.model.config import ModelConfig
from dcsim.quant import formats
from dcsim.quant.formats import FORMATS, WeightFormat, check_format
from dcsim.quant.tables import QuantTable
from dcsim.quantities import units
from dcsim.requests import is_on
from dcsim.requests.weights import WEIGHTS
from dcsim.ui import frame, state, turns

NONE = "none"
MAX_CACHED = 32


def _name_or_none(text: str) -> str:
    return NONE if text == NONE else WEIGHTS["weights"].read(text)


def _seeded_setting(page: str, name: str, default: str | None = None) -> str:
    """The widget key of ``page``'s weight setting ``name``, seeded and checked by its declaration
    (``dcsim.requests.weights.WEIGHTS``)."""
    field = WEIGHTS[name]
    return frame.seeded_setting(
        page, name, field.default if default is None else default, field.read, limit=field.limit
    )


def label(name: str) -> str:
    return "none: the storage dtype" if name == NONE else f"{name}: {formats.SUMMARIES[name]}"


def format_inputs(page: str, default: str, *, allow_none: bool) -> tuple[WeightFormat | None, dict[str, str]]:
    """The format widgets (the name, then the options the format has) and the link keys they set.
    Returns None for ``none``."""
    names = ((NONE,) if allow_none else ()) + FORMATS
    name = state.held(st.selectbox)(
        "Weights format",
        names,
        key=frame.seeded_setting(
            page, "weights", default, _name_or_none if allow_none else WEIGHTS["weights"].read, limit=32
        ),
        format_func=label,
        help="Plain dtypes; qwix's JAX-native quantization; GPTQ, AWQ, bitsandbytes and FP8 as their tools write "
        "them; llama.cpp's GGUF recipes. Bytes are the format's exact tensors (docs/quantized.md).",
    )
    if name == NONE:
        return None, {}  # the storage dtype alone: nothing in the link
    kind = check_format(name).kind
    params = {"weights": name}
    options: dict[str, Any] = {}
    columns = st.columns(3)
    if kind in ("gptq", "awq"):
        text = state.held(columns[0].text_input)("Group (input features a scale)", key=_seeded_setting(page, "group"))
        params["group"] = frame.parsed_setting(page, "group", text, WEIGHTS["group"].read, "Group")
        options["group"] = int(params["group"])
    if kind == "gptq":
        bits = state.held(columns[1].selectbox)("Bits", ("4", "8"), key=_seeded_setting(page, "bits"))
        params["bits"] = bits
        options["bits"] = int(bits)
    if kind == "qwix" and name != "int8":
        text = state.held(columns[0].text_input)(
            "Tile (values along the contraction)", key=_seeded_setting(page, "tile")
        )
        params["tile"] = frame.parsed_setting(page, "tile", text, WEIGHTS["tile"].read, "Tile")
        options["tile"] = int(params["tile"])
    if kind in ("qwix", "gptq", "awq"):
        head = state.held(columns[2].selectbox)(
            "Output head",
            ("false", "true"),
            key=_seeded_setting(page, "qhead"),
            format_func=lambda text: "quantized too" if text == "true" else "kept unquantized (the tools' default)",
        )
        params["qhead"] = head
        options["quantize_head"] = is_on(WEIGHTS["qhead"], head)
    try:
        return check_format(name, **options), params
    except ValueError as err:  # an option this format has no use for, as links can carry
        st.error(frame.plain(f"Weights format: {err}. Showing {name} with its defaults."), icon=":material/error:")
        return check_format(name), {"weights": name}


@st.cache_data(max_entries=MAX_CACHED, show_spinner=False)
def _table(config_json: str, fmt: WeightFormat) -> tuple[QuantTable | None, str | None]:
    from dcsim.model.count import count_params
    from dcsim.quant import layouts

    config = ModelConfig.from_json(config_json)
    try:
        return layouts.weight_table(config, count_params(config), fmt), None
    except ValueError as err:
        return None, str(err)


def table(config: ModelConfig, fmt: WeightFormat) -> tuple[QuantTable | None, str | None]:
    """The model's arrays in ``fmt``, or the format's refusal; cached (bounded)."""
    return _table(config.to_json(), fmt)


def arrays_frame(table: QuantTable, on_device: dict[str, int] | None = None) -> pd.DataFrame:
    """Each array with its format tensors, shape, dtypes and bytes, grouped as the Model page
    groups (embeddings, blocks, norms, head)."""
    rows = []
    for array in table.arrays:
        row = {
            "group": breakdown.group_of(array.path),
            "array": array.path,
            "shape": " x ".join(f"{size:,}" for size in array.shape),
            "dtypes": ", ".join(dict.fromkeys(tensor.dtype for tensor in array.tensors)),
            "bytes": f"{array.nbytes:,}",
        }
        if on_device is not None:
            row["bytes a device"] = f"{on_device[array.path]:,}"
        row["tensors"] = ", ".join(tensor.name for tensor in array.tensors)
        rows.append(row)
    frame_ = pd.DataFrame(rows)
    order = {name: index for index, name in enumerate(dict.fromkeys(frame_["group"]))} if rows else {}
    return frame_.sort_values("group", key=lambda column: column.map(order), kind="stable") if rows else frame_


def summary_line(table: QuantTable) -> str:
    """The payload, bits a weight and what is quantized, in one line."""
    return (
        f"{table.format.label}: {units.bytes_exact(table.payload_bytes)} of tensors "
        f"({float(table.bits_per_weight):.3f} bits a weight, from the exact bytes; the file adds its header); "
        f"{units.count(table.quantized_params)} of {units.count(table.total_params)} parameters quantized"
    )


def show_table(table: QuantTable, on_device: dict[str, int] | None = None, *, in_expander: bool = True) -> None:
    """The summary, the format's notes and the arrays table (in an expander of its own unless
    already in one), with a JSON download."""
    st.write(frame.plain(summary_line(table) + "."))
    for note in table.notes:
        st.caption(frame.plain(note.rstrip(".") + "."))
    label = f"Every array in {table.format.name}: its tensors, shapes, dtypes and bytes"
    with st.expander(label) if in_expander else st.container():
        if not in_expander:
            st.markdown(f"**{label}**")
        st.dataframe(arrays_frame(table, on_device), hide_index=True, width="stretch")
    from dcsim.quant.tables import weights_record

    st.download_button(
        f"Download the {table.format.name} table (JSON)",
        json.dumps(weights_record(table), indent=2),
        file_name=f"weights-{table.format.name}.json",
        mime="application/json",
        icon=":material/download:",
        key=f"weights.download.{table.format.name}",
    )


def write_button(table: QuantTable, key: str) -> None:
    """For a format with a file and a model of at most ``write.MAX_WRITE_BYTES`` in it: write the
    real file in a temporary folder, weigh it, read it back, and delete it."""
    from dcsim.quant import write

    if table.format.kind in ("plain", "qwix"):
        return
    predicted = write.predicted_file_bytes(table)
    if predicted > write.MAX_WRITE_BYTES:
        st.caption(
            frame.plain(
                f"The {table.format.name} file would be {predicted:,} bytes, above the {write.MAX_WRITE_BYTES:,}-byte "
                "limit of writing it here; `python -m dcsim serve --weights ... --write DIR` has the same limit."
            )
        )
        return
    if st.button(f"Write the {table.format.name} file and weigh it", key=key, icon=":material/save:"):
        with turns.waiting("Writing zeros of the right shapes with the format's own library…"):
            try:
                with tempfile.TemporaryDirectory(prefix="dcsim-weights-") as folder:
                    written: Any = write.write(table, folder)
            except (OSError, ValueError) as err:
                written = str(err)
        if isinstance(written, str):
            st.error(frame.plain(f"Writing the file failed: {written}"), icon=":material/error:")
            return
        same = "equal to the byte" if written.file_bytes == written.predicted_file_bytes else "they differ"
        st.success(
            frame.plain(
                f"Written and read back: {written.file_bytes:,} bytes on disk, dcsim predicted "
                f"{written.predicted_file_bytes:,} ({same}); {written.tensors_checked:,} tensors' names, shapes and "
                "dtypes checked. The file was deleted."
            )
        )


def nearest_options(fmt: WeightFormat, accepts: Callable[[WeightFormat], bool]) -> dict[str, int | bool] | None:
    """The options of ``fmt`` nearest what was asked that ``accepts`` takes: the output head left
    unquantized (the tools' default; a tied head must be), else the group or the tile at the
    nearest power of two (the smaller of two as near), with the head as asked, then unquantized.
    The options changed, by name, or None when nothing near is taken."""
    heads = [False] if fmt.quantize_head else []
    if heads and accepts(dataclasses.replace(fmt, quantize_head=False)):
        return {"quantize_head": False}
    for option in ("group", "tile"):
        asked = getattr(fmt, option)
        if asked is None:
            continue
        powers = [1 << power for power in range(formats.MAX_GROUP.bit_length()) if 1 << power != asked]
        for size in sorted(powers, key=lambda size: (abs(math.log2(size / asked)), size > asked)):
            tried = dataclasses.replace(fmt, group=size) if option == "group" else dataclasses.replace(fmt, tile=size)
            for head in [fmt.quantize_head, *heads]:
                if accepts(dataclasses.replace(tried, quantize_head=head)):
                    return {option: size} | ({} if head == fmt.quantize_head else {"quantize_head": head})
    return None


_OPTION_LINKS = {"quantize_head": "qhead", "group": "group", "tile": "tile"}


def offer_options(
    where: Any, page: str, config: ModelConfig, fmt: WeightFormat, accepts: Callable[[WeightFormat], bool]
) -> None:
    """When ``accepts`` refuses ``fmt`` (after a switch of model, a group wider than a shard's input
    features, a quantized head that is a tied token table), one click to the nearest options it
    takes (``nearest_options``), in ``where``."""
    if accepts(fmt):
        return
    nearest = nearest_options(fmt, accepts)
    if nearest is None:
        return
    said = [f"a {option} of {value:,}" for option, value in nearest.items() if option != "quantize_head"]
    if "quantize_head" in nearest:
        said.append("the output head unquantized")
    frame.offer(
        where,
        f"Use {' and '.join(said)}, the nearest {fmt.name} this model takes",
        {
            frame.setting_key(page, _OPTION_LINKS[option]): "false" if value is False else str(value)
            for option, value in nearest.items()
        },
        help=f"{fmt.name} with the options asked cannot hold {frame.describe(config)}; this changes as few as it can.",
    )
