"""How figures are shown: exact numbers in words and units (``units``), pandas tables
(``tables``) and Altair charts, a module a subject (``model_charts`` for the Model, Shards and
Bytes pages, ``layout_charts``, ``compare_charts``, ``checkpoint_charts``) over the axes and
helpers they share (``chart_axes``). No Streamlit: the CLI and the pages share them.
"""
