"""bindMode Ungate when the ungater's pin and the watch overtake each other: kube-scheduler may
bind a pod before the ungater has fed its pin into the cache, and the watch may bring a pod's
binding or deletion before the pin patch's answer. Neither may hold the pod at the bind barrier
nor roll the cache back. Nor may a member bound without waiting at the barrier leave its peers
there until the timeout."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import ANY

import httpx

from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.ungater import Ungater
from gangplugin.kube.client import Client
from tests.support.extender import (
    HOST,
    NODES,
    Api,
    add,
    bind,
    cache_of,
    filtered,
    make_cache,
    pod,
    run,
    ungate_pod,
    until,
)


def test_a_pod_bound_before_the_cache_has_its_pin_is_bound_at_once_not_held_at_the_barrier() -> None:
    # The replacement of 2 pods after 2 nodes failed: both pinned, and kube-scheduler binds p0
    # before the cache has its pin (the ungater feeds it when its patch returns); p1's it has.
    cache = cache_of({"us-1": 4})
    add(cache, *(bound(ungate_pod(f"p{i}", "g", 4, pinned=f"us-1-{i}")) for i in (2, 3)))
    add(cache, ungate_pod("p0", "g", 4), ungate_pod("p1", "g", 4))
    pins = {p.name: n for p, n in cache.pins(("ns", "g"), now=0.0)[0]}
    assert set(pins) == {"p0", "p1"}
    add(cache, ungate_pod("p1", "g", 4, pinned=pins["p1"]))

    async def go(client, rec):  # type: ignore[no-untyped-def]
        for name in ("p1", "p0"):
            status, answer = await bind(client, name, pins[name])
            assert status == 200 and answer["Error"] == "", answer
        return rec.calls

    # Before: p0 waited at the bind barrier for p1, bound straight away, until the timeout.
    assert run(go, cache, timeout=5.0) == [("ns", n, f"uid-{n}", pins[n]) for n in ("p1", "p0")]


def bound(obj: dict[str, Any]) -> dict[str, Any]:
    """The pinned pod `obj` as kube-scheduler leaves it: bound to its pin."""
    return {**obj, "spec": {**obj["spec"], "nodeName": obj["spec"]["nodeSelector"][HOST]}}


class WatchFirst(Api):
    """The API server, with the watch delivering `then` (the pod bound, or deleted) to the cache
    before the pin patch's answer reaches the ungater."""

    def __init__(self, pods: list[dict[str, Any]], cache: GangReservations, then: str) -> None:
        super().__init__(pods)
        self.cache, self.then = cache, then

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle(request)
        if request.method == "PATCH" and "/pods/" in request.url.path:
            pinned = answer.json()
            old = self.cache.pods[("ns", pinned["metadata"]["name"])]
            if self.then == "bound":
                self.cache.on_pod("MODIFIED", old, gang_pod_from_k8s(bound(pinned)))
            else:
                self.cache.on_pod("DELETED", old, None)
        return answer


def pin_with_the_watch_first(then: str) -> GangReservations:
    cache = cache_of({"us-1": 2})
    pods = [ungate_pod("p0", "g", 1)]
    add(cache, *pods)
    api = WatchFirst(pods, cache, then)
    client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    ungater = Ungater(client, cache, clock=lambda: 0.0, workers=1)
    try:
        assert ungater.reconcile("ns/g") is None
    finally:
        ungater.patcher.shutdown()
        client.close()
    return cache


def test_a_binding_the_watch_brought_first_is_not_rolled_back_by_the_pin_answer() -> None:
    cache = pin_with_the_watch_first("bound")
    p0 = cache.pods[("ns", "p0")]
    assert p0.node is not None and p0.node == p0.pinned
    assert not cache.pinned_on  # kube-scheduler counts it itself
    assert cache.bound_members(("ns", "g")) == [("ns", "p0")]


def test_a_pod_the_watch_saw_deleted_is_not_brought_back_by_the_pin_answer() -> None:
    cache = pin_with_the_watch_first("deleted")
    assert ("ns", "p0") not in cache.pods and not cache.gangs and not cache.pinned_on
    assert not cache.bound  # its node is free again


def test_waiters_are_bound_once_a_member_that_did_not_wait_at_the_barrier_is_bound() -> None:
    # A Kueue pod group: kube-scheduler bound p1 while the cache did not know it as a gang
    # member yet (its gang label came later), so only p0 waits, and no other bind call comes.
    cache = make_cache()
    members = [pod(f"p{i}", "g", 2) for i in range(2)]
    for m in members:
        cache.on_pod("ADDED", None, gang_pod_from_k8s(m))

    async def go(client, rec):  # type: ignore[no-untyped-def]
        _, planned = await filtered(client, members[0])
        target = planned["NodeNames"][0]
        waiting = asyncio.create_task(bind(client, "p0", target))
        await until(lambda: rec.waiting("g") == {"p0"}, "p0 waiting at the barrier")
        other = next(n for n in NODES if n != target)
        bound = {**members[1], "spec": {**members[1]["spec"], "nodeName": other}}
        cache.on_pod("MODIFIED", cache.pods[("ns", "p1")], gang_pod_from_k8s(bound))
        status, answer = await waiting
        assert status == 200 and answer["Error"] == "", answer
        return rec.calls

    # Before: p0 waited out the barrier's timeout ("only 2 of 2 pods had a node").
    assert run(go, cache, timeout=5.0) == [("ns", "p0", "uid-p0", ANY)]
