"""The extender's pure decisions (core/gangplan.py) over plain data."""

from __future__ import annotations

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import (
    GangPlan,
    GangPod,
    SlotPicker,
    assign,
    barrier_open,
    filter_gang_pod,
    filter_single_pod,
    plan_gang,
    scores,
)
from gangplugin.core.placement import PlacementPolicy
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, Node, build_snapshot
from tests.support.core import GPU, LEVELS, ultraservers

REQ = {GPU: 4, "cpu": 1000}


def member(i: int, size: int, gang: str = "g", node: str | None = None, **kw) -> GangPod:
    return GangPod("ns", f"{gang}-{i}", f"uid-{gang}-{i}", gang, size, node, REQ, **kw)


def snap(us: int = 4, size: int = 18):
    return build_snapshot(ultraservers(us, size), levels=LEVELS)


def test_sixteen_pods_required_ultraserver_land_in_one_ultraserver():
    s = snap()
    pods = [member(i, 16, required_topology=ULTRASERVER_LABEL) for i in range(16)]
    plan = plan_gang(s, pods[0], pods)
    assert plan.feasible
    assert plan.level == ULTRASERVER_LABEL and len(plan.domains) == 1
    assert len(plan.slots) == 16
    assert {s.node(sl.node).labels[ULTRASERVER_LABEL] for sl in plan.slots} == set(plan.domains)  # type: ignore[union-attr]
    assert len({sl.node for sl in plan.slots}) == 16  # 4 GPUs a node: one pod each


def test_twenty_pods_required_ultraserver_cannot_fit_eighteen_node_ultraservers():
    s = snap()
    pods = [member(i, 20, required_topology=ULTRASERVER_LABEL) for i in range(20)]
    plan = plan_gang(s, pods[0], pods)
    assert not plan.feasible and plan.slots == ()
    assert "cannot be placed whole" in plan.reason and ULTRASERVER_LABEL in plan.reason
    assert "room for 18" in plan.reason
    names = sorted(s.node_ids)
    verdict = filter_gang_pod(plan, names, None)
    assert verdict.passed == ()
    assert set(verdict.failed) == set(names) and set(verdict.failed.values()) == {plan.reason}


def test_members_created_later_are_planned_like_the_first():
    s = snap()
    first = member(0, 12)
    plan = plan_gang(s, first, [first])
    assert plan.feasible and len(plan.slots) == 12


def test_gang_size_disagreement_names_the_field():
    s = snap()
    a, b = member(0, 16), member(1, 8)
    with pytest.raises(InputError) as err:
        plan_gang(s, a, [a, b])
    assert "gangplugin.io/gang-size" in str(err.value) and "disagrees" in str(err.value)


def test_unusable_pod_is_refused_with_its_error():
    bad = GangPod(
        "ns", "bad", error="metadata.annotations.gangplugin.io/gang-size: 'x' is not a whole number"
    )
    with pytest.raises(InputError, match="not a whole number"):
        plan_gang(snap(), bad, [bad])


def ten_of_sixteen_bound_in_us2(nodes: list[Node]) -> tuple[list[GangPod], GangPlan]:
    """A 16-pod gang required in one UltraServer, 10 of its pods bound in us-2: those pods, and
    the plan for its first pending one."""
    bound = [member(i, 16, node=f"us2-n{i:02d}", required_topology=ULTRASERVER_LABEL) for i in range(10)]
    pending = [member(i, 16, required_topology=ULTRASERVER_LABEL) for i in range(10, 16)]
    s = build_snapshot(nodes, [BoundPod("ns", p.name, p.node or "", REQ) for p in bound], LEVELS)
    return bound, plan_gang(s, pending[0], bound + pending)


def test_partial_gang_is_completed_in_the_domain_of_its_bound_pods():
    _, plan = ten_of_sixteen_bound_in_us2(ultraservers(2, 18))
    assert plan.feasible and plan.domains == ("us-2",)
    assert len(plan.slots) == 6 and all(sl.node.startswith("us2-") for sl in plan.slots)


