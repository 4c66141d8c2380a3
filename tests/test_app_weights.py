"""Weight formats on the pages, in Streamlit's AppTest (issue 28): the Model page's bytes per shard in
a format and the Serving page's weights, each the engine's figure exactly, the options in the link,
bad link values named, and the file written and weighed from the page."""

from fractions import Fraction

from conftest import metrics, open_app
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quant import layouts
from dcsim.quant.formats import check_format
from dcsim.quantities import units
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh

SERVING = "pages/serving.py"


def payload(preset, name, **options):
    config = ModelConfig(preset=preset)
    return layouts.weight_table(config, count_params(config), check_format(name, **options)).payload_bytes


def test_the_model_page_gives_bytes_per_shard_in_the_format():
    at = open_app({"preset": "llama2-13b", "weights": "gptq-int4"}, editors=False)
    shown = metrics(at)
    assert shown["Bytes per shard (gptq-int4)"] == units.bytes_share(Fraction(payload("llama2-13b", "gptq-int4"), 2))
    # one bytes-per-shard figure, the format's (issue 46): the storage dtype's is for the other pages
    assert "Bytes per shard (float32)" not in shown
    assert at.query_params["weights"] == "gptq-int4" and at.query_params["group"] == "128"
    at.text_input(key="w.model.group").set_value("64").run()
    expected = units.bytes_share(Fraction(payload("llama2-13b", "gptq-int4", group=64), 2))
    assert metrics(at)["Bytes per shard (gptq-int4)"] == expected
    assert at.query_params["group"] == "64"


def test_the_model_page_without_a_format_shows_the_dtype_alone():
    at = open_app({"preset": "llama2-7b"}, editors=False)
    assert not any(label.startswith("Bytes per shard (") and "float32" not in label for label in metrics(at))
    assert "weights" not in at.query_params


def test_the_model_page_table_lists_every_array_in_the_format():
    at = open_app({"preset": "gpt2-small", "weights": "awq-int4"}, editors=False)
    at.session_state["model.weights_open"] = True
    at.run()
    frames = [frame.value for frame in at.dataframe if "tensors" in frame.value.columns]
    assert len(frames) == 1 and len(frames[0]) == len(count_params(ModelConfig(preset="gpt2-small")).arrays)
    query = frames[0].set_index("array").loc["block_0/attn/query/kernel"]
    assert "transformer.h.0.attn.c_attn.qweight" in query["tensors"] and query["dtypes"] == "int32, float16"


def test_a_bad_format_in_a_link_is_named_and_replaced():
    at = open_app({"preset": "llama2-7b", "weights": "q4"}, editors=False)
    warnings = " ".join(item.value for item in at.warning).replace("\\", "")
    assert "Link: `weights`" in warnings and "must be a weight format" in warnings and "got 'q4'" in warnings
    assert "weights" not in at.query_params


def test_the_serving_page_weights_are_the_engines_exactly():
    query = {"preset": "llama2-70b", "mesh": "model=2", "device": "h100-sxm", "weights": "gguf-q4_k_m"}
    at = open_app(query, SERVING, editors=False)
    served = compute_serving(
        ModelConfig(preset="llama2-70b"), Serving(mesh=parse_mesh("model=2"), device="h100-sxm", weights="gguf-q4_k_m")
    )
    shown = metrics(at)
    assert shown["Weights"] == units.bytes_exact(served.weights_bytes_per_device)
    assert shown["Total"] == units.bytes_exact(served.total_bytes_per_device)
    assert at.query_params["weights"] == "gguf-q4_k_m" and "group" not in at.query_params


def test_the_serving_page_refuses_none_as_a_format():
    at = open_app({"preset": "llama2-7b", "weights": "none"}, SERVING, editors=False)
    assert "Link: `weights`" in " ".join(item.value for item in at.warning).replace("\\", "")
    assert at.query_params["weights"] == "bfloat16"


def test_the_file_is_written_and_weighed_from_the_page():
    at = open_app({"preset": "gpt2-small", "context": "1024", "weights": "gptq-int4"}, SERVING, editors=False)
    at.button(key="serving.write").click().run()
    assert not at.exception
    done = " ".join(item.value for item in at.success)
    assert "equal to the byte" in done and "tensors' names, shapes and dtypes checked" in done


def test_the_compare_page_shows_a_scenarios_bytes_in_its_format():
    token = "float32~preset=llama2-13b~weights=gptq-int4~n=13B GPTQ"
    at = open_app({"cv": "2", "s": token}, "pages/compare.py", editors=False)
    rows = next(frame.value for frame in at.dataframe if "weights_bytes" in frame.value.columns)
    assert rows["weights"][0] == "gptq-int4" and rows["weights_bytes"][0] == f"{payload('llama2-13b', 'gptq-int4'):,}"
    assert "weights=gptq-int4" in at.query_params["s"]
