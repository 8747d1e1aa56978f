"""The learners' warm-up (trainer/warm_up.py): once, in the caller's thread or its own, errors raised where it waits."""

from __future__ import annotations

import threading

import pytest

from trainer.warm_up import WarmUp


def test_in_the_callers_thread_it_runs_prepare_then_trace_once() -> None:
    calls: list[tuple[str, str]] = []
    warm_up = WarmUp(
        lambda: calls.append(("trace", threading.current_thread().name)),
        lambda: calls.append(("prepare", threading.current_thread().name)),
        name="test-warm-up",
        pending=True,
    )
    warm_up.start(in_thread=False)
    warm_up.start(in_thread=True)  # started before: nothing more
    here = threading.current_thread().name
    assert calls == [("prepare", here), ("trace", here)] and warm_up.thread is None


def test_in_a_thread_of_its_own_the_caller_goes_on_and_wait_joins_it() -> None:
    gate = threading.Event()
    names: list[str] = []

    def trace() -> None:
        gate.wait()
        names.append(threading.current_thread().name)

    warm_up = WarmUp(trace, name="test-warm-up", pending=True)
    warm_up.start(in_thread=True)  # returns while the trace is held
    assert warm_up.thread is not None and warm_up.thread.is_alive()
    gate.set()
    warm_up.wait()
    assert names == ["test-warm-up"] and warm_up.thread is None


def test_a_failed_trace_is_raised_once_by_the_thread_that_waits() -> None:
    def broken() -> None:
        raise ValueError("no graph today")

    warm_up = WarmUp(broken, name="test-warm-up", pending=True)
    warm_up.start(in_thread=True)
    with pytest.raises(ValueError, match="no graph today"):
        warm_up.wait()
    warm_up.wait()  # raised once


def test_a_failed_trace_in_the_callers_thread_is_raised_by_start() -> None:
    def broken() -> None:
        raise ValueError("no graph today")

    with pytest.raises(ValueError, match="no graph today"):
        WarmUp(broken, name="test-warm-up", pending=True).start(in_thread=False)


def test_nothing_pending_runs_nothing() -> None:
    calls: list[str] = []
    warm_up = WarmUp(lambda: calls.append("trace"), lambda: calls.append("prepare"), name="test-warm-up", pending=False)
    warm_up.start(in_thread=False)
    warm_up.start(in_thread=True)
    warm_up.wait()
    assert calls == []
