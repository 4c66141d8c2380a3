"""The frame every page shares: the sidebar's summary, link, download and upload boxes.

User-supplied text (an uploaded file's name, a link's values) is only ever shown through
Streamlit's text elements or inside code spans: never as HTML.
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from dcsim import hf, links
from dcsim.model import presets
from dcsim.model.config import MAX_CONFIG_BYTES, ModelConfig
from dcsim.quantities import units
from dcsim.ui import cache, state, widgets

UPLOAD_DONE = "dcsim.upload_done"
LINK_ICON = ":material/link_off:"
T = TypeVar("T")
UPLOAD_ERROR = "dcsim.upload_error"
# Every character with a meaning in CommonMark, GitHub's extensions or Streamlit's own directives
# (`:red[...]`, `:material/icon:`, `$math$`); commas, quotes and letters pass unchanged.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*_{}\[\]()#+\-.!|<>~$:=&^]")


# Exact figures run long (313,487,556,608 bytes): let metric values and labels wrap instead of
# being cut with an ellipsis, which would hide digits. Static CSS, nothing from a user in it.
_STYLE = """<style>
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: break-word;
}
[data-testid="stMetricValue"] { font-size: clamp(1.3rem, 2.1vw, 2.1rem); }
[data-testid="stMetricLabel"] p { white-space: normal; }
[data-testid="stSidebar"] a { overflow-wrap: anywhere; }
</style>"""


def style() -> None:
    """The frame's few style rules (see ``_STYLE``)."""
    st.html(_STYLE)


def page_link(page: str, settings: Mapping[str, str] | None = None, **kwargs) -> None:
    """``st.page_link`` that carries the configuration (and ``settings`` the target page shares,
    such as the mesh): a link opened in a new tab (or copied) reopens the same model, where a bare
    page link would drop the whole query string."""
    st.page_link(page, query_params={**links.encode(state.config()), **(settings or {})}, **kwargs)


def metric_row(*cells: tuple[str, str] | tuple[str, str, str]) -> None:
    """One row of ``st.metric``, a column each: (label, value) or (label, value, help)."""
    for column, (label, value, *help_text) in zip(st.columns(len(cells)), cells, strict=True):
        column.metric(label, value, help=help_text[0] if help_text else None)


def estimate_row(leaves_out: Iterable[str], *cells: tuple[str, str, str], exact: Collection[str] = ()) -> None:
    """One ``metric_row`` of estimates: each cell's help (label, value, help; "" for none) ends with
    what the estimates leave out, the same sentence on every cell, save the cells labelled in
    ``exact`` (a bound, such as the roofline), whose help stays as given."""
    sentence = f"Estimate; leaves out {', '.join(leaves_out)}."
    metric_row(*(cell if cell[0] in exact else (*cell[:2], f"{cell[2]} {sentence}".lstrip()) for cell in cells))


def plain(text: str) -> str:
    """``text`` as literal characters in Streamlit's markdown: every mark with a meaning there is
    backslash-escaped, so a value from a link or a file can never become a link, an image,
    emphasis, a directive or HTML."""
    return _MARKDOWN_SPECIAL.sub(r"\\\g<0>", text)


def setting_from_link(name: str, default: str, parse: Callable[[str], T], *, limit: int = 512) -> tuple[str, T]:
    """Where a page's own setting (``mesh``, ``strategy``...) starts, checked: ``state.page_setting``'s
    text (the link's, else this session's last, else ``default``) and its value under ``parse``.
    A value the link had to refuse, or one ``parse`` refuses, is named in a warning and ``default``
    (which must parse) is used instead. Call it only to seed a widget that has no state yet."""
    text, problem = state.page_setting(name, default, limit=limit)
    if problem:
        st.warning(plain(problem), icon=LINK_ICON)
    try:
        value = parse(text)
    except (TypeError, ValueError) as err:
        st.warning(plain(f"Link: `{name}`: {err}; using {default}."), icon=LINK_ICON)
        return default, parse(default)
    if isinstance(value, str) and "".join(value.split()) != "".join(text.split()):
        # The link's text reads as another (``seq=08`` as 8, ``4e3`` as 4000): the box shows it read.
        st.warning(plain(f"Link: `{name}` {text.strip()} is read as {value}."), icon=LINK_ICON)
        return value, value
    return text, value


