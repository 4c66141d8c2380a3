"""How figures are shown: pandas tables (``tables``) and Altair charts, a module a subject
(``model_charts`` for the Model, Shards and Bytes pages, ``layout_charts``, ``compare_charts``,
``checkpoint_charts``) over the axes and helpers they share (``chart_axes``). Figures in words are
``dcsim.quantities.units``. No Streamlit: the CLI and the pages share them.
"""
