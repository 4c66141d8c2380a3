"""Script runs take turns in a server process, so that a crowd is served one after another.

Streamlit runs each session's script in a thread of one server process, and those threads share
one interpreter (Python's GIL). When eight people open their links at the same moment, the runs
share the interpreter evenly and all of them end late together: each visit takes about as long as
all of them. Taking turns, the first visit ends after one run's time, the second after two, and so
on: the last ends when it would have anyway, and every other ends sooner (for four runs at once,
the median visit waits 2.5 runs instead of 4; bench/README.md, ``bench_crowd.py``).

A turn is not a queue one can be stuck in:

- a run waits for the run ahead at most ``WAIT_SECONDS``, then goes on beside it; a run that
  takes long (a 405B layout) delays the others by that much, never more;
- a run gives its turn up while it waits on something that is not this interpreter (a child
  process measuring a checkpoint, XLA compiling, the Hub answering): ``aside()`` wraps those waits,
  and ``waiting()`` is the pages' spinner with the turn given up.

AppTest runs one script at a time, so its turns are always free.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import streamlit as st

WAIT_SECONDS = 2.0  # the most a run waits for the run ahead of it

_turn = threading.Lock()
_holder = threading.local()


def _take() -> None:
    _holder.held = _turn.acquire(timeout=WAIT_SECONDS)


def _give() -> None:
    if getattr(_holder, "held", False):
        _holder.held = False
        _turn.release()


@contextlib.contextmanager
def run() -> Iterator[None]:
    """A script run's turn: taken when the run starts (after at most ``WAIT_SECONDS``), given up
    when it ends, however it ends (a rerun or a stop raises through here)."""
    _take()
    try:
        yield
    finally:
        _give()


@contextlib.contextmanager
def aside() -> Iterator[None]:
    """A wait outside this interpreter (a child process, a compile, a download): the turn goes to
    the next run meanwhile, and is taken again after, with the same bounded wait."""
    had = getattr(_holder, "held", False)
    _give()
    try:
        yield
    finally:
        if had:
            _take()


@contextlib.contextmanager
def waiting(text: str) -> Iterator[None]:
    """``st.spinner(text)`` around a wait outside this interpreter, the turn given up meanwhile
    (``aside``): every spinner of the pages is such a wait."""
    with st.spinner(text), aside():
        yield
