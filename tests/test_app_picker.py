"""The model picked where the question is (``dcsim.ui.model.heading``): the Layout, Memory,
Serving, Checkpoint, Bytes and Shards pages carry the Model page's own model box, and a choice
there changes every figure, the link and the sidebar, with the page's own settings kept (issue 46,
item 4)."""

import pytest

from conftest import metrics, open_app, quick_sample
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.ui.model import MODEL_KEY

PAGES = [
    ("pages/layout.py", {"mesh": "data=4", "strategy": "fsdp"}),
    ("pages/memory.py", {"mesh": "data=4", "strategy": "fsdp", "zero": "1"}),
    ("pages/serving.py", {"mesh": "model=2", "context": "512"}),
    ("pages/checkpoint.py", {"mesh": "data=2", "strategy": "fsdp"}),
    ("pages/bytes.py", {"opt": "adamw,sgd", "dtype": "bfloat16"}),
    ("pages/shards.py", {"shards": "6", "dtype": "bfloat16"}),
]


def model_box(at):
    (box,) = [box for box in at.selectbox if box.key == MODEL_KEY]
    return box


@pytest.mark.parametrize(
    "page_and_settings", quick_sample({page: (page, settings) for page, settings in PAGES}, ["pages/layout.py"])
)
def test_a_model_picked_on_the_page_replaces_the_linked_one_everywhere(page_and_settings):
    page, settings = page_and_settings
    at = open_app({"preset": "gpt2-small", **settings}, page, editors=False)
    assert model_box(at).value == "gpt2-small"
    model_box(at).set_value("llama2-7b").run()
    assert not at.exception
    assert at.query_params["preset"] == "llama2-7b"
    assert all(at.query_params[key] == value for key, value in settings.items())  # the page's own, kept
    total = units.count(count_params(ModelConfig(preset="llama2-7b")).total_params)
    captions = " ".join(caption.value for caption in at.caption)
    assert f"Model: Llama 2 7B · {total} parameters." in captions
    assert "124,439,808" not in captions + " ".join(metrics(at).values())  # nothing of GPT-2 small is left


def test_the_page_links_to_the_model_page_for_the_hyperparameters():
    at = open_app({"preset": "gpt2-small", "mesh": "data=2"}, "pages/layout.py", editors=False)
    labels = [link.proto.label for link in at.get("page_link")]
    assert "Edit its hyperparameters" in labels


def test_the_shards_page_keeps_its_shards_and_dtype_across_a_switch():
    at = open_app({"preset": "gpt2-small", "shards": "6", "dtype": "bfloat16"}, "pages/shards.py", editors=False)
    model_box(at).set_value("llama2-7b").run()
    assert not at.exception
    total = count_params(ModelConfig(preset="llama2-7b")).total_params
    whole, rest = divmod(total * 2, 6)  # 2 bytes a bfloat16 value, over 6 shards
    assert rest == 4  # 6,738,415,616 x 2 / 6 = 2,246,138,538 and 2/3
    assert metrics(at)["Bytes per shard (bfloat16)"].startswith(f"{whole:,}.666")
