"""Opening a model by its Hub id (``dcsim.hf.hub``) against a loopback Hub (``tests/fake_hub.py``):
the count of a fetched config.json, each way a fetch fails said plainly, hostile ids refused before
any request, offline mode, the limits and the cache. Nothing leaves 127.0.0.1."""

import json
import threading
import time
from urllib.parse import parse_qs

import pytest
from fake_hub import DATA, LLAMA, LLAMA_COMMIT, Repo, llama, running, write_cache
from huggingface_hub.utils import validate_repo_id
from hypothesis import given
from hypothesis import strategies as st

from dcsim import links
from dcsim.hf import bounds, hub
from dcsim.hf.bounds import AnswerCache, HubError, ServerLimit, SessionBudget
from dcsim.model.config import ModelConfig, Origin
from dcsim.model.count import count_params

TOKEN = "hf_GatedSecretToken1234567890abcdef"
LLAMA_COUNT = json.loads((DATA / "counts.json").read_text())["llama-2-7b"]
BIG = b'{"model_type": "llama", "padding": "' + b"x" * 300_000 + b'"}'


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake():
    repos = {
        LLAMA: llama(),
        "gated/model": Repo(files=llama().files, token=TOKEN),
        "no/config": Repo(files={"main": None}),
        "bad/json": Repo(files={"main": b'{"model_type": "llama",'}),
        "big/file": Repo(files={"main": BIG}),
        "lying/size": Repo(files={"main": BIG}, head_size=100, get_without_length=True),
        "slow/model": Repo(files=llama().files, delay=30),
        "other/model": Repo(files=llama().files),
    }
    with running(repos) as server:
        yield server


def fetcher(fake, **kwargs) -> hub.Fetcher:
    return hub.Fetcher(hub.HubSettings(endpoint=fake.url, timeout=kwargs.pop("timeout", 5)), **kwargs)


def refusal(fake, repo_id, revision=None, **kwargs) -> HubError:
    with pytest.raises(HubError) as caught:
        hub.open_model(repo_id, revision, fetcher=kwargs.pop("using", None) or fetcher(fake), **kwargs)
    return caught.value


def test_llama_2_7b_fetched_by_its_id_counts_what_transformers_counts(fake):
    opened = hub.open_model(LLAMA, fetcher=fetcher(fake), base=ModelConfig(num_shards=8, dtype="bfloat16"))
    assert count_params(opened.config).total_params == LLAMA_COUNT == 6_738_415_616
    origin = opened.config.origin
    assert (origin.hub_id, origin.revision, origin.name, origin.model_type) == (LLAMA, None, LLAMA, "llama")
    assert (opened.config.num_shards, opened.config.dtype) == (8, "bfloat16")
    assert opened.fetched.commit == LLAMA_COMMIT and opened.fetched.source == "hub"
    assert opened.message.startswith(f"Opened {LLAMA} (llama, from the Hub) at commit {LLAMA_COMMIT[:12]}. Counted as")
    assert [(method, path) for method, path, _ in fake.requests] == [
        ("HEAD", f"/{LLAMA}/resolve/main/config.json"),
        ("GET", f"/{LLAMA}/resolve/main/config.json"),
    ]
    assert all(auth is None for _, _, auth in fake.requests)  # no token given: none sent, not even the machine's


def test_a_revision_is_asked_for_and_kept(fake):
    opened = hub.open_model(LLAMA, LLAMA_COMMIT, fetcher=fetcher(fake))
    assert opened.config.origin.revision == LLAMA_COMMIT
    assert opened.config.origin.title == f"{LLAMA} (llama, from the Hub at {LLAMA_COMMIT})"
    assert fake.requests[-1][1] == f"/{LLAMA}/resolve/{LLAMA_COMMIT}/config.json"


