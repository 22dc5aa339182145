"""The informer's watch loop against a scripted API server (tests/unit/kube/fakeapi.py): every
failure path backs off and lists again; lists come from the watch cache or, after 410, in pages
from etcd; watches ask for bookmarks, a jittered timeout, and a read timeout near the bookmark
interval."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gangplugin.kube.client import PODS
from gangplugin.kube.informer import PAGE_SIZE, READ_TIMEOUT, WATCH_TIMEOUT, Backoff, Informer, identity
from tests.unit.kube.fakeapi import Clock, FakeApi, event, pod, wait_until


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.closed.set()


class _Recording(Backoff):
    """Fast delays, and how many were asked for."""

    def __init__(self) -> None:
        super().__init__(initial=0.01, cap=0.05)
        self.delays: list[float] = []

    def next(self) -> float:
        self.delays.append(super().next())
        return self.delays[-1]


def _informer(api: FakeApi, seen: list[tuple[str, Any, Any]] | None = None) -> Informer[Any]:
    inf: Informer[Any] = Informer(api.client(), PODS, identity, backoff=_Recording())
    if seen is not None:
        inf.add_handler(lambda kind, old, new: seen.append((kind, old, new)))
    inf.start()
    assert inf.wait_synced(5)
    return inf


def _names(inf: Informer[Any]) -> set[str]:
    return {p["metadata"]["name"] for p in inf.items()}


def test_lists_from_the_watch_cache_then_watches_with_bookmarks_and_a_jittered_timeout(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6)), event("BOOKMARK", {"metadata": {"resourceVersion": "9"}})]]
    inf = _informer(api)
    wait_until(lambda: _names(inf) == {"a", "b"})
    first = api.calls("list")[0].url.params
    assert first["resourceVersion"] == "0" and first["limit"] == str(PAGE_SIZE)
    watch = api.calls("watch")[0]
    params = watch.url.params
    assert params["allowWatchBookmarks"] == "true" and params["resourceVersion"] == "5"
    assert WATCH_TIMEOUT <= int(params["timeoutSeconds"]) < 2 * WATCH_TIMEOUT
    assert watch.extensions["timeout"]["read"] == READ_TIMEOUT
    inf.stop()


def test_a_watch_the_server_ends_is_resumed_from_the_last_version_without_a_list(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.watches = [httpx.Response(200, content=event("ADDED", pod("b", 7)))]  # ends after one event
    inf = _informer(api)
    wait_until(lambda: len(api.calls("watch")) >= 2)
    assert api.calls("watch")[1].url.params["resourceVersion"] == "7"
    assert len(api.calls("list")) == 1
    inf.stop()


def test_an_undecodable_line_relists_from_the_last_version_and_keeps_going(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6)), b"{not json\n"], [event("ADDED", pod("c", 8))]]
    inf = _informer(api)
    wait_until(lambda: "c" in _names(inf))
    relist = api.calls("list")[1].url.params
    assert relist["resourceVersion"] == "6"  # not older than what was seen: the watch cache answers
    assert "limit" not in relist  # a limit would make it an exact read from etcd
    inf.stop()


def test_410_gone_relists_from_etcd_in_pages_and_emits_what_changed(api: FakeApi) -> None:
    api.set(pod("a", 5), pod("b", 5))
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    api.watches = [[event("ERROR", gone)]]
    seen: list[tuple[str, Any, Any]] = []
    inf = _informer(api, seen)
    # What etcd holds now, in two pages: b was deleted and c created while the watch was gone.
    page1 = {"metadata": {"continue": "tok", "resourceVersion": "20"}, "items": [pod("a", 5)]}
    page2 = {"metadata": {"resourceVersion": "20"}, "items": [pod("c", 19)]}
    api.lists = [orjson.dumps(page1), orjson.dumps(page2)]
    wait_until(lambda: _names(inf) == {"a", "c"})
    lists = api.calls("list")
    assert "resourceVersion" not in lists[1].url.params and lists[1].url.params["limit"] == str(PAGE_SIZE)
    assert lists[2].url.params["continue"] == "tok"
    assert ("DELETED", pod("b", 5), None) in seen and ("ADDED", None, pod("c", 19)) in seen
    wait_until(lambda: any(w.url.params.get("resourceVersion") == "20" for w in api.calls("watch")))
    inf.stop()


def test_a_continue_token_that_expired_falls_back_to_one_full_list(api: FakeApi) -> None:
    api.set(pod("a", 5))
    client = api.client()
    expired = orjson.dumps({"kind": "Status", "code": 410, "reason": "Expired"})
    api.lists = [
        orjson.dumps({"metadata": {"continue": "tok", "resourceVersion": "3"}, "items": [pod("x", 3)]}),
        httpx.Response(410, content=expired),
    ]
    listing = client.list(PODS, limit=1)
    assert [p["metadata"]["name"] for p in listing["items"]] == ["a"]
    assert "limit" not in api.requests[-1].url.params


def test_429_waits_at_least_retry_after(api: FakeApi) -> None:
    api.set(pod("a", 5))
    busy = orjson.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests"})
    api.watches = [httpx.Response(429, content=busy, headers={"Retry-After": "1"})]
    inf = _informer(api)
    wait_until(lambda: len(api.calls("list")) >= 2, timeout=5)
    lists, watch = api.calls("list"), api.calls("watch")[0]
    assert api.requests.index(lists[1]) == api.requests.index(watch) + 1
    assert api.times[id(lists[1])] - api.times[id(watch)] >= 1.0
    inf.stop()


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(500, content=b"etcdserver: leader changed"),
        httpx.Response(503, content=orjson.dumps({"kind": "Status", "code": 503, "message": "starting"})),
        httpx.ConnectError("connection refused"),
        httpx.RemoteProtocolError("peer closed connection"),
    ],
    ids=["500", "503", "refused", "cut"],
)
def test_server_and_connection_failures_back_off_and_relist(api: FakeApi, failure: Any) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6)), failure] if isinstance(failure, Exception) else failure]
    inf = _informer(api)
    api.set(pod("a", 5), pod("b", 6), pod("c", 9))  # what the relist will find
    wait_until(lambda: _names(inf) == {"a", "b", "c"})
    assert inf._thread.is_alive()
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 1
    inf.stop()


def test_a_silent_watch_is_made_again_and_a_dead_server_then_backs_off_and_relists(api: FakeApi) -> None:
    api.set(pod("a", 5))
    # Silent past READ_TIMEOUT; then the new watch cannot connect (the server is gone); then back.
    api.watches = [[event("ADDED", pod("b", 6)), httpx.ReadTimeout("silent")], httpx.ConnectError("refused")]
    inf = _informer(api)
    wait_until(lambda: len(api.calls("watch")) >= 3)
    watches, lists = api.calls("watch"), api.calls("list")
    assert watches[1].url.params["resourceVersion"] == "6"  # made again at once, from where it was
    assert api.requests.index(watches[1]) == api.requests.index(watches[0]) + 1  # no list between
    assert len(lists) == 2 and api.requests.index(lists[1]) == api.requests.index(watches[1]) + 1
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 1  # only the refusal
    inf.stop()


def test_a_list_that_times_out_backs_off_and_lists_again(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.lists = [httpx.ReadTimeout("no answer")]
    inf = _informer(api)
    assert _names(inf) == {"a"} and len(api.calls("list")) == 2
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 1
    inf.stop()


def test_repeated_410s_back_off_longer_each_time(api: FakeApi) -> None:
    api.set(pod("a", 5))
    gone = event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})
    api.watches = [[gone], [gone], [gone]]
    inf = _informer(api)
    wait_until(lambda: len(api.calls("watch")) >= 4)
    assert isinstance(inf._backoff, _Recording)
    delays = inf._backoff.delays
    assert len(delays) == 3 and delays[0] < delays[2]
    inf.stop()


def test_a_failing_first_list_is_retried_until_it_syncs(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.lists = [httpx.ConnectError("refused"), httpx.Response(500, content=b"oops"), ValueError("any bug")]
    inf: Informer[Any] = Informer(api.client(), PODS, identity, backoff=Backoff(initial=0.01, cap=0.05))
    inf.start()
    assert inf.wait_synced(5) and _names(inf) == {"a"}
    assert len(api.calls("list")) == 4
    inf.stop()


def test_backoff_doubles_with_jitter_up_to_its_cap_and_starts_over_after_quiet() -> None:
    clock = Clock()
    low = Backoff(clock=clock, rand=lambda: 0.0)
    assert [round(low.next(), 2) for _ in range(7)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]
    clock.t += 120.0  # two minutes without a failure
    assert low.next() == pytest.approx(0.8)
    high = Backoff(clock=clock, rand=lambda: 0.999)
    assert 1.59 < high.next() < 1.6  # stretched by up to 2x, never less than the base
    default = Backoff()  # on the monotonic clock, so a step of the wall clock cannot reset it
    assert default.clock is time.monotonic and 0.8 <= default.next() < 1.6
