"""Configuration widgets shared by the pages, each seeded from and written back to the session's
configuration (``dcsim.ui.state``).

Browser-side limits (``min_value``, ``max_value``) are a convenience only: every value is checked
again here by ``dcsim.model.config`` before it becomes the configuration, and a rejected value is
reported with its rule while the last valid configuration stays in use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from dcsim.model.config import DTYPES, FIELD_LIMITS, ModelConfig
from dcsim.quantities import units
from dcsim.ui import state


def number(
    label: str, field: str, config: ModelConfig, *, help: str | None = None, page: str = "", on_change: Any = None
) -> Any:
    """A number input for the integer ``field`` of the configuration (``page`` tells apart two
    inputs of one field on different pages)."""
    minimum, maximum, _why = FIELD_LIMITS[field]
    key = state.seed_widget(f"{page}.{field}", getattr(config, field))
    return state.held(st.number_input)(
        label, min_value=minimum, max_value=maximum, step=1, key=key, help=help, on_change=on_change
    )


def text_counts(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``frame`` with each count column as exact text with separators (``669,706``), so every
    viewer reads the same figure whatever their browser's locale."""
    return frame.assign(**{column: frame[column].map(units.count) for column in columns})


_MIME = {".csv": "text/csv", ".json": "application/json"}


def download(label: str, data: pd.DataFrame | str, file_name: str, where: Any = st) -> None:
    """A download button (in ``where``, a column or the sidebar) for a table as CSV or for text
    such as JSON; the type follows the file name. A click does not rerun the page."""
    st_data = data.to_csv(index=False) if isinstance(data, pd.DataFrame) else data
    where.download_button(
        label,
        data=st_data,
        file_name=file_name,
        mime=_MIME[file_name[file_name.rindex(".") :]],
        icon=":material/download:",
        on_click="ignore",
    )


def opened(label: str, key: str) -> Any:
    """An expander whose content is drawn only while it is open: the expander, or None while it is
    closed (its open state is ``st.session_state[key]``, and opening it reruns the page).

    A first visit's figures are painted once every script the run's elements need has loaded, so
    what is drawn only when opened does not delay them: the grid and chart libraries behind big
    tables and charts, and the editors under the Model page's form."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def share_table(frame: pd.DataFrame, **labels: str) -> None:
    """A table of parameter counts with ``num_arrays``, ``num_params`` and ``percent_of_total``
    (``tables.layers_frame``, ``breakdown.breakdown_frame``, ``breakdown.depth_frame``), counts as
    exact text; ``labels`` names its other columns, e.g. ``path="Layer"``."""
    st.dataframe(
        text_counts(frame, "num_params"),
        hide_index=True,
        column_config={
            **labels,
            "num_arrays": "Arrays",
            "num_params": st.column_config.TextColumn("Parameters"),
            "percent_of_total": st.column_config.NumberColumn("Share of total", format="%.2f%%"),
        },
    )


def apply(config: ModelConfig, **changes: Any) -> tuple[ModelConfig, str | None]:
    """Validate ``changes`` to ``config``; keep it and return no error, or return the old one with
    the error to show."""
    try:
        new = dataclasses.replace(config, **changes)
    except (TypeError, ValueError) as err:
        return config, str(err)
    state.set_config(new)
    return new, None


def dtype_choice(config: ModelConfig, *, page: str = "", on_change: Any = None) -> str:
    """The storage dtype of the byte figures (``page`` tells apart the boxes of different pages)."""
    key = state.seed_widget(f"{page}.dtype", config.dtype)
    return state.held(st.selectbox)(
        "Storage dtype",
        DTYPES,
        key=key,
        on_change=on_change,
        help="The dtype the bytes per shard count in (bytes a value: float32 4, bfloat16 and float16 2, int8 1, "
        "float64 8). The raw float32 estimate stays beside it.",
    )
