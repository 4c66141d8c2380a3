"""dcsim: how big is this model, and what does it come to per shard?

The engine: validated configurations (``config``), exact abstract parameter counts from real Flax
modules (``count``), ideal shares (``shares``), raw payload bytes (``payload``) and the seed
exercise's function (``simulate``). It never imports Streamlit and never prints; the CLI
(``dcsim.cli``) and the dashboard (``app.py``, ``pages/``) sit at its edge.
"""

from dcsim.config import DenseLayer, ModelConfig
from dcsim.count import ArrayRow, LayerRow, ParamReport, count_module, count_params
from dcsim.presets import FAMILY_SCHEMAS, PRESETS, HParam, Preset
from dcsim.shares import IdealShare, ideal_share
from dcsim.simulate import distributed_checkpoint_simulate

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
