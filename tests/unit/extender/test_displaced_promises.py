"""A gang admitted into one UltraServer is planned there even where the reservations placed
another gang's promise on the room the check counted for it: that gang was admitted into a wider
domain (a network layer), the check counted it elsewhere in it, and its promise is placed again
there. The 500-node bench left 2-5 admitted gangs a burst gated this way, their UltraServer full
of another gang's slice."""

from __future__ import annotations

from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.shared import admitted_of, policy_of
from gangplugin.readmodel.records import node_record
from tests.support import objects
from tests.support.caches import model_of
from tests.support.extender import add, ungate_pod

LAYER = "topology.k8s.aws/network-node-layer-3"


def _admitted(name: str, count: int, domain: dict[str, str], rv: int) -> dict:
    return objects.admitted_by_check(
        name,
        "ns",
        objects.podset(count),
        objects.check_state("gang", "Ready", pinned=domain),
        resourceVersion=str(rv),
    )


def _pods(gang: str, count: int, domain: dict[str, str]) -> list[dict]:
    """The gang's pods as its Job makes them once admitted: the check's domain in their nodeSelector."""
    pods = [ungate_pod(f"{gang}-{i}", gang, count) for i in range(count)]
    for p in pods:
        p["spec"]["nodeSelector"] = dict(domain)
    return pods


def _layer_of_two_ultraservers(*workloads: dict) -> GangReservations:
    checks, policies = [objects.admission_check("gang", policy="p")], [objects.gang_policy("p")]
    _, model = model_of(workloads=list(workloads), checks=checks, policies=policies)
    res = GangReservations(policy_of=policy_of(model), admitted_of=admitted_of(model))
    for us in ("us-1", "us-2"):
        for i in range(2):
            res.on_node("ADDED", None, node_record(objects.node(f"{us}-{i}", us, labels={LAYER: "l1"})))
    return res


def test_a_wide_gang_s_promise_moves_for_a_gang_admitted_into_the_ultraserver_it_sat_on() -> None:
    wide = _admitted("wide", 2, {LAYER: "l1"}, 1)
    narrow = _admitted("narrow", 2, {ULTRASERVER_LABEL: "us-1"}, 2)
    res = _layer_of_two_ultraservers(wide, narrow)
    res.on_workload("ADDED", None, wide)
    res._settle()
    on_us1 = {n for n in ("us-1-0", "us-1-1") if ("ns", "wide") in res.promises.on(n)}
    assert on_us1 == {"us-1-0", "us-1-1"}, "the wide gang's promise must sit on us-1 for this test"
    res.on_workload("ADDED", None, narrow)
    add(res, *_pods("narrow", 2, {ULTRASERVER_LABEL: "us-1"}))

    pins, why = res.pins(("ns", "narrow"), now=0.0)

    assert sorted(node for _, node in pins) == ["us-1-0", "us-1-1"], why
    assert not res.promises.short()  # the wide gang's promise still fits whole
    assert {g for n in ("us-2-0", "us-2-1") for g in res.promises.on(n)} == {("ns", "wide")}


def test_promises_that_cannot_move_are_left_where_they_were() -> None:
    """Two gangs admitted into the same UltraServer for more than it holds (the check never
    does this; a view of it behind): nothing is displaced, the later one waits."""
    first = _admitted("first", 2, {ULTRASERVER_LABEL: "us-1"}, 1)
    second = _admitted("second", 2, {ULTRASERVER_LABEL: "us-1"}, 2)
    res = _layer_of_two_ultraservers(first, second)
    res.on_workload("ADDED", None, first)
    res._settle()
    res.on_workload("ADDED", None, second)
    res._settle()
    assert res.promises.short() == {("ns", "second")}
    held = {n: res.promises.on(n) for n in ("us-1-0", "us-1-1")}
    add(res, *_pods("second", 2, {ULTRASERVER_LABEL: "us-1"}))

    pins, why = res.pins(("ns", "second"), now=0.0)

    assert pins == [] and "cannot be placed whole" in why
    res._settle()
    assert {n: res.promises.on(n) for n in ("us-1-0", "us-1-1")} == held
    assert not res.plans


def test_admissions_seen_together_are_promised_the_ultraserver_ones_first() -> None:
    wide = _admitted("a-wide", 2, {LAYER: "l1"}, 1)  # first by name: the order alone would place it first
    narrow = _admitted("narrow", 2, {ULTRASERVER_LABEL: "us-1"}, 2)
    res = _layer_of_two_ultraservers(wide, narrow)
    res.on_workload("ADDED", None, wide)
    res.on_workload("ADDED", None, narrow)
    res._settle()
    assert not res.promises.short()
    assert {g for n in ("us-1-0", "us-1-1") for g in res.promises.on(n)} == {("ns", "narrow")}