def seeded_setting(page: str, name: str, default: str, parse: Callable[[str], Any], *, limit: int) -> str:
    """The widget key of ``page``'s setting ``name``, seeded (when it has no state) from the link,
    else the session's memory of the page's settings, else ``default``; a bad link value is
    explained and replaced by ``default`` (``setting_from_link``). The widget holds the text;
    ``parse`` only checks it. The text is remembered as the page's last valid (``parsed_setting``).

    A ``default`` that depends on the model (the Serving page's context: 4,096, or GPT-2's 1,024)
    follows a switch of model while the setting still holds the default it started from, in the
    box, in the session's memory or in the URL the app keeps in step: an untouched 4,096 becomes
    GPT-2's 1,024 rather than a refusal. Any other value, typed or from a link, stays; a constant
    default never moves."""
    key = setting_key(page, name)
    started = st.session_state.setdefault(_started_from(page), {})
    previous = started.get(name, default)
    started[name] = default
    if key in st.session_state:
        if previous != default and st.session_state[key] == previous:
            st.session_state[key] = default
        return key
    text, value = setting_from_link(name, default, parse, limit=limit)
    if previous != default and text == previous:  # the URL mirrors the settings: its value may be the old default
        text, value = default, parse(default)
    st.session_state.setdefault(_last_valid(page), {})[name] = text
    return state.seed_widget(f"{page}.{name}", value if isinstance(value, str) else text)


def setting_key(page: str, name: str) -> str:
    """The widget key of ``page``'s setting ``name`` (``seeded_setting``'s)."""
    return f"{state.WIDGET_PREFIX}{page}.{name}"


def offer(
    where: Any, label: str, values: Mapping[str, str], *, help: str, rerun: Callable[[], None] | None = None
) -> None:
    """One click, in ``where`` (a container, a column or ``st``), that puts each of ``values`` (text
    by widget key) into its setting's widget: how a value the model refuses (after a switch of
    model) is offered back at the nearest one it accepts. ``rerun`` is for a click inside a fragment:
    ``st.rerun``, the whole page, so the widgets show the values put in them (after a fragment-keyed
    rerun such as ``rerun_with_link``'s, Streamlit 1.67 left such a box showing its old text in the
    browser); outside a fragment the click reruns the page."""

    def use() -> None:
        st.session_state.update(values)
        if rerun is not None:
            rerun()

    where.button(plain(label), key=f"offer.{'.'.join(values)}", on_click=use, icon=":material/straighten:", help=help)


def parsed_setting(page: str, name: str, text: str, parse: Callable[[str], T], what: str) -> T:
    """``parse(text)``, remembered as ``page``'s last valid ``name``; on a bad edit, the error and
    the last valid value, which stays on screen."""
    last = st.session_state.setdefault(_last_valid(page), {})
    try:
        value = parse(text)
    except (TypeError, ValueError) as err:
        shown = last.get(name, "")
        st.error(plain(f"{what}: {err}. Showing the last valid {what.lower()}: {shown}"), icon=":material/error:")
        return parse(shown)
    last[name] = text
    return value


def last_valid_setting(page: str, name: str, default: str) -> str:
    """``page``'s last valid text of ``name`` (``parsed_setting``'s), or ``default``: what a link
    written before the widget is drawn carries while the widget holds a refused edit."""
    return str(st.session_state.get(_last_valid(page), {}).get(name, default))


def _last_valid(page: str) -> str:
    return f"dcsim.{page}.last_valid"  # this session's last valid settings of the page, shown after a bad edit


def _started_from(page: str) -> str:
    return f"dcsim.{page}.started_from"  # the default each setting of the page was last seeded with