def test_partial_gang_that_cannot_complete_names_its_bound_pods_to_abandon():
    bound, plan = ten_of_sixteen_bound_in_us2(ultraservers(2, 12))
    assert not plan.feasible
    assert plan.abandon == tuple(sorted(p.key for p in bound))
    assert "next to its 10 bound pod(s) in topology.k8s.aws/ultraserver-id us-2" in plan.reason


def test_assign_gives_each_member_its_own_slot_and_keeps_it():
    s = snap()
    pods = [member(i, 3) for i in range(4)]
    plan = plan_gang(s, pods[0], pods[:3])
    claims: dict = {}
    for p in pods[:3]:
        slot = assign(plan, p, claims)
        assert slot is not None
        claims[p.key] = slot
    assert sorted(claims.values()) == [0, 1, 2]
    assert assign(plan, pods[1], claims) == claims[pods[1].key]
    assert assign(plan, pods[3], claims) is None


def test_one_picker_for_a_gang_gives_what_assign_gives_one_pod_at_a_time():
    """The ungater's pins pick every member's slot with one index (linear in the gang); the
    filter's `assign` picks one: the same slots, in any arrival order, with or without pod
    indexes, members the plan has no slot for left out."""
    s = snap(us=8)
    pods = [member(i, 100, index=i if i % 3 else None) for i in range(104)]  # 4 too many
    plan = plan_gang(s, pods[0], pods[:100])
    one_by_one: dict = {}
    for p in reversed(pods):
        slot = assign(plan, p, one_by_one)
        if slot is not None:
            one_by_one[p.key] = slot
    picked: dict = {}
    picker = SlotPicker(plan, picked)
    for p in reversed(pods):
        slot = picker.pick(p)
        if slot is not None:
            picked[p.key] = slot
    assert picked == one_by_one and len(set(picked.values())) == len(plan.slots) == 100
    assert SlotPicker(plan, picked).pick(pods[5]) == picked[pods[5].key]  # a held slot is kept


def test_member_passes_only_its_planned_node_and_no_reasons_are_sent():
    s = build_snapshot(ultraservers(2, 4), levels=LEVELS)
    s.bind(BoundPod("other", "x", "us1-n00", {GPU: 4}))
    pods = [member(i, 2, required_topology=ULTRASERVER_LABEL) for i in range(2)]
    plan = plan_gang(s, pods[0], pods, PlacementPolicy(spares_per_ultraserver=1))
    assert plan.feasible and plan.domains == ("us-1",)  # best fit: us-1 has one node busy
    assert "us1-n03" not in {sl.node for sl in plan.slots}  # us-1's spare
    target = plan.slots[0].node
    verdict = filter_gang_pod(plan, [*sorted(s.node_ids), "gone"], target)
    assert verdict.passed == (target,) and verdict.failed == {}


def test_every_node_gets_the_plans_reason_when_the_gang_cannot_be_placed():
    s = build_snapshot(ultraservers(2, 4), levels=LEVELS)
    pods = [member(i, 5, required_topology=ULTRASERVER_LABEL) for i in range(5)]
    plan = plan_gang(s, pods[0], pods)
    verdict = filter_gang_pod(plan, sorted(s.node_ids), None)
    assert verdict.passed == () and set(verdict.failed) == set(s.node_ids)
    assert set(verdict.failed.values()) == {plan.reason} and "room for 4" in plan.reason


def test_filter_asks_for_a_new_plan_when_the_scheduler_refused_the_planned_node():
    s = snap()
    pods = [member(i, 2) for i in range(2)]
    plan = plan_gang(s, pods[0], pods)
    verdict = filter_gang_pod(plan, ["us4-n00"], plan.slots[0].node)
    assert verdict.replan and verdict.passed == ()
    assert "rejected by the scheduler" in verdict.failed["us4-n00"]


