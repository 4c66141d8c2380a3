"""Open a model by its Hugging Face Hub id: fetch its ``config.json``, and nothing else, within bounds.

Teams name models by their Hub id (``mistralai/Mixtral-8x7B-v0.1``). ``open_model`` asks the Hub for
the one file ``config.json`` of that repository (at a revision, if given) and reads it with
``dcsim.hf.from_hf_config``; the model keeps its Hub id and revision in its ``Origin``, so its link
reopens it without the Hub. No other file of the repository is read, and nothing is written to disk.

Ids and revisions are checked against the Hub's rules (``check_repo_id``, ``check_revision``) before
any request: a link's ``hf=`` comes from a stranger. The endpoint is ``HF_ENDPOINT`` as the process
has it when a fetch starts (huggingface_hub's default otherwise); with ``HF_HUB_OFFLINE`` set (or the
CLI's ``--hf-cache``) only the local Hugging Face cache is read, through huggingface_hub's own
``try_to_load_from_cache``, and the network never.

A token, for a gated or private model, is passed per call. It is sent only in the Authorization header
to the endpoint (httpx2 drops it on a redirect to another host); it is never logged, never in a
message, a link or a cache key: the answer cache keys on an HMAC of it under a key drawn when the
process starts, so a gated answer serves only the token that fetched it. No token means none at all:
the server's own ``HF_TOKEN`` or saved login is never sent on a visitor's behalf.

The limits (the cache and the counts are kept by ``dcsim.hf.bounds``, one set a server process):

- time: ``DEFAULT_TIMEOUT_SECONDS`` = 10 s for a whole fetch (HEAD, then GET). The fetch runs in a thread
  of its own, each of its requests bounded by the time left, and the caller waits no longer: a hanging
  Hub gives "did not answer within 10 s", never a hung page.
- size: ``MAX_HF_CONFIG_BYTES`` (256 KiB): refused from the HEAD's size before the GET, from the GET's
  Content-Length before its body, and counted while the body is read (a server may lie).
- answers: ``MAX_CACHED_ANSWERS`` = 64 (at most 16 MiB of config.json), each kept ``ANSWER_SECONDS`` =
  600 s (a branch moves; ten minutes behind it is fine for a parameter count); failures kept
  ``FAILURE_SECONDS`` = 30 s, so a flood of the same bad link asks the Hub once in 30 s. A cache hit
  costs nothing against the limits below.
- the server: at most ``MAX_FETCHES_PER_MINUTE`` = 30 fetches in any 60 s and ``MAX_CONCURRENT_FETCHES``
  = 4 at once (``ServerLimit``): one fetch every two seconds on average, so a crowd opening links
  cannot make the server a crawler of the Hub, and slow fetches hold four threads at most.
- a session: ``MAX_SESSION_FETCHES`` = 5 in any 60 s (``SessionBudget``, kept in the session's state),
  so one visitor cannot spend the whole server's minute.

Over a limit: a ``HubError`` saying which limit and when to try again, and no request.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import huggingface_hub
from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.errors import (
    DisabledRepoError,
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session, hf_raise_for_status, validate_repo_id

from dcsim.hf import MAX_HF_CONFIG_BYTES, from_hf_config
from dcsim.hf.bounds import (
    CONNECTION,
    GATED,
    NO_CONFIG,
    NO_REVISION,
    NOT_FOUND,
    NOT_JSON,
    OFFLINE,
    REFUSED,
    TIMEOUT,
    TOO_LARGE,
    AnswerCache,
    HubError,
    ServerLimit,
    SessionBudget,
    token_fingerprint,
)
from dcsim.inputs import load_json
from dcsim.model.config import ModelConfig, check_hub_id, check_hub_revision

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_TIMEOUT_SECONDS = 120.0
MAX_TOKEN_CHARS = 256  # the Hub's tokens are hf_ and 34 characters; room for others, not for a file
CONFIG_FILE = "config.json"
_CHUNK_BYTES = 16 * 1024
_GRACE_SECONDS = 0.25  # the thread's own timeout, better worded, usually lands first
_COMMIT = re.compile(r"[0-9a-f]{40}")


def check_repo_id(text: Any, name: str = "Hub id") -> str:
    """A Hub repository id, by dcsim's rules (``dcsim.model.config.HUB_ID_RULE``: bounded, no URL, no
    path) and then huggingface_hub's own ``validate_repo_id``; raises ``ValueError`` saying why."""
    repo_id = check_hub_id(text, name)
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:  # dcsim's rules are the stricter; kept should the library's grow
        raise ValueError(f"`{name}` is not a Hub id: {err}") from None
    return repo_id


