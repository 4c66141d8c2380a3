"""Script runs take turns in a server process (dcsim.ui.turns): each test drives threads as
Streamlit's script runners would, with events rather than sleeps, so what it asserts is an order,
never a duration."""

from __future__ import annotations

import threading

import pytest

from dcsim.ui import turns

BOUND = 10.0  # seconds a thread in these tests may block before the test calls it a hang


def start(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def finish(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(BOUND)
        assert not thread.is_alive(), "a run never ended: its turn was not given up"


def test_a_second_run_starts_only_when_the_first_ends():
    order: list[str] = []
    inside, let_go = threading.Event(), threading.Event()

    def first():
        with turns.run():
            order.append("first starts")
            inside.set()
            assert let_go.wait(BOUND)
            order.append("first ends")

    def second():
        assert inside.wait(BOUND)
        with turns.run():
            order.append("second starts")

    one, two = start(first), start(second)
    assert inside.wait(BOUND)
    two.join(0.3)  # the second is waiting for its turn, not running
    assert order == ["first starts"]
    let_go.set()
    finish(one, two)
    assert order == ["first starts", "first ends", "second starts"]


def test_a_run_that_raises_gives_its_turn_up():
    class Rerun(Exception):  # as Streamlit stops a run: an exception raised through the script
        pass

    with pytest.raises(Rerun), turns.run():
        raise Rerun
    assert turns._turn.acquire(blocking=False)  # free again
    turns._turn.release()


def test_a_wait_aside_lets_the_next_run_in_and_takes_the_turn_back():
    order: list[str] = []
    waiting, second_done, back, let_go = (threading.Event() for _ in range(4))

    def first():
        with turns.run():
            with turns.aside():  # a child process measuring: the interpreter is free meanwhile
                order.append("first waits aside")
                waiting.set()
                assert second_done.wait(BOUND)
            order.append("first goes on")
            back.set()
            assert let_go.wait(BOUND)

    def second():
        assert waiting.wait(BOUND)
        with turns.run():
            order.append("second runs")
        second_done.set()

    one, two = start(first), start(second)
    assert back.wait(BOUND)
    assert not turns._turn.acquire(blocking=False)  # the first holds its turn again after its wait
    let_go.set()
    finish(one, two)
    assert order == ["first waits aside", "second runs", "first goes on"]
    assert turns._turn.acquire(blocking=False)
    turns._turn.release()


def test_a_run_that_holds_its_turn_too_long_is_joined_after_the_bounded_wait(monkeypatch):
    monkeypatch.setattr(turns, "WAIT_SECONDS", 0.2)
    inside, let_go, second_ran = threading.Event(), threading.Event(), threading.Event()

    def first():
        with turns.run():
            inside.set()
            assert let_go.wait(BOUND)

    def second():
        assert inside.wait(BOUND)
        with turns.run():  # the first still holds its turn: go on beside it after the wait
            second_ran.set()

    one, two = start(first), start(second)
    assert second_ran.wait(BOUND)
    assert not let_go.is_set()  # the second ran while the first was still inside
    let_go.set()
    finish(one, two)
    assert turns._turn.acquire(blocking=False)  # the second, which never got the turn, released nothing
    turns._turn.release()


def test_a_wait_aside_outside_any_run_takes_no_turn():
    with turns.aside():
        pass
    assert turns._turn.acquire(blocking=False)
    turns._turn.release()