@pytest.mark.parametrize(
    ("repo_id", "revision", "kind", "says"),
    [
        ("nobody/missing", None, hub.NOT_FOUND, "nobody/missing was not found on the Hub"),
        ("nobody/missing", None, hub.NOT_FOUND, "if the model is private, give a token"),
        ("no/config", None, hub.NO_CONFIG, "no/config has no config.json"),
        (LLAMA, "v9.9", hub.NO_REVISION, f"{LLAMA} has no revision 'v9.9'"),
        ("bad/json", None, hub.NOT_JSON, "config.json of bad/json: the config.json is not valid JSON"),
    ],
    ids=["missing", "private", "no-config", "no-revision", "bad-json"],
)
def test_each_failure_is_said_plainly(fake, repo_id, revision, kind, says):
    err = refusal(fake, repo_id, revision)
    assert err.kind == kind and says in str(err)
    assert "Traceback" not in str(err) and "\n" not in str(err)


def test_a_gated_model_needs_its_licence_accepted_and_a_token(fake):
    using = fetcher(fake)
    without = refusal(fake, "gated/model", using=using)
    assert without.kind == hub.GATED
    assert f"accept its licence on {fake.url}/gated/model, then give a token" in str(without)
    wrong = refusal(fake, "gated/model", token="hf_wrong", using=using)
    assert wrong.kind == hub.GATED and "the token given has no access yet" in str(wrong)
    opened = hub.open_model("gated/model", token=TOKEN, fetcher=using)
    assert count_params(opened.config).total_params == LLAMA_COUNT
    assert fake.requests[-1][2] == f"Bearer {TOKEN}"
    # the token is in no message, no cache key, no link, no configuration
    said = [str(without), str(wrong), opened.message, repr(using.cache.keys()), opened.config.to_json()]
    assert not any(TOKEN in text or "hf_wrong" in text for text in said)
    # one user's gated answer never serves another without the token: it is asked again, and refused
    gets = fake.gets()
    assert refusal(fake, "gated/model", using=using).kind == hub.GATED
    assert hub.open_model("gated/model", token=TOKEN, fetcher=using).config == opened.config
    assert fake.gets() == gets  # both answered from the cache, each under its own token's key


def test_a_hanging_hub_is_given_up_on_in_time(fake):
    # The fake answers "slow/model" after 30 s: a fetcher that did not keep its 0.5 s limit would get
    # the file, not a time-out (no wall-clock assertion: timings belong in bench/).
    err = refusal(fake, "slow/model", using=fetcher(fake, timeout=0.5))
    assert err.kind == hub.TIMEOUT
    assert str(err) == f"the Hub ({fake.url}) did not answer within 0.5 s; try again later"


def test_no_hub_at_all_says_so(fake):
    closed = hub.Fetcher(hub.HubSettings(endpoint="http://127.0.0.1:9", timeout=2))
    err = refusal(fake, LLAMA, using=closed)
    assert err.kind == hub.CONNECTION
    assert str(err).startswith("cannot connect to the Hub at http://127.0.0.1:9 (no network?")


def test_an_oversized_file_is_refused_from_its_size_before_it_is_read(fake):
    err = refusal(fake, "big/file")
    assert err.kind == hub.TOO_LARGE and f"is {len(BIG):,} bytes; dcsim reads at most 262,144 bytes" in str(err)
    assert [method for method, _, _ in fake.requests] == ["HEAD"]


def test_a_server_that_understates_the_size_is_cut_off_while_reading(fake):
    err = refusal(fake, "lying/size")
    assert err.kind == hub.TOO_LARGE and "larger than announced" in str(err)


HOSTILE_IDS = [
    "https://huggingface.co/meta-llama/Llama-2-7b-hf",
    "huggingface.co/meta-llama/Llama-2-7b-hf",
    "../x",
    "a/../b",
    "a/b/c",
    "meta-llama/Llama 2",
    " gpt2",
    "gpt2\n",
    "x" * 97,
    "a" * 5000,
    "",
    "-a",
    "a--b",
    "café/x",
    "<img src=x>",
    "a/b?x=1",
    "a/b#c",
    "%2e%2e/x",
]


