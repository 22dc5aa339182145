"""Gang admission decisions: one domain, podSetUpdates, promised capacity, sequential gate."""

from __future__ import annotations

from gangplugin.core.admission import (
    decide,
    gang_id,
    promise,
    remaining,
    sequential_blocker,
    with_selector,
)
from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.topology import ULTRASERVER_LABEL, build_snapshot
from tests.support.core import GPU, LEVELS, gang, ultraservers


def snap(count: int = 2, size: int = 4):  # type: ignore[no-untyped-def]
    return build_snapshot(ultraservers(count, size), levels=LEVELS)


def named(g: Gang, name: str) -> Gang:
    return Gang(g.podsets, name)


def test_gang_id_is_the_workload_name_or_a_stable_hash() -> None:
    assert gang_id("job-train-abc12") == "job-train-abc12"
    long = "job-" + "x" * 80
    gid = gang_id(long)
    assert len(gid) <= 63 and gid == gang_id(long) and gid != gang_id(long + "y")


def test_admits_into_one_ultraserver_with_labels_and_selector() -> None:
    s = snap()
    g = gang(3, required=ULTRASERVER_LABEL)
    d = decide(s, g, "wl-1", PlacementPolicy())
    assert d.ready
    assert d.domain == {ULTRASERVER_LABEL: "us-1"}
    (upd,) = d.pod_set_updates
    assert upd.to_dict() == {
        "name": "main",
        "labels": {GANG_LABEL: "wl-1"},
        "annotations": {GANG_SIZE_ANNOTATION: "3"},
        "nodeSelector": {ULTRASERVER_LABEL: "us-1"},
    }
    ungate = decide(s, g, "wl-1", PlacementPolicy(), bind_mode="Ungate")
    assert ungate.pod_set_updates[0].labels == {GANG_LABEL: "wl-1", "gangplugin.io/bind-mode": "Ungate"}


def test_gang_size_counts_every_podset() -> None:
    g = Gang((PodSet("leader", 1, {GPU: 4}), PodSet("workers", 3, {GPU: 4})))
    d = decide(snap(), g, "wl", PlacementPolicy())
    assert d.ready and {u.annotations[GANG_SIZE_ANNOTATION] for u in d.pod_set_updates} == {"4"}
    assert not d.domain  # no topology asked: nothing pinned


def test_extra_annotations_reach_every_podset() -> None:
    g = Gang((PodSet("leader", 1, {GPU: 4}), PodSet("workers", 3, {GPU: 4})))
    end = {"gangplugin.io/block-end-time": "2026-12-03T11:30:00Z"}
    d = decide(snap(), g, "wl", PlacementPolicy(), annotations=end)
    assert d.ready
    for u in d.pod_set_updates:
        assert u.annotations == {**end, GANG_SIZE_ANNOTATION: "4"}


def test_too_big_for_any_ultraserver_waits_with_the_reason() -> None:
    d = decide(snap(2, 4), gang(5, required=ULTRASERVER_LABEL), "wl", PlacementPolicy())
    assert not d.ready and d.message.startswith("gang does not fit now:")
    assert ULTRASERVER_LABEL in d.message


def test_promised_capacity_is_counted_for_the_next_gang() -> None:
    s = snap(2, 4)
    first = with_selector(named(gang(4, required=ULTRASERVER_LABEL), "g1"), {ULTRASERVER_LABEL: "us-1"})
    assert promise(s, first, "ns", PlacementPolicy()) == 4
    d = decide(s, gang(4, required=ULTRASERVER_LABEL), "wl-2", PlacementPolicy())
    assert d.ready and d.domain == {ULTRASERVER_LABEL: "us-2"}
    # a third gang finds both UltraServers promised
    assert (
        promise(s, with_selector(named(gang(4), "g2"), {ULTRASERVER_LABEL: "us-2"}), "ns", PlacementPolicy())
        == 4
    )
    assert not decide(s, gang(1, required=ULTRASERVER_LABEL), "wl-3", PlacementPolicy()).ready


def test_remaining_subtracts_bound_pods_per_podset() -> None:
    g = Gang((PodSet("a", 2, {GPU: 1}), PodSet("b", 3, {GPU: 1})))
    r = remaining(g, {"a": 2, "b": 1})
    assert [(ps.name, ps.count) for ps in r.podsets] == [("b", 2)]
    assert not promise(snap(), remaining(g, {"a": 2, "b": 3}), "ns", PlacementPolicy())


def test_spares_stay_free_for_admission() -> None:
    s = snap(1, 4)
    g = gang(4, required=ULTRASERVER_LABEL)
    assert decide(s, g, "wl", PlacementPolicy(0)).ready
    assert not decide(s, g, "wl", PlacementPolicy(1)).ready
    assert place(s, gang(3, required=ULTRASERVER_LABEL), PlacementPolicy(1)).feasible


def test_sequential_gate() -> None:
    assert sequential_blocker("ns/b", []) is None
    assert sequential_blocker("ns/b", ["ns/b"]) is None
    assert sequential_blocker("ns/b", ["ns/c", "ns/a"]) == "ns/a"
