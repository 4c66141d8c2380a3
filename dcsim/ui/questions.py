"""The questions dcsim answers, each a link into the page that answers it on a real model.

The landing page lists them above the seed's example (a visitor used to land on a 20-parameter
Dense stack with nothing pointing at serving, training memory, weight formats or checkpoints).
Each link is an ordinary shareable link, written by the same codecs a page writes its own link
with (``dcsim.links`` for the model, the pages' request declarations for their settings), so it
opens exactly what a person who set it up by hand would share; tests/test_questions.py opens every
one and requires its page to show it without a warning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from urllib.parse import urlencode

import streamlit as st

from dcsim import links
from dcsim.model.config import ModelConfig
from dcsim.requests import Request
from dcsim.requests.serving import SERVING
from dcsim.requests.training import TRAINING
from dcsim.sharding import meshes


@dataclasses.dataclass(frozen=True, kw_only=True)
class Question:
    """A question as a person asks it, and the page (its URL path; ``""`` is the Model page) that
    answers it for ``config`` with the page's own ``settings`` (its link keys, as text)."""

    text: str
    page: str
    config: ModelConfig
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    request: Request | None = None  # the page's declaration, which checks ``settings``

    def query(self) -> dict[str, str]:
        """The link's keys: the model's (``links.encode``), then the page's, each checked."""
        own = dict(self.settings)
        if "mesh" in own:
            own["mesh"] = meshes.parse_mesh(own["mesh"]).text
        if self.request is not None:
            own |= self.request.encode({key: value for key, value in own.items() if key in self.request.keys})
        return {**links.encode(self.config), **own}

    def href(self) -> str:
        """The link, relative to the app's root: it works under any host and base URL path."""
        return f"./{self.page}?{urlencode(self.query())}"


# The serving question's setup, which its follow-up asks again with quantized weights and cache.
_SERVING_70B = {"mesh": "model=4", "strategy": "megatron", "context": "8192", "device": "h100-sxm"}

QUESTIONS = (
    Question(
        text="Does Llama 3 8B train on 8 × H100 at 8,192 tokens, and which remat policy does it need?",
        page="memory",
        config=ModelConfig(preset="llama3-8b"),
        settings={
            "mesh": "data=8",
            "strategy": "fsdp",
            "zero": "3",
            "optim": "adamw",
            "master": "float32",
            "seq": "8192",
            "remat": "full",
            "devmem": "80GiB",
        },
        request=TRAINING,
    ),
    Question(
        text="How many 8,192-token sequences does Llama 3.1 70B serve on 4 × H100?",
        page="serving",
        config=ModelConfig(preset="llama3.1-70b"),
        settings=_SERVING_70B,
        request=SERVING,
    ),
    Question(
        text="And with AWQ int4 weights and an fp8 KV cache?",
        page="serving",
        config=ModelConfig(preset="llama3.1-70b"),
        settings={**_SERVING_70B, "weights": "awq-int4", "kv": "fp8"},
        request=SERVING,
    ),
    Question(
        text="How big is DeepSeek-V3, and how much of it does one token use?",
        page="",
        config=ModelConfig(preset="deepseek-v3", num_shards=64, dtype="bfloat16"),
    ),
    Question(
        text="What does each of 8 devices hold when Mixtral 8x7B is laid out with FSDP?",
        page="layout",
        config=ModelConfig(preset="mixtral-8x7b"),
        settings={"mesh": "data=8", "strategy": "fsdp"},
    ),
    Question(
        text="What does a real Orbax checkpoint of ResNet-18 write over 4 devices, and does it restore bit for bit?",
        page="checkpoint",
        config=ModelConfig(preset="resnet18"),
        settings={"mesh": "data=4", "strategy": "fsdp"},
    ),
)


def landing(config: ModelConfig) -> bool:
    """Whether ``config`` is what a visitor without a link lands on (the seed's Dense example): the
    questions are shown to that visitor only. Once a model is chosen every figure on screen is that
    model's, and the questions' own models and figures would read as if they were."""
    return config == links.decode({}).config


def render() -> None:
    """The questions, two to a row, each a link that opens its answer (a full page load: the
    session then starts from that link, as it would from a colleague's)."""
    st.subheader("What dcsim answers")
    columns = st.columns(2)
    for index, question in enumerate(QUESTIONS):
        columns[index % 2].markdown(f"[{question.text}]({question.href()})")
    st.caption(
        "Each opens the page that answers it in a new tab, on that model, as a link you can share. Any Hugging "
        "Face model or config.json opens on the Model page below (Open from the Hub, or the upload in the sidebar)."
    )
