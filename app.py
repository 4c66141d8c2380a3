"""dcsim's router and shared frame: every page is an ``st.Page`` in ``pages/``."""

import streamlit as st

st.set_page_config(page_title="dcsim", page_icon=":material/calculate:", layout="wide")

pages = [
    st.Page("pages/count.py", title="Count", icon=":material/calculate:", url_path="count", default=True),
]

st.sidebar.caption("dcsim: how big is this model, and what does it come to per shard?")
st.navigation(pages).run()
