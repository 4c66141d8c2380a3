"""Serving memory per device: the weights in their serving dtype, the KV cache the model's own
attention keeps in decode mode, both laid out by JAX's sharding rules, and the capacity answers
(does it fit, how many sequences, how long a context) within a device's budget.

``request`` (the ``Serving`` request and its checks), ``catalog`` (accelerators and their memory as
the vendors state it), ``cache`` (the decode-mode cache read from an abstract init, one spec a kind
of layer), ``engine`` (the per-device report and the answers), ``search`` (the smallest mesh that
serves a target), ``verify`` and ``verify_child`` (XLA's compiled decode step, on virtual CPU
devices).
"""
