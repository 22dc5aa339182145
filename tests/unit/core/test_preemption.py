"""The victim search (`core.preemption`): Kueue's rules, topology, cost order, and properties
checked against brute force on small clusters (hypothesis)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.preemption import (
    ClusterQueueState,
    Contender,
    QueuePreemption,
    RunningGang,
    find_victims,
    may_preempt,
    without,
)
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, Node, Snapshot, build_snapshot
from tests.support.core import GPU, LEVELS, SETTINGS, gang, ultraservers

LOWER = {"q": ClusterQueueState("q", preemption=QueuePreemption(within_cluster_queue="LowerPriority"))}


def running(key: str, nodes: list[str], priority: int = 0, started: float = 0.0, **kw) -> RunningGang:
    return RunningGang(
        key,
        priority,
        kw.pop("cq", "q"),
        0.0,
        started,
        4 * len(nodes),
        tuple(("ns", f"{key}-{i}") for i in range(len(nodes))),
        **kw,
    )


def cluster(gangs: list[RunningGang], node_names: dict[str, list[str]], nodes: list[Node]) -> Snapshot:
    pods = [
        BoundPod("ns", f"{g.key}-{i}", n, {GPU: 4, "cpu": 1000})
        for g in gangs
        for i, n in enumerate(node_names[g.key])
    ]
    return build_snapshot(nodes, pods, LEVELS)


def fragmented(count: int = 4) -> tuple[Snapshot, list[RunningGang]]:
    """`count` UltraServers of 18 nodes, each holding two 8-node gangs (2 nodes free in each)."""
    nodes = ultraservers(count, 18)
    gangs, where = [], {}
    for u in range(count):
        for k in range(2):
            key = f"low-{u + 1}-{k}"
            names = [f"us{u + 1}-n{i:02d}" for i in range(8 * k, 8 * k + 8)]
            g = running(key, names, priority=10, started=100.0 * u + k)
            gangs.append(g)
            where[key] = names
    return cluster(gangs, where, nodes), gangs


HIGH = Contender("high", 1000, "q", 50.0)


def test_victims_come_from_one_ultraserver_not_one_from_each() -> None:
    snap, gangs = fragmented()
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), HIGH, gangs, LOWER)
    assert plan.preempts
    assert {v.key for v in plan.victims} == {"low-4-0", "low-4-1"}  # the most recently started
    assert plan.domain == "us-4" and plan.level == ULTRASERVER_LABEL
    assert "preempting low-4-0, low-4-1 (64 GPUs)" in plan.reason
    assert "withinClusterQueue: LowerPriority, priority 10 < 1000" in plan.reason


def test_equal_priority_is_protected_and_the_message_says_so() -> None:
    snap, gangs = fragmented()
    equal = Contender("high", 10, "q", 50.0)
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), equal, gangs, LOWER)
    assert not plan.preempts
    assert "8 protected by withinClusterQueue: LowerPriority, priority 10 >= 10" in plan.reason


def test_newer_equal_priority_is_preemptible_when_the_queue_says_so() -> None:
    snap, gangs = fragmented()
    rules = {
        "q": ClusterQueueState(
            "q", preemption=QueuePreemption(within_cluster_queue="LowerOrNewerEqualPriority")
        )
    }
    older = Contender("high", 10, "q", -1.0)  # every running gang is newer
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), older, gangs, rules)
    assert len(plan.victims) == 2


def test_gangs_being_evicted_are_waited_for_not_added_to() -> None:
    snap, gangs = fragmented()
    gangs = [replace(g, evicting=g.key.startswith("low-2")) for g in gangs]
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), HIGH, gangs, LOWER)
    assert not plan.preempts
    assert set(plan.waiting_for) == {"low-2-0", "low-2-1"}


def test_cheapest_domain_wins_over_fewest_gangs() -> None:
    """us-1 frees room by evicting one gang of 12 GPUs, us-2 by two of 4: fewer GPUs wins."""
    nodes = ultraservers(2, 4)
    big = running("big", ["us1-n00", "us1-n01", "us1-n02"], started=1.0)
    small = [running("s1", ["us2-n00"], started=2.0), running("s2", ["us2-n01"], started=3.0)]
    snap = cluster(
        [big, *small], {"big": ["us1-n00", "us1-n01", "us1-n02"], "s1": ["us2-n00"], "s2": ["us2-n01"]}, nodes
    )
    plan = find_victims(
        snap, gang(4, required=ULTRASERVER_LABEL), PlacementPolicy(), HIGH, [big, *small], LOWER
    )
    assert {v.key for v in plan.victims} == {"s1", "s2"}


def test_reclaim_within_cohort_only_from_borrowing_queues() -> None:
    snap, gangs = fragmented(2)
    team_b = [replace(g, cluster_queue="b") for g in gangs]
    rules = {
        "a": ClusterQueueState("a", "org", QueuePreemption(reclaim_within_cohort="Any")),
        "b": ClusterQueueState("b", "org", borrowing=True),
    }
    a = Contender("a-gang", 0, "a", 0.0)
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), a, team_b, rules)
    assert len(plan.victims) == 2 and "reclaimWithinCohort: Any" in plan.reason
    rules["b"] = ClusterQueueState("b", "org", borrowing=False)
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), a, team_b, rules)
    assert not plan.preempts and "does not borrow from the cohort" in plan.reason


def test_borrow_within_cohort_respects_the_threshold() -> None:
    own = ClusterQueueState(
        "a",
        "org",
        QueuePreemption(
            reclaim_within_cohort="Any", borrow_within_cohort="LowerPriority", max_priority_threshold=5
        ),
        borrowing=True,
    )
    rules = {"a": own, "b": ClusterQueueState("b", "org", borrowing=True)}
    p = Contender("x", 100, "a", 0.0)
    assert may_preempt(p, running("v", [], priority=5, cq="b"), rules)[0]
    ok, why = may_preempt(p, running("v", [], priority=6, cq="b"), rules)
    assert not ok and "maxPriorityThreshold 5" in why
    assert not may_preempt(p, running("v", [], priority=1, cq="c"), rules)[0]


def test_default_rules_protect_everyone() -> None:
    snap, gangs = fragmented(1)
    plan = find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), HIGH, gangs, {})
    assert not plan.preempts and "withinClusterQueue: Never" in plan.reason


def test_snapshot_is_given_back_unchanged() -> None:
    snap, gangs = fragmented(2)
    before = [dict(f) for f in snap.free]
    find_victims(snap, gang(16, required=ULTRASERVER_LABEL), PlacementPolicy(), HIGH, gangs, LOWER)
    assert [dict(f) for f in snap.free] == before


# -- properties -------------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    nodes: list[Node] = []
    for u in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 4))):
            name = f"u{u}n{i}"
            labels = {LEVELS[0]: "z", LEVELS[1]: f"us-{u}", LEVELS[2]: name}
            nodes.append(Node(name, labels, {GPU: draw(st.sampled_from([4, 8])), "cpu": 64000, "pods": 110}))
    gangs, where = [], {}
    for k in range(draw(st.integers(0, 6))):
        names = draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=3))
        gpus = draw(st.sampled_from([1, 2, 4]))
        key = f"g{k}"
        gangs.append(
            RunningGang(
                key,
                draw(st.integers(0, 3)),
                "q",
                float(k),
                float(draw(st.integers(0, 5))),
                gpus * len(names),
                tuple(("ns", f"{key}-{i}") for i in range(len(names))),
            )
        )
        where[key] = (names, gpus)
    pods = [
        BoundPod("ns", f"{key}-{i}", n, {GPU: gpus})
        for key, (names, gpus) in where.items()
        for i, n in enumerate(names)
    ]
    snap = build_snapshot(nodes, pods, LEVELS)
    want = Gang(
        (
            PodSet(
                "main",
                draw(st.integers(1, 6)),
                {GPU: draw(st.sampled_from([1, 2, 4]))},
                required_topology=draw(st.sampled_from([None, LEVELS[1], LEVELS[2]])),
            ),
        ),
        "want",
    )
    return snap, gangs, want, Contender("want", draw(st.integers(0, 4)), "q", 2.5)


@SETTINGS
@given(scenarios())
def test_victims_are_allowed_free_a_fitting_domain_and_are_optimal(scenario) -> None:
    snap, gangs, want, preemptor = scenario
    policy = PlacementPolicy()
    if place(snap, want, policy).feasible:
        return  # preemption is asked only for a gang that does not fit
    plan = find_victims(snap, want, policy, preemptor, gangs, LOWER)
    by_key = {g.key: g for g in gangs}
    allowed = [g for g in gangs if may_preempt(preemptor, g, LOWER)[0]]
    for v in plan.victims:
        assert by_key[v.key].priority < preemptor.priority  # never equal or higher
    if plan.preempts:
        with without(snap, [by_key[v.key] for v in plan.victims]):
            assert place(snap, want, policy).feasible
    best = None
    for r in range(len(allowed) + 1):
        for subset in itertools.combinations(allowed, r):
            cost = sum(g.gpus for g in subset)
            if best is not None and cost >= best:
                continue
            with without(snap, list(subset)):
                if place(snap, want, policy).feasible:
                    best = cost
    assert (best is not None) == plan.preempts
    if best is not None:
        assert sum(v.gpus for v in plan.victims) == best
