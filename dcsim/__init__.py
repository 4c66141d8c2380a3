"""dcsim: how big is this model, and what does it come to per shard?

The engine: validated configurations (``config``), exact abstract parameter counts from real Flax
modules (``count``), ideal shares (``shares``), raw payload bytes (``payload``) and the seed
exercise's function (``simulate``). It never imports Streamlit and never prints; the CLI
(``dcsim.cli``) and the dashboard (``app.py``, ``pages/``) sit at its edge.
"""

import importlib
from typing import Any

# Loaded on first use (PEP 562), so that ``python -m dcsim`` can act before JAX is imported:
# ``dcsim.__main__`` starts the checkpoint child first, and its interpreter start and imports
# then overlap the parent's (see ``dcsim.checkpoint.prestart``).
_EXPORTS = {
    "DenseLayer": "dcsim.model.config",
    "ModelConfig": "dcsim.model.config",
    "ArrayRow": "dcsim.model.count",
    "LayerRow": "dcsim.model.count",
    "ParamReport": "dcsim.model.count",
    "count_module": "dcsim.model.count",
    "count_params": "dcsim.model.count",
    "FAMILY_SCHEMAS": "dcsim.model.schemas",
    "HParam": "dcsim.model.hparams",
    "PRESETS": "dcsim.model.presets",
    "Preset": "dcsim.model.presets",
    "IdealShare": "dcsim.sharding.shares",
    "ideal_share": "dcsim.sharding.shares",
    "distributed_checkpoint_simulate": "dcsim.simulate",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dcsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "FAMILY_SCHEMAS",
    "PRESETS",
    "ArrayRow",
    "DenseLayer",
    "HParam",
    "IdealShare",
    "LayerRow",
    "ModelConfig",
    "ParamReport",
    "Preset",
    "count_module",
    "count_params",
    "distributed_checkpoint_simulate",
    "ideal_share",
]
