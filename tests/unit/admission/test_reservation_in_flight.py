"""A reservation's write in flight (`admission/outbox.py`): the passes decide the other gangs
with the reservation from the pass that took it, not only once the cache shows its annotation,
and do not decide its gang again until the write's answer is known (a reservation is two
writes: the annotation, then the check message on the Workload the annotation left)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import httpx
import orjson

from gangplugin.admission.controller import GangAdmission
from gangplugin.kube.client import WORKLOADS, Client
from gangplugin.kube.kueue_records import reservation_from_k8s
from tests.support.big_gangs import US, big_gang_cluster
from tests.support.caches import NOW, Caches, workload

BIG = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/big"


class Api:
    """Holds the big gang's writes (the annotation, then its status) until the test lets each
    through, answering a Workload patch with the Workload as patched (resourceVersion + 1);
    answers any other write with an empty object. Records each write's path."""

    def __init__(self, big: dict[str, Any]) -> None:
        self.big = big
        self.go = threading.Semaphore(0)
        self.arrived = threading.Semaphore(0)
        self.writes: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.writes.append(request.url.path)
        if not request.url.path.startswith(BIG):
            return httpx.Response(200, json={})
        self.arrived.release()
        assert self.go.acquire(timeout=30), "the big gang's write was never let through"
        body = orjson.loads(request.content)
        wl = copy.deepcopy(self.big)
        annotations = {
            **(wl["metadata"].get("annotations") or {}),
            **body.get("metadata", {}).get("annotations", {}),
        }
        wl["metadata"]["annotations"] = annotations
        wl["metadata"]["resourceVersion"] = str(int(wl["metadata"]["resourceVersion"]) + 1)
        self.big = wl
        return httpx.Response(200, json=wl)


def cluster() -> tuple[Caches, Api, GangAdmission, list[float]]:
    """us-1: "a" on 3 of its 4 nodes, its Job's deadline 1h; us-2: "b" on all 4, no deadline.
    "big" (4 pods, one UltraServer) waits past its policy's `afterWaiting`: it reserves us-1,
    its write held at the API server. Returns the pass's reruns asked for."""
    c = big_gang_cluster(b_nodes=4)
    big = workload("big", 4, message="gang does not fit now")
    api = Api(big)
    c.client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    adm = GangAdmission(c.client, c.model(), clock=lambda: NOW + 90)
    c.replay()
    reruns: list[float] = []
    adm.admission.rerun = reruns.append
    adm.admission.run()
    assert api.arrived.acquire(timeout=30), "the pass sent no write for the big gang"
    return c, api, adm, reruns


def test_a_reservation_in_flight_keeps_a_gang_ranked_after_it_off_its_domain() -> None:
    c, api, adm, _ = cluster()
    # A small gang that declares no end arrives while the annotation is on its way: the one
    # free node, us1-3, is reserved for big; admitted there, it would keep big from us-1.
    c.put(WORKLOADS, workload("small", 1, message="gang does not fit now"))
    adm.admission.run()
    assert adm.model.capacity.assumed == {}, "small admitted onto the domain reserved for big"
    api.go.release(2)
    assert adm.admission.outbox.wait(30)
    smalls = [p for p in api.writes if p.endswith("/workloads/small/status")]
    assert smalls, api.writes  # small told why it waits


def test_a_gang_is_not_decided_again_between_its_reservations_writes() -> None:
    c, api, adm, reruns = cluster()
    api.go.release()  # the annotation lands; the check message is held
    assert api.arrived.acquire(timeout=30)
    annotated = copy.deepcopy(api.big)
    recorded = reservation_from_k8s(annotated)
    assert recorded is not None and (recorded.level, recorded.domain) == (US, "us-1")
    # The watch shows the Workload the annotation made before the message's answer: the pass
    # leaves big be (a decision on this copy would write its reservation a second time).
    c.put(WORKLOADS, annotated)
    adm.admission.run()
    api.go.release()
    assert adm.admission.outbox.wait(30)
    assert [p for p in api.writes if p.startswith(BIG)] == [BIG, f"{BIG}/status"]
    assert reruns == [0.0]  # the pass that left it be runs again once the answer is known
