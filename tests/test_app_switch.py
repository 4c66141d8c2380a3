"""Every page's settings after a switch of model in place (issue 46, item 2): a mesh, a context, a
prompt or a weight format's options that the new model refuses are refused with the reason and
offered back, in one click, at the nearest value it takes; switching back treats the old model the
same way."""

import pytest

from conftest import metrics, open_app
from conftest import shown as shown_text
from dcsim.quant.formats import check_format
from dcsim.sharding.meshes import MeshSpec, parse_mesh
from dcsim.ui.layout import nearest_mesh
from dcsim.ui.model import MODEL_KEY
from dcsim.ui.weights import nearest_options


def pick(at, preset):
    (box,) = [box for box in at.selectbox if box.key == MODEL_KEY]
    box.set_value(preset).run()
    assert not at.exception
    return at


def offers(at) -> dict[str, object]:
    """The page's one-click offers, by label as a reader sees it."""
    return {label.replace("\\", ""): button for button in at.button if (label := button.label).startswith("Use ")}


def click(at, label):
    offers(at)[label].click().run()
    assert not at.exception
    return at


def model_size(heads):
    """A `model` axis a multi-head attention of ``heads`` heads takes: one that divides them."""
    return lambda mesh: heads % dict(mesh.axes).get("model", 1) == 0


@pytest.mark.parametrize(
    ("asked", "heads", "expected"),
    [
        ("data=2,model=8", 12, "data=2,model=6"),  # 7 and 9 do not divide 12; data=1 or 3 does not help
        ("model=6", 64, "model=4"),  # 5 and 7 do not divide 64; 4 and 8 are as near: the smaller
        ("model=8", 64, None),  # taken as it is: nothing to offer (nearest_mesh is asked only on refusal)
    ],
    ids=["gpt2-heads", "back-to-64-heads", "already-taken"],
)
def test_the_nearest_mesh_changes_one_axis_to_the_nearest_size_taken(asked, heads, expected):
    mesh = parse_mesh(asked)
    if expected is None:
        assert model_size(heads)(mesh)
        return
    assert nearest_mesh(mesh, model_size(heads)) == parse_mesh(expected)


def test_no_nearest_mesh_when_nothing_near_is_taken():
    assert nearest_mesh(MeshSpec((("model", 8),)), lambda mesh: False) is None


def test_the_layout_page_offers_the_nearest_mesh_each_way():
    at = open_app({"preset": "llama2-7b", "mesh": "data=2,model=8", "strategy": "megatron"}, "pages/layout.py")
    assert not at.error and not offers(at)  # 32 heads: model=8 takes them
    pick(at, "gpt2-small")  # 12 heads
    assert "a tensor size of 8 cannot split 12 query heads evenly" in at.error[0].value.replace("\\", "")
    click(at, "Use data=2,model=6, the nearest mesh this model takes")
    assert not at.error and at.query_params["mesh"] == "data=2,model=6"
    pick(at, "llama2-7b")  # 6 does not divide 32
    assert "a tensor size of 6 cannot split 32 query heads evenly" in at.error[0].value.replace("\\", "")
    click(at, "Use data=2,model=4, the nearest mesh this model takes")
    assert not at.error and at.query_params["mesh"] == "data=2,model=4"


