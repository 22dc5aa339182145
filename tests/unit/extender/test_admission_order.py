"""A Kueue gang is planned only once the gang reservations hold its admission, and the admission
pass writes its admissions in the order it decided them where no reservations run in its process
(those of its process hear of each admission before it is written): so a gang's plan leaves
alone capacity the pass promised an earlier-decided gang.

The soak (seed 5, 30 min) found gb200-us-2 promised 88 GPUs for 72: one pass admitted a 6-pod
gang into us-2 and, after it, a 15-pod gang into the wide network-node-layer-1; the extender
planned the 15 pods (first filter call) before the Workload watch had brought it the first
gang's admission, and put 14 of them in us-2."""

from __future__ import annotations

import threading

import pytest

from gangplugin.admission.outbox import Outbox, Sent
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import UNSEEN_ADMISSION, AdmissionUnseen, GangReservations
from gangplugin.extender.shared import admitted_of, policy_of
from gangplugin.extender.ungater import RETRY_SECONDS, Ungater
from gangplugin.kube.client import Client
from gangplugin.kube.resources import ADMISSION_CHECKS
from gangplugin.readmodel.records import node_record
from tests.support.caches import model_of
from tests.support.extender import US1, add, passed, pod, reservations, ungate_pod, workload
from tests.support.objects import admission_check, gang_policy, node


def extender_pod(name: str) -> dict[str, object]:
    raw = pod(name, "train", 3)
    raw["metadata"]["labels"]["gangplugin.io/bind-mode"] = "Extender"  # stamped by the check
    return raw


def test_a_kueue_gang_is_not_planned_before_its_admission_reaches_the_reservations() -> None:
    res = reservations(US1)
    members = [extender_pod(f"p{i}") for i in range(3)]
    add(res, *members)
    with pytest.raises(AdmissionUnseen, match="has not reached the gang reservations"):
        res.filter(gang_pod_from_k8s(members[0]), US1, now=0.0)
    assert not res.plans  # nothing reserved for it
    res.on_workload("ADDED", None, workload())
    _, plan = res.filter(gang_pod_from_k8s(members[0]), US1, now=0.0)
    assert plan is not None and plan.feasible


def test_the_ungater_does_not_pin_a_gang_before_its_admission_reaches_the_reservations() -> None:
    res = reservations(US1)
    add(res, *(ungate_pod(f"p{i}", "train", 3) for i in range(3)))
    assert res.pins(("ns", "train"), now=0.0) == ([], UNSEEN_ADMISSION)
    res.on_workload("ADDED", None, workload())
    pins, why = res.pins(("ns", "train"), now=0.0)
    assert len(pins) == 3, why


def test_the_ungater_looks_again_at_once_when_the_admission_it_waited_for_reaches_the_watch() -> None:
    res = reservations(US1)
    add(res, *(ungate_pod(f"p{i}", "train", 3) for i in range(3)))
    ungater = Ungater(Client("https://api.test", False), res, clock=lambda: 0.0, workers=1)
    try:
        assert ungater.reconcile("ns/train") == RETRY_SECONDS  # its admission not seen yet
        other = {**workload(), "metadata": {"name": "other", "namespace": "ns"}}
        ungater.on_workload("ADDED", None, other)  # another gang's Workload: not looked at
        assert ungater.queue.get(timeout=0) is None
        res.on_workload("ADDED", None, workload())
        ungater.on_workload("ADDED", None, workload())
        assert ungater.queue.get(timeout=0) == "ns/train"
    finally:
        ungater.patcher.shutdown()


def test_a_plain_pod_gang_needs_no_admission() -> None:
    res = reservations(US1)
    members = [pod(f"q{i}", "plain-gang", 2) for i in range(2)]  # no bind-mode label: not Kueue's
    add(res, *members)
    _, plan = res.filter(gang_pod_from_k8s(members[0]), US1, now=0.0)
    assert plan is not None and plan.feasible
    assert len(passed(res, US1)) == 2


def test_without_reservations_in_this_process_admissions_are_written_in_decision_order() -> None:
    """Admissions in order, each after the one before it ended, across passes; the other writes
    beside them (the first admission waits for one of them: written one by one, this would
    never end)."""
    done: list[str] = []
    other_ran = threading.Event()
    ended = threading.Semaphore(0)

    def admit(name: str, wait: threading.Event | None = None, after: str | None = None) -> bool:
        if wait is not None:
            assert wait.wait(30), "the other writes did not run beside the admissions"
        assert after is None or after in done, f"{name} written before {after} was"
        done.append(name)
        return True

    def other() -> bool:
        other_ran.set()
        return True

    outbox = Outbox(lambda _sent, _outcome, _passed_over: ended.release())
    first = [Sent("a", "1", lambda: admit("a", other_ran), admission=True), Sent("o", "1", other)]
    outbox.send(first, ordered=True)
    outbox.send([Sent("b", "1", lambda: admit("b", after="a"), admission=True)], ordered=True)  # next pass
    for _ in range(3):
        assert ended.acquire(timeout=30)
    assert done == ["a", "b"]


def test_a_workload_listed_before_its_admission_check_is_promised_once_the_check_is_here() -> None:
    """After a restart the watches list in any order: the Workload of an admitted gang that
    arrives before its AdmissionCheck is promised nothing then; the check's arrival reads it
    again (`recheck`), so the gang is not left waiting for its admission for good."""
    caches, model = model_of(workloads=[workload()], policies=[gang_policy("p")])
    res = GangReservations(policy_of=policy_of(model), admitted_of=admitted_of(model))
    for name in US1:
        res.on_node("ADDED", None, node_record(node(name, "us-1")))
    add(res, *(ungate_pod(f"p{i}", "train", 3) for i in range(3)))
    res.on_workload("ADDED", None, workload())  # before the AdmissionCheck: not ours yet
    assert res.pins(("ns", "train"), now=0.0) == ([], UNSEEN_ADMISSION)
    caches.put(ADMISSION_CHECKS, admission_check("gang", policy="p"))
    res.recheck([workload()])
    pins, why = res.pins(("ns", "train"), now=0.0)
    assert len(pins) == 3, why
