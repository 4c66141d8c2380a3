"""The bounds of fetching from the Hugging Face Hub (``dcsim.hf.hub``): what a fetch that failed
says (``HubError``), the answer cache, and the limits on fetches per server and per session.

Each refuses before a request, never after: a cache hit costs nothing, and a fetch over a limit is
refused in words that say which limit and when to try again. The numbers, and why, are in
``dcsim.hf.hub``'s docstring. A token never reaches this module's keys: ``token_fingerprint`` is an
HMAC under a key drawn when the process starts, so it tells tokens apart without holding one, and
means nothing outside this process.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_CACHED_ANSWERS = 64
ANSWER_SECONDS = 600.0
FAILURE_SECONDS = 30.0
MAX_FETCHES_PER_MINUTE = 30
MAX_CONCURRENT_FETCHES = 4
MAX_SESSION_FETCHES = 5
WINDOW_SECONDS = 60.0
_FINGERPRINT_KEY = secrets.token_bytes(32)

# What went wrong, for callers that act on it (``HubError.kind``).
NOT_FOUND = "not_found"
GATED = "gated"
NO_CONFIG = "no_config"
NO_REVISION = "no_revision"
TIMEOUT = "timeout"
CONNECTION = "connection"
TOO_LARGE = "too_large"
NOT_JSON = "not_json"
OFFLINE = "offline"
LIMITED = "limited"
REFUSED = "refused"


class HubError(ValueError):
    """A fetch that failed or was refused, in words a person can act on (never holding the token)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def token_fingerprint(token: str | None) -> str:
    """An HMAC of ``token`` under this process's own key ("" for none): a cache key that tells
    tokens apart without holding them, and means nothing outside this process."""
    if not token:
        return ""
    return hmac.new(_FINGERPRINT_KEY, token.encode(), hashlib.sha256).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class _Failure:
    kind: str
    message: str


class AnswerCache:
    """Answers and failures by (endpoint, repository, revision, token fingerprint), bounded in
    entries (the oldest goes first) and in time (``ANSWER_SECONDS``, ``FAILURE_SECONDS``)."""

    def __init__(
        self,
        max_entries: int = MAX_CACHED_ANSWERS,
        answer_seconds: float = ANSWER_SECONDS,
        failure_seconds: float = FAILURE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_entries, self.answer_seconds, self.failure_seconds = max_entries, answer_seconds, failure_seconds
        self.clock = clock
        self._entries: collections.OrderedDict[tuple[str, ...], tuple[float, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> tuple[bytes, str | None] | HubError | None:
        """The raw answer and its commit, a fresh copy of the failure, or None (absent or expired)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= self.clock():
                self._entries.pop(key, None)
                return None
            value = entry[1]
        return HubError(value.kind, value.message) if isinstance(value, _Failure) else value

    def put_answer(self, key: tuple[str, ...], raw: bytes, commit: str | None) -> None:
        self._put(key, (raw, commit), self.answer_seconds)

    def put_failure(self, key: tuple[str, ...], err: HubError) -> None:
        if err.kind != LIMITED:  # a refusal asked nothing of the Hub: nothing to remember
            self._put(key, _Failure(err.kind, str(err)), self.failure_seconds)

    def _put(self, key: tuple[str, ...], value: Any, seconds: float) -> None:
        with self._lock:
            self._entries[key] = (self.clock() + seconds, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def keys(self) -> list[tuple[str, ...]]:
        with self._lock:
            return list(self._entries)


def _fetches(count: int) -> str:
    return f"{count:,} fetch{'' if count == 1 else 'es'}"


def _wait_text(seconds: float) -> str:
    return f"{max(1, round(seconds)):,} s"


class _Window:
    """Times of the events of the last ``window`` seconds."""

    def __init__(self, limit: int, window: float, clock: Callable[[], float]):
        self.limit, self.window, self.clock = limit, window, clock
        self.times: collections.deque[float] = collections.deque()

    def full(self) -> float | None:
        """None while there is room; else the seconds until there is."""
        now = self.clock()
        while self.times and self.times[0] <= now - self.window:
            self.times.popleft()
        return None if len(self.times) < self.limit else self.times[0] + self.window - now

    def add(self) -> None:
        self.times.append(self.clock())


class ServerLimit:
    """Fetches this process may make: ``per_minute`` in any ``window`` seconds, ``concurrent`` at once."""

    def __init__(
        self,
        per_minute: int = MAX_FETCHES_PER_MINUTE,
        concurrent: int = MAX_CONCURRENT_FETCHES,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.concurrent = concurrent
        self.running = 0
        self._started = _Window(per_minute, window, clock)
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Take one fetch's place, or raise ``HubError`` (``limited``) saying which limit is reached."""
        with self._lock:
            if self.running >= self.concurrent:
                raise HubError(
                    LIMITED,
                    f"this server has {_fetches(self.running)} from the Hub under way (at most {self.concurrent} at "
                    "once); try again in a few seconds",
                )
            wait = self._started.full()
            if wait is not None:
                raise HubError(
                    LIMITED,
                    f"this server has made {_fetches(self._started.limit)} from the Hub in the last "
                    f"{self._started.window:g} s, its limit; try again in {_wait_text(wait)}",
                )
            self._started.add()
            self.running += 1

    def release(self) -> None:
        with self._lock:
            self.running -= 1


class SessionBudget:
    """Fetches one session may make: ``max_fetches`` in any ``window`` seconds. Kept in the session's
    state by the dashboard; a cache hit spends nothing."""

    def __init__(
        self,
        max_fetches: int = MAX_SESSION_FETCHES,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._spent = _Window(max_fetches, window, clock)

    def check(self) -> None:
        wait = self._spent.full()
        if wait is not None:
            raise HubError(
                LIMITED,
                f"this session has made {_fetches(self._spent.limit)} from the Hub in the last "
                f"{self._spent.window:g} s, its limit; try again in {_wait_text(wait)} (a model fetched before "
                "opens at once)",
            )

    def spend(self) -> None:
        self._spent.add()
