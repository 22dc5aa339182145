"""The victim search with its shared index (`core.preemption.VictimIndex`) decides exactly as the
straightforward search it replaced: every search walking every node and reading every running
gang's pods. Checked on random small clusters (hypothesis), also with one index reused across
searches while the snapshot changes under it as an admission pass changes it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gangplugin.core.admission import charge
from gangplugin.core.eligibility import Taint
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, eligible_nodes, gang_levels, place
from gangplugin.core.preemption import (
    ACCELERATORS,
    ClusterQueueState,
    Contender,
    QueuePreemption,
    RunningGang,
    VictimIndex,
    _candidate_sets,
    _set_key,
    _usage,
    find_victims,
    gang_gpus,
    may_preempt,
)
from gangplugin.core.topology import BoundPod, Node, Snapshot, build_snapshot
from gangplugin.core.victim_search import DomainFit, least_gpus, search
from tests.support.core import GPU, LEVELS, SETTINGS

QUEUES = {
    "q": ClusterQueueState("q", preemption=QueuePreemption(within_cluster_queue="LowerOrNewerEqualPriority"))
}


def reference_sets(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, req: int | None, allowed: list[RunningGang]
) -> list[tuple[list[RunningGang], int]]:
    """The search as it was before the index, written plainly: per search, every domain of the
    level with its eligible nodes, every allowed gang's pods read from the snapshot."""
    domains = snapshot.domains
    level = [0] if req is None else [d for d in snapshot.by_level[req] if domains[d].value is not None]
    eligible = [set(e) for e in eligible_nodes(snapshot, gang, policy)]
    nodes = {d: [[n for n in snapshot.subtree_nodes(d) if n in e] for e in eligible] for d in level}
    domain = {n: d for d in level for n in snapshot.subtree_nodes(d)}
    asked = [r for r in ACCELERATORS if any(ps.requests.get(r) for ps in gang.podsets)]
    free_gpus: dict[int, int] = {}
    for d, per_podset in nodes.items():
        union = set().union(*per_podset)
        free_gpus[d] = sum(max(0, snapshot.free[n].get(r, 0)) for n in union for r in asked)
    usage = {g.key: _usage(snapshot, g) for g in allowed}
    gangs_in: dict[int, list[tuple[RunningGang, int]]] = {}
    for g in sorted(allowed, key=lambda g: (g.gpus, g.priority, -g.started_at, g.key)):
        inside: dict[int, int] = {}
        for n, requests in usage[g.key]:
            if (d := domain.get(n)) is not None:
                inside[d] = inside.get(d, 0) + sum(requests.get(r, 0) for r in ACCELERATORS)
        for d, gpus in inside.items():
            gangs_in.setdefault(d, []).append((g, gpus))
    wanted = gang_gpus(gang)
    least = {
        d: least_gpus([g.gpus for g, _ in here], [n for _, n in here], wanted - free_gpus.get(d, 0))
        for d, here in gangs_in.items()
    }
    bound = [1 << 62]
    found: list[tuple[tuple[object, ...], list[RunningGang], int]] = []
    for d in sorted(gangs_in, key=lambda d: (least[d], d)):
        if least[d] > bound[0]:
            break
        if d not in nodes or not all(nodes[d]):
            continue
        dom = DomainFit(snapshot, gang, nodes[d], usage)
        for members in search(dom, [g for g, _ in gangs_in[d]], bound):
            found.append((_set_key(members), members, d))
    found.sort(key=lambda t: (t[0], domains[t[2]].value or ""))
    return [(members, d) for _, members, d in found]


def named(sets: list[tuple[list[RunningGang], int]]) -> list[tuple[list[str], int]]:
    return [([g.key for g in members], d) for members, d in sets]


