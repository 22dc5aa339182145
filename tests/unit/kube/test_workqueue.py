"""The controller work queue: dedup, one worker per key, backoff, wake-ups at a later time."""

from __future__ import annotations

import logging
import threading

import pytest

from gangplugin.kube.client import ApiError
from gangplugin.kube.workqueue import WorkQueue, run_worker


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_duplicates_collapse_and_order_is_fifo() -> None:
    q = WorkQueue()
    for k in ("a", "b", "a", "c", "b"):
        q.add(k)
    got = [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)]
    assert got == ["a", "b", "c", None]


def test_key_added_while_active_runs_again_after_done_not_concurrently() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    assert q.get(timeout=0) is None, "a second worker must not get a key that is being worked on"
    q.done("a")
    assert q.get(timeout=0) == "a"


def test_add_after_waits_for_the_clock() -> None:
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("plan", 60)
    assert q.get(timeout=0) is None
    clock.now += 59.9
    assert q.get(timeout=0) is None
    clock.now += 0.2
    assert q.get(timeout=0) == "plan"


def test_a_key_waiting_is_added_once_at_the_earliest_time_asked() -> None:
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("gang", 1.0)
    for _ in range(1000):  # a burst of pod events, each asking for a look within a second
        clock.now += 0.0005
        q.add_after("gang", 1.0)
    q.add_after("gang", 30)  # a later wake-up asked meanwhile: the earlier one stands
    assert len(q) == 1
    clock.now = 100.0 + 0.9999
    assert q.get(timeout=0) is None
    clock.now = 101.0
    assert q.get(timeout=0) == "gang"
    q.done("gang")
    clock.now += 60  # every replaced time has passed: none of them adds it again
    assert q.get(timeout=0) is None and len(q) == 0
    q.add_after("gang", 5)
    q.add_after("gang", 2)  # sooner: replaces the 5 s
    clock.now += 2
    assert q.get(timeout=0) == "gang"
    q.done("gang")
    clock.now += 3
    assert q.get(timeout=0) is None


def test_retry_backs_off_exponentially_up_to_the_cap_and_forget_resets() -> None:
    q = WorkQueue(base_delay=1, max_delay=5, clock=FakeClock())
    assert [q.retry("k") for _ in range(5)] == [1, 2, 4, 5, 5]
    q.forget("k")
    assert q.retry("k") == 1


def test_worker_retries_failures_and_honours_requested_wakeups() -> None:
    clock = FakeClock()
    q = WorkQueue(base_delay=10, clock=clock)
    calls: list[str] = []

    def reconcile(key: str) -> float | None:
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("transient")
        if len(calls) == 2:
            return 30.0
        q.shutdown()
        return None

    q.add("x")
    t = threading.Thread(target=run_worker, args=(q, reconcile, "test"), daemon=True)
    t.start()
    for done, step in ((1, 10), (2, 30)):  # the retry after 10s, then the requested wake-up after 30s
        while not (len(calls) == done and len(q) == 1) and t.is_alive():
            threading.Event().wait(0.01)
        clock.now += step
        with q._cond:
            q._cond.notify_all()
    t.join(timeout=5)
    assert calls == ["x", "x", "x"]


def test_a_first_key_is_handed_out_ahead_of_the_keys_queued_before_it() -> None:
    q = WorkQueue(first=frozenset({"pass"}))
    for key in ("wl/a", "wl/b", "pass", "wl/c"):
        q.add(key)
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == [
        "pass",
        "wl/a",
        "wl/b",
        "wl/c",
    ]


def test_a_conflict_is_retried_as_the_ordinary_thing_it_is_and_a_failure_is_logged_as_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    q = WorkQueue(base_delay=0)
    errors = [ApiError(409, "Conflict", "the object has been modified"), RuntimeError("a bug")]

    def reconcile(key: str) -> float | None:
        if errors:
            raise errors.pop(0)
        q.shutdown()
        return None

    q.add("cq/a")
    with caplog.at_level(logging.INFO, logger="gangplugin.kube.workqueue"):
        run_worker(q, reconcile, "plans")  # returns at the shutdown of the third call
    conflict, failure = caplog.records
    assert conflict.levelno == logging.INFO and conflict.exc_info is None
    assert "cq/a met a newer version (409 Conflict" in conflict.getMessage()
    assert failure.levelno == logging.ERROR and failure.exc_info is not None
