"""dcsim's router and shared frame: every page is an ``st.Page`` in ``pages/``.

The frame around every page: the link's problems (if the session opened a bad link), the sidebar
with a summary of the configuration, the link to copy, the configuration's JSON to download and an
upload that restores one. After the page has drawn, the URL is rewritten to what it shows.
"""

import streamlit as st

from dcsim.ui import frame, state, turns

st.set_page_config(page_title="dcsim", page_icon=":material/calculate:", layout="wide")

pages = [
    st.Page("pages/model.py", title="Model", icon=":material/calculate:", url_path="model", default=True),
    st.Page("pages/shards.py", title="Shards", icon=":material/grid_view:", url_path="shards"),
    st.Page("pages/bytes.py", title="Bytes", icon=":material/storage:", url_path="bytes"),
    st.Page("pages/layout.py", title="Layout", icon=":material/view_module:", url_path="layout"),
    st.Page("pages/memory.py", title="Memory", icon=":material/memory:", url_path="memory"),
    st.Page("pages/serving.py", title="Serving", icon=":material/dns:", url_path="serving"),
    st.Page("pages/checkpoint.py", title="Checkpoint", icon=":material/save:", url_path="checkpoint"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
]

with turns.run():  # one run at a time in this process, so a crowd is served in turn (dcsim.ui.turns)
    page = st.navigation(pages)
    state.start_page()
    frame.style()
    frame.upload_box()
    frame.upload_problem()
    frame.link_problems()
    page.run()
    frame.share_box()
    frame.settle_heap()
