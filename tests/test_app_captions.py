"""Every caption and label on every page starts in upper case (or a digit or a sign), on models that
fill the pages: the sidebar's model line, the Layout page's strategy notes and refusals, the Compare
page's budget answers. Seen in screenshots: "input 1,024 → 1,024" under a capitalised page."""

import json

import pytest

from conftest import open_app, quick_sample
from dcsim.model import schemas

PAGES = [
    "pages/model.py",
    "pages/shards.py",
    "pages/bytes.py",
    "pages/layout.py",
    "pages/memory.py",
    "pages/checkpoint.py",
]
LINKS = {
    "dense": {"input_dim": "1024", "layers": "1024", "dtype": "bfloat16"},
    "llama-tensor-refused": {"preset": "llama2-7b", "mesh": "data=8", "strategy": "tensor"},
    "llama-fsdp-fallback": {"preset": "llama2-7b", "mesh": "data=3", "strategy": "fsdp"},
    "custom-rules": {"input_dim": "8", "layers": "5", "mesh": "data=2,model=2", "strategy": "custom"},
    "llama-zero1-master": {"preset": "llama2-7b", "mesh": "data=64", "zero": "1", "master": "float32"},
    "mixtral-expert-parts": {"preset": "mixtral-8x7b", "mesh": "data=2,expert=8", "parts": "optimizer,grads"},
}
# The Model page's hyperparameter fields are labelled with the names a link (h.d_model) and the
# CLI (--set d_model=...) use: identifiers, shown as such on purpose.
IDENTIFIERS = {spec.name for schema in schemas.FAMILY_SCHEMAS.values() for spec in schema}
WIDGETS = ("text_input", "number_input", "selectbox", "radio", "checkbox", "text_area", "button", "download_button")


def starts_well(text: str) -> bool:
    first = text.lstrip("*_“\"'`( ⚠✖\\")[:1]
    return not first or not first.islower()


def captions_and_labels(at) -> list[tuple[str, str]]:
    said = [
        (kind, element.value) for kind in ("caption", "info", "warning", "error", "success") for element in at.get(kind)
    ]
    said += [("subheader", element.value) for element in at.subheader]
    said += [("metric", metric.label) for metric in at.metric]
    said += [(kind, widget.label) for kind in WIDGETS for widget in at.get(kind) if widget.label not in IDENTIFIERS]
    for table in at.dataframe:
        columns = json.loads(table.proto.columns or "{}")
        said += [("column", column["label"]) for column in columns.values() if column.get("label")]
    return said


@pytest.mark.parametrize("link", quick_sample(list(LINKS), keep=("dense", "mixtral-expert-parts")))
@pytest.mark.parametrize("page", PAGES, ids=[page.split("/")[1][:-3] for page in PAGES])
def test_every_caption_and_label_starts_in_upper_case(page, link):
    at = open_app(LINKS[link], page)
    lower = [(kind, text[:80]) for kind, text in captions_and_labels(at) if not starts_well(text)]
    assert lower == []


def test_the_compare_page_with_budget_answers_too():
    at = open_app(
        {"s": ["bfloat16~preset=llama2-7b~n=7B", "float32~n=seed"], "btrain": "adam", "bunit": "bytes"},
        "pages/compare.py",
    )
    lower = [(kind, text[:80]) for kind, text in captions_and_labels(at) if not starts_well(text)]
    assert lower == []
    assert any("Fits on" in block.value for block in at.markdown)  # the answers were drawn


def test_the_sidebar_names_a_dense_stack_in_a_sentence_case_line():
    at = open_app({"input_dim": "1024", "layers": "1024"}, "pages/bytes.py")
    assert "Dense stack, input 1,024 → 1,024" in [caption.value.replace("\\", "") for caption in at.sidebar.caption]
