"""The admission pass sends its writes without waiting for them (`admission/outbox.py`): the next
pass decides while the API server answers, a gang whose write is in flight is not decided again,
and a refused admission gives back what it was charged, on the copy it was decided on only."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from gangplugin.admission.controller import GangAdmission
from gangplugin.admission.outbox import Outbox, Sent
from gangplugin.core.preemption import Hold
from gangplugin.kube.client import WORKLOADS
from gangplugin.runtime.admissions import AdmissionsInFlight, Subscriber
from tests.support.caches import NOW, Caches, standard, workload
from tests.support.fakeapi import FakeApi


def test_admissions_go_out_side_by_side_unless_ordered() -> None:
    started = threading.Barrier(2, timeout=30)  # both running at once, or neither ends
    outbox = Outbox(lambda _sent, _outcome, _passed_over: None)
    outbox.send([Sent(k, "1", lambda: started.wait() >= 0, admission=True) for k in "ab"], ordered=False)
    assert outbox.wait(30)


def test_a_gang_is_busy_while_a_write_for_it_is_in_flight() -> None:
    go = threading.Event()
    ends: list[Any] = []
    outbox = Outbox(lambda sent, outcome, over: ends.append((sent.key, outcome, over, outbox.busy(sent.key))))
    hold = Hold(level="us", domain="us-1", nodes=("n1",), victims=("ns/v",), quota_reserved_at=NOW, at=NOW)
    outbox.send([Sent("ns/g", "7", lambda: go.wait(30) and False, hold=hold)], ordered=True)
    assert outbox.busy("ns/g") and not outbox.busy("ns/h")
    # counts before the cache shows it, and while the cache shows a copy it did not make yet
    assert outbox.holds({"ns/g": "7"}) == {"ns/g": hold} == outbox.holds({"ns/g": "8"})
    assert outbox.pass_over("ns/g") and not outbox.pass_over("ns/h")
    go.set()
    assert outbox.wait(30)
    # refused: not busy by the time it is reported (the pass that report starts decides it again,
    # as it would for a pass that left it be), and its hold, never recorded, no longer counts
    assert ends == [("ns/g", False, True, False)] and outbox.holds({"ns/g": "7"}) == {}


def test_a_hold_counts_until_the_cache_shows_a_newer_copy() -> None:
    outbox = Outbox(lambda _sent, _outcome, _passed_over: None)
    hold = Hold(level="us", domain="us-1", nodes=("n1",), victims=("ns/v",), quota_reserved_at=NOW, at=NOW)
    outbox.send([Sent("ns/g", "7", lambda: True, hold=hold)], ordered=False)
    assert outbox.wait(30)
    assert outbox.holds({"ns/g": "7"}) == {"ns/g": hold}
    assert outbox.holds({"ns/g": "8"}) == {}  # the newer copy carries the annotation itself
    assert outbox.holds({"ns/g": "7"}) == {}


class Gate:
    """An API server answer held until the test lets it through."""

    def __init__(self, answer: httpx.Response) -> None:
        self.answer, self.open = answer, threading.Event()
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert self.open.wait(30), "the write was never let through"
        return self.answer


def admission(api: FakeApi) -> tuple[GangAdmission, list[str], Caches]:
    caches = Caches()
    standard(caches)
    caches.put(WORKLOADS, workload("train", 2))
    told: list[str] = []
    in_flight = AdmissionsInFlight()
    in_flight.subscribe(
        Subscriber(lambda _wl: told.append("admitting"), lambda _wl: told.append("withdrawn"))
    )
    adm = GangAdmission(api.client(), caches.model(), clock=lambda: NOW, in_flight=in_flight)
    caches.replay()
    return adm, told, caches


def test_the_pass_does_not_wait_for_its_writes_nor_decides_a_gang_being_written() -> None:
    api = FakeApi()
    held = Gate(httpx.Response(409, json={"kind": "Status", "code": 409, "reason": "Conflict"}))
    handle = api.handle
    api.handle = lambda r: held(r) if r.method == "PATCH" else handle(r)  # type: ignore[method-assign]
    adm, told, _ = admission(api)
    reruns: list[float] = []
    adm.admission.rerun = reruns.append
    adm.admission.run()  # returns with the admission's write held at the API server
    assert told == ["admitting"] and "team-a/train" in adm.model.capacity.assumed
    adm.admission.run()  # charged and in flight: not decided again
    assert told == ["admitting"]
    held.open.set()
    assert adm.admission.outbox.wait(30)
    # refused: its charge given back and withdrawn, and the pass asked to run again at once
    assert "team-a/train" not in adm.model.capacity.assumed
    assert told == ["admitting", "withdrawn"] and reruns == [0.0]
    assert [r.url.path for r in held.requests] == [
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/train/status"
    ]


def test_a_late_refusal_leaves_an_admission_decided_since_on_a_newer_copy() -> None:
    adm, told, _ = admission(FakeApi())
    adm.admission.run()
    assert adm.admission.outbox.wait(30)
    key = "team-a/train"
    current = adm.model.capacity.assumed[key]
    # the answer to a write decided on an older copy arrives only now
    adm.admission._settle_failed_admission(key, "an older resourceVersion", False)
    assert adm.model.capacity.assumed.get(key) == current and told == ["admitting"]
