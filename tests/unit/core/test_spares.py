"""Spares: one rule (`held_spares`) for the admission check's placement and recovery and the
extender's plan of a pod recreated after its node failed."""

from __future__ import annotations

import dataclasses

from gangplugin.core.admission import with_selector
from gangplugin.core.gangplan import GangPod, plan_gang
from gangplugin.core.placement import (
    Assignment,
    Gang,
    PlacementPolicy,
    PodSet,
    held_spares,
    place,
    recover,
)
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, Snapshot, build_snapshot
from tests.support.core import GPU, LEVELS, ultraservers

REQ = {GPU: 4, "cpu": 1000}
ONE_SPARE = PlacementPolicy(spares_per_ultraserver=1)


def running(count: int, us: int = 2, size: int = 18) -> tuple[Snapshot, list[Assignment]]:
    """`count` pods of gang g bound on the first nodes of us-1 (one per node)."""
    nodes = ultraservers(us, size)
    pods = [BoundPod("ns", f"g-{i}", nodes[i].name, REQ) for i in range(count)]
    snap = build_snapshot(nodes, pods, LEVELS)
    return snap, [Assignment("main", i, nodes[i].name) for i in range(count)]


def pinned(count: int) -> Gang:
    return Gang((PodSet("main", count, REQ, required_topology=ULTRASERVER_LABEL),), "g")


def fail(snap: Snapshot, *names: str) -> None:
    for name in names:
        node = snap.node(name)
        assert node is not None
        snap.upsert_node(dataclasses.replace(node, ready=False))


def test_a_spare_is_held_from_everyone_but_a_gang_in_its_ultraserver() -> None:
    snap, assignments = running(17)
    spares = snap.spare_nodes(1)
    names = {snap.nodes[i].name for i in spares}  # type: ignore[union-attr]
    assert names == {"us1-n17", "us2-n17"}
    held = held_spares(snap, ONE_SPARE, [a.node for a in assignments])
    assert {snap.nodes[i].name for i in held} == {"us2-n17"}  # type: ignore[union-attr]
    assert held_spares(snap, ONE_SPARE) == spares


def test_place_gives_the_spare_only_to_the_gang_already_there() -> None:
    snap, assignments = running(16)
    fail(snap, "us1-n00")
    snap.unbind("ns", "g-0")  # its pod was deleted: one member to place again
    one = Gang((PodSet("main", 1, REQ, required_topology=ULTRASERVER_LABEL),), "g")
    occupied = [a.node for a in assignments[1:]]
    # us-1 has n16 and n17 idle: n17 is the spare; with n16 taken, only the spare is left
    snap.bind(BoundPod("ns", "other", "us1-n16", REQ))
    in_us1 = with_selector(one, {ULTRASERVER_LABEL: "us-1"})
    assert not place(snap, in_us1, ONE_SPARE).feasible
    got = place(snap, in_us1, ONE_SPARE, occupied)
    assert got.feasible and [a.node for a in got.assignments] == ["us1-n17"]


def test_recover_one_failed_node_takes_the_spare_of_the_gangs_ultraserver() -> None:
    snap, assignments = running(17)
    fail(snap, "us1-n03")
    before = [dict(f) for f in snap.free]
    result = recover(snap, pinned(17), assignments, ["us1-n03"], ONE_SPARE)
    assert result.feasible and len(result.moves) == 1
    move = result.moves[0]
    assert move.node == "us1-n17" and move.used_spare
    assert move.assignments == (Assignment("main", 3, "us1-n17"),)
    assert "spare of UltraServer us-1" in result.reason
    assert [dict(f) for f in snap.free] == before  # the snapshot is left as given


def test_recover_two_failed_nodes_with_one_spare_moves_nothing() -> None:
    snap, assignments = running(17)
    fail(snap, "us1-n01", "us1-n02")
    result = recover(snap, pinned(17), assignments, ["us1-n02", "us1-n01"], ONE_SPARE)
    assert not result.feasible and result.moves == ()
    assert "all 2 failed nodes cannot be replaced" in result.reason


def test_recover_several_failed_nodes_in_one_decision() -> None:
    snap, assignments = running(15)
    fail(snap, "us1-n00", "us1-n01", "us1-n02")
    result = recover(snap, pinned(15), assignments, ["us1-n00", "us1-n01", "us1-n02"], ONE_SPARE)
    assert result.feasible and len(result.moves) == 3
    targets = [m.node for m in result.moves]
    assert len(set(targets)) == 3 and set(targets) == {"us1-n15", "us1-n16", "us1-n17"}
    assert sum(m.used_spare for m in result.moves) >= 1


def member(i: int, node: str | None = None, **kw) -> GangPod:
    return GangPod("ns", f"g-{i}", f"uid-{i}", "g", 17, node, REQ, required_topology=ULTRASERVER_LABEL, **kw)


def test_extender_plans_a_recreated_pod_onto_the_spare_and_never_abandons_a_checked_gang() -> None:
    snap, assignments = running(17)
    fail(snap, "us1-n01")
    snap.unbind("ns", "g-1")
    bound = [member(a.index, a.node) for a in assignments if a.index != 1]
    new = member(1)
    plan = plan_gang(snap, new, [*bound, new], ONE_SPARE, keep_bound=True)
    assert plan.feasible and [s.node for s in plan.slots] == ["us1-n17"]
    assert plan.abandon == ()
    # no room at all (the spare taken by someone else): a checked gang keeps its bound pods
    snap.bind(BoundPod("other", "x", "us1-n17", REQ))
    plan = plan_gang(snap, new, [*bound, new], ONE_SPARE, keep_bound=True)
    assert not plan.feasible and plan.abandon == ()
    # a plain pod gang (no check) is still started over whole
    plan = plan_gang(snap, new, [*bound, new], ONE_SPARE)
    assert not plan.feasible and len(plan.abandon) == 16


def test_a_member_being_deleted_is_no_longer_counted() -> None:
    snap, assignments = running(17)
    fail(snap, "us1-n01")
    bound = [member(a.index, a.node, deleting=a.index == 1) for a in assignments]
    new = GangPod("ns", "g-1-new", "uid-new", "g", 17, None, REQ, required_topology=ULTRASERVER_LABEL)
    plan = plan_gang(snap, new, [*bound, new], ONE_SPARE, keep_bound=True)
    assert plan.feasible and [s.node for s in plan.slots] == ["us1-n17"]
