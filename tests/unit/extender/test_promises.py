"""Capacity the gang check promised an admitted gang is held in the gang reservations from the
moment of admission: the extender's filter keeps plain pods off it before the gang's pods exist
(issue 21's Ungate race: plain pods created as Kueue admitted a gang took nodes the gang was
then pinned to), other gangs' plans leave it alone, and the gang's own plan takes it over."""

from __future__ import annotations

from typing import Any

from gangplugin.admission.writes import as_admitted
from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.shared import admitted_of, policy_of
from gangplugin.kube.client import JSON
from gangplugin.readmodel.records import node_record
from tests.support.caches import model_of
from tests.support.extender import US1, add, passed, pod, reservations, ungate_pod, workload
from tests.support.objects import admission_check, node

US2 = [f"us-2-{i}" for i in range(4)]


def test_a_plain_pod_is_kept_off_capacity_promised_at_admission_before_the_gangs_pods_exist() -> None:
    res = reservations(US1)
    res.on_workload("ADDED", None, workload("Pending"))
    assert passed(res, US1) == tuple(US1)  # not admitted yet: nothing promised
    res.on_workload("MODIFIED", workload("Pending"), workload("Ready"))
    free = passed(res, US1)
    assert len(free) == 1  # three of the four nodes are the gang's from its admission on
    assert set(res.promises.nodes()) == set(US1) - set(free)


def test_the_gang_is_pinned_on_its_promised_capacity_and_plain_pods_stay_off_it_until_bound() -> None:
    res = reservations(US1)
    res.on_workload("ADDED", None, workload())
    (free,) = passed(res, US1)
    add(res, {**pod("plain"), "spec": {**pod("plain")["spec"], "nodeName": free}})  # it binds there
    members = [ungate_pod(f"p{i}", "train", 3) for i in range(3)]
    add(res, *members)  # the Job made the gang's pods, behind the placement gate
    pins, why = res.pins(("ns", "train"), now=0.0)
    assert sorted(n for _, n in pins) == sorted(set(US1) - {free}), why
    other = [n for n in US1 if n != free]
    assert passed(res, other) == ()  # the plan's placeholders hold them now
    for p, n in pins:  # the pins come back through the watch
        res.on_pod("MODIFIED", p, gang_pod_from_k8s(ungate_pod(p.name, "train", 3, pinned=n)))
    assert passed(res, other) == ()  # pinned, not bound yet: held for them
    assert not res.plans and not list(res.promises.nodes())  # the pins hold the nodes, nothing else


def test_a_promise_shrinks_as_the_gangs_pods_bind_and_ends_with_its_admission() -> None:
    res = reservations(US1)
    res.on_workload("ADDED", None, workload())
    add(res, pod("p0", "train", 3, node_name="us-1-0"))  # one member bound already
    offered = US1[1:]  # kube-scheduler offers the nodes with room
    assert len(passed(res, offered)) == 1  # two still promised
    res.on_workload("MODIFIED", workload(), workload("Retry"))  # requeued: nothing held any more
    assert passed(res, offered) == tuple(offered)
    res.on_workload("MODIFIED", workload("Retry"), workload())
    assert len(passed(res, offered)) == 1
    res.on_workload("DELETED", workload(), None)
    assert passed(res, offered) == tuple(offered)


def test_a_promise_made_before_its_nodes_were_seen_is_made_once_they_arrive() -> None:
    res = reservations()  # the Workload watch listed before the node watch
    res.on_workload("ADDED", None, workload())
    assert passed(res, []) == ()
    for name in US1:
        res.on_node("ADDED", None, node_record(node(name, "us-1")))
    assert len(passed(res, US1)) == 1


def test_another_gangs_plan_leaves_promised_capacity_alone() -> None:
    res = reservations(US1, US2)
    res.on_workload("ADDED", None, workload())
    raw = [pod(f"q{i}", "other", 2) for i in range(2)]
    for r in raw:
        r["metadata"]["annotations"]["gangplugin.io/required-topology"] = ULTRASERVER_LABEL
    add(res, *raw)
    _, plan = res.filter(gang_pod_from_k8s(raw[0]), US1 + US2, now=0.0)
    # us-1 and us-2 are equally free by real usage; us-1 holds the admitted gang's promise
    assert plan is not None and plan.feasible and plan.domains == ("us-2",), plan


