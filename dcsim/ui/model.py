"""The Model page's form: the model box, the shared settings, the Dense layer editor and a family's
hyperparameters, applied in the widgets' callbacks.

Streamlit runs a widget's callback before the rerun it causes, so the configuration is already the
widgets' when the page starts drawing: the page draws its answer first, once, from the
configuration, and a shard change reaches the browser as the run's first figures instead of after
two dozen widgets. ``edited`` is that callback; the page also calls it after drawing the form, for
a client that changed widget state without one (AppTest's ``session_state``), and reruns if that
changed anything.

A value the rules refuse keeps the last valid configuration, with the reason kept for the answer to
show (``edit_error``); the shard count, dtype, seed and batch size still apply.

The Hub id box under the model box is ``dcsim.ui.hub``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from dcsim.model import presets, schemas
from dcsim.model.config import FIELD_LIMITS, MAX_LAYERS, DenseLayer, ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.ui import cache, frame, hub, state, widgets

DENSE = "dense"
OPENED = "opened"  # the model opened from a file this session, under its own name
SETTINGS = ("num_shards", "dtype", "batch_size", "seed")
MODEL_KEY = state.WIDGET_PREFIX + "preset"
_EDITOR_BASE = "dcsim.layers_base"
# The editors' expanders: drawn only while open (``widgets.opened``), so a first visit's answer
# does not wait for the data grid's and the input widgets' scripts to load.
EDIT_LAYERS = "model.edit_layers"
EDIT_HPARAMS = "model.edit_hparams"
_EDITOR_COLUMNS = ("features", "use_bias")
# The hyperparameter form's values as of the last run, and the values a person set in it, by
# widget prefix. Both live under the widgets' prefix, so a model from outside the widgets (an
# upload, a reset) forgets them with the widgets (``state.set_config(..., replace_widgets=True)``).
_FORM_VALUES = state.WIDGET_PREFIX + "form.values"
_PINNED = state.WIDGET_PREFIX + "form.pinned"
# The values the form moved in a callback (a derived value following its source), by widget key:
# (what the browser showed before, what the form moved it to), until that widget's next change.
_MOVED = state.WIDGET_PREFIX + "form.moved"
# The fields whose callbacks ran since the form was last drawn: the edits of one rerun.
_EDITED_NOW = state.WIDGET_PREFIX + "form.edited_now"


def _key(field: str) -> str:
    return f"{state.WIDGET_PREFIX}.{field}"  # as ``widgets.number`` and ``widgets.dtype_choice`` key them


def _editor_key() -> str:
    return f"{state.WIDGET_PREFIX}layers.{state.generation()}"


def form_prefix(base: ModelConfig) -> str:
    return f"h.{base.preset or OPENED}."


def edit_error() -> str | None:
    """Why the form's values were refused, while they are on screen."""
    if MODEL_KEY not in st.session_state:  # a fresh form, seeded from the configuration: nothing refused
        st.session_state.pop(state.EDIT_ERROR, None)
    return st.session_state.get(state.EDIT_ERROR)


def choice_of(config: ModelConfig) -> str:
    return config.preset or (OPENED if config.origin is not None else DENSE)


def _dense_base(config: ModelConfig) -> ModelConfig:
    return config if config.is_dense else state.last_dense()


def _family_base(config: ModelConfig, choice: str) -> ModelConfig:
    if choice == OPENED:
        opened = config if config.origin is not None else state.last_opened()
        assert opened is not None  # OPENED is offered only while there is one
        return opened
    return config if config.preset == choice else ModelConfig(preset=choice)


# --- the callback ------------------------------------------------------------------------------


def on_edit() -> None:
    """The form's widgets' callback: ``edited``, whose answer a callback has no use for."""
    edited()


