"""Bounded caches around the engine, shared by every session of one server.

``st.cache_data`` is unbounded unless told otherwise; these bounds keep a crowd of different
configurations from growing the server's memory without limit. Keys are the JSON text of the
configuration's architecture (``ModelConfig.architecture``: shards, dtype, seed and batch size left
out, since none changes a count), so a shard change recounts nothing and equal models share one
entry whichever page or session asked.
"""

from __future__ import annotations

import streamlit as st

from dcsim.model import optimizer
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport, count_params
from dcsim.model.optimizer import OptimizerState

MAX_CACHED_COUNTS = 512
MAX_CACHED_OPTIMIZER_STATES = 64


# st.cache_resource, not st.cache_data: a report is frozen, so every caller may share the one object,
# where cache_data unpickles a copy on every call (20 ms for Llama 2 70B's 723 rows, three times a run).
@st.cache_resource(max_entries=MAX_CACHED_COUNTS, show_spinner=False)
def _count(config_json: str) -> ParamReport:
    return count_params(ModelConfig.from_json(config_json))


def count(config: ModelConfig) -> ParamReport:
    """``dcsim.model.count.count_params``, cached per configuration."""
    return _count(config.architecture().to_json())


@st.cache_data(max_entries=MAX_CACHED_OPTIMIZER_STATES, show_spinner="Initialising the optimizer abstractly…")
def _optimizer_state(config_json: str, name: str) -> OptimizerState:
    return optimizer.state_of(name, optimizer.abstract_params(ModelConfig.from_json(config_json)))


def optimizer_state(config: ModelConfig, name: str) -> OptimizerState:
    """``dcsim.model.optimizer.state_of`` for the configuration's parameters, cached per pair."""
    return _optimizer_state(config.architecture().to_json(), name)
