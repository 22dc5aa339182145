"""The informer's watch loop against a scripted API server (tests/support/fakeapi.py): every
failure path backs off and lists again, and the cache and its handlers end with the server's
state; lists come from the watch cache or, after 410, in pages from etcd; watches ask for
bookmarks, a jittered timeout, and a read timeout near the bookmark interval. Handlers run on
dispatchers, never on the watch thread."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gangplugin.kube.client import NODES, PODS
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import (
    PAGE_SIZE,
    READ_TIMEOUT,
    WATCH_TIMEOUT,
    Backoff,
    Informer,
    identity,
)
from tests.support.fakeapi import Clock, FakeApi, event, pod, wait_until

GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.closed.set()


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher]:
    d = Dispatcher("test")
    d.start()
    yield d
    d.stop()


class Mirror:
    """A handler that rebuilds the server's objects from the events alone, as a component's own
    cache does; it checks that every update and deletion names the object it last saw."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.events: list[tuple[str, str]] = []  # (type, name)
        self.wrong: list[str] = []

    def __call__(self, kind: str, old: Any, new: Any) -> None:
        if old is None and new is None:
            self.wrong.append(f"{kind} of no object")
            return
        name = (new or old)["metadata"]["name"]
        if (old is not None and self.objects.get(name) != old) or (old is None and name in self.objects):
            self.wrong.append(f"{kind} {name}: old {old!r}, mirror has {self.objects.get(name)!r}")
        if new is None:
            self.objects.pop(name, None)
        else:
            self.objects[name] = new
        self.events.append((kind, name))


class _Recording(Backoff):
    """Fast delays, and how many were asked for."""

    def __init__(self) -> None:
        super().__init__(initial=0.01, cap=0.05)
        self.delays: list[float] = []

    def next(self) -> float:
        self.delays.append(super().next())
        return self.delays[-1]


def _watching(api: FakeApi, dispatcher: Dispatcher | None = None, *handlers: Any) -> Informer[Any]:
    """A pod informer (fast recorded backoff) started with `handlers` on `dispatcher`."""
    inf: Informer[Any] = Informer(api.client(), PODS, identity, backoff=_Recording())
    for handler in handlers:
        assert dispatcher is not None
        inf.add_handler(handler, dispatcher)
    inf.start()
    return inf


def _informer(
    api: FakeApi, seen: list[tuple[str, Any, Any]] | None = None, dispatcher: Dispatcher | None = None
) -> Informer[Any]:
    """`_watching` (recording every event into `seen`, when given), once synced."""
    handlers = [] if seen is None else [lambda kind, old, new: seen.append((kind, old, new))]
    inf = _watching(api, dispatcher, *handlers)
    assert inf.wait_synced(5)
    return inf


def _names(inf: Informer[Any]) -> set[str]:
    return {p["metadata"]["name"] for p in inf.items()}


def _server_state(
    api: FakeApi, inf: Informer[Any], *mirrors: Mirror, dispatcher: Dispatcher | None = None
) -> bool:
    """The cache, and what each mirror rebuilt from its handler's events, equal the server's."""
    if {p["metadata"]["name"]: p for p in inf.items()} != api.pods:
        return False
    if dispatcher is not None and not dispatcher.caught_up(5):
        return False
    return all(m.objects == api.pods and not m.wrong for m in mirrors)


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


