"""A loopback Hugging Face Hub for the tests: ``/{repo_id}/resolve/{revision}/config.json``,
answered the way the Hub answers it (HEAD and GET; ``X-Repo-Commit``, ``ETag``, ``Content-Length``;
failures with the ``X-Error-Code`` header huggingface_hub reads: ``RepoNotFound`` 401/404,
``GatedRepo`` 403, ``EntryNotFound`` 404, ``RevisionNotFound`` 404).

Each repository can misbehave as a test needs: answer late, claim a small size and send a large
body, hold no config.json. Every request is recorded (method, path, Authorization header), so a
test can say that nothing was asked. Everything stays on 127.0.0.1; ``stop`` ends a sleeping
answer at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from dcsim.hf import hub as dcsim_hub

DATA = Path(__file__).parent / "data" / "hf"
LLAMA = "meta-llama/Llama-2-7b-hf"
LLAMA_COMMIT = "01c7f73d771dfac7d292323805ebc428287df4f9"
GATED_TOKEN = "hf_GatedToken1122334455667788aabbcc"  # the token that opens ``gated/model`` in the gated_hub fixture


@dataclasses.dataclass
class Repo:
    """One repository: its config.json by revision (``main`` and its commit resolve alike), and how
    it answers.

    Attributes:
      files: revision -> the config.json's bytes (None: the revision exists, the file does not).
      commit: what ``X-Repo-Commit`` says.
      token: a gated repository's: only ``Authorization: Bearer <token>`` opens it.
      delay: seconds to wait before answering (a slow or hanging Hub).
      head_size: the size the HEAD claims, when it lies (None: the true one).
      get_without_length: GET sends no Content-Length, only the body, until it closes.
    """

    files: dict[str, bytes | None]
    commit: str = LLAMA_COMMIT
    token: str | None = None
    delay: float = 0.0
    head_size: int | None = None
    get_without_length: bool = False


def llama() -> Repo:
    """meta-llama/Llama-2-7b-hf as transformers writes its config.json (tests/data/hf)."""
    return Repo(files={"main": (DATA / "llama-2-7b.json").read_bytes()})


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # a client that hung up first: expected here
        pass


class FakeHub:
    """The fake Hub: ``repos`` by id, ``requests`` as (method, path, authorization) tuples."""

    def __init__(self, repos: dict[str, Repo] | None = None):
        self.repos: dict[str, Repo] = dict(repos or {})
        self.requests: list[tuple[str, str, str | None]] = []
        self.stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self) -> int:
        return sum(method == "GET" for method, _, _ in self.requests)

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def log_message(self, *args) -> None:  # quiet
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # serve_forever checks for shutdown every poll_interval: its default half-second made every
        # test that used a fake Hub wait that long at its end (about 100 of them).
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True, name="fake-hub"
        ).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        auth = handler.headers.get("Authorization")
        self.requests.append((handler.command, handler.path, auth))
        path = unquote(handler.path.split("?", 1)[0]).strip("/").split("/")
        if "resolve" not in path or len(path) < 4:
            return self._fail(handler, 404, None)
        at = path.index("resolve")
        repo_id, revision, filename = "/".join(path[:at]), "/".join(path[at + 1 : -1]), path[-1]
        repo = self.repos.get(repo_id)
        if repo is not None and repo.delay:
            self.stopping.wait(repo.delay)
        if repo is None:
            return self._fail(handler, 404 if auth else 401, "RepoNotFound", "Repository not found")
        if repo.token is not None and auth != f"Bearer {repo.token}":
            return self._fail(handler, 403, "GatedRepo", f"Access to model {repo_id} is restricted.")
        files = {**repo.files, repo.commit: repo.files.get("main")}
        if revision not in files:
            return self._fail(handler, 404, "RevisionNotFound", "Invalid rev id")
        content = files[revision]
        if filename != "config.json" or content is None:
            return self._fail(handler, 404, "EntryNotFound", "Entry not found")
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("X-Repo-Commit", repo.commit)
        handler.send_header("ETag", f'"{hashlib.sha1(content).hexdigest()}"')
        if not body:
            handler.send_header("Content-Length", str(repo.head_size if repo.head_size is not None else len(content)))
            handler.end_headers()
            return None
        if not repo.get_without_length:
            handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        with contextlib.suppress(OSError):  # the client may hang up once it has read enough
            handler.wfile.write(content)
        return None

    def _fail(self, handler: BaseHTTPRequestHandler, status: int, code: str | None, message: str = "") -> None:
        handler.send_response(status)
        if code is not None:
            handler.send_header("X-Error-Code", code)
            handler.send_header("X-Error-Message", message)
        handler.send_header("Content-Length", "0")
        handler.end_headers()


@contextlib.contextmanager
def running(repos: dict[str, Repo] | None = None):
    """A fake Hub serving ``repos`` until the block ends."""
    hub = FakeHub(repos).start()
    try:
        yield hub
    finally:
        hub.stop()


def with_gated(token: str) -> dict[str, Repo]:
    """Llama 2 7B, and ``gated/model``: the same config.json, which only ``token`` opens."""
    return {LLAMA: llama(), "gated/model": Repo(files=llama().files, token=token)}


@contextlib.contextmanager
def endpoint(monkeypatch, repos: dict[str, Repo]):
    """A fake Hub serving ``repos`` as this process's ``HF_ENDPOINT`` until the block ends: online, no
    ``HF_TOKEN`` unless a test sets one, and a fresh fetcher (nothing cached from another test's Hub)."""
    with running(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        for name in ("HF_HUB_OFFLINE", "HF_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(dcsim_hub, "FETCHER", dcsim_hub.Fetcher())
        yield hub


def write_cache(folder: Path, repo_id: str, content: bytes, commit: str = LLAMA_COMMIT, ref: str = "main") -> Path:
    """A Hugging Face cache folder holding ``config.json`` of ``repo_id``, laid out as
    huggingface_hub's ``try_to_load_from_cache`` reads it (plain files, no symlinks)."""
    repo = folder / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / commit / "config.json").write_bytes(content)
    return folder
