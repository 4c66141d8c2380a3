"""What a model is and how big: its validated configuration, the architecture presets and their
hyperparameter schemas, the Flax modules they build, Hugging Face ``config.json`` files, the exact
abstract count (``jax.eval_shape``), its breakdown, and optimizer state per parameter.

Pure engine: no Streamlit, no printing. ``config`` builds on ``dcsim.inputs``, ``schemas`` (each
family's hyperparameters) and ``presets`` (the preset table, checked against them); ``schemas`` and
``presets`` are plain Python (no JAX); ``families`` and ``modules`` hold the Flax modules; ``count``,
``breakdown`` and ``optimizer`` count them.
"""