def text_table(
    data: pd.DataFrame,
    columns: Mapping[str, str | Any],
    formats: Mapping[str, Callable[[Any], str]] | None = None,
) -> None:
    """``st.dataframe`` of ``data`` as text, after each column's ``formats`` function (exact figures
    as people read them: ``units.bytes_exact``, ...). ``columns`` gives each column a label, or a
    whole ``st.column_config`` when it needs a width or help."""
    shown = data.assign(**{name: data[name].map(format_value) for name, format_value in (formats or {}).items()})
    st.dataframe(
        shown,
        hide_index=True,
        column_config={
            name: st.column_config.TextColumn(column) if isinstance(column, str) else column
            for name, column in columns.items()
        },
    )


def link_problems() -> None:
    """Say, once per bad link, which fields were wrong and what was used instead."""
    for problem in state.problems():
        st.warning(plain(problem), icon=LINK_ICON)


def describe(config: ModelConfig) -> str:
    """A one-line summary such as ``Dense stack, input 4 → 4`` or ``GPT-2 small (num_layers=6)``: the model
    under the name a person knows it by (a file's model under the file's name, never a preset's)."""
    if not config.is_dense:
        changed = ", ".join(f"{name}={presets.value_text(value)}" for name, value in config.overrides)
        title = presets.model_title(config)
        return f"{title} ({changed})" if changed and config.origin is None else title
    widths = " → ".join(f"{layer.features:,}{'' if layer.use_bias else ' (no bias)'}" for layer in config.layers[:6])
    if len(config.layers) > 6:
        widths += f" → … ({len(config.layers):,} layers)"
    return f"Dense stack, input {config.input_dim:,} → {widths}"  # a caption of its own in the sidebar


def upload_box() -> None:
    """Restore a configuration from a JSON file the dashboard or the CLI wrote, or open a Hugging
    Face config.json under its own name. A refused file is explained in the sidebar and, for a
    phone's reader whose sidebar is folded away, at the top of the page (``upload_problem``).

    The box is drawn only while it is open: its file picker is a script of its own that a first
    visit would otherwise load before its first figures. What a file was opened as stays said
    under the box while that model is shown."""
    box = st.sidebar.expander(
        "Open a configuration file", icon=":material/upload_file:", key="frame.upload_open", on_change="rerun"
    )
    done = st.session_state.get(UPLOAD_DONE)
    opened_note = done[2] if isinstance(done, tuple) and done[1] == state.config().architecture() else None
    if not box.open:
        st.session_state.pop(UPLOAD_ERROR, None)
        if opened_note:
            st.sidebar.info(plain(opened_note), icon=":material/info:")
        return
    with box:
        uploaded = st.file_uploader(
            "Configuration JSON",
            type="json",
            max_upload_size=1,
            key=f"upload.{state.generation()}",
            help=(
                f"A file saved with “Download configuration” (at most {MAX_CONFIG_BYTES // 1024} KiB), "
                f"or a Hugging Face config.json (model_type {', '.join(hf.MODEL_TYPES)}; "
                f"at most {hf.MAX_HF_CONFIG_BYTES // 1024} KiB)."
            ),
        )
        st.caption(
            f"At most {MAX_CONFIG_BYTES // 1024} KiB (a Hugging Face config.json {hf.MAX_HF_CONFIG_BYTES // 1024} "
            "KiB): the box's 1MB is only the upload's own cap."
        )
        if uploaded is None:
            st.session_state.pop(UPLOAD_ERROR, None)
            if opened_note:
                st.info(plain(opened_note), icon=":material/info:")
            return
        if isinstance(done, tuple) and done[0] == uploaded.file_id:
            st.success(plain(done[2] or "Configuration opened."))
            return
        try:
            config, note = hf.read_config_file(uploaded.getvalue(), base=state.config())
        except (TypeError, ValueError) as err:
            message = f"This file was not opened: {err}"
            st.error(plain(message))
            st.session_state[UPLOAD_ERROR] = message
            return
        st.session_state.pop(UPLOAD_ERROR, None)
        state.set_config(config, replace_widgets=True)
        st.session_state[UPLOAD_DONE] = (uploaded.file_id, config.architecture(), note)
        st.success(plain(note or "Configuration opened."))