@st.composite
def clusters(draw):
    """Up to 4 UltraServers of up to 4 nodes (some unlabelled, tainted or cordoned), up to 8
    running gangs of several priorities (some being evicted), pods of 1 to 4 GPUs."""
    nodes: list[Node] = []
    for u in range(draw(st.integers(1, 4))):
        for i in range(draw(st.integers(1, 4))):
            name = f"u{u}n{i}"
            labels = {LEVELS[0]: "z", LEVELS[2]: name}
            if draw(st.integers(0, 9)):  # now and then a node outside any UltraServer
                labels[LEVELS[1]] = f"us-{u}"
            taints = (Taint("gpu", "bad", "NoSchedule"),) if not draw(st.integers(0, 9)) else ()
            nodes.append(
                Node(
                    name,
                    labels,
                    {GPU: draw(st.sampled_from([4, 8])), "cpu": 64000, "pods": 110},
                    taints,
                    unschedulable=not draw(st.integers(0, 14)),
                )
            )
    gangs: list[RunningGang] = []
    pods: list[BoundPod] = []
    for k in range(draw(st.integers(0, 8))):
        key, gpus = f"g{k}", draw(st.sampled_from([1, 2, 4]))
        on = draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=4))
        mine = [BoundPod("ns", f"{key}-{i}", n, {GPU: gpus, "cpu": 1000}) for i, n in enumerate(on)]
        priority, started, evicting = (
            draw(st.integers(0, 3)),
            draw(st.integers(0, 5)),
            draw(st.integers(0, 5)),
        )
        keys = tuple((p.namespace, p.name) for p in mine)
        gangs.append(
            RunningGang(key, priority, "q", float(k), float(started), gpus * len(on), keys, evicting == 0)
        )
        pods += mine
    return build_snapshot(nodes, pods, LEVELS), gangs


@st.composite
def waiting(draw, index: int):
    """A waiting gang of one or two podsets, with or without a required level."""
    required = draw(st.sampled_from([None, LEVELS[1], LEVELS[2]]))
    podsets = tuple(
        PodSet(
            f"ps{p}",
            draw(st.integers(1, 5)),
            {GPU: draw(st.sampled_from([1, 2, 4])), "cpu": 1000},
            required_topology=required,
            excluded_nodes=frozenset(draw(st.lists(st.sampled_from(["u0n0", "u1n1"]), max_size=1))),
        )
        for p in range(draw(st.integers(1, 2)))
    )
    return Gang(podsets, f"w{index}"), Contender(f"w{index}", draw(st.integers(0, 4)), "q", 2.5)


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.data())
def test_shared_index_decides_as_the_straightforward_search(cluster, seeds, data) -> None:
    """Each search of a pass, on one index built before the first: the same candidate sets in
    the same order as the straightforward search on the snapshot as it is then, and the same
    plan as `find_victims` without a shared index. Between searches the pass admits a gang (its
    pods charged) or marks victims evicting, as `admission.admit` does."""
    snap, gangs = cluster
    policy = PlacementPolicy(spares_per_ultraserver=data.draw(st.integers(0, 1)))
    index = VictimIndex(snap, gangs)
    for i, _ in enumerate(seeds):
        gang, preemptor = data.draw(waiting(i))
        fit = place(snap, gang, policy)
        if fit.feasible:
            charge(snap, gang, fit, "ns")  # admitted: its capacity counts for the next search
            continue
        allowed = [
            g
            for g in gangs
            if not g.evicting and g.key != preemptor.key and may_preempt(preemptor, g, QUEUES)[0]
        ]
        req, _ = gang_levels(snap, gang)
        expected = named(reference_sets(snap, gang, policy, req, allowed))
        assert named(_candidate_sets(snap, gang, policy, req, allowed, index)) == expected
        plan = find_victims(snap, gang, policy, preemptor, gangs, QUEUES, index)
        assert plan == find_victims(snap, gang, policy, preemptor, gangs, QUEUES)
        victims = {v.key for v in plan.victims}
        gangs = [replace(g, evicting=True) if g.key in victims else g for g in gangs]


def test_an_index_for_other_gangs_or_another_snapshot_is_not_used() -> None:
    nodes = [
        Node(f"n{i}", {LEVELS[0]: "z", LEVELS[1]: "us-1", LEVELS[2]: f"n{i}"}, {GPU: 4}) for i in range(2)
    ]
    snap = build_snapshot(nodes, [BoundPod("ns", "a-0", "n0", {GPU: 4})], LEVELS)
    a = RunningGang("a", 0, "q", 0.0, 0.0, 4, (("ns", "a-0"),))
    index = VictimIndex(snap, [a])
    assert index.covers(snap, [a]) and index.covers(snap, [replace(a, evicting=True)])
    assert not index.covers(snap, [a, replace(a, key="b")])
    assert not index.covers(build_snapshot(nodes, [], LEVELS), [a])