def test_a_dropped_plan_gives_the_gang_its_promise_back() -> None:
    res = reservations(US1)
    res.on_workload("ADDED", None, workload())
    members = [pod(f"p{i}", "train", 3) for i in range(3)]  # bindMode Extender: through filter
    add(res, *members)
    _, plan = res.filter(gang_pod_from_k8s(members[0]), US1, now=0.0)
    assert plan is not None and plan.feasible  # planned on its own promise
    assert not list(res.promises.nodes()) and len(passed(res, US1)) == 1  # the plan holds them
    with res.lock:
        res.drop(("ns", "train"))  # the barrier timed out
    assert len(passed(res, US1)) == 1 and len(list(res.promises.nodes())) == 3


def test_a_promise_short_of_room_is_made_whole_once_pods_leave_its_domain() -> None:
    # Admitted by preemption: the victims' pods still hold two of the domain's nodes.
    res = reservations(US1)
    victims = [pod(f"v{i}", node_name=f"us-1-{i}") for i in range(2)]
    add(res, *victims)
    res.on_workload("ADDED", None, workload())
    assert passed(res, US1[2:]) == tuple(US1[2:])  # three pods do not fit in two nodes: none promised
    for v in victims:
        res.on_pod("DELETED", gang_pod_from_k8s(v), None)
    assert len(passed(res, US1)) == 1  # room came free: the whole promise stands


def test_the_pods_of_an_admitted_gang_coming_one_by_one_do_not_place_its_promise_again() -> None:
    res = reservations(US1)
    res.on_workload("ADDED", None, workload())
    passed(res, US1)
    before = res.promises._charged[("ns", "train")]
    for i in range(3):  # gated: they hold no node, so what is promised stays as it was
        add(res, ungate_pod(f"p{i}", "train", 3))
        passed(res, US1)
    assert res.promises._charged[("ns", "train")] is before


def revision(wl: JSON, rv: int) -> JSON:
    return {**wl, "metadata": {**wl["metadata"], "resourceVersion": str(rv)}}


def test_an_admission_announced_before_its_write_is_promised_until_the_watch_shows_newer() -> None:
    """The admission pass of this process announces an admission before writing it; the
    Workload watch, behind the write, still delivers the version the pass decided on (Pending):
    that version does not take the promise back, the written one (newer) confirms it."""
    res = reservations(US1)
    decided_on = revision(workload("Pending"), 7)
    res.on_workload("ADDED", None, decided_on)
    res.on_admitting(
        as_admitted(decided_on, "gang", workload("Ready")["status"]["admissionChecks"][0]["podSetUpdates"])
    )
    assert len(passed(res, US1)) == 1  # promised from the announcement on
    res.on_workload("MODIFIED", None, decided_on)  # the watch, late, with the decided-on version
    assert len(passed(res, US1)) == 1
    res.on_workload("MODIFIED", decided_on, revision(workload("Ready"), 8))  # the write itself
    assert len(passed(res, US1)) == 1 and not res.announced
    res.on_withdrawn(decided_on)  # too late to matter: the watch has shown the admission
    assert len(passed(res, US1)) == 1


def test_an_announced_admission_not_written_is_withdrawn_or_overtaken() -> None:
    res = reservations(US1)
    decided_on = revision(workload("Pending"), 7)
    updates = workload("Ready")["status"]["admissionChecks"][0]["podSetUpdates"]
    res.on_admitting(as_admitted(decided_on, "gang", updates))
    res.on_withdrawn(decided_on)  # the write was refused
    assert passed(res, US1) == tuple(US1)
    res.on_admitting(as_admitted(decided_on, "gang", updates))
    res.on_workload("MODIFIED", None, revision(workload("Pending"), 9))  # changed by another writer
    assert passed(res, US1) == tuple(US1) and not res.announced


def test_an_admitted_workload_whose_gang_policy_is_gone_is_logged_once_not_on_every_recheck(
    caplog: Any,
) -> None:
    """Every AdmissionCheck, GangPolicy and ResourceFlavor event reads every Workload again; one
    GangPolicy deleted under an admitted Workload was logged 470 times in a test session."""
    ac = admission_check("gang", policy="gone")
    _, model = model_of(workloads=[workload()], checks=[ac])
    res = GangReservations(policy_of=policy_of(model), admitted_of=admitted_of(model))
    other = {**workload(), "metadata": {**workload()["metadata"], "name": "other"}}
    with caplog.at_level("WARNING", logger="gangplugin.extender.shared"):
        for _ in range(5):
            res.recheck([workload(), other])
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said  # once for each Workload
    assert all("GangPolicy 'gone' does not exist" in m for m in said), said
    assert not list(res.promises.nodes())  # and nothing is promised
    caplog.clear()
    res.on_workload("MODIFIED", workload(), workload("Retry"))  # requeued, then admitted again
    res.on_workload("MODIFIED", workload("Retry"), workload())
    assert len(caplog.records) == 1  # a new admission with the same error is worth saying again
