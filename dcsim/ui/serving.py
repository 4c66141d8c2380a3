"""The Serving page's settings, cached answers and tables.

The mesh and strategy are the Layout and Memory pages' settings under the same link keys
(``mesh``, ``strategy``, ``rules``). The page's own link keys, each checked when a link arrives
(``frame.setting_from_link``: a bad value is named in a warning and replaced by its default):

- ``weights`` and its options (``group``, ``bits``, ``tile``, ``qhead``): ``dcsim.ui.weights``;
  ``kv``: the cache's dtype;
- ``context``, ``concurrency``, ``source`` (an encoder-decoder's source tokens; ``auto``: the context, or
  Whisper's every encoder position);
- ``device`` (a catalog name, or ``none``) and ``devmem`` (a budget with its unit, used without a
  device; empty: no budget); ``reserve``; ``fullwin`` (``true``/``false``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dcsim.inputs import as_int, number_from_text
from dcsim.model import presets, registry
from dcsim.model.config import ModelConfig
from dcsim.quantities.amounts import parse_budget
from dcsim.serving import catalog, records, request, search
from dcsim.serving.engine import ServingReport, compute_serving, default_context
from dcsim.serving.request import Serving
from dcsim.ui import frame

T = TypeVar("T")

PAGE = "serving"
NO_DEVICE = "none"
AUTO = "auto"
DEFAULTS = {
    "kv": "bfloat16",
    "context": "4096",
    "concurrency": "1",
    "source": AUTO,
    "device": "h100-sxm",
    "devmem": "",
    "reserve": "0.1",
    "fullwin": "false",
}
MAX_SETTING_CHARS = 64
MAX_CACHED = 64


def seeded(name: str, parse: Callable[[str], Any], default: str | None = None) -> str:
    """The widget key of the Serving page's setting ``name`` (``frame.seeded_setting``), seeded with
    ``default`` (else ``DEFAULTS[name]``) when neither the link nor the session has a value."""
    return frame.seeded_setting(
        PAGE, name, DEFAULTS[name] if default is None else default, parse, limit=MAX_SETTING_CHARS
    )


def context_default(config: ModelConfig) -> str:
    """The context box's first value for ``config``: 4,096 tokens, or its positions when fewer
    (``dcsim.serving.engine.default_context``), so a freshly opened GPT-2 or Whisper is not refused."""
    return str(default_context(config))


def parsed(name: str, text: str, parse: Callable[[str], T], what: str) -> T:
    return frame.parsed_setting(PAGE, name, text, parse, what)


def _count(name: str, maximum: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        return str(as_int(number_from_text(text.strip()), name, maximum=maximum, shown=text))

    return parse


parse_context = _count("context", request.MAX_CONTEXT)
parse_concurrency = _count("concurrency", request.MAX_CONCURRENCY)


def parse_source(text: str) -> str:
    return AUTO if text.strip() in ("", AUTO) else _count("source", request.MAX_CONTEXT)(text)


def source_label(config: ModelConfig) -> str | None:
    """The source-length box's label for an encoder-decoder (None for any other model): what
    ``auto`` caches, the context, or for Whisper every encoder position (a clip padded to 30 s)."""
    if not registry.family_of(config).encoder_decoder:
        return None
    hparams = presets.resolved_hparams(config)
    auto = "the context"
    if hparams.get("audio_bins"):
        auto = f"every encoder position, {hparams['source_positions']:,}"
    return f"Source length (encoder tokens a sequence; auto: {auto})"


def parse_device(text: str) -> str:
    return NO_DEVICE if text == NO_DEVICE else catalog.get_accelerator(text).name


def parse_devmem(text: str) -> str:
    """A budget with its unit, or empty for none."""
    if text.strip():
        parse_budget(text)
    return text.strip()


def parse_reserve_text(text: str) -> str:
    return request.reserve_text(request.parse_reserve(text))


def parse_kv(text: str) -> str:
    return request.check_kv_dtype(text)


def parse_flag_text(text: str) -> str:
    if text not in ("true", "false"):
        raise ValueError(f"`fullwin` must be true or false, got {text!r}")
    return text


def device_label(name: str) -> str:
    if name == NO_DEVICE:
        return "none: type a budget"
    row = catalog.ACCELERATORS[name]
    return f"{row.title} ({row.stated} = {row.bytes:,} bytes)"


@st.cache_data(max_entries=MAX_CACHED, show_spinner=False)
def _answer(config_json: str, serving: Serving) -> tuple[ServingReport | None, search.MeshSearch | None, str | None]:
    config = ModelConfig.from_json(config_json)
    try:
        report = compute_serving(config, serving)
        return report, search.smallest_mesh(config, serving), None
    except ValueError as err:
        return None, None, str(err)


def answer(config: ModelConfig, serving: Serving) -> tuple[ServingReport | None, search.MeshSearch | None, str | None]:
    """The report, the smallest-mesh search and the refusal (one of report or refusal), cached."""
    return _answer(config.to_json(), serving)


def layers_frame(report: ServingReport) -> pd.DataFrame:
    """The per-layer table: layers that cache alike as one row."""
    rows = []
    for group in records.layer_groups(report.layers):
        layer = group[0]
        rows.append(
            {
                "layers": layer.path if len(group) == 1 else f"{layer.path} and {len(group) - 1:,} more like it",
                "kind": layer.kind,
                "window": f"{layer.window:,}" if layer.window else "none",
                "tokens held": f"{layer.tokens:,}",
                "bytes a token": f"{layer.bytes_per_token:,}",
                "bytes a sequence": f"{layer.bytes_for(report.serving.context, report.serving.full_windows):,}",
            }
        )
    return pd.DataFrame(rows)


def tried_frame(found: search.MeshSearch) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "mesh": item.mesh.text,
                "devices": f"{item.num_devices:,}",
                "serves the target": "yes" if item.serves else "no",
                "bytes a device": "-" if item.total_bytes_per_device is None else f"{item.total_bytes_per_device:,}",
                "max sequences": "-" if item.max_concurrency is None else f"{item.max_concurrency:,}",
                "why not": item.reason,
            }
            for item in found.tried
        ]
    )


def device_parts(report: ServingReport) -> dict[str, int]:
    """One device's bytes by part: weights, KV, other and, with a budget, the reserve and what is free."""
    parts = {
        "Weights": report.weights_bytes_per_device,
        "KV cache": report.kv_bytes_per_device,
        "Other (step index, buffers)": report.other_bytes_per_device,
    }
    if report.budget_bytes is not None and report.usable_bytes is not None:
        parts["Reserve"] = report.budget_bytes - report.usable_bytes
        parts["Free"] = max(report.usable_bytes - report.total_bytes_per_device, 0)
    return parts
