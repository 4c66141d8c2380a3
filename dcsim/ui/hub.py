"""The Hub id box under the model box: a model opened by its Hugging Face Hub id (``dcsim.hf.hub``).
A form, so nothing is asked of the Hub until the person presses the button, and a token typed into
it stays in the session."""

from __future__ import annotations

import streamlit as st

from dcsim.model.config import HUB_ID_RULE
from dcsim.ui import frame, state, widgets

HUB_ERROR = "dcsim.hub_error"
_TYPED_CHARS = 512  # what a Hub box takes: room for a pasted URL, refused with its reason, not cut short


def hub_box() -> None:
    """Open a model by its Hugging Face Hub id, an optional revision and an optional token (a password
    box, kept in this session), when the button is pressed. Drawn only while open; what was opened
    from the Hub is said under it while that model is shown."""
    config = state.config()
    note = st.session_state.get(state.HUB_NOTE)
    opened_note = note[1] if isinstance(note, tuple) and note[0] == config.architecture() else None
    box = widgets.opened("Open a model by its Hugging Face Hub id", state.HUB_OPEN)
    if box is None:
        if opened_note:
            st.caption(frame.plain(opened_note))
        return
    from dcsim.hf import hub  # loaded when the box is first opened

    with box, st.form("hub.form", border=False):
        left, middle, right = st.columns([3, 2, 2])
        state.held(left.text_input)(
            "Hub id",
            key=state.HUB_ID,
            placeholder="mistralai/Mixtral-8x7B-v0.1",
            max_chars=_TYPED_CHARS,
            help=f"The model's id on the Hugging Face Hub: {HUB_ID_RULE}. Only its config.json is fetched.",
        )
        state.held(middle.text_input)(
            "Revision (optional)",
            key=state.HUB_REVISION,
            placeholder="main",
            max_chars=_TYPED_CHARS,
            help="A branch, tag or commit of the repository; its default branch when empty.",
        )
        state.held(right.text_input)(
            "Token (optional)",
            key=state.HUB_TOKEN,
            type="password",
            autocomplete="off",
            max_chars=hub.MAX_TOKEN_CHARS,
            help="For a gated or private model: a Hugging Face token of an account that may read it. Kept in "
            "this browser session only: never in the link, never logged, sent to the Hub alone.",
        )
        submitted = st.form_submit_button("Open from the Hub", icon=":material/cloud_download:")
    with box:
        hub_at = hub.HubSettings.from_env()
        offline = f"HF_HUB_OFFLINE is set on this server: only models in its cache ({hub_at.cache_dir}) open."
        st.caption(frame.plain(offline if hub_at.offline else f"Asks the Hub at {hub_at.endpoint}."))
        if submitted:
            _open_typed()
        if st.session_state.get(HUB_ERROR):
            st.error(frame.plain(st.session_state[HUB_ERROR]), icon=":material/cloud_off:")
        elif opened_note:
            st.success(frame.plain(opened_note))


def _open_typed() -> None:
    """Open what the box holds: the model, and a rerun so the answer above shows it; or the reason
    it was not opened, kept for the box to show."""
    repo_id = str(st.session_state.get(state.HUB_ID) or "").strip()
    revision = str(st.session_state.get(state.HUB_REVISION) or "").strip() or None
    token = str(st.session_state.get(state.HUB_TOKEN) or "").strip() or None
    if not repo_id:
        st.session_state[HUB_ERROR] = "Type the model's Hub id first, such as mistralai/Mixtral-8x7B-v0.1."
        return
    try:
        opened = state.open_from_hub(repo_id, revision, token=token, base=state.config())
    except (TypeError, ValueError) as err:
        st.session_state[HUB_ERROR] = f"Not opened: {err}"
        return
    st.session_state.pop(HUB_ERROR, None)
    st.session_state.pop(state.EDIT_ERROR, None)
    state.set_config(opened.config, replace_widgets=True)
    st.rerun()
