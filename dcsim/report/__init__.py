"""How figures are shown: exact numbers in words and units (``units``), pandas tables
(``tables``) and Altair charts (``charts``). No Streamlit: the CLI and the pages share them.
"""