def edited() -> bool:
    """Make the form's values the configuration, or keep the last valid one with the reason.
    Returns whether the configuration or the reason changed."""
    config, before = state.config(), st.session_state.get(state.EDIT_ERROR)
    settings = {field: st.session_state.get(_key(field), getattr(config, field)) for field in SETTINGS}
    choice = st.session_state.get(MODEL_KEY, choice_of(config))
    if choice == OPENED and config.origin is None and state.last_opened() is None:
        choice = DENSE
    try:
        model = _model_fields(config, choice)
        error = None
    except ValueError as err:
        model, error = {}, str(err)
    new, refused = widgets.apply(config, **settings, **model)
    error = error or refused
    if error is None:
        st.session_state.pop(state.EDIT_ERROR, None)
    else:
        st.session_state[state.EDIT_ERROR] = error
    return new != config or error != before


def _model_fields(config: ModelConfig, choice: str) -> dict[str, Any]:
    """The model part of the configuration the form describes; raises ``ValueError`` naming what
    is wrong."""
    if choice == DENSE:
        dense = _dense_base(config)
        input_dim = st.session_state.get(_key("input_dim"), dense.input_dim)
        delta = st.session_state.get(_editor_key())
        layers = dense.layers if delta is None else layers_from_frame(edited_frame(_editor_base(dense), delta))
        return {"input_dim": input_dim, "layers": layers, "preset": None, "origin": None, "overrides": ()}
    base = _family_base(config, choice)
    values, error = _hparam_values(base)
    if error is not None:
        raise ValueError(error)
    family = base.family
    assert family is not None
    overrides = tuple(sorted(schemas.overrides_from(family, presets.base_hparams(base), values).items()))
    origin = base.origin
    if origin is not None and overrides != base.overrides:
        origin = dataclasses.replace(origin, edited=True)
    return {"preset": base.preset, "origin": origin, "overrides": overrides}


def reset() -> None:
    """Back to the seed example, every widget seeded afresh."""
    state.set_config(ModelConfig(), replace_widgets=True)
    st.session_state.pop(state.EDIT_ERROR, None)


# --- the Dense stack's editor ------------------------------------------------------------------


def layers_frame(layers: tuple[DenseLayer, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "features": pd.array([layer.features for layer in layers], dtype="int64"),
            "use_bias": pd.array([layer.use_bias for layer in layers], dtype="boolean"),
        }
    )


def _editor_base(dense: ModelConfig) -> pd.DataFrame:
    """The table the editor's edits are changes against: fixed while the editor's state lives."""
    if _editor_key() not in st.session_state or _EDITOR_BASE not in st.session_state:
        st.session_state[_EDITOR_BASE] = layers_frame(dense.layers)
    return st.session_state[_EDITOR_BASE]


def edited_frame(base: pd.DataFrame, delta: Any) -> pd.DataFrame:
    """``base`` with a data editor's edits applied, as ``st.session_state[key]`` holds them:
    ``edited_rows`` by position in ``base``, ``deleted_rows`` positions in ``base``, ``added_rows``
    appended. Raises ``ValueError`` for edits that do not fit the table (a tampered client)."""
    try:
        rows = [dict(row) for row in base.to_dict("records")]
        for position, changes in dict(delta.get("edited_rows", {})).items():
            rows[int(position)].update({column: changes[column] for column in changes if column in _EDITOR_COLUMNS})
        deleted = {int(position) for position in delta.get("deleted_rows", [])}
        if any(not 0 <= position < len(rows) for position in deleted):
            raise IndexError("a deleted row is not in the table")
        kept = [row for position, row in enumerate(rows) if position not in deleted]
        for added in delta.get("added_rows", []):
            kept.append({column: dict(added).get(column) for column in _EDITOR_COLUMNS})
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"the layer edits could not be applied ({err})") from None
    return pd.DataFrame(kept, columns=list(_EDITOR_COLUMNS))


def layers_from_frame(table: pd.DataFrame) -> tuple[DenseLayer, ...]:
    """The edited table as Dense layers; raises ``ValueError`` naming the row that is wrong."""
    if len(table) == 0:
        raise ValueError("the model needs at least one Dense layer: add a row")
    if len(table) > MAX_LAYERS:
        raise ValueError(f"the model may hold at most {MAX_LAYERS} layers, got {len(table):,}")
    layers = []
    for position, (features, use_bias) in enumerate(zip(table["features"], table["use_bias"], strict=True), 1):
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


