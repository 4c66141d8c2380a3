"""The landing page's questions (``dcsim.ui.questions``): each is a link that opens its page on its
model with its settings, without a warning, and the page keeps every setting in its own link."""

from urllib.parse import parse_qsl, urlsplit

import pytest
from hostile import alert_texts

from conftest import open_app
from dcsim import links
from dcsim.ui.questions import QUESTIONS

PAGE_FILES = {"": "pages/model.py", "memory": "pages/memory.py", "serving": "pages/serving.py"}
PAGE_FILES |= {"layout": "pages/layout.py", "checkpoint": "pages/checkpoint.py"}


def query_of(href: str) -> dict[str, str]:
    pairs = parse_qsl(urlsplit(href).query, keep_blank_values=True)
    assert len({key for key, _ in pairs}) == len(pairs), href  # each key once
    return dict(pairs)


def test_the_questions_cover_the_pages_that_answer_them():
    assert {question.page for question in QUESTIONS} == set(PAGE_FILES)
    assert len({question.text for question in QUESTIONS}) == len(QUESTIONS)


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.text[:40] for q in QUESTIONS])
def test_a_question_links_relative_to_the_app_root_and_its_model_decodes_as_written(question):
    href = question.href()
    assert href.startswith(f"./{question.page}?")  # relative: it works under a base URL path too
    decoded = links.decode({key: [value] for key, value in query_of(href).items()})
    assert decoded.problems == ()
    assert decoded.config == question.config
    if question.request is not None:
        values, problems = question.request.decode(query_of(href))
        assert problems == []
        assert all(values[key] == value for key, value in query_of(href).items() if key in values)


def test_a_question_with_a_setting_its_page_refuses_cannot_be_written():
    from dcsim.model.config import ModelConfig
    from dcsim.requests.training import TRAINING
    from dcsim.ui.questions import Question

    wrong = Question(
        text="?", page="memory", config=ModelConfig(preset="gpt2-small"), settings={"seq": "0"}, request=TRAINING
    )
    with pytest.raises(ValueError, match="seq"):
        wrong.href()


@pytest.mark.slow  # each opens a page on a real model: a count, a layout, a trace or a serving report
@pytest.mark.parametrize("question", QUESTIONS, ids=[q.text[:40] for q in QUESTIONS])
def test_each_question_opens_its_page_with_its_settings_and_no_warning(question):
    query = query_of(question.href())
    at = open_app(query, PAGE_FILES[question.page], editors=False)
    assert alert_texts(at) == []
    # The page rewrote the link to what it shows: every key the question gave, with its value.
    shown = dict(at.query_params.items())
    assert {key: shown.get(key) for key in query} == query


def test_a_visitor_without_a_link_sees_the_questions_and_a_linked_model_shows_only_its_own_figures():
    landing = open_app(editors=False)
    assert [header.value for header in landing.subheader][:1] == ["What dcsim answers"]
    texts = " ".join(element.value for element in landing.markdown)
    assert all(question.href() in texts for question in QUESTIONS)
    linked = open_app({"preset": "gpt2-small"}, editors=False)
    assert "What dcsim answers" not in [header.value for header in linked.subheader]
    assert not any("./memory?" in element.value for element in linked.markdown)
