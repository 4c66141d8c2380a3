"""A model opened by its Hub id on the dashboard, in AppTest, against a loopback Hub (the app reads
``HF_ENDPOINT`` when it fetches): a link with ``hf=`` alone, the link the page then writes (which
reopens without the Hub), a link whose model cannot be fetched, hostile ``hf``/``rev`` values, and
the Model page's Hub id box with a gated model's token, which stays out of the link and the page."""

import json

import fake_hub
import hostile
import pytest
from fake_hub import GATED_TOKEN, LLAMA

from conftest import open_app, quick_sample
from dcsim.hf import hub
from dcsim.ui import state

LLAMA_TOTAL = "6,738,415,616"


def total(at) -> str:
    return next(metric.value for metric in at.metric if metric.label == "Total parameters")


def texts(at) -> str:
    """Every text on the page and in its sidebar, markdown escapes removed."""
    kinds = ("caption", "markdown", "warning", "error", "info", "success", "code", "text")
    found = [hostile.unescape(str(element.value)) for kind in kinds for element in at.get(kind)]
    found += [hostile.unescape(str(element.value)) for kind in kinds for element in at.sidebar.get(kind)]
    return " ".join(found)


def hub_box(at):
    at.session_state[state.HUB_OPEN] = True
    at.run()
    assert not at.exception
    return at


def submit(at, repo_id: str, revision: str = "", token: str = ""):
    at.text_input(key=state.HUB_ID).input(repo_id)
    at.text_input(key=state.HUB_REVISION).input(revision)
    at.text_input(key=state.HUB_TOKEN).input(token)
    next(button for button in at.button if button.label == "Open from the Hub").click().run()
    assert not at.exception
    return at


def test_a_link_with_a_hub_id_alone_fetches_and_opens_it(gated_hub):
    at = open_app({"hf": LLAMA, "shards": "8", "dtype": "bfloat16"}, editors=False)
    assert total(at) == LLAMA_TOTAL
    assert not at.warning
    link = dict(at.query_params)
    assert (link["hf"], link["family"], link["model_type"], link["shards"], link["dtype"]) == (
        LLAMA,
        "decoder",
        "llama",
        "8",
        "bfloat16",
    )
    assert "name" not in link  # the Hub id names it
    assert [method for method, _, _ in gated_hub.requests] == ["HEAD", "GET"]
    # The link it wrote reopens the same model without asking the Hub.
    again = open_app(link, editors=False)
    assert total(again) == LLAMA_TOTAL and again.session_state[state.CONFIG] == at.session_state[state.CONFIG]
    assert len(gated_hub.requests) == 2
    assert f"{LLAMA} (llama, from the Hub)" in texts(again)


def test_a_link_whose_model_cannot_be_fetched_says_why_and_shows_no_numbers_as_its(gated_hub):
    at = open_app({"hf": "nobody/missing"}, editors=False)
    warning = hostile.unescape(at.warning[0].value)
    assert warning.startswith("Link: `hf`: nobody/missing could not be opened from the Hugging Face Hub: ")
    assert "nobody/missing was not found on the Hub" in warning
    assert "The figures shown are the Dense stack's, not nobody/missing's" in warning
    assert total(at) == "20" and "hf" not in at.query_params
    # the Hub id box is open with the id filled in, for a retry with a token
    assert at.text_input(key=state.HUB_ID).value == "nobody/missing"


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("hf=..%2Fx", "Link: `hf` may not hold '..' or '--'"),
        ("hf=https%3A%2F%2Fhuggingface.co%2Fa%2Fb", "Link: `hf` is a URL"),
        ("hf=%3Cscript%3Ealert(1)%3C%2Fscript%3E", "Link: `hf` must be owner/name"),
        ("hf=a%2Fb%2Fc", "Link: `hf` is owner/name or a single name"),
        ("hf=" + "x" * 200, "Link: `hf` may be at most 96 characters"),
        (f"hf={LLAMA}&rev=..%2Fmain", "Link: `rev` must be a branch, tag or commit"),
        ("rev=main", "Link: `rev` is a revision of a Hub model, and the link names no valid one"),
        ("hf=a&hf=b", "Link: `hf` appears 2 times in the link"),
    ],
    ids=lambda value: value[:30],
)
def test_a_hostile_hub_id_in_a_link_is_refused_before_any_request(gated_hub, query, says):
    at, read = hostile.open_page("pages/model.py", query)
    assert hostile.check_run(at, query, read) == []
    assert any(text.startswith(says) for text in hostile.alert_texts(at))
    assert gated_hub.requests == []


