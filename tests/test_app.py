"""The dashboard in Streamlit's AppTest: it runs, shows the numbers and explains bad input."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture
def app():
    return AppTest.from_file(APP, default_timeout=30).run()


def metrics(at):
    return {metric.label: metric.value for metric in at.metric}


def test_landing_page_answers_the_seed_example_without_a_click(app):
    assert not app.exception
    values = metrics(app)
    assert values["Total parameters"] == "20"
    assert values["Ideal share per shard (2 shards)"] == "10"
    assert values["Raw float32 payload"] == "80 bytes"
    assert any("not the checkpoint size" in caption.value for caption in app.caption)


def test_changing_shards_and_widths_updates_the_numbers(app):
    shards = next(widget for widget in app.number_input if "shards" in widget.label)
    shards.set_value(3).run()
    assert metrics(app)["Ideal share per shard (3 shards)"] == "6.666666666666667 (20/3)"
    app.text_input[0].set_value("4, 2").run()
    assert metrics(app)["Total parameters"] == "30"
    assert not app.exception


@pytest.mark.parametrize(
    "widths", ["4,x", "", "0", "4," * 300, "1e400"], ids=["text", "empty", "zero", "too-many", "1e400"]
)
def test_bad_widths_show_the_rule_not_a_traceback(app, widths):
    app.text_input[0].set_value(widths).run()
    assert not app.exception
    assert app.error and "layer widths" in app.error[0].value
