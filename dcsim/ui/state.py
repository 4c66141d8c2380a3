"""The one configuration of a browser session, mirrored in its URL.

A session starts from its link: the first run decodes ``st.query_params`` (``dcsim.links``, which
never raises) into the configuration kept in ``st.session_state``. From then on the session state
is the truth and the URL its mirror, rewritten after every run, so a page switch (which drops the
query string) loses nothing and the address bar is always a link that reopens what is on screen.

Widgets are never bound to the URL (``bind="query-params"`` on a number input raises before any
code runs on ``?shards=1e400``): each widget is seeded from the configuration, and its value,
once validated, becomes the configuration.

A link that names a model by its Hub id alone (``?hf=owner/name``) is opened on the first run by
fetching its config.json (``open_from_hub``: the server's bounded, cached fetcher, this session's
budget); when that fails, the link's problems say why, the Model page's Hub id box is opened with
the id filled in, and no other model's figures are shown under that name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import streamlit as st

from dcsim import links
from dcsim.model.config import ModelConfig
from dcsim.ui import turns

if TYPE_CHECKING:
    from dcsim.hf.hub import Opened, SessionBudget

CONFIG = "dcsim.config"
PROBLEMS = "dcsim.link_problems"
GENERATION = "dcsim.generation"
PAGE_PARAMS = "dcsim.page_params"
PAGE_MEMORY = "dcsim.page_memory"
LAST_DENSE = "dcsim.last_dense"
LAST_OPENED = "dcsim.last_opened"
WIDGET_PREFIX = "w."
# The reason the Model page's last edit was refused (``dcsim.ui.model.edit_error``).
EDIT_ERROR = "dcsim.model.edit_error"
# The Hub id box (``dcsim.ui.hub.hub_box``): its widgets, kept apart from the configuration's
# ``w.`` widgets so a newly opened model does not empty them, and its expander.
HUB_ID = "hub.id"
HUB_REVISION = "hub.revision"
HUB_TOKEN = "hub.token"  # the token stays in this session's state: never in the URL, never logged
HUB_OPEN = "model.hub_open"
HUB_BUDGET = "dcsim.hub_budget"
HUB_NOTE = "dcsim.hub_note"  # (architecture, message) of the model last opened from the Hub


def _query() -> dict[str, list[str]]:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def config() -> ModelConfig:
    """The session's configuration: the link's on the first run, the last valid one after."""
    if CONFIG not in st.session_state:
        decoded = links.decode(_query())
        config, problems = decoded.config, decoded.problems
        if decoded.hub is not None:
            config, problems = _open_linked(decoded)
        st.session_state[CONFIG] = config
        st.session_state[PROBLEMS] = problems
        st.session_state[GENERATION] = 0
        _remember(config)
    return st.session_state[CONFIG]


def _open_linked(decoded: links.Decoded) -> tuple[ModelConfig, tuple[str, ...]]:
    """The model a link names by its Hub id alone, fetched; or, when it cannot be, the link's own
    configuration (the Dense stack) and a problem saying why, the Hub id box filled in for a retry."""
    assert decoded.hub is not None
    repo_id, revision = decoded.hub.repo_id, decoded.hub.revision
    try:
        keep_dtype = links.DTYPE_KEY in st.query_params  # a link that names its dtype keeps it
        opened = open_from_hub(repo_id, revision, token=None, base=decoded.config, keep_dtype=keep_dtype)
        return opened.config, decoded.problems
    except (TypeError, ValueError) as err:
        st.session_state[HUB_ID], st.session_state[HUB_REVISION] = repo_id, revision or ""
        st.session_state[HUB_OPEN] = True
        problem = (
            f"Link: `hf`: {repo_id} could not be opened from the Hugging Face Hub: {err}. The figures shown are "
            f"the Dense stack's, not {repo_id}'s; try again in the Model page's Hub id box."
        )
        return decoded.config, (*decoded.problems, problem)


def hub_budget() -> SessionBudget:
    """This session's budget of fetches from the Hub (``dcsim.hf.hub.SessionBudget``)."""
    from dcsim.hf import hub  # loaded on the first fetch: a visit that fetches nothing never waits for it

    budget = st.session_state.get(HUB_BUDGET)
    if not isinstance(budget, hub.SessionBudget):
        budget = st.session_state[HUB_BUDGET] = hub.SessionBudget()
    return budget


def open_from_hub(
    repo_id: str, revision: str | None, *, token: str | None, base: ModelConfig, keep_dtype: bool = False
) -> Opened:
    """``dcsim.hf.hub.open_model`` with this session's budget, under a spinner; the message saying
    what was opened is kept for the Model page (``HUB_NOTE``). Raises what ``open_model`` raises."""
    from dcsim.hf import hub

    repo_id = hub.check_repo_id(repo_id)  # checked before it is shown, too
    revision = None if revision is None else hub.check_revision(revision)
    with turns.waiting(f"Fetching `config.json` of `{repo_id}` from the Hugging Face Hub…"):
        opened = hub.open_model(repo_id, revision, token=token, base=base, budget=hub_budget(), keep_dtype=keep_dtype)
    st.session_state[HUB_NOTE] = (opened.config.architecture(), opened.message)
    return opened


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


def held(widget: Callable[..., Any]) -> Callable[..., Any]:
    """``widget`` (``st.selectbox``, a column's ``text_input``...), declaring the value its ``key``
    holds as its default too: ``held(st.selectbox)(label, options, key=key, ...)``.

    Streamlit sends a value seeded through ``st.session_state`` to the browser only on the run
    that set it. A busy browser can skip drawing that run (the next one's elements arrive before
    it paints), and the widget then mounts from the next run's element, whose value is its
    declared default: an unnamed default (the first option, the minimum, empty text) would come
    back as an edit with the person's next change (seen under load: a GPT-2 small page turned
    into the Dense stack with one shard when a hyperparameter was typed). Declaring the held
    value as the default makes either element say the same."""
    kind = getattr(widget, "__name__", "")

    def draw(label: str, *args: Any, key: str, **kwargs: Any) -> Any:
        value = st.session_state.get(key)
        if kind in ("selectbox", "radio"):
            options = list(args[0] if args else kwargs["options"])
            if value in options:
                kwargs["index"] = options.index(value)
        elif kind == "multiselect":
            kwargs["default"] = value
        elif value is not None:
            kwargs["value"] = value
        return widget(label, *args, key=key, **kwargs)

    return draw


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