def test_410_gone_relists_from_etcd_in_pages_and_emits_what_changed(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    api.set(pod("a", 5), pod("b", 5))
    api.watches = [[event("ERROR", GONE)]]
    seen: list[tuple[str, Any, Any]] = []
    inf = _informer(api, seen, dispatcher)
    # What etcd holds now, in two pages: b was deleted and c created while the watch was gone.
    page1 = {"metadata": {"continue": "tok", "resourceVersion": "20"}, "items": [pod("a", 5)]}
    page2 = {"metadata": {"resourceVersion": "20"}, "items": [pod("c", 19)]}
    api.lists = [orjson.dumps(page1), orjson.dumps(page2)]
    wait_until(lambda: _names(inf) == {"a", "c"})
    lists = api.calls("list")
    assert "resourceVersion" not in lists[1].url.params and lists[1].url.params["limit"] == str(PAGE_SIZE)
    assert lists[2].url.params["continue"] == "tok"
    wait_until(lambda: ("DELETED", pod("b", 5), None) in seen and ("ADDED", None, pod("c", 19)) in seen)
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


# -- handlers on dispatchers ------------------------------------------------------------------


def test_a_slow_handler_delays_neither_the_cache_nor_another_components_handler(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod(f"p{i}", 6 + i)) for i in range(20)]]
    release = threading.Event()
    slow_seen: list[str] = []

    def slow(kind: str, old: Any, new: Any) -> None:
        release.wait(10)  # busy far longer than the events take to come
        slow_seen.append(new["metadata"]["name"])

    slow_d, fast_d = Dispatcher("slow"), Dispatcher("fast")
    fast = Mirror()
    inf: Informer[Any] = Informer(api.client(), PODS, identity, backoff=_Recording())
    inf.add_handler(slow, slow_d)
    inf.add_handler(fast, fast_d)
    for d in (slow_d, fast_d):
        d.start()
    inf.start()
    try:
        wait_until(lambda: len(_names(inf)) == 21)  # the store is current while `slow` still waits
        wait_until(lambda: len(fast.objects) == 21)  # and so is the other component's handler
        assert slow_seen == [] and slow_d.backlog() >= 20
        assert not inf.wait_synced(0)  # synced means handled: `slow` has not handled the list yet
        release.set()
        assert inf.wait_synced(5)
        wait_until(lambda: len(slow_seen) == 21)
        assert slow_seen == ["a", *(f"p{i}" for i in range(20))]  # every event, in order
        assert fast.objects == {p["metadata"]["name"]: p for p in inf.items()} and not fast.wrong
    finally:
        release.set()
        inf.stop()
        for d in (slow_d, fast_d):
            d.stop()


def test_a_handler_slower_than_the_event_rate_gets_every_event_in_order_and_the_cache_keeps_up(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    api.set(pod("a", 5))
    versions = [pod("a", 6 + i) for i in range(200)]  # one object changing fast
    api.watches = [[event("MODIFIED", v) for v in versions]]
    seen: list[str] = []
    gate = threading.Semaphore(0)

    def lagging(kind: str, old: Any, new: Any) -> None:
        gate.acquire(timeout=10)  # one event per permit: always behind the watch
        seen.append(new["metadata"]["resourceVersion"])

    inf = _watching(api, dispatcher, lagging)
    try:
        wait_until(lambda: inf.get("ns/a") == versions[-1])  # the cache has the last version
        assert len(seen) < len(versions)
        for _ in range(len(versions) + 1):
            gate.release()
        wait_until(lambda: len(seen) == len(versions) + 1)
        assert seen == ["5", *(v["metadata"]["resourceVersion"] for v in versions)]
    finally:
        for _ in range(len(versions) + 1):
            gate.release()
        inf.stop()


def test_a_handler_that_raises_is_logged_and_its_dispatcher_carries_on(
    api: FakeApi, dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6)), event("ADDED", pod("c", 7))]]

    def buggy(kind: str, old: Any, new: Any) -> None:
        if new["metadata"]["name"] == "b":
            raise RuntimeError("a bug in a handler")

    after = Mirror()
    with caplog.at_level(logging.ERROR, logger="gangplugin.kube.dispatcher"):
        inf = _watching(api, dispatcher, buggy, after)
        api.set(pod("a", 5), pod("b", 6), pod("c", 7))
        wait_until(lambda: _server_state(api, inf, after, dispatcher=dispatcher))
    assert after.events == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]  # b too, after the failure
    (failure,) = [r for r in caplog.records if "failed" in r.getMessage()]
    assert "buggy" in failure.getMessage() and failure.exc_info is not None
    assert isinstance(inf._backoff, _Recording) and inf._backoff.delays == []  # the watch never noticed
    inf.stop()


def test_handlers_of_one_dispatcher_run_in_registration_order_one_event_at_a_time(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6))]]
    order: list[tuple[str, str]] = []
    running = threading.Lock()
    overlapped: list[str] = []

    def handler(tag: str) -> Any:
        def handle(kind: str, old: Any, new: Any) -> None:
            if not running.acquire(blocking=False):
                overlapped.append(tag)
                return
            try:
                order.append((tag, new["metadata"]["name"]))
            finally:
                running.release()

        return handle

    inf = _watching(api, dispatcher, handler("cache"), handler("reader"))
    wait_until(lambda: len(order) == 4)
    assert order == [("cache", "a"), ("reader", "a"), ("cache", "b"), ("reader", "b")] and not overlapped
    inf.stop()