@pytest.mark.parametrize("repo_id", HOSTILE_IDS, ids=lambda text: repr(text[:24]))
def test_hostile_ids_are_refused_before_any_request(fake, repo_id):
    with pytest.raises(ValueError, match=r"`Hub id` (is |may |must )") as caught:
        hub.open_model(repo_id, fetcher=fetcher(fake))
    assert fake.requests == []
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("revision", ["../main", "/etc", "a b", "main/", "x" * 97, "v1..2", "refs//pr", "a?b=1", ""])
def test_hostile_revisions_are_refused_before_any_request(fake, revision):
    with pytest.raises(ValueError, match="`revision`"):
        hub.open_model(LLAMA, revision, fetcher=fetcher(fake))
    assert fake.requests == []


@pytest.mark.parametrize("token", ["hf_a\nInjected: 1", "hf a", "é" * 10, "x" * 300])
def test_a_malformed_token_is_refused_and_never_shown(fake, token):
    err = refusal(fake, LLAMA, token=token)
    assert err.kind == hub.REFUSED and token not in str(err)
    assert fake.requests == []


@given(st.text(alphabet="ab-_./", min_size=1, max_size=12))
def test_every_id_dcsim_accepts_huggingface_hub_accepts_too(text):
    try:
        hub.check_repo_id(text)
    except ValueError:
        return
    validate_repo_id(text)  # raises if the two disagreed


def test_offline_reads_the_local_cache_and_never_the_network(fake, tmp_path, monkeypatch):
    write_cache(tmp_path, LLAMA, (DATA / "llama-2-7b.json").read_bytes())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    settings = hub.HubSettings.from_env()
    assert settings.offline and settings.cache_dir == str(tmp_path) and settings.endpoint == fake.url
    opened = hub.open_model(LLAMA, fetcher=hub.Fetcher())
    assert count_params(opened.config).total_params == LLAMA_COUNT
    assert opened.fetched.source == "cache" and opened.fetched.commit == LLAMA_COMMIT
    assert "from the local Hugging Face cache" in opened.message
    err = refusal(fake, "other/model", using=hub.Fetcher())
    assert err.kind == hub.OFFLINE
    assert str(err).startswith(
        f"HF_HUB_OFFLINE is set, and config.json of other/model is not in the Hugging Face cache ({tmp_path})"
    )
    assert fake.requests == []


def test_the_server_limit_refuses_without_asking_and_reopens_after_a_minute(fake):
    clock = Clock()
    using = fetcher(fake, limit=ServerLimit(per_minute=2, clock=clock))
    hub.open_model(LLAMA, fetcher=using)
    hub.open_model("other/model", fetcher=using)
    asked = len(fake.requests)
    err = refusal(fake, "gated/model", token=TOKEN, using=using)
    assert (
        err.kind == bounds.LIMITED
        and "this server has made 2 fetches from the Hub in the last 60 s, its limit" in str(err)
    )
    assert "try again in 60 s" in str(err) and len(fake.requests) == asked
    hub.open_model(LLAMA, fetcher=using)  # a cache hit costs nothing
    clock.now += 61
    hub.open_model("gated/model", token=TOKEN, fetcher=using)


def test_the_server_limit_on_fetches_at_once(fake):
    using = fetcher(fake, limit=ServerLimit(concurrent=1), timeout=2)
    outcome = []

    def open_slowly():
        try:
            hub.open_model("slow/model", fetcher=using)
        except HubError as err:
            outcome.append(err.kind)

    slow = threading.Thread(target=open_slowly)
    slow.start()
    deadline = time.monotonic() + 5
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    err = refusal(fake, LLAMA, using=using)
    assert err.kind == bounds.LIMITED
    assert "this server has 1 fetch from the Hub under way (at most 1 at once)" in str(err)
    slow.join(10)
    assert not slow.is_alive() and outcome == [hub.TIMEOUT]
    hub.open_model(LLAMA, fetcher=using)  # the place is free once the slow fetch has given up