def check_revision(text: Any, name: str = "revision") -> str:
    """A branch, tag or commit (``dcsim.model.config.REVISION_RULE``); raises ``ValueError`` saying why."""
    return check_hub_revision(text, name)


def check_token(token: Any) -> str | None:
    """A token as the Hub's look (printable ASCII, no spaces), or None for an empty one. The refusal
    never shows it."""
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not (token.isascii() and token.isprintable()):
        raise HubError(REFUSED, f"a token is printable ASCII of at most {MAX_TOKEN_CHARS} characters; this one is not")
    if " " in token:
        raise HubError(REFUSED, "a token holds no spaces; this one does (it is not shown)")
    return token


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")  # as huggingface_hub reads its flags


@dataclasses.dataclass(frozen=True, kw_only=True)
class HubSettings:
    """Where and how to fetch: the Hub's address, whether to stay offline (the local cache only),
    the cache folder, and the time a fetch may take in all."""

    endpoint: str = DEFAULT_ENDPOINT
    offline: bool = False
    cache_dir: str | None = None  # None: huggingface_hub's (HF_HUB_CACHE)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    # How a miss in the cache is explained, and what else the person may do.
    offline_because: str = "HF_HUB_OFFLINE is set"
    offline_remedy: str = "or unset HF_HUB_OFFLINE to fetch it from the Hub"

    def __post_init__(self) -> None:
        endpoint = self.endpoint.rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"the Hub's endpoint must be an http(s) URL (HF_ENDPOINT), got {endpoint!r}")
        object.__setattr__(self, "endpoint", endpoint)
        if not 0 < self.timeout <= MAX_TIMEOUT_SECONDS:
            limit = f"over 0 and at most {MAX_TIMEOUT_SECONDS:g} s"
            raise ValueError(f"a fetch's timeout must be {limit}, got {self.timeout!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HubSettings:
        """The process's settings as huggingface_hub reads them (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``,
        ``HF_HUB_CACHE``), read now rather than when huggingface_hub was imported."""
        env = os.environ if environ is None else environ
        return cls(
            endpoint=env.get("HF_ENDPOINT") or constants.ENDPOINT,
            offline=constants.HF_HUB_OFFLINE or _truthy(env.get("HF_HUB_OFFLINE")),
            cache_dir=env.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fetched:
    """A model's ``config.json``, parsed.

    Attributes:
      data: the parsed JSON object (a fresh one for every caller).
      repo_id, revision: what was asked for (revision None: the default branch).
      commit: the commit the Hub resolved (its ``X-Repo-Commit``), or the cache's snapshot; None when
        neither says one.
      source: ``hub`` or ``cache`` (the local Hugging Face cache, offline).
    """

    data: dict[str, Any]
    repo_id: str
    revision: str | None
    commit: str | None
    source: str


# --- one fetch ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Ask:
    """One fetch's question, for its messages: what, where, and whether a token was given."""

    settings: HubSettings
    repo_id: str
    revision: str | None
    token: str | None = dataclasses.field(repr=False)  # in no repr, so in no traceback or log either

    @property
    def what(self) -> str:
        at = f" at revision {self.revision!r}" if self.revision else ""
        return f"{CONFIG_FILE} of {self.repo_id}{at}"

    @property
    def url(self) -> str:
        revision = quote(self.revision or constants.DEFAULT_REVISION, safe="")
        return f"{self.settings.endpoint}/{self.repo_id}/resolve/{revision}/{CONFIG_FILE}"

    def error(self, kind: str, detail: str = "") -> HubError:
        hub, page = f"the Hub ({self.settings.endpoint})", f"{self.settings.endpoint}/{self.repo_id}"
        given = self.token is not None
        messages = {
            NOT_FOUND: f"{self.repo_id} was not found on {hub}"
            + (
                ", or the token given may not read it: check the id and the token's access"
                if given
                else ": check the id (owner/name, as on the model's page); if the model is private, give a "
                "token that may read it"
            ),
            GATED: f"{self.repo_id} is a gated model: "
            + (
                f"the token given has no access yet; accept its licence on {page} with the token's account"
                if given
                else f"accept its licence on {page}, then give a token of the account that accepted it"
            ),
            NO_CONFIG: f"{self.repo_id}{' at ' + repr(self.revision) if self.revision else ''} has no {CONFIG_FILE}: "
            f"dcsim opens a model from the {CONFIG_FILE} at the top of its repository (transformers models have one)",
            NO_REVISION: f"{self.repo_id} has no revision {self.revision!r}: give a branch, tag or commit of it "
            f"(the default branch, {constants.DEFAULT_REVISION}, when none is given)",
            TIMEOUT: f"{hub} did not answer within {self.settings.timeout:g} s; try again later",
            CONNECTION: f"cannot connect to the Hub at {self.settings.endpoint} (no network? a proxy or firewall in "
            f"the way?){': ' + detail if detail else ''}",
            TOO_LARGE: f"{self.what} is {detail}; dcsim reads at most {MAX_HF_CONFIG_BYTES:,} bytes (256 KiB)",
            NOT_JSON: f"{self.what}: {detail}",
            REFUSED: f"{hub} refused {self.what}: {detail}",
        }
        return HubError(kind, messages[kind])


def _left(deadline: float, ask: _Ask) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ask.error(TIMEOUT)
    return left


def _from_status(ask: _Ask, status: int, code: str | None) -> HubError:
    """A failed answer, by the Hub's ``X-Error-Code`` (as huggingface_hub's ``hf_raise_for_status``
    reads it) and its status."""
    kinds = {"RepoNotFound": NOT_FOUND, "GatedRepo": GATED, "EntryNotFound": NO_CONFIG, "RevisionNotFound": NO_REVISION}
    if code in kinds:
        return ask.error(kinds[code])
    if status == 401:
        return ask.error(NOT_FOUND)
    if status == 403:
        return ask.error(REFUSED, "HTTP 403; a token that may read the model is needed")
    if status == 429:
        return ask.error(REFUSED, "HTTP 429, too many requests; try again in a minute")
    return ask.error(REFUSED, f"HTTP {status}; try again later")


def _from_exception(ask: _Ask, err: Exception) -> HubError:
    """huggingface_hub's and httpx2's exceptions, in the fetch's words (theirs may hold URLs and
    server text; none is passed on)."""
    if isinstance(err, GatedRepoError):  # a RepositoryNotFoundError too: first
        return ask.error(GATED)
    if isinstance(err, RepositoryNotFoundError):
        return ask.error(NOT_FOUND)
    if isinstance(err, RevisionNotFoundError):
        return ask.error(NO_REVISION)
    if isinstance(err, EntryNotFoundError):
        return ask.error(NO_CONFIG)
    if isinstance(err, DisabledRepoError):
        return ask.error(REFUSED, "access to this repository is disabled")
    if isinstance(err, HfHubHTTPError):
        status = err.response.status_code if err.response is not None else 0
        return _from_status(ask, status, None)
    if isinstance(err, httpx2.TimeoutException):
        return ask.error(TIMEOUT)
    return ask.error(CONNECTION, type(err).__name__)


def _declared(text: str | None) -> int | None:
    """A size a header declares, if it is one (a number too long to convert is only too large)."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 18 else 10**18


def _headers(token: str | None) -> dict[str, str]:
    """The request's headers, built here rather than by huggingface_hub's ``build_hf_headers``: that one
    sends the machine's own token when given none, and first fetches a registry of AI agents from
    the endpoint to name one in the user agent, a request and a file write nobody asked for."""
    headers = {"User-Agent": f"dcsim; hf_hub/{huggingface_hub.__version__}", "Accept-Encoding": "identity"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _download(ask: _Ask, deadline: float) -> tuple[bytes, str | None]:
    """HEAD, then GET of ``config.json``: the raw bytes and the commit the Hub resolved. The HEAD's
    failures are read by huggingface_hub's own ``hf_raise_for_status`` (its error classes, from the
    Hub's ``X-Error-Code``); "identity" keeps every size the file's own, with no decompression."""
    headers = _headers(ask.token)
    try:
        head = get_session().head(ask.url, headers=headers, timeout=_left(deadline, ask), follow_redirects=True)
        hf_raise_for_status(head)
        linked = head.headers.get(constants.HUGGINGFACE_HEADER_X_LINKED_SIZE)
        size = _declared(linked or head.headers.get("Content-Length"))
        if size is not None and size > MAX_HF_CONFIG_BYTES:
            raise ask.error(TOO_LARGE, f"{size:,} bytes")
        with get_session().stream(
            "GET", ask.url, headers=headers, timeout=_left(deadline, ask), follow_redirects=True
        ) as response:
            if response.status_code >= 400:
                raise _from_status(ask, response.status_code, response.headers.get("X-Error-Code"))
            size = _declared(response.headers.get("Content-Length"))
            if size is not None and size > MAX_HF_CONFIG_BYTES:
                raise ask.error(TOO_LARGE, f"{size:,} bytes")
            if response.headers.get("Content-Encoding", "identity").lower() != "identity":
                raise ask.error(REFUSED, "it came compressed, though asked for the file as it is")
            body = bytearray()
            for chunk in response.iter_raw(_CHUNK_BYTES):
                body += chunk
                if len(body) > MAX_HF_CONFIG_BYTES:  # whatever the headers said
                    raise ask.error(TOO_LARGE, f"larger than announced (more than {MAX_HF_CONFIG_BYTES:,} bytes came)")
                _left(deadline, ask)
            commit = response.headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT) or head.headers.get(
                constants.HUGGINGFACE_HEADER_X_REPO_COMMIT
            )
    except HubError:
        raise
    except (httpx2.HTTPError, httpx2.InvalidURL, OSError) as err:
        raise _from_exception(ask, err) from None
    return bytes(body), commit if commit and _COMMIT.fullmatch(commit) else None


def _bounded(ask: _Ask, release: Callable[[], None]) -> tuple[bytes, str | None]:
    """``_download`` in a thread of its own, waited for at most the fetch's timeout: the caller's
    time is bounded whatever the network does, and the server's place is released only when the
    thread has ended, so stuck fetches count against the concurrent limit while they last."""
    deadline = time.monotonic() + ask.settings.timeout
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = _download(ask, deadline)
        except BaseException as err:  # handed to the caller, whatever it is
            outcome["error"] = err
        finally:
            release()
            finished.set()

    threading.Thread(target=run, name=f"dcsim-hub-{ask.repo_id}", daemon=True).start()
    if not finished.wait(ask.settings.timeout + _GRACE_SECONDS):
        raise ask.error(TIMEOUT)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _parsed(ask: _Ask, raw: bytes, commit: str | None, source: str) -> Fetched:
    if len(raw) > MAX_HF_CONFIG_BYTES:
        raise ask.error(TOO_LARGE, f"more than {MAX_HF_CONFIG_BYTES:,} bytes")
    try:
        data = load_json(raw, CONFIG_FILE, MAX_HF_CONFIG_BYTES)
    except ValueError as err:
        raise ask.error(NOT_JSON, str(err)) from None
    if not isinstance(data, dict):
        raise ask.error(NOT_JSON, f"a {CONFIG_FILE} is a JSON object, this one is not")
    return Fetched(data=data, repo_id=ask.repo_id, revision=ask.revision, commit=commit, source=source)


def _from_local_cache(ask: _Ask) -> Fetched:
    """Offline: the file as huggingface_hub's cache holds it, or a plain refusal; never the network."""
    folder = ask.settings.cache_dir or constants.HF_HUB_CACHE
    found = try_to_load_from_cache(ask.repo_id, CONFIG_FILE, cache_dir=folder, revision=ask.revision)
    if not isinstance(found, str):  # None, or the cache's note that the file does not exist
        raise HubError(
            OFFLINE,
            f"{ask.settings.offline_because}, and {ask.what} is not in the Hugging Face cache ({folder}): "
            f"put it there where the Hub is reachable (hf download {ask.repo_id} {CONFIG_FILE}"
            f"{' --revision ' + ask.revision if ask.revision else ''} --cache-dir {folder}), "
            f"{ask.settings.offline_remedy}",
        )
    path = Path(found)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_HF_CONFIG_BYTES + 1)
    except OSError as err:
        raise HubError(OFFLINE, f"cannot read {ask.what} in the Hugging Face cache: {err.strerror or err}") from None
    commit = path.parent.name
    return _parsed(ask, raw, commit if _COMMIT.fullmatch(commit) else None, "cache")


class Fetcher:
    """The bounded, cached fetcher: its answer cache and server limit are shared by every caller that
    uses it (``FETCHER`` is the process's)."""

    def __init__(
        self, settings: HubSettings | None = None, *, limit: ServerLimit | None = None, cache: AnswerCache | None = None
    ):
        self.settings = settings
        self.limit = limit or ServerLimit()
        self.cache = cache or AnswerCache()

    def fetch(
        self,
        repo_id: Any,
        revision: Any = None,
        *,
        token: str | None = None,
        budget: SessionBudget | None = None,
        settings: HubSettings | None = None,
    ) -> Fetched:
        """``config.json`` of ``repo_id`` at ``revision`` (None: the default branch), parsed.

        Raises ``ValueError`` for an id or revision the Hub's rules refuse (before any request), and
        ``HubError`` (a ``ValueError``) when the fetch fails or a limit refuses it.
        """
        repo_id = check_repo_id(repo_id)
        revision = None if revision is None else check_revision(revision)
        ask = _Ask(settings or self.settings or HubSettings.from_env(), repo_id, revision, check_token(token))
        if ask.settings.offline:
            return _from_local_cache(ask)
        key = (ask.settings.endpoint, repo_id, revision or "", token_fingerprint(ask.token))
        hit = self.cache.get(key)
        if isinstance(hit, HubError):
            raise hit
        if hit is not None:
            return _parsed(ask, *hit, "hub")
        if budget is not None:
            budget.check()
        self.limit.acquire()
        if budget is not None:
            budget.spend()
        try:
            raw, commit = _bounded(ask, self.limit.release)
            fetched = _parsed(ask, raw, commit, "hub")
        except HubError as err:
            self.cache.put_failure(key, err)
            raise
        self.cache.put_answer(key, raw, commit)
        return fetched


FETCHER = Fetcher()


@dataclasses.dataclass(frozen=True)
class Opened:
    """A model opened by its Hub id: its configuration, what to tell the person, and the fetch."""

    config: ModelConfig
    message: str
    fetched: Fetched


def open_model(
    repo_id: Any,
    revision: Any = None,
    *,
    token: str | None = None,
    base: ModelConfig | None = None,
    budget: SessionBudget | None = None,
    settings: HubSettings | None = None,
    fetcher: Fetcher | None = None,
    keep_dtype: bool = False,
) -> Opened:
    """The dcsim model of the Hub's ``config.json`` of ``repo_id``: as ``dcsim.hf.from_hf_config``
    opens a file (``base``'s shards, seed and batch kept; the model's own dtype unless
    ``keep_dtype``), named by its Hub id, which its ``Origin`` keeps with the revision. Raises
    ``ValueError``/``TypeError`` saying why not."""
    fetched = (fetcher or FETCHER).fetch(repo_id, revision, token=token, budget=budget, settings=settings)
    try:
        imported = from_hf_config(fetched.data, base, keep_dtype=keep_dtype)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{CONFIG_FILE} of {fetched.repo_id}: {err}") from None
    origin = imported.config.origin
    assert origin is not None  # from_hf_config always names its model
    origin = dataclasses.replace(origin, name=fetched.repo_id, hub_id=fetched.repo_id, revision=fetched.revision)
    config = dataclasses.replace(imported.config, origin=origin)
    commit = f" at commit {fetched.commit[:12]}" if fetched.commit else ""
    cached = " from the local Hugging Face cache" if fetched.source == "cache" else ""
    message = f"Opened {origin.title}{commit}{cached}. Counted as {imported.counted_as}.{imported.stored}"
    return Opened(config=config, message=message, fetched=fetched)
