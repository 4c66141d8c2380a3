"""Streamlit helpers: the only part of dcsim that imports Streamlit."""
