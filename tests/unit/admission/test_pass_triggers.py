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
