"""The cache remembers nodes kube-scheduler refused for a gang member and plans without them,
so a node the scheduler considers full (a Terminating pod it still counts) cannot make the
gang be planned onto it again and again."""

from __future__ import annotations

from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.readmodel.records import node_record
from tests.support.extender import pod
from tests.support.objects import node


def cache_of(*nodes: tuple[str, str]) -> GangReservations:
    cache = GangReservations(reject_ttl=30.0)
    for name, us in nodes:
        cache.on_node("ADDED", None, node_record(node(name, us)))
    return cache


def test_refused_node_is_avoided_and_the_gang_binds_elsewhere():
    cache = cache_of(("a0", "us-1"), ("a1", "us-1"), ("b0", "us-2"), ("b1", "us-2"))
    p0, p1 = (gang_pod_from_k8s(pod(f"g{i}", "g", 2)) for i in range(2))
    cache.on_pod("ADDED", None, p1)
    verdict, plan = cache.filter(p0, ["a0", "a1", "b0", "b1"], now=0.0)
    assert plan is not None and len(verdict.passed) == 1
    refused = verdict.passed[0]
    cache.drop(("ns", "g"))  # as if the first plan had timed out at the barrier
    candidates = [n for n in ["a0", "a1", "b0", "b1"] if n != refused]
    # kube-scheduler leaves `refused` out: the gang is planned again at once without it
    verdict, plan = cache.filter(p0, candidates, now=1.0)
    assert plan is not None and plan.feasible and not verdict.replan
    assert refused not in {sl.node for sl in plan.slots}
    assert verdict.passed and verdict.passed[0] != refused
    for _ in range(3):  # later calls keep the plan: no livelock
        again, made = cache.filter(p1, candidates, now=2.0)
        assert made is None and again.passed and again.passed[0] != refused
    assert cache.rejected  # remembered for the pod's shape


def test_gang_that_cannot_fit_without_the_refused_node_gets_the_reason():
    cache = cache_of(("a0", "us-1"), ("a1", "us-1"))
    p0 = gang_pod_from_k8s(pod("g0", "g", 2))
    verdict, plan = cache.filter(p0, ["a1"], now=0.0)  # a0 planned, refused, planned without
    assert plan is not None and not plan.feasible and not verdict.replan
    assert "rejected by kube-scheduler" in plan.reason
    assert verdict.failed == {"a1": plan.reason}
    verdict, made = cache.filter(p0, ["a1"], now=1.0)  # same answer, no plan in between
    assert made is not None and not made.feasible and not verdict.replan


def test_refusal_is_forgotten_on_expiry_node_change_freed_pod_or_offer():
    cache = cache_of(("a0", "us-1"), ("a1", "us-1"))
    p0 = gang_pod_from_k8s(pod("g0", "g", 2))
    cache.filter(p0, ["a1"], now=0.0)
    assert set(cache.rejected[p0.shape]) == {"a0"}
    # the Terminating pod that filled a0 goes away: a0 is planned again
    stuck = gang_pod_from_k8s(pod("old", node_name="a0"))
    cache.on_pod("ADDED", None, stuck)
    cache.on_pod("DELETED", stuck, None)
    assert not cache.rejected
    verdict, plan = cache.filter(p0, ["a0", "a1"], now=1.0)
    assert plan is not None and plan.feasible and verdict.passed
    cache.drop(("ns", "g"))
    cache.filter(p0, ["a1"], now=2.0)
    assert cache.rejected
    changed = node("a0", "us-1")
    changed["metadata"]["labels"]["extra"] = "x"
    cache.on_node("MODIFIED", node_record(node("a0", "us-1")), node_record(changed))
    assert not cache.rejected
    cache.filter(p0, ["a1"], now=3.0)
    # a heartbeat changes nothing the plan reads
    cache.on_node("MODIFIED", node_record(changed), node_record(changed))
    assert cache.rejected
    cache.drop(("ns", "g"))
    _, plan = cache.filter(p0, ["a0", "a1"], now=4.0)  # offered again: forgiven
    assert plan is not None and plan.feasible and not cache.rejected
    cache.drop(("ns", "g"))
    cache.filter(p0, ["a1"], now=5.0)
    assert cache._rejected_for(p0, [], now=5.0 + 29.0)
    assert cache._rejected_for(p0, [], now=5.0 + 30.0) == {} and not cache.rejected  # expired