@pytest.mark.parametrize("page", ["pages/model.py", "pages/layout.py", "pages/shards.py"])
@pytest.mark.parametrize(
    "query",
    quick_sample(
        {
            "opens": f"hf={LLAMA}&shards=4",
            "missing": "hf=nobody%2Fmissing",
            "ignored-hparams": f"hf={LLAMA}&h.num_layers=3&name=x",
            "preset-wins": f"hf={LLAMA}&preset=gpt2-small",
        },
        keep=("opens",),
    ),
)
def test_hub_links_survive_the_hostile_link_check_on_any_page(gated_hub, page, query):
    at, read = hostile.open_page(page, query)
    assert hostile.check_run(at, query, read) == []


def test_the_hub_box_opens_a_gated_model_with_a_token_kept_out_of_the_link(gated_hub):
    at = hub_box(open_app(editors=False))
    assert f"Asks the Hub at {gated_hub.url}." in texts(at)
    submit(at, "gated/model")
    assert "Not opened: gated/model is a gated model: accept its licence" in hostile.unescape(at.error[0].value)
    assert total(at) == "20"
    submit(at, " gated/model ", token=GATED_TOKEN)
    assert total(at) == LLAMA_TOTAL and not at.error
    assert at.query_params["hf"] == "gated/model"
    shown = texts(at)
    assert "Opened gated/model (llama, from the Hub) at commit 01c7f73d771d." in shown
    assert GATED_TOKEN not in shown and GATED_TOKEN not in str(dict(at.query_params))
    assert GATED_TOKEN not in at.session_state[state.CONFIG].to_json()
    assert gated_hub.requests[-1][2] == f"Bearer {GATED_TOKEN}"


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("https://huggingface.co/meta-llama/Llama-2-7b-hf", "Not opened: `Hub id` is a URL"),
        ("../../etc/passwd", "Not opened: `Hub id` is owner/name or a single name"),
        ("<img src=x onerror=alert(1)>", "Not opened: `Hub id` may not hold spaces"),
        ("", "Type the model's Hub id first"),
    ],
    ids=["url", "path", "markup", "empty"],
)
def test_the_hub_box_refuses_what_is_not_a_hub_id_before_asking(gated_hub, typed, says):
    at = submit(hub_box(open_app(editors=False)), typed)
    assert hostile.unescape(at.error[0].value).startswith(says)
    assert hostile.markup_failures(at) == []
    assert gated_hub.requests == []


def test_without_a_network_the_box_says_so(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "FETCHER", hub.Fetcher())
    at = submit(hub_box(open_app(editors=False)), LLAMA)
    error = hostile.unescape(at.error[0].value)
    assert error.startswith("Not opened: cannot connect to the Hub at http://127.0.0.1:9 (no network?")
    assert total(at) == "20"


def test_an_offline_server_opens_from_its_cache_and_says_it_is_offline(gated_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hostile.ROOT / "examples" / "hub-cache"))
    at = open_app({"hf": LLAMA}, editors=False)
    assert total(at) == LLAMA_TOTAL
    at = submit(hub_box(open_app(editors=False)), "other/model")
    assert "HF_HUB_OFFLINE is set on this server" in texts(at)
    assert "HF_HUB_OFFLINE is set, and config.json of other/model is not in the Hugging Face cache" in texts(at)
    assert gated_hub.requests == []


@pytest.mark.parametrize(
    ("query", "dtype"),
    [({}, "bfloat16"), ({"dtype": "float32"}, "float32")],
    ids=["the-models-own", "the-links"],
)
def test_a_hub_link_stores_in_the_models_dtype_unless_it_names_one(monkeypatch, query, dtype):
    bf16 = json.loads(fake_hub.llama().files["main"]) | {"torch_dtype": "bfloat16"}
    with fake_hub.endpoint(monkeypatch, {LLAMA: fake_hub.Repo(files={"main": json.dumps(bf16).encode()})}):
        at = open_app({"hf": LLAMA, **query}, editors=False)
    assert total(at) == LLAMA_TOTAL
    assert at.session_state[state.CONFIG].dtype == dtype
    assert at.query_params["dtype"] == dtype  # the link it writes keeps that meaning


def test_the_hub_box_opens_a_bfloat16_model_in_bfloat16(monkeypatch):
    bf16 = json.loads(fake_hub.llama().files["main"]) | {"torch_dtype": "bfloat16"}
    with fake_hub.endpoint(monkeypatch, {LLAMA: fake_hub.Repo(files={"main": json.dumps(bf16).encode()})}):
        at = submit(hub_box(open_app({"shards": "8"}, editors=False)), LLAMA)
    assert total(at) == LLAMA_TOTAL
    assert next(box for box in at.selectbox if box.label == "Storage dtype").value == "bfloat16"
    assert next(metric.value for metric in at.metric if metric.label == "Bytes per shard (bfloat16)").startswith(
        f"{6_738_415_616 * 2 // 8:,} bytes"
    )