def test_synced_waits_for_every_dispatcher_to_handle_the_first_list(api: FakeApi) -> None:
    api.set(pod("a", 5), pod("b", 5))
    nodes_api = FakeApi()
    nodes_api.set({"metadata": {"name": "n1", "resourceVersion": "3"}})
    gate = threading.Event()
    built: list[str] = []

    def build(kind: str, old: Any, new: Any) -> None:
        gate.wait(10)
        built.append(new["metadata"]["name"])

    d = Dispatcher("component")
    pods: Informer[Any] = Informer(api.client(), PODS, identity, backoff=_Recording())
    nodes: Informer[Any] = Informer(nodes_api.client(), NODES, identity, backoff=_Recording())
    pods.add_handler(build, d)
    nodes.add_handler(build, d)  # two caches feeding one component
    d.start()
    pods.start()
    nodes.start()
    try:
        wait_until(lambda: _names(pods) == {"a", "b"} and _names(nodes) == {"n1"})
        assert not pods.wait_synced(0) and not nodes.wait_synced(0) and built == []
        gate.set()
        assert pods.wait_synced(5) and nodes.wait_synced(5)
        assert sorted(built) == ["a", "b", "n1"]  # what the component built from both lists is there
    finally:
        gate.set()
        nodes_api.closed.set()
        pods.stop()
        nodes.stop()
        d.stop()


# -- failure paths of the watch loop ----------------------------------------------------------


def test_a_410_storm_on_lists_watches_and_in_the_stream_ends_in_the_servers_state(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    storm = 8
    gone = orjson.dumps(GONE)
    # What the informer lists first; meanwhile b was deleted, a changed and c was created.
    before = {"metadata": {"resourceVersion": "5"}, "items": [pod("a", 5), pod("b", 5)]}
    api.set(pod("a", 9), pod("c", 12))
    # Each watch fails with 410, as its HTTP status or as an ERROR event in its stream, and the
    # first list after each is refused with 410 too.
    api.watches = [
        httpx.Response(410, content=gone) if i % 2 else [event("ERROR", GONE)] for i in range(storm)
    ]
    api.lists = [orjson.dumps(before), *[httpx.Response(410, content=gone), None] * storm]
    mirror = Mirror()
    inf = _watching(api, dispatcher, mirror)
    wait_until(
        lambda: len(api.calls("watch")) > storm and _server_state(api, inf, mirror, dispatcher=dispatcher)
    )
    lists = api.calls("list")[1:]
    assert len(lists) == 2 * storm
    assert all(
        "resourceVersion" not in r.url.params and r.url.params["limit"] == str(PAGE_SIZE) for r in lists
    )
    assert ("DELETED", "b") in mirror.events
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 2 * storm
    assert inf._thread.is_alive()
    inf.stop()


def test_a_429_storm_waits_out_every_retry_after_and_sends_nothing_in_between(api: FakeApi) -> None:
    api.set(pod("a", 5), pod("b", 8))
    busy = {"kind": "Status", "code": 429, "reason": "TooManyRequests"}

    def refused() -> httpx.Response:
        return httpx.Response(429, content=orjson.dumps(busy), headers={"Retry-After": "1"})

    in_stream = {**busy, "details": {"retryAfterSeconds": 1}}
    api.watches = [[event("ERROR", in_stream)], refused()]
    api.lists = [None, refused()]
    inf = _watching(api)
    # list, watch (429 in its stream), list (429), list, watch (429), list, then an idle watch
    wait_until(lambda: len(api.requests) >= 7, timeout=10)
    assert _server_state(api, inf)
    kinds = ["watch" if "watch" in r.url.params else "list" for r in api.requests]
    assert kinds == ["list", "watch", "list", "list", "watch", "list", "watch"]  # nothing more
    at = [api.times[id(r)] for r in api.requests]
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert all(gaps[i] >= 1.0 for i in (1, 2, 4)), gaps  # each 429's Retry-After, waited out
    inf.stop()


def test_a_watch_the_server_ends_at_once_without_an_event_backs_off_and_lists_again(api: FakeApi) -> None:
    # A proxy that closes every watch at once: without a backoff the informer would make watches
    # in a busy loop. As client-go's "very short watch", each is a failure.
    api.set(pod("a", 5))
    api.watches = [httpx.Response(200, content=b"") for _ in range(3)]
    inf = _informer(api)
    api.set(pod("a", 5), pod("b", 7))
    wait_until(lambda: len(api.calls("watch")) >= 4 and _server_state(api, inf))
    assert len(api.calls("list")) == 4  # one after each
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 3
    inf.stop()


def test_an_error_event_other_than_410_lists_again_from_the_watch_cache(api: FakeApi) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6)), event("ERROR", {"kind": "Status", "code": 500})]]
    inf = _informer(api)
    api.set(pod("a", 5), pod("b", 6), pod("c", 9))
    wait_until(lambda: _server_state(api, inf))
    relist = api.calls("list")[1].url.params
    assert relist["resourceVersion"] == "6" and "limit" not in relist  # not a quorum list
    inf.stop()


