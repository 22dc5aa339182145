"""What enqueues an admission pass: a pod that leaves its node, at each step of leaving. On a
real node a deleted pod holds its node through its grace period, so the pass its deletion
started finds no room; the one its removal enqueues must run too."""

from __future__ import annotations

from gangplugin.admission.controller import PASS, GangAdmission
from gangplugin.kube.client import PODS, WORKLOADS
from tests.support.caches import NOW, pod, standard, workload
from tests.support.fakeapi import FakeApi


def drained(adm: GangAdmission) -> list[str]:
    keys = []
    while (key := adm.queue.get(timeout=0)) is not None:
        keys.append(key)
        adm.queue.done(key)
    return keys


def test_a_pod_enqueues_a_pass_when_it_starts_leaving_and_again_when_its_node_is_free() -> None:
    caches = standard()
    caches.put(WORKLOADS, workload("running", 1, check="Ready", admitted=True))
    bound = pod("running-0", "running", node="us1-0")
    caches.put(PODS, bound)
    adm = GangAdmission(FakeApi().client(), caches.model(), clock=lambda: NOW)
    caches.replay()
    drained(adm)
    terminating = pod("running-0", "running", node="us1-0")
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    terminating["metadata"]["resourceVersion"] = "2"
    caches.put(PODS, terminating)
    assert PASS in drained(adm)  # it is leaving: preemption and reservations read it so
    caches.delete(PODS, terminating)
    assert PASS in drained(adm)  # its node's capacity is free now


def test_passes_rest_between_them_while_events_keep_coming() -> None:
    """A pass asked for by an event runs once the last one has rested twice as long as it took;
    one asked for while a pass runs, likewise once after it, not at once; after a quiet spell, at
    once."""
    caches = standard()
    caches.put(WORKLOADS, workload("waiting", 1))
    t = [100.0]
    adm = GangAdmission(FakeApi().client(), caches.model(), clock=lambda: NOW, monotonic=lambda: t[0])
    caches.replay()
    drained(adm)
    record = caches.model().record(caches.model().workloads.items()[0])
    asked_meanwhile = [False]

    def a_pass_of_100_ms() -> None:
        t[0] += 0.1
        if asked_meanwhile[0]:
            adm.workload(None, record)

    adm.admission.run = a_pass_of_100_ms  # type: ignore[method-assign, assignment]
    adm.reconcile(PASS)
    adm.workload(None, record)
    assert PASS not in drained(adm)  # resting
    t[0] += 0.2
    assert PASS in drained(adm)
    asked_meanwhile[0] = True
    adm.reconcile(PASS)
    assert PASS not in drained(adm)  # asked while it ran: after the rest
    t[0] += 0.2
    assert PASS in drained(adm)
    asked_meanwhile[0] = False
    adm.reconcile(PASS)
    t[0] += 5.0  # quiet
    adm.workload(None, record)
    assert PASS in drained(adm)