def layers_editor(dense: ModelConfig) -> None:
    """An editable table of Dense layers: rows added and removed, features and bias per row.

    The editor keeps its edits as changes against the table it was first given, so that table
    stays fixed while its state lives; it is rebuilt from the configuration whenever the state is
    gone (the page was left, or an upload replaced the configuration).
    """
    key = _editor_key()
    base = _editor_base(dense)
    try:
        _editor(key, base)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        # Edits that do not fit the table (only a tampered client sends them; Streamlit raises
        # AttributeError on rows that are not objects): start afresh under a new key, since this
        # run has already registered the old one.
        del st.session_state[key]
        st.session_state[_EDITOR_BASE] = layers_frame(dense.layers)
        st.session_state.pop(state.EDIT_ERROR, None)
        st.warning("The layer edits could not be applied and were reset to the configuration.")
        _editor(f"{state.WIDGET_PREFIX}layers.{state.next_generation()}", st.session_state[_EDITOR_BASE])


def _editor(key: str, base: pd.DataFrame) -> None:
    st.data_editor(
        base,
        key=key,
        num_rows="dynamic",
        hide_index=False,
        width="stretch",
        on_change=on_edit,
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


# --- the model box and a family's hyperparameters ----------------------------------------------


def model_choice(config: ModelConfig) -> str:
    """The model to count: ``DENSE`` (the editable stack), ``OPENED`` (the model this session
    opened from a file, while there is one) or a preset's name."""
    opened = state.last_opened()
    options = [DENSE, *([OPENED] if opened is not None else []), *presets.PRESETS]

    def label(name: str) -> str:
        if name == DENSE:
            return "Dense stack (edit the layers below)"
        if name == OPENED:
            assert opened is not None
            return presets.model_title(opened)
        row = presets.PRESETS[name]
        return f"{row.title} · {row.family} · {row.reference_params:,} parameters"

    state.seed_widget("preset", choice_of(config))
    chosen = state.held(st.selectbox)(
        "Model",
        options,
        format_func=label,
        key=MODEL_KEY,
        on_change=on_edit,
        help="A preset reproduces its reference count exactly: for most, transformers' count of the model's "
        "config.json; for some, a library's documented count or the published checkpoint's tensors. The "
        "caption under the count names which.",
    )
    return DENSE if chosen is None else chosen  # None only for a select box with no choice made


def _hparam_values(base: ModelConfig) -> tuple[dict[str, Any], str | None]:
    """The form's values for ``base``'s family (``base``'s own where a widget has none yet) and
    the first value or rule they break."""
    family = base.family
    assert family is not None
    prefix, current = form_prefix(base), presets.resolved_hparams(base)
    values: dict[str, Any] = {}
    error = None
    for spec in schemas.schema(family):
        raw = st.session_state.get(hparam_key(prefix, spec.name), _widget_value(spec, current[spec.name]))
        try:
            values[spec.name] = _parsed(spec, raw)
        except (TypeError, ValueError) as err:
            values[spec.name] = current[spec.name]
            error = error or str(err)
    if error is None:
        try:
            schemas.check_hparams(family, values)
        except ValueError as err:
            error = str(err)
    return values, error


def hparam_form(base: ModelConfig) -> None:
    """One widget per hyperparameter of ``base``'s family that changes its count, seeded from it.

    A derived value (``ffn_dim`` from ``d_model``, tied ``num_kv_heads`` from ``num_heads``)
    follows its source until the person sets it (``schemas.follow``, in the widgets' callback).
    """
    family = base.family
    assert family is not None
    prefix = form_prefix(base)
    columns = st.columns(3)
    for index, spec in enumerate(form_fields(base)):
        key = hparam_key(prefix, spec.name)
        with columns[index % 3]:
            _hparam_widget(spec, key, on_change=hparam_edited, args=(family, prefix, spec.name))


def form_fields(base: ModelConfig) -> list[schemas.HParam]:
    """The hyperparameters the form shows for ``base``, each widget's state seeded, and the form's
    values recorded for the callbacks (``_follow``)."""
    family = base.family
    assert family is not None
    prefix, current = form_prefix(base), presets.resolved_hparams(base)
    specs = schemas.schema(family)
    for spec in specs:
        state.seed_widget(prefix + spec.name, _widget_value(spec, current[spec.name]))
    values, _ = _hparam_values(base)
    st.session_state.setdefault(_FORM_VALUES, {})[prefix] = values
    st.session_state.pop(_EDITED_NOW, None)
    shown = schemas.applicable(family, values)
    return [spec for spec in specs if spec.name in shown]


def hparam_edited(family: str, prefix: str, name: str) -> None:
    """A hyperparameter widget's callback: the values derived from it follow, then the form applies."""
    if not _echoed(family, prefix, name):
        _follow(family, prefix, name)
    edited()


def _echoed(family: str, prefix: str, name: str) -> bool:
    """Whether the browser sent back the old value of a widget the form had moved, along with
    another edit: then put the moved value back, and say so.

    A derived value moved in a callback (``_follow``) reaches the browser with the next run's
    form. When the person edits another field before the browser has it (a busy server: the edit
    crosses the run that draws the move), the browser's rerun carries every widget's value, the
    moved one still at its old value, and Streamlit reports that as a change of the moved widget
    too. That is not the person's edit, so it must not pin the old value (seen in CI: GPT-2
    small's ``num_kv_heads`` left at 7 after ``num_heads`` went 7 then 12, then ``num_layers`` 6).
    The same old value typed on its own is the person's, and kept."""
    key = hparam_key(prefix, name)
    moved_values = st.session_state.get(_MOVED, {})
    if key not in moved_values:
        return False
    shown, moved = moved_values.pop(key)
    if st.session_state[key] != shown:
        return False  # a value the person typed
    values = st.session_state.get(_FORM_VALUES, {}).get(prefix, {})
    others = {other for other in st.session_state.get(_EDITED_NOW, ()) if other != name} | {
        other
        for other, value in values.items()
        if other != name
        and hparam_key(prefix, other) in st.session_state
        and st.session_state[hparam_key(prefix, other)] != _widget_value(schemas.hparam(family, other, family), value)
    }
    if not others:
        return False  # the only change: the person's
    st.session_state[key] = moved
    return True


def _follow(family: str, prefix: str, name: str) -> None:
    """After ``name`` was edited, move the values that derive from it (``schemas.follow``)."""
    pinned = st.session_state.setdefault(_PINNED, {}).setdefault(prefix, set())
    pinned.add(name)
    st.session_state.setdefault(_EDITED_NOW, set()).add(name)
    before: Mapping[str, Any] | None = st.session_state.get(_FORM_VALUES, {}).get(prefix)
    if before is None:
        return
    spec = schemas.hparam(family, name, family)
    try:
        after = {**before, name: _parsed(spec, st.session_state[hparam_key(prefix, name)])}
    except (TypeError, ValueError):
        return
    unsent = st.session_state.setdefault(_MOVED, {})
    followed = schemas.follow(family, before, after, pinned)
    # The next callback may come before this run draws the form (the person edits on while the
    # server is busy): it moves values from these, not from the last drawn form's.
    st.session_state[_FORM_VALUES][prefix] = followed
    for moved, value in followed.items():
        if value != after[moved]:
            key = hparam_key(prefix, moved)
            unsent[key] = (st.session_state.get(key), _widget_value(schemas.hparam(family, moved, family), value))
            st.session_state[key] = unsent[key][1]


def hparam_key(prefix: str, name: str) -> str:
    """The widget key of hyperparameter ``name`` in the form of ``prefix`` (``form_prefix``)."""
    return state.WIDGET_PREFIX + prefix + name


def _parsed(spec: schemas.HParam, value: Any) -> Any:
    return spec.parse(value) if spec.kind == "ints" else spec.check(value)


def _widget_value(spec: schemas.HParam, value: Any) -> Any:
    return ",".join(str(entry) for entry in value) if spec.kind == "ints" else value


def _hparam_widget(spec: schemas.HParam, key: str, **callback: Any) -> Any:
    label = spec.name
    if spec.kind == "int":
        return state.held(st.number_input)(
            label,
            min_value=spec.minimum,
            max_value=spec.maximum,
            step=1,
            key=key,
            help=spec.description,
            **callback,
        )
    if spec.kind == "bool":
        return state.held(st.checkbox)(label, key=key, help=spec.description, **callback)
    if spec.kind == "choice":
        return state.held(st.selectbox)(label, spec.choices, key=key, help=spec.description, **callback)
    return state.held(st.text_input)(
        label, key=key, help=f"{spec.description}; {spec.rule()}", max_chars=64, **callback
    )


# --- the whole form ------------------------------------------------------------------------------


def form(config: ModelConfig, choice: str) -> None:
    """Every widget of the Model page's configuration but the model picker (``model_choice``, which
    gives ``choice``), seeded from ``config``, each applied by ``edited`` when it changes. Batch
    size and seed, which change no count, are under "Advanced"."""
    left, right = st.columns(2)
    with left:
        widgets.number(
            "Number of checkpoint shards",
            "num_shards",
            config,
            on_change=on_edit,
            help="The ideal share divides the total by this count: an average, not a layout.",
        )
        widgets.dtype_choice(config, on_change=on_edit)
    with right, st.expander("Advanced: batch size and seed (they change no count)"):
        widgets.number(
            "Batch size B",
            "batch_size",
            config,
            on_change=on_edit,
            help="Every example shares the same kernels and biases: the batch size never changes a count.",
        )
        widgets.number(
            "Seed",
            "seed",
            config,
            on_change=on_edit,
            help="The PRNG seed of the initialisation (0 to 4,294,967,295): it changes values, never their number.",
        )
        st.caption("Batch size and seed change no count: they are kept so a link reproduces the exact run.")
    if choice == DENSE:
        dense = _dense_base(config)
        with left:
            widgets.number(
                "Input dimension D", "input_dim", dense, on_change=on_edit, help="The width of each input example."
            )
        label = f"Edit the Dense layers ({len(dense.layers):,})"
        if box := widgets.opened(label, EDIT_LAYERS):
            with box:
                st.caption("In order, Dense_0 first: add rows at the bottom; select rows to delete them.")
                layers_editor(dense)
    else:
        base = _family_base(config, choice)
        assert base.family is not None  # a preset's or an opened file's model: a family's
        shown = len(schemas.applicable(base.family, presets.resolved_hparams(base)))
        title = frame.plain(presets.model_title(base))
        if box := widgets.opened(f"{title}: edit its {shown} hyperparameters", EDIT_HPARAMS):
            with box:
                st.caption("Change any; the count follows. A value derived from another follows it until you set it.")
                hparam_form(base)
    st.button("Reset to the seed example", icon=":material/restart_alt:", on_click=reset)


# --- the model, picked on any page ---------------------------------------------------------------


def heading(title: str) -> tuple[ModelConfig, ParamReport]:
    """A page's header and its model, picked where the question is: the Model page's own model box
    (type to search the presets; the same widget and callback, so one rule applies everywhere), the
    Hub id box, and the sidebar's file box. A family's hyperparameters are edited on the Model page,
    one click away. Returns the model and its count, after any change the box made."""
    st.header(title)
    choice_col, link_col = st.columns([3, 1], vertical_alignment="bottom")
    with choice_col:
        model_choice(state.config())
    with link_col:
        frame.page_link("pages/model.py", label="Edit its hyperparameters", icon=":material/edit:")
    hub.hub_box()
    config = state.config()  # the box's callback has run: the model chosen, if one was
    report = cache.count(config)
    st.caption(
        f"Model: {frame.plain(frame.describe(config))} · {units.count(report.total_params)} parameters. "
        "Or open a config.json from the file box at the top of the sidebar."
    )
    return config, report


def verdict_heading(title: str) -> tuple[ModelConfig, ParamReport, Any]:
    """``heading(title)`` and, right under it, the box that will hold the page's verdict: the
    answer for the mesh asked about leads a page but is known only once its settings are read."""
    config, report = heading(title)
    return config, report, st.container()


def show_verdict(box: Any, text: str, fits: bool) -> None:
    """A verdict in ``box``: a success with a tick when the setup fits, an error with a cross when
    it does not."""
    if fits:
        box.success(frame.plain(text), icon=":material/check_circle:")
    else:
        box.error(frame.plain(text), icon=":material/cancel:")