def test_a_session_budget_refuses_its_sixth_fetch_but_not_a_cache_hit(fake):
    budget, using = SessionBudget(max_fetches=1), fetcher(fake)
    hub.open_model(LLAMA, fetcher=using, budget=budget)
    err = refusal(fake, "other/model", budget=budget, using=using)
    assert err.kind == bounds.LIMITED and "this session has made 1 fetch from the Hub in the last 60 s" in str(err)
    hub.open_model(LLAMA, fetcher=using, budget=budget)
    assert hub.open_model("other/model", fetcher=using, budget=SessionBudget()).config.origin.hub_id == "other/model"
    assert bounds.MAX_SESSION_FETCHES == SessionBudget()._spent.limit == 5


def test_answers_and_failures_are_cached_and_failures_briefly(fake):
    clock = Clock()
    using = fetcher(fake, cache=AnswerCache(clock=clock))
    first = hub.open_model(LLAMA, fetcher=using)
    gets = fake.gets()
    second = hub.open_model(LLAMA, fetcher=using)
    assert fake.gets() == gets and second.config == first.config
    second.fetched.data["vocab_size"] = 1  # each caller gets its own parsed copy
    assert hub.open_model(LLAMA, fetcher=using).fetched.data["vocab_size"] == 32000
    missing = refusal(fake, "nobody/missing", using=using)
    asked = len(fake.requests)
    assert str(refusal(fake, "nobody/missing", using=using)) == str(missing)  # a flood asks once
    assert len(fake.requests) == asked
    clock.now += bounds.FAILURE_SECONDS + 1
    refusal(fake, "nobody/missing", using=using)
    assert len(fake.requests) == asked + 1
    clock.now += bounds.ANSWER_SECONDS
    hub.open_model(LLAMA, fetcher=using)
    assert fake.gets() == gets + 1


def test_the_answer_cache_is_bounded():
    cache = AnswerCache(max_entries=2)
    for name in "abc":
        cache.put_answer((name,), b"{}", None)
    assert cache.keys() == [("b",), ("c",)]


def test_the_process_fetcher_reads_hf_endpoint_when_it_fetches(fake, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake.url + "/")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "FETCHER", hub.Fetcher())
    assert hub.FETCHER.fetch(LLAMA).data["model_type"] == "llama"
    assert len(fake.requests) == 2


def test_a_config_dcsim_cannot_count_is_refused_by_name(fake):
    fake.repos["t5/model"] = Repo(files={"main": b'{"model_type": "t5_unknown"}'})
    with pytest.raises(
        ValueError, match=r"^config\.json of t5/model: dcsim reads Hugging Face configs of \d+ model types"
    ):
        hub.open_model("t5/model", fetcher=fetcher(fake))


# --- the Hub id in a link (dcsim.links: hf, rev) ---------------------------------------------------

hub_ids = st.from_regex(
    r"[A-Za-z0-9]{1,8}([_.][A-Za-z0-9]{1,8})?(/[A-Za-z0-9]{1,8}(-[A-Za-z0-9]{1,8})?)?", fullmatch=True
)
revisions = st.one_of(st.none(), st.sampled_from(["main", "v1.0", "refs/pr/12", LLAMA_COMMIT]))


@given(hub_ids, revisions, st.booleans())
def test_a_hub_model_survives_a_link_round_trip_without_the_hub(repo_id, revision, edited):
    origin = Origin(
        name=repo_id, model_type="llama", family="decoder", hub_id=repo_id, revision=revision, edited=edited
    )
    config = ModelConfig(origin=origin, overrides={"num_layers": 3}, num_shards=8)
    decoded = links.decode(parse_qs(links.query_string(config), keep_blank_values=True))
    assert (decoded.config, decoded.problems, decoded.hub) == (config, (), None)
    assert ModelConfig.from_json(config.to_json()) == config


def test_a_hand_written_hub_link_names_the_model_to_fetch():
    decoded = links.decode(parse_qs(f"hf={LLAMA}&rev=v1.0&shards=8"))
    assert decoded.hub == links.HubRef(repo_id=LLAMA, revision="v1.0") and decoded.problems == ()
    assert decoded.config == ModelConfig(num_shards=8)  # replaced by the fetched model, never shown as it