@pytest.mark.slow  # traces the step of two models
def test_the_memory_page_offers_the_mesh_the_state_and_the_step_take():
    query = {"preset": "llama2-7b", "mesh": "data=2,model=8", "strategy": "megatron", "zero": "3", "seq": "512"}
    at = pick(open_app(query, "pages/memory.py", editors=False), "gpt2-small")
    assert "Use data=2,model=6, the nearest mesh this model takes" in offers(at)
    assert any("the layout is impossible" in shown_text(warning) for warning in at.warning)
    click(at, "Use data=2,model=6, the nearest mesh this model takes")
    assert at.query_params["mesh"] == "data=2,model=6"
    assert not [label for label in offers(at) if "mesh" in label]
    assert shown_text(at.success[0]).startswith("Mesh data=2,model=6 fits")
    pick(at, "llama2-7b")  # back: 6 does not divide 32 heads
    click(at, "Use data=2,model=4, the nearest mesh this model takes")
    assert shown_text(at.success[0]).startswith("Mesh data=2,model=4 fits") and at.query_params["seq"] == "512"
    # ZeRO-0 splits no part over the data axes, but Megatron's tensor split holds at every ZeRO stage
    # (issue 45): without a step the state alone refuses model=8 for 12 heads, and is offered model=6;
    # with one, the split of the activations needs the `model` axis to divide the heads too.
    zero = query | {"zero": "0"}
    at = pick(open_app({**zero, "seq": "none"}, "pages/memory.py", editors=False), "gpt2-small")
    assert [label for label in offers(at) if "mesh" in label] == [
        "Use data=2,model=6, the nearest mesh this model takes"
    ]
    at = pick(open_app(zero, "pages/memory.py", editors=False), "gpt2-small")
    assert "the mesh's model axis (8) must divide the KV heads (12)" in shown_text(at.error[0])
    click(at, "Use data=2,model=6, the nearest mesh this model takes")
    assert shown_text(at.success[0]).startswith("Mesh data=2,model=6 fits")


def test_the_serving_page_offers_the_context_the_mesh_and_the_prompt_each_in_one_click():
    query = {"preset": "llama2-7b", "mesh": "model=8", "context": "2048", "prompt": "2000", "device": "h100-sxm"}
    at = open_app(query, "pages/serving.py", editors=False)
    assert shown_text(at.success[0]).startswith("Mesh model=8 serves 1 sequence of 2,048 tokens")
    pick(at, "gpt2-small")  # 1,024 positions, 12 heads
    assert not at.success  # no verdict beside a refusal of its own inputs
    assert "past the model's 1,024 positions" in shown_text(at.error[0])
    assert {"Use 1,024 tokens, this model's positions", "Use model=6, the nearest mesh this model takes"} <= set(
        offers(at)
    )
    click(at, "Use 1,024 tokens, this model's positions")
    assert "a tensor size of 8 cannot split 12 query heads evenly" in shown_text(at.error[0])
    click(at, "Use model=6, the nearest mesh this model takes")
    assert shown_text(at.success[0]).startswith("Mesh model=6 serves 1 sequence of 1,024 tokens")
    # the time section's prompt of 2,000 tokens cannot sit in a context of 1,024: no first-token time for it
    assert "First token (estimate)" not in metrics(at)
    assert shown_text(at.error[0]) == (
        "Prompt: 2,000 tokens leave no room for a token in a context of 1,024 tokens a sequence; the prompt must "
        "be shorter than the context (at most 1,023 tokens)."
    )
    click(at, "Use 1,023 tokens, the longest prompt this context takes")
    assert not at.error and at.query_params["prompt"] == "1023"
    assert "First token (estimate)" in metrics(at)
    pick(at, "llama2-7b")  # back: 32 heads refuse model=6; the context follows (1,024 was GPT-2's untouched default)
    assert at.query_params["context"] == "4096"
    click(at, "Use model=4, the nearest mesh this model takes")
    assert shown_text(at.success[0]).startswith("Mesh model=4 serves 1 sequence of 4,096 tokens")


