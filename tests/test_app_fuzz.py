"""Hostile links through every page of the router (issue 8): a seeded subset of the sweep that
``bench/bench_fuzz.py`` runs in full. What a page must do with each link is defined in
``tests/hostile.py`` (``check_run``); pages and their keys are discovered, not listed."""

import random

import hostile
import pytest

pytestmark = pytest.mark.slow  # runs every page against hundreds of hostile links

PAGES = hostile.pages_from_app()
CASES_PER_PAGE = 32  # about 0.25 s a case on an idle 2-core machine: about 40 s in all
SEED = 8


@pytest.fixture(scope="module")
def page_keys():
    return hostile.discover_page_keys(PAGES)


def test_the_sweep_finds_every_page_and_its_settings(page_keys):
    assert {f"pages/{name}.py" for name in ("model", "shards", "bytes", "layout", "checkpoint")} <= set(PAGES)
    assert {"mesh", "strategy", "rules"} <= set(page_keys["pages/layout.py"])
    assert {"mesh", "strategy", "processes"} <= set(page_keys["pages/checkpoint.py"])
    assert "opt" in page_keys["pages/bytes.py"]
    if "pages/compare.py" in PAGES:  # a page with a codec of its own: every key of it is attacked
        assert {"s", "base", "budget"} <= set(page_keys["pages/compare.py"])


@pytest.mark.parametrize("page", PAGES)
def test_hostile_links_never_crash_a_page_and_every_rejection_is_explained(page, page_keys):
    rng = random.Random(f"{SEED}:{page}")
    failures = []
    for _ in range(CASES_PER_PAGE):
        query = hostile.hostile_query(rng, page_keys[page])
        at, read = hostile.open_page(page, query)
        failures += [f"?{query[:200]} -> {failure}" for failure in hostile.check_run(at, query, read, page_keys[page])]
    assert not failures, "\n".join(failures[:10])


def test_the_check_catches_a_page_that_hides_a_rejection():
    """The judge can fail: a link whose bad field the page did not mention is flagged."""
    at, read = hostile.open_page("pages/shards.py", "shards=1e400")
    assert hostile.check_run(at, "shards=1e400", read) == []
    for warning in at.warning:  # as if the page had not shown the link's problems
        warning.proto.body = "nothing to see"
    assert any("not shown" in failure for failure in hostile.check_run(at, "shards=1e400", read))
    at, read = hostile.open_page("pages/shards.py", "junk=%3Cimg%20src%3Dx%3E")
    assert hostile.check_run(at, "junk=%3Cimg%20src%3Dx%3E", read) == []
    at.query_params["junk"] = "1"  # as if the page had carried a junk key on
    at.caption[0].proto.body = "<img src=x>"  # and shown the link's markup raw
    failures = hostile.check_run(at, "junk=%3Cimg%20src%3Dx%3E", read)
    assert [failure.split(" ")[0] for failure in failures] == ["rewritten", "caption"]


TYPED = ("<img src=x onerror=alert(1)>[x](javascript:alert(1))", "9" * 5000, "\x00\x1b[31m\u202e💥 data=2")
# Links that make every text box of the current pages appear (custom rules, a preset's lists).
SHOW_ALL = "strategy=custom&preset=resnet18"


@pytest.mark.parametrize("page", PAGES)
def test_hostile_text_typed_into_every_text_box_is_refused_or_used_never_raised(page):
    """Every text input and text area a page draws (found on the page, not listed), given markup,
    a 5,000-character value and control characters, as a tampered client may send them."""
    at, _ = hostile.open_page(page, SHOW_ALL)
    boxes = [(kind, widget.key) for kind in ("text_input", "text_area") for widget in at.get(kind)]
    assert boxes or page not in ("pages/model.py", "pages/layout.py")  # a preset's list; mesh and rules
    failures = []
    for kind, key in boxes:
        for value in TYPED:
            at, _ = hostile.open_page(page, SHOW_ALL)
            next(widget for widget in at.get(kind) if widget.key == key).set_value(value).run()
            if at.exception:
                failures.append(f"{key} = {value[:30]!r}: {at.exception[0].message[:200]}")
            failures += [f"{key} = {value[:30]!r}: {failure}" for failure in hostile.markup_failures(at)]
    assert not failures, "\n".join(failures[:10])


# --- regressions: what the sweep found ---------------------------------------------------------


def test_checkpoint_page_names_the_mesh_it_refused_from_a_link():
    at, _ = hostile.open_page("pages/checkpoint.py", "mesh=data%3D128")
    refusal = "Link: `mesh`: a checkpoint measurement runs on at most 64"
    assert any(text.startswith(refusal) for text in hostile.alert_texts(at))
    assert at.query_params["mesh"] == "data=1"


@pytest.mark.parametrize(
    ("opt", "ignored", "used"),
    [
        ("adam,nope", "'nope'", "adam"),
        ("adam,adam", "repeated names", "adam"),
        ("", "''", "adamw"),
        ("<b>x</b>,lion", "'<b>x</b>'", "lion"),
    ],
)
def test_bytes_page_says_which_optimizers_of_a_link_it_ignored(opt, ignored, used):
    at, _ = hostile.open_page("pages/bytes.py", f"opt={opt}")
    assert any(f"Link: `opt`: ignoring {ignored}" in text for text in hostile.alert_texts(at))
    assert at.query_params["opt"] == used


@pytest.mark.parametrize(
    "edits",
    [
        {"added_rows": ["junk"]},  # raised AttributeError in Streamlit's editor before the fix
        {"edited_rows": [1, 2]},  # likewise
        {"edited_rows": {0: {"features": float("nan")}}},
        {"edited_rows": {0: {"features": "<script>"}}},
        {"edited_rows": {7: {"features": 3}}},
        {"added_rows": [{"features": 4, "extra": 1}]},
        {"deleted_rows": ["a", -1]},
    ],
    ids=lambda edits: repr(edits)[:40],
)
def test_tampered_layer_edits_are_refused_or_reset_never_raised(edits):
    at, _ = hostile.open_page("pages/model.py", "")
    at.session_state["w.layers.0"] = {"edited_rows": {}, "added_rows": [], "deleted_rows": [], **edits}
    at.run()
    assert not at.exception
    assert hostile.alert_texts(at), "the edit was neither applied nor explained"
    assert at.metric[0].value == "20"  # the last valid answer stays on screen
