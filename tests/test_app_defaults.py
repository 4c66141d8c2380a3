"""Every widget a page seeds from its link or its session declares the value it holds as its
default too (``dcsim.ui.state.held``).

Streamlit sends a seeded value to the browser only on the run that seeded it; a busy browser that
skips painting that run mounts the widget from the next run's element, whose value is the declared
default. Seen under load: a GPT-2 small page became the Dense stack with one shard when a
hyperparameter was typed, the model box and the shard box having mounted at their unnamed defaults
(the first option, the minimum). Here every widget's declared default is checked against the value
it shows, on every page, opened from links whose values are none of the defaults."""

import pytest

from conftest import open_app

LINKS = {
    "pages/model.py": {"preset": "gpt2-small", "shards": "8", "dtype": "bfloat16", "seed": "7", "batch": "3"},
    "pages/memory.py": {
        "preset": "gpt2-small",
        "mesh": "data=2,model=2",
        "strategy": "megatron",
        "optim": "adafactor",
        "devmem": "40GiB",
        "param": "bfloat16",
        "master": "float32",
        "seq": "512",
        "mb": "2",
        "remat": "dots",
        "attn": "naive",
        "cdtype": "float32",
        "sp": "on",
    },
    "pages/serving.py": {
        "preset": "llama2-7b",
        "mesh": "model=2",
        "kv": "int8",
        "context": "2048",
        "concurrency": "3",
        "devmem": "40GiB",
        "reserve": "0.2",
        "weights": "gptq",
        "group": "64",
        "bits": "8",
    },
    "pages/layout.py": {"preset": "gpt2-small", "mesh": "data=2,model=4", "strategy": "megatron"},
    "pages/checkpoint.py": {"preset": "gpt2-small", "mesh": "data=2,model=2", "strategy": "fsdp", "processes": "2"},
    "pages/bytes.py": {"preset": "gpt2-small", "opt": ["adamw", "sgd"]},
}

KINDS = ("selectbox", "number_input", "text_input", "text_area", "checkbox", "radio", "multiselect")


def shown_and_declared(widget) -> tuple[object, object]:
    """What the widget shows and what it declares as its default, in the proto's own terms."""
    proto = widget.proto
    if widget.type in ("selectbox", "radio"):
        return widget.index, proto.default
    if widget.type == "multiselect":
        return list(widget.indices), list(proto.default)
    return widget.value, proto.default


@pytest.mark.parametrize("page", sorted(LINKS))
def test_every_seeded_widget_declares_the_value_it_holds(page):
    at = open_app(LINKS[page], page)
    assert not at.exception
    checked = 0
    for kind in KINDS:
        for widget in at.get(kind):
            if widget.key is None or widget.form_id:  # a form's boxes are not seeded from a link
                continue
            value, default = shown_and_declared(widget)
            assert value == default, f"{page}: {widget.label!r} ({widget.key}) shows {value!r}, declares {default!r}"
            checked += 1
    assert checked >= 2, f"{page}: only {checked} widgets seen"