@pytest.mark.parametrize(
    ("asked", "takes", "expected"),
    [
        # a shard of 192 input features (GPT-2 small's 768 over model=4): the tile must divide it; 64 is the
        # nearest power of two to 128 that does (256 is as near, and larger)
        (check_format("int4", tile=128), lambda fmt: 192 % fmt.tile == 0, {"tile": 64}),
        (
            check_format("int4", tile=128, quantize_head=True),
            lambda fmt: 192 % fmt.tile == 0 and not fmt.quantize_head,
            {"tile": 64, "quantize_head": False},
        ),
        (
            check_format("int4", tile=128, quantize_head=True),
            lambda fmt: not fmt.quantize_head,
            {"quantize_head": False},
        ),
        (check_format("awq-int4", group=128), lambda fmt: 512 % fmt.group == 0 and fmt.group >= 256, {"group": 256}),
        (check_format("awq-int4", group=128), lambda fmt: False, None),
    ],
    ids=["tile", "tile-and-tied-head", "tied-head", "group-up", "nothing"],
)
def test_the_nearest_weight_options_change_as_little_as_they_can(asked, takes, expected):
    assert nearest_options(asked, takes) == expected


def test_the_serving_page_offers_the_weight_options_the_new_model_takes():
    query = {"preset": "llama2-7b", "mesh": "model=8", "weights": "awq-int4", "group": "128", "device": "h100-sxm"}
    at = pick(open_app(query, "pages/serving.py", editors=False), "t5-small")
    # T5-small's 8 heads of 64 over 8 ranks: the output projection's shard has 64 input features, under the group
    assert "the group of 128 does not divide its 64 input features" in shown_text(at.error[0])
    click(at, "Use a group of 64, the nearest awq-int4 this model takes")
    assert at.query_params["group"] == "64" and at.query_params["mesh"] == "model=8"
    assert shown_text(at.success[0]).startswith("Mesh model=8 serves 1 sequence")
    # GPT-2 small ties its head to the token table, which qwix keeps unquantized, and its heads are 64 wide
    # (768 / 12), which qwix tiles on their own axis in the output projection: no tile of 128 (Llama's heads)
    query = {"preset": "llama2-7b", "mesh": "model=2", "weights": "int4", "qhead": "true", "context": "1024"}
    at = pick(open_app(query, "pages/serving.py", editors=False), "gpt2-small")
    assert "tied embeddings" in shown_text(at.error[0])
    click(at, "Use a tile of 64 and the output head unquantized, the nearest int4 this model takes")
    assert at.query_params["qhead"] == "false" and at.query_params["tile"] == "64"
    assert not at.error and shown_text(at.success[0]).startswith("Mesh model=2 serves 1 sequence of 1,024 tokens")


def test_the_model_page_offers_the_weight_options_the_new_model_takes():
    at = open_app({"preset": "llama2-7b", "weights": "int4", "qhead": "true"}, "pages/model.py", editors=False)
    assert not at.error and not offers(at)
    pick(at, "gpt2-small")
    assert "tied embeddings" in shown_text(at.error[0])
    click(at, "Use a tile of 64 and the output head unquantized, the nearest int4 this model takes")
    assert not at.error and (at.query_params["tile"], at.query_params["qhead"]) == ("64", "false")
    assert "Bytes per shard (int4)" in metrics(at)


def test_an_untouched_prompt_follows_a_short_context_and_a_typed_one_stays():
    """The prompt's default is 128 tokens, or the context less one where that is shorter: a short
    context never refuses a prompt nobody typed, and the prompt comes back to 128 with the context."""
    query = {"preset": "llama2-7b", "context": "64", "device": "h100-sxm"}
    at = open_app(query, "pages/serving.py", editors=False)
    (prompt,) = [box for box in at.text_input if box.label.startswith("Prompt")]
    assert prompt.value == "63" and not at.error and "First token (estimate)" in metrics(at)
    (context,) = [box for box in at.text_input if box.label.startswith("Context")]
    context.set_value("4096").run()
    (prompt,) = [box for box in at.text_input if box.label.startswith("Prompt")]
    assert prompt.value == "128" and not at.error
    prompt.set_value("100").run()
    (context,) = [box for box in at.text_input if box.label.startswith("Context")]
    context.set_value("64").run()  # a typed prompt stays, refused with its offer
    assert "Prompt: 100 tokens leave no room" in shown_text(at.error[0])
    assert "Use 63 tokens, the longest prompt this context takes" in offers(at)