def test_the_deletion_of_an_object_never_seen_tells_no_handler(api: FakeApi, dispatcher: Dispatcher) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("DELETED", pod("x", 6)), event("ADDED", pod("b", 7))]]
    mirror = Mirror()
    inf = _watching(api, dispatcher, mirror)
    api.set(pod("a", 5), pod("b", 7))
    wait_until(lambda: _server_state(api, inf, mirror, dispatcher=dispatcher))
    assert mirror.events == [("ADDED", "a"), ("ADDED", "b")]
    inf.stop()


def test_a_transform_that_fails_on_an_object_backs_off_lists_again_and_converges(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    api.set(pod("a", 5))
    api.watches = [[event("ADDED", pod("b", 6))]]
    failed: list[str] = []

    def flaky(obj: Any) -> Any:
        name = obj["metadata"]["name"]
        if name == "b" and not failed:  # a bug that bites once
            failed.append(name)
            raise ValueError("a bug in a transform")
        return obj

    mirror = Mirror()
    inf: Informer[Any] = Informer(api.client(), PODS, flaky, backoff=_Recording())
    inf.add_handler(mirror, dispatcher)
    inf.start()
    api.set(pod("a", 5), pod("b", 6))
    wait_until(lambda: _server_state(api, inf, mirror, dispatcher=dispatcher))
    assert failed == ["b"] and len(api.calls("list")) == 2
    assert isinstance(inf._backoff, _Recording) and len(inf._backoff.delays) == 1
    inf.stop()


def test_stop_during_a_backoff_ends_the_thread_without_waiting_it_out(api: FakeApi) -> None:
    class Long(Backoff):
        def __init__(self) -> None:
            super().__init__(initial=3600.0, cap=3600.0)
            self.asked = threading.Event()

        def next(self) -> float:
            self.asked.set()
            return super().next()

    api.set(pod("a", 5))
    api.watches = [httpx.Response(500, content=b"down")]
    backoff = Long()
    inf: Informer[Any] = Informer(api.client(), PODS, identity, backoff=backoff)
    inf.start()
    assert backoff.asked.wait(5)  # waiting out an hour
    inf.stop()
    wait_until(lambda: not inf._thread.is_alive())
    assert len(api.calls("list")) == 1


def test_a_follower_keeps_its_own_transform_from_its_leaders_one_stream_through_a_relist(
    api: FakeApi, dispatcher: Dispatcher
) -> None:
    """Two caches of pods (raw, and names only) kept by one list and one watch: each store and each
    handler sees every change under its own transform, a 410's relist included."""
    api.set(pod("a", 5), pod("b", 5))
    after_410 = {"metadata": {"resourceVersion": "8"}, "items": [pod("b", 5), pod("c", 6), pod("d", 8)]}
    api.lists = [None, orjson.dumps(after_410)]
    api.watches = [
        [event("ADDED", pod("c", 6)), event("DELETED", pod("a", 7)), event("ERROR", GONE)],
        [event("MODIFIED", pod("b", 9))],
    ]
    raw: Informer[Any] = Informer(api.client(), PODS, identity, backoff=_Recording())
    names = raw.follower(lambda p: p["metadata"]["name"].upper())
    mirror, seen = Mirror(), []
    raw.add_handler(mirror, dispatcher)
    names.add_handler(lambda kind, old, new: seen.append((kind, old, new)), dispatcher)
    thread = names.start()
    assert thread is raw.start() and thread.is_alive()  # its leader's thread, started by its leader
    assert names.wait_synced(5) and raw.wait_synced(5)
    api.set(pod("b", 9), pod("c", 6), pod("d", 8))
    wait_until(lambda: _server_state(api, raw, mirror, dispatcher=dispatcher))
    assert sorted(names.items()) == ["B", "C", "D"]
    assert seen[:2] == [("ADDED", None, "A"), ("ADDED", None, "B")]
    assert seen[2:] == [
        ("ADDED", None, "C"),
        ("DELETED", "A", None),
        ("MODIFIED", "B", "B"),  # the relist: b as listed
        ("MODIFIED", "C", "C"),
        ("ADDED", None, "D"),
        ("MODIFIED", "B", "B"),  # the watch after it
    ]
    assert len(api.calls("list")) == 2 and len(api.calls("watch")) == 2  # one stream, not one each
    names.stop()  # stops the one stream
    api.closed.set()
    thread.join(10)
    assert not thread.is_alive()
