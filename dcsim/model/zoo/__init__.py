"""Families beyond the first seven, for the model types of the Hugging Face Hub whose blocks
differ from dcsim's decoder in ways that change the count: norms without parameters or without
a bias, parallel attention and MLP, norms over every query and key feature, biases on some
projections and not others, an embedding norm, an output head with a bias.

``schemas`` (pure Python) holds their hyperparameters, which ``dcsim.model.schemas`` appends to its
table; ``variant`` builds them as real ``flax.linen`` modules from ``dcsim.model.layers``' parts.
"""
