"""The Model page on the families of issue 16: the active count with its definition, the
Mixture-of-Experts form (dense blocks written as a list, possibly empty) and links that keep it."""

from conftest import metrics, open_app
from dcsim import links
from dcsim.model import breakdown
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params


def captions(at) -> str:
    return "\n".join(caption.value for caption in at.caption)


def widget(at, label):
    return next(item for item in [*at.number_input, *at.text_input] if item.label == label)


def test_deepseek_v3_shows_its_total_and_what_a_token_uses():
    at = open_app({"preset": "deepseek-v3"})
    shown = metrics(at)
    assert shown["Total parameters"] == "671,026,404,352"
    assert shown["Active per token"] == "37,552,282,624"
    text = captions(at)
    assert "What one token uses: 8 of the 256 routed experts in each MoE block" in text
    assert "Every expert is stored" in text
    assert "DeepSeek-V3's router score-correction biases" in text and "14,848 values" in text
    help_text = next(metric for metric in at.metric if metric.label == "Active per token").help
    assert help_text == breakdown.ACTIVE_DEFINITION


def test_a_dense_model_has_no_active_figure():
    assert "Active per token" not in metrics(open_app({"preset": "llama2-7b"}))


def test_routing_to_fewer_experts_changes_only_the_active_count():
    at = open_app({"preset": "mixtral-8x7b"})
    widget(at, "experts_per_token").set_value(1).run()
    shown = metrics(at)
    assert shown["Total parameters"] == "46,702,792,704"
    # 12,879,925,248 less one expert (3 x 4,096 x 14,336 = 176,160,768 values) in each of 32 blocks
    assert shown["Active per token"] == "7,242,780,672"
    assert at.query_params["h.experts_per_token"] == "1"


def test_dense_blocks_can_all_become_moe_blocks_and_the_link_keeps_it():
    at = open_app({"preset": "deepseek-v3"})
    widget(at, "dense_layers").set_value("").run()
    expected = count_params(ModelConfig(preset="deepseek-v3", overrides={"dense_layers": ()})).total_params
    assert metrics(at)["Total parameters"] == f"{expected:,}"
    query = dict(at.query_params.items())
    assert query["h.dense_layers"] == "none"
    again = open_app(query)
    assert metrics(again)["Total parameters"] == f"{expected:,}" and not again.warning
    for written in ("none", ""):
        decoded = links.decode({"preset": ["deepseek-v3"], "h.dense_layers": [written]})
        assert decoded.problems == () and dict(decoded.config.overrides) == {"dense_layers": ()}


def test_a_bad_top_k_names_the_rule_and_keeps_the_last_valid_numbers():
    at = open_app({"preset": "mixtral-8x7b"})
    widget(at, "experts_per_token").set_value(9).run()
    error = at.error[0].value.replace("\\", "")  # the page escapes markdown marks
    assert "`experts_per_token` (9) must be at most `num_experts` (8)" in error
    assert metrics(at)["Total parameters"] == "46,702,792,704"