def test_replan_avoids_the_node_the_scheduler_rejected():
    s = build_snapshot(ultraservers(2, 4), levels=LEVELS)
    pods = [member(i, 4, required_topology=ULTRASERVER_LABEL) for i in range(4)]
    plan = plan_gang(s, pods[0], pods)
    assert plan.feasible and plan.domains == ("us-1",)
    target = plan.slots[0].node
    # kube-scheduler counts a Terminating pod on `target`: it leaves the node out
    candidates = [n for n in sorted(s.node_ids) if n != target]
    verdict = filter_gang_pod(plan, candidates, target)
    assert verdict.replan and verdict.rejected == (target,)
    again = plan_gang(s, pods[0], pods, rejected={pods[0].shape: verdict.rejected})
    assert again.feasible and again.domains == ("us-2",)  # whole, in the UltraServer without it
    assert target not in {sl.node for sl in again.slots} and len(again.slots) == 4
    slot = assign(again, pods[0], {})
    assert slot is not None
    assert filter_gang_pod(again, candidates, again.slots[slot].node).passed == (again.slots[slot].node,)
    # the refusal counts only for the shape kube-scheduler judged
    other = GangPod("ns", "o-0", "uid-o", "o", 4, None, {GPU: 2}, required_topology=ULTRASERVER_LABEL)
    assert plan_gang(s, other, [other], rejected={pods[0].shape: verdict.rejected}).domains == ("us-1",)


def test_gang_that_needs_the_rejected_node_gets_the_plans_reason_not_a_replan():
    s = build_snapshot(ultraservers(1, 2), levels=LEVELS)
    pods = [member(i, 2, required_topology=ULTRASERVER_LABEL) for i in range(2)]
    plan = plan_gang(s, pods[0], pods)
    assert plan.feasible
    verdict = filter_gang_pod(plan, ["us1-n01"], "us1-n00")
    assert verdict.replan and verdict.rejected == ("us1-n00",)
    again = plan_gang(s, pods[0], pods, rejected={pods[0].shape: ["us1-n00"]})
    assert not again.feasible and again.slots == ()  # never half placed
    assert "room for 1" in again.reason and "1 rejected by kube-scheduler" in again.reason
    final = filter_gang_pod(again, ["us1-n01"], None)
    assert not final.replan and final.passed == () and final.failed == {"us1-n01": again.reason}


def test_single_pod_avoids_capacity_reserved_for_a_gang():
    s = build_snapshot(ultraservers(1, 2), levels=LEVELS)
    s.bind(BoundPod("ns", "\0reserved:g#0", "us1-n00", REQ))
    pod = GangPod("ns", "solo", requests=REQ)
    verdict = filter_single_pod(s, pod, ["us1-n00", "us1-n01"], {"us1-n00"})
    assert verdict.passed == ("us1-n01",)
    assert verdict.failed["us1-n00"].startswith("too little free capacity")
    # kube-scheduler checked real usage already: unreserved nodes are not judged again
    assert filter_single_pod(s, pod, ["us1-n00"], set()).passed == ("us1-n00",)


def test_scores_planned_node_and_best_fit():
    s = build_snapshot(ultraservers(2, 2), levels=LEVELS)
    s.bind(BoundPod("ns", "half", "us2-n00", {GPU: 2}))
    pod = GangPod("ns", "solo", requests={GPU: 2})
    scored = dict(scores(s, pod, sorted(s.node_ids), None))
    assert scored["us2-n00"] == 10  # least room left over
    assert scored["us2-n01"] > scored["us1-n00"]  # shares the UltraServer with the best node
    assert dict(scores(s, pod, ["us1-n00", "us1-n01"], "us1-n01")) == {"us1-n00": 0, "us1-n01": 10}


def test_barrier_opens_when_bound_and_arrived_members_cover_the_gang():
    assert not barrier_open(4, [("ns", "a")], [("ns", "b"), ("ns", "c")])
    assert barrier_open(4, [("ns", "a")], [("ns", "b"), ("ns", "c"), ("ns", "d")])
    assert not barrier_open(3, [("ns", "a")], [("ns", "a"), ("ns", "b")])  # counted once
