"""Configuration widgets shared by the pages, each seeded from and written back to the session's
configuration (``dcsim.ui.state``).

Browser-side limits (``min_value``, ``max_value``) are a convenience only: every value is checked
again here by ``dcsim.config`` before it becomes the configuration, and a rejected value is
reported with its rule while the last valid configuration stays in use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from dcsim import presets, units
from dcsim.config import DTYPES, FIELD_LIMITS, MAX_LAYERS, DenseLayer, ModelConfig
from dcsim.ui import state

_EDITOR_BASE = "dcsim.layers_base"


def number(label: str, field: str, config: ModelConfig, *, help: str | None = None, page: str = "") -> Any:
    """A number input for the integer ``field`` of the configuration (``page`` tells apart two
    inputs of one field on different pages)."""
    minimum, maximum, _why = FIELD_LIMITS[field]
    key = state.seed_widget(f"{page}.{field}", getattr(config, field))
    return st.number_input(label, min_value=minimum, max_value=maximum, step=1, key=key, help=help)


def layers_frame(layers: tuple[DenseLayer, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "features": pd.array([layer.features for layer in layers], dtype="int64"),
            "use_bias": pd.array([layer.use_bias for layer in layers], dtype="boolean"),
        }
    )


def layers_editor(config: ModelConfig) -> pd.DataFrame:
    """An editable table of Dense layers: rows added and removed, features and bias per row.

    The editor keeps its edits as changes against the table it was first given, so that table
    stays fixed while its state lives; it is rebuilt from the configuration whenever the state is
    gone (the page was left, or an upload replaced the configuration).
    """
    key = f"{state.WIDGET_PREFIX}layers.{state.generation()}"
    if key not in st.session_state or _EDITOR_BASE not in st.session_state:
        st.session_state[_EDITOR_BASE] = layers_frame(config.layers)
    try:
        return _editor(key)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        # Edits that do not fit the table (only a tampered client sends them; Streamlit raises
        # AttributeError on rows that are not objects): start afresh
        # under a new key, since this run has already registered the old one.
        del st.session_state[key]
        st.session_state[_EDITOR_BASE] = layers_frame(config.layers)
        st.warning("The layer edits could not be applied and were reset to the configuration.")
        return _editor(f"{state.WIDGET_PREFIX}layers.{state.next_generation()}")


def _editor(key: str) -> pd.DataFrame:
    return st.data_editor(
        st.session_state[_EDITOR_BASE],
        key=key,
        num_rows="dynamic",
        hide_index=False,
        width="stretch",
        column_config={
            "_index": st.column_config.NumberColumn("#", help="Layer order: Dense_0 first"),
            "features": st.column_config.NumberColumn(
                "Features (output width)",
                min_value=1,
                max_value=FIELD_LIMITS["features"][1],
                step=1,
                format="%d",
                required=True,
            ),
            "use_bias": st.column_config.CheckboxColumn("Bias", default=True, help="Flax's default: a bias per layer"),
        },
    )


def layers_from_frame(frame: pd.DataFrame) -> tuple[DenseLayer, ...]:
    """The edited table as Dense layers; raises ``ValueError`` naming the row that is wrong."""
    if len(frame) == 0:
        raise ValueError("the model needs at least one Dense layer: add a row")
    if len(frame) > MAX_LAYERS:
        raise ValueError(f"the model may hold at most {MAX_LAYERS} layers, got {len(frame):,}")
    layers = []
    for position, (features, use_bias) in enumerate(zip(frame["features"], frame["use_bias"], strict=True), 1):
        if pd.isna(features):
            raise ValueError(
                f"layer {position} has no width: fill in its features (1 to {FIELD_LIMITS['features'][1]:,})"
            )
        bias = True if pd.isna(use_bias) else bool(use_bias)
        try:
            layers.append(DenseLayer(features=features, use_bias=bias))
        except (TypeError, ValueError) as err:
            raise ValueError(f"layer {position}: {err}") from None
    return tuple(layers)


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


DENSE = "dense"
OPENED = "opened"  # the model opened from a file this session, under its own name
_FORM_VALUES = state.WIDGET_PREFIX + "form.values"  # the form's values as of the last run, by widget prefix
_PINNED = state.WIDGET_PREFIX + "form.pinned"  # hyperparameters a person set in the form, by widget prefix
# (Both live under the widgets' prefix, so a new model from outside the widgets, an upload or a
# reset, forgets them with the widgets: ``state.set_config(..., replace_widgets=True)``.)


def model_choice(config: ModelConfig) -> str:
    """The model to count: ``DENSE`` (the editable stack), ``OPENED`` (the model this session
    opened from a file, while there is one) or a preset's name."""
    opened = state.last_opened()
    options = [DENSE, *([OPENED] if opened is not None else []), *presets.PRESETS]

    def label(name: str) -> str:
        if name == DENSE:
            return "Dense stack (edit the layers below)"
        if name == OPENED:
            return presets.model_title(opened)
        row = presets.PRESETS[name]
        return f"{row.title} · {row.family} · {row.published_params:,} published"

    current = config.preset or (OPENED if config.origin is not None else DENSE)
    key = state.seed_widget("preset", current)
    return st.selectbox("Model", options, format_func=label, key=key, help="A preset reproduces a published count.")


