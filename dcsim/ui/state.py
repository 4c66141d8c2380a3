"""The one configuration of a browser session, mirrored in its URL.

A session starts from its link: the first run decodes ``st.query_params`` (``dcsim.links``, which
never raises) into the configuration kept in ``st.session_state``. From then on the session state
is the truth and the URL its mirror, rewritten after every run, so a page switch (which drops the
query string) loses nothing and the address bar is always a link that reopens what is on screen.

Widgets are never bound to the URL (``bind="query-params"`` on a number input raises before any
code runs on ``?shards=1e400``): each widget is seeded from the configuration, and its value,
once validated, becomes the configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from dcsim import links
from dcsim.model.config import ModelConfig

CONFIG = "dcsim.config"
PROBLEMS = "dcsim.link_problems"
GENERATION = "dcsim.generation"
PAGE_PARAMS = "dcsim.page_params"
PAGE_MEMORY = "dcsim.page_memory"
LAST_DENSE = "dcsim.last_dense"
LAST_OPENED = "dcsim.last_opened"
WIDGET_PREFIX = "w."


def _query() -> dict[str, list[str]]:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def config() -> ModelConfig:
    """The session's configuration: the link's on the first run, the last valid one after."""
    if CONFIG not in st.session_state:
        decoded = links.decode(_query())
        st.session_state[CONFIG] = decoded.config
        st.session_state[PROBLEMS] = decoded.problems
        st.session_state[GENERATION] = 0
        _remember(decoded.config)
    return st.session_state[CONFIG]


def _remember(config: ModelConfig) -> None:
    if config.is_dense:
        st.session_state[LAST_DENSE] = config
    elif config.origin is not None:
        st.session_state[LAST_OPENED] = config


def last_dense() -> ModelConfig:
    """The Dense stack this session last showed (the seed example if none), so a person who looks
    at a preset and comes back finds their layers again."""
    config()
    return st.session_state.get(LAST_DENSE, ModelConfig())


def last_opened() -> ModelConfig | None:
    """The model this session last opened from a file (or a link to one), if any."""
    config()
    return st.session_state.get(LAST_OPENED)


def problems() -> tuple[str, ...]:
    """What was wrong with the link this session opened, until the person changes something."""
    config()
    return st.session_state[PROBLEMS]


def generation() -> int:
    """Bumped whenever the configuration is replaced from outside the widgets (an upload, a
    reset), so widgets whose state cannot be overwritten (the layer editor) start afresh."""
    config()
    return st.session_state[GENERATION]


def next_generation() -> int:
    st.session_state[GENERATION] = generation() + 1
    return st.session_state[GENERATION]


def set_config(new: ModelConfig, *, replace_widgets: bool = False) -> None:
    """Make ``new`` the session's configuration.

    ``replace_widgets`` is for changes that did not come from the widgets themselves: their
    state is dropped, so every widget is seeded again from ``new`` on this run.
    """
    if new != config():
        st.session_state[CONFIG] = new
        st.session_state[PROBLEMS] = ()
        _remember(new)
    if replace_widgets:
        for key in [key for key in st.session_state if str(key).startswith(WIDGET_PREFIX)]:
            del st.session_state[key]
        next_generation()


def seed_widget(key: str, value: object) -> str:
    """Give the widget ``key`` its value from the configuration unless it already holds one."""
    key = WIDGET_PREFIX + key
    if key not in st.session_state:
        st.session_state[key] = value
    return key


def set_page_params(params: Mapping[str, str | list[str]]) -> None:
    """The current page's own settings (already validated, as text; a list for a repeated key),
    written into the URL beside the configuration and remembered for when the person comes back
    to the page."""
    st.session_state[PAGE_PARAMS] = dict(params)
    st.session_state.setdefault(PAGE_MEMORY, {}).update(params)


def page_setting(name: str, default: str, *, limit: int = 512) -> tuple[str, str | None]:
    """Where a page's own setting (``mesh``, ``strategy``...) starts: the link's value when the
    URL carries one, else what this session last used on the page, else ``default``.

    Returns the text and, when the link's value had to be refused before parsing (repeated or
    too long), the problem to show; the page parses the text itself and falls back to
    ``default`` with its own message when that fails. Call it only to seed a widget that has no
    state yet (``seed_widget`` does that), since the URL lags one run behind the widgets.
    """
    values = st.query_params.get_all(name)
    if values:
        if len(values) != 1:
            return default, f"Link: `{name}` appears {len(values)} times, where it may appear once; using {default}."
        if len(values[0]) > limit:
            return (
                default,
                f"Link: `{name}` may be at most {limit:,} characters, got {len(values[0]):,}; using {default}.",
            )
        return values[0], None
    return st.session_state.get(PAGE_MEMORY, {}).get(name, default), None


def wanted_query() -> dict[str, str | list[str]]:
    return {**links.encode(config()), **st.session_state.get(PAGE_PARAMS, {})}


def publish() -> None:
    """Rewrite the URL to the configuration and the page's settings, and nothing else.

    Only when it differs, so an unchanged run sends nothing to the browser. Keys nobody reads
    (a pasted junk link's) are dropped, so copying the address bar never carries them on.
    """
    wanted = wanted_query()
    if _query() != {key: value if isinstance(value, list) else [value] for key, value in wanted.items()}:
        st.query_params.from_dict(wanted)


def start_page() -> None:
    """Forget the previous page's settings; call once per run before the page draws."""
    st.session_state[PAGE_PARAMS] = {}