def upload_problem() -> None:
    """The refused upload's message in the main area too, while the refused file is in the box."""
    message = st.session_state.get(UPLOAD_ERROR)
    if message:
        st.error(plain(message), icon=":material/upload_file:")


SHARE_FRAGMENT = "dcsim.share"


def share_box() -> None:
    """The frame's end: under the page's summary, the link to copy and the configuration's JSON;
    then the URL rewritten to what the page shows (``state.publish``)."""
    with st.sidebar:
        _share_fragment()


@st.fragment(key=SHARE_FRAGMENT)
def _share_fragment() -> None:
    # A fragment, so that a page's fragment can rerun it with its own (``rerun_with_link``): the
    # link and the URL then follow a setting that reran only part of the page.
    config = state.config()
    report = cache.count(config)
    st.caption(plain(describe(config)))
    st.caption(f"{units.count(report.total_params)} parameters · {config.num_shards:,} shards · {config.dtype}")
    st.markdown("**Share this view**")
    link(f"{st.context.url or ''}?{urlencode(state.wanted_query(), doseq=True)}")
    st.caption(
        "Copy this link (right-click it, or long-press on a phone), or the address bar: either reopens "
        "exactly this configuration and page."
    )
    widgets.download("Download configuration (JSON)", config.to_json(), "dcsim-config.json")
    state.publish()


def rerun_with_link(fragment: str) -> Callable[[], None]:
    """The ``on_change`` of a setting drawn inside the page's fragment ``fragment`` that the link
    carries: the change reruns that fragment and then the link and the URL, not the whole page.

    A setting of the page's own fragment would otherwise rerun the fragment alone, leaving the
    link to copy and the address bar one change behind."""

    def rerun() -> None:
        st.rerun([fragment, SHARE_FRAGMENT])

    return rerun


# Characters a URL may hold that would end or break a markdown link's target.
_LINK_TARGET_UNSAFE = {"(": "%28", ")": "%29", " ": "%20", "<": "%3C", ">": "%3E", "\\": "%5C"}


def link(url: str) -> None:
    """``url`` shown whole, as a link a person copies. A markdown link, not ``st.code``: the code
    box's syntax highlighter (1.5 MB of script) was the largest thing a first visit loaded, and the
    first figures are painted only once every script a run needs has loaded. A URL that is not
    http(s) (AppTest has no server address) is shown as text."""
    if not url.startswith(("http://", "https://")):
        st.caption(plain(url))
        return
    target = "".join(_LINK_TARGET_UNSAFE.get(char, char) for char in url)
    st.markdown(f"[{plain(url)}]({target})")


def stop_page() -> NoReturn:
    """End the page's run here, as ``st.stop`` does, after the frame's end (the link to copy and
    the URL rewritten to what the page shows), which a bare ``st.stop`` would skip: a link refused
    halfway must still lose the keys no page reads."""
    share_box()
    st.stop()
    raise AssertionError("st.stop() returned")  # it raises; this tells the type checker so


_heap_settled = False  # gc.get_freeze_count() walks the frozen objects: 33 ms, so a flag says it


def settle_heap() -> None:
    """Once per server process, after the first run that loaded JAX: move every object alive then
    (the imported modules of JAX, Flax, pandas, Altair and Streamlit, some 280,000) out of the
    garbage collector's view with ``gc.freeze()``. They live as long as the process; a full
    collection then scans only what the sessions made since. Measured on the Memory page for
    Llama 2 70B: a full collection took 170-200 ms and fell inside a run every few runs; frozen,
    it scans a few thousand objects. Objects frozen are still freed by their reference counts."""
    global _heap_settled
    if not _heap_settled and "jax" in sys.modules:
        gc.freeze()
        _heap_settled = True