def dtype_choice(config: ModelConfig, *, page: str = "") -> str:
    """The storage dtype of the byte figures (``page`` tells apart the boxes of different pages)."""
    key = state.seed_widget(f"{page}.dtype", config.dtype)
    return st.selectbox(
        "Storage dtype",
        DTYPES,
        key=key,
        help="The dtype the bytes per shard count in (bytes a value: float32 4, bfloat16 and float16 2, int8 1, "
        "float64 8). The raw float32 estimate stays beside it.",
    )


def hparam_form(base: ModelConfig) -> tuple[tuple[tuple[str, Any], ...], str | None]:
    """One widget per hyperparameter of ``base``'s family that changes its count, seeded from it.

    Returns the overrides the widgets make (against ``base``'s preset, or its family's defaults for
    a model opened from a file) and the first value or rule the widgets break, if any. A derived
    value (``ffn_dim`` from ``d_model``, tied ``num_kv_heads`` from ``num_heads``) follows its
    source until the person sets it (``presets.follow``, run in the widgets' callbacks).
    """
    family = base.family
    assert family is not None
    prefix = f"h.{base.preset or OPENED}."
    current = presets.resolved_hparams(base)
    specs = presets.schema(family)
    keys = {spec.name: state.seed_widget(prefix + spec.name, _widget_value(spec, current[spec.name])) for spec in specs}
    values, error = {}, None
    for spec in specs:
        try:
            values[spec.name] = _parsed(spec, st.session_state[keys[spec.name]])
        except (TypeError, ValueError) as err:
            values[spec.name] = current[spec.name]
            error = error or str(err)
    st.session_state.setdefault(_FORM_VALUES, {})[prefix] = values
    shown = presets.applicable(family, values)
    columns = st.columns(3)
    for index, spec in enumerate(spec for spec in specs if spec.name in shown):
        with columns[index % 3]:
            _hparam_widget(spec, keys[spec.name], on_change=_follow, args=(family, prefix, spec.name))
    overrides = presets.overrides_from(family, presets.base_hparams(base), values)
    if error is None:
        try:
            presets.check_hparams(family, values)
        except ValueError as err:
            error = str(err)
    return tuple(sorted(overrides.items())), error


def _follow(family: str, prefix: str, name: str) -> None:
    """After ``name`` was edited, move the values that derive from it (``presets.follow``)."""
    pinned = st.session_state.setdefault(_PINNED, {}).setdefault(prefix, set())
    pinned.add(name)
    before = st.session_state.get(_FORM_VALUES, {}).get(prefix)
    if before is None:
        return
    spec = presets.hparam(family, name, family)
    try:
        after = {**before, name: _parsed(spec, st.session_state[prefix_key(prefix, name)])}
    except (TypeError, ValueError):
        return
    for moved, value in presets.follow(family, before, after, pinned).items():
        if value != after[moved]:
            st.session_state[prefix_key(prefix, moved)] = _widget_value(presets.hparam(family, moved, family), value)


def prefix_key(prefix: str, name: str) -> str:
    return state.WIDGET_PREFIX + prefix + name


def _parsed(spec: presets.HParam, value: Any) -> Any:
    return spec.parse(value) if spec.kind == "ints" else spec.check(value)


def _widget_value(spec: presets.HParam, value: Any) -> Any:
    return ",".join(str(entry) for entry in value) if spec.kind == "ints" else value


def _hparam_widget(spec: presets.HParam, key: str, **callback: Any) -> Any:
    label = spec.name
    if spec.kind == "int":
        return st.number_input(
            label, min_value=spec.minimum, max_value=spec.maximum, step=1, key=key, help=spec.description, **callback
        )
    if spec.kind == "bool":
        return st.checkbox(label, key=key, help=spec.description, **callback)
    if spec.kind == "choice":
        return st.selectbox(label, spec.choices, key=key, help=spec.description, **callback)
    return st.text_input(label, key=key, help=f"{spec.description}; {spec.rule()}", max_chars=64, **callback)
