"""bindMode Ungate: a pin is final, so a pod pinned to a node that fails before kube-scheduler
binds it is deleted for its controller to make it again behind the gate (`stranded_pin`); a pod
no controller owns is left for `unscheduledTimeout`."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gangplugin.core.gangplan import GangPod, stranded_pin
from gangplugin.core.topology import Node, Taint, build_snapshot
from gangplugin.extender.ungater import Ungater
from gangplugin.kube.client import Client
from gangplugin.readmodel.records import node_record
from tests.support.extender import WORKLOAD, add, cache_of, ungate_pod
from tests.support.objects import node

JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid", "controller": True}


def test_a_pin_is_stranded_only_on_a_node_that_no_longer_takes_the_pod() -> None:
    nodes = [
        Node("ok", {}, {"nvidia.com/gpu": 4}),
        Node("down", {}, {"nvidia.com/gpu": 4}, ready=False),
        Node("cordoned", {}, {"nvidia.com/gpu": 4}, unschedulable=True),
        Node("tainted", {}, {"nvidia.com/gpu": 4}, taints=(Taint("maintenance", "", "NoSchedule"),)),
    ]
    snap = build_snapshot(nodes)

    def why(**kw: Any) -> str | None:
        return stranded_pin(snap, GangPod("ns", "p", gang="g", size=2, **kw))

    assert why(pinned="ok") is None
    assert why(pinned="down") == "pod ns/p is pinned to down, which is NotReady"
    assert why(pinned="cordoned") == "pod ns/p is pinned to cordoned, which is cordoned"
    assert "taint maintenance" in (why(pinned="tainted") or "")
    assert why(pinned="deleted") == "pod ns/p is pinned to deleted, which is gone"
    # bound already, leaving, finished, or never pinned: nothing to move
    assert why(pinned="down", node="down") is None
    assert why(pinned="down", deleting=True) is None
    assert why(pinned="down", finished=True) is None
    assert why() is None


class Api:
    """Answers the ungater: the Workload, Events, and pod deletions (recorded)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path, body))
        if "/workloads/" in request.url.path:
            return httpx.Response(200, content=orjson.dumps(WORKLOAD))
        return httpx.Response(200 if request.method == "DELETE" else 201, content=orjson.dumps(body or {}))

    def made(self, method: str, part: str) -> list[tuple[str, Any]]:
        return [(path, body) for m, path, body in self.calls if m == method and part in path]


def not_ready(name: str) -> dict[str, Any]:
    obj = node(name, "us-1")
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return obj


def stranded_gang(owned: bool) -> tuple[Ungater, Api, Client]:
    """Gang g: p0 pinned to us-1-0, which goes NotReady before kube-scheduler binds p0; p1 bound."""
    api = Api()
    client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    cache = cache_of({"us-1": 3})
    ungater = Ungater(client, cache, clock=lambda: 0.0, workers=1)
    p0 = ungate_pod("p0", "g", 2, pinned="us-1-0")
    p1 = ungate_pod("p1", "g", 2, pinned="us-1-1")
    p1["spec"]["nodeName"] = "us-1-1"
    if owned:
        p0["metadata"]["ownerReferences"] = [JOB]
    add(cache, p0, p1)
    cache.on_node("MODIFIED", node_record(node("us-1-0", "us-1")), node_record(not_ready("us-1-0")))
    ungater.on_node("MODIFIED", node_record(node("us-1-0", "us-1")), node_record(not_ready("us-1-0")))
    return ungater, api, client


def test_a_pod_pinned_to_a_node_that_failed_is_deleted_once_for_its_controller_to_make_again() -> None:
    ungater, api, client = stranded_gang(owned=True)
    try:
        assert ungater.queue.get(timeout=0) == "ns/g"  # the node's change woke the gang
        ungater.reconcile("ns/g")
        # a second look before the watch shows the deletion: not deleted (nor reported) again
        ungater.reconcile("ns/g")
    finally:
        ungater.patcher.shutdown()
        client.close()
    ((path, body),) = api.made("DELETE", "/pods/")
    assert path.endswith("/namespaces/ns/pods/p0")
    assert body["preconditions"] == {"uid": "uid-p0"}  # never a pod made since under that name
    ((_, event),) = api.made("POST", "/events")
    assert event["reason"] == "PinnedNodeLost" and event["involvedObject"]["name"] == "g"
    assert "pinned to us-1-0, which is NotReady" in event["message"]


def test_a_pod_no_controller_owns_is_left_for_the_unscheduled_timeout() -> None:
    ungater, api, client = stranded_gang(owned=False)
    try:
        ungater.reconcile("ns/g")
    finally:
        ungater.patcher.shutdown()
        client.close()
    assert api.made("DELETE", "/pods/") == []
