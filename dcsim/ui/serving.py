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

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dcsim.model import presets, registry
from dcsim.model.config import ModelConfig
from dcsim.quant.formats import WeightFormat
from dcsim.requests.serving import SERVING
from dcsim.serving import catalog, records, search
from dcsim.serving.engine import ServingReport, compute_serving, context_limit, default_context
from dcsim.serving.request import Serving
from dcsim.sharding import meshes
from dcsim.ui import cache, frame

T = TypeVar("T")

PAGE = "serving"
NO_DEVICE = "none"
AUTO = "auto"
# The page's own settings (dcsim.requests.serving.SERVING): each one's default, as the link writes it.
DEFAULTS = {field.link: field.default for field in SERVING.fields}
MAX_CACHED = 64


def seeded(name: str, default: str | None = None) -> str:
    """The widget key of the Serving page's setting ``name`` (``frame.seeded_setting``), seeded with
    ``default`` (else its declared default) when neither the link nor the session has a value."""
    field = SERVING[name]
    return frame.seeded_setting(
        PAGE, name, field.default if default is None else default, field.read, limit=field.limit
    )


def context_default(config: ModelConfig) -> str:
    """The context box's first value for ``config``: 4,096 tokens, or its positions when fewer
    (``dcsim.serving.engine.default_context``), so a freshly opened GPT-2 or Whisper is not refused."""
    return str(default_context(config))


def parsed(name: str, text: str, what: str) -> str:
    """The setting ``name``'s text as the link writes it, checked by its declaration
    (``frame.parsed_setting``: on a bad edit, the error and the last valid value)."""
    return frame.parsed_setting(PAGE, name, text, SERVING[name].read, what)


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


@st.cache_data(max_entries=MAX_CACHED, show_spinner=False)
def _serves(config_json: str, serving: Serving) -> bool:
    try:
        compute_serving(ModelConfig.from_json(config_json), serving)
    except ValueError:
        return False
    return True


def serves_on(config: ModelConfig, serving: Serving) -> Callable[[meshes.MeshSpec], bool]:
    """Whether ``serving`` on another mesh is served (``compute_serving`` takes it), a context past
    the model's positions taken at them: the mesh is offered apart from the context."""
    try:
        limit = context_limit(config)
    except (TypeError, ValueError):  # a model that is not served: no mesh serves it
        return lambda mesh: False
    request = serving if limit is None else dataclasses.replace(serving, context=min(serving.context, limit))
    return lambda mesh: _serves(config.to_json(), dataclasses.replace(request, mesh=mesh))


def serves_with(config: ModelConfig, serving: Serving) -> Callable[[WeightFormat], bool]:
    """Whether ``serving`` with other weight options is served, on the same mesh, a context past
    the model's positions taken at them (``serves_on``)."""
    # Each option given, not the format alone: a request keeps its own options over a format's.
    options = ("group", "bits", "tile", "quantize_head")
    return lambda fmt: serves_on(
        config,
        dataclasses.replace(serving, weights=fmt.name, **{option: getattr(fmt, option) for option in options}),
    )(serving.mesh)


@st.cache_data(max_entries=MAX_CACHED, show_spinner="Trying what would make it serve…")
def _verdict(config_json: str, serving: Serving) -> Any:
    from dcsim.serving import remedies

    config = ModelConfig.from_json(config_json)
    report, found, refusal = _answer(config_json, serving)
    if report is None:
        return refusal
    return remedies.verdict(config, report, cache.count(config), found)


def verdict(config: ModelConfig, serving: Serving) -> Any:
    """The verdict for the asked mesh with the remedies tried (``dcsim.serving.remedies``), None
    without a budget, or the refusal's text; cached."""
    return _verdict(config.to_json(), serving)


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
    if report.budget_bytes is not None and report.usable_bytes is not None and report.fits:
        # when it does not fit, the parts run past the device's line (the chart draws that overflow):
        # stacking the reserve after them would draw memory the device does not have
        parts["Free"] = report.usable_bytes - report.total_bytes_per_device
        parts["Reserve"] = report.budget_bytes - report.usable_bytes
    return parts
