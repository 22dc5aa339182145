import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.topology import (
    DEFAULT_LEVELS,
    HOSTNAME_LABEL,
    ULTRASERVER_LABEL,
    ZONE_LABEL,
    BoundPod,
    Node,
    Snapshot,
    build_snapshot,
    validate_levels,
)
from tests.support.core import GPU, LEVELS, node, ultraservers


def domain_of(snap: Snapshot, node_name: str, level: int):
    return snap.domains[snap.path[snap.node_ids[node_name]][level]]


def domain_free(snap: Snapshot, domain_id: int, resource: str) -> int:
    """Free capacity summed over the usable nodes under a domain."""
    return sum(snap.free[i].get(resource, 0) for i in snap.subtree_nodes(domain_id) if snap.usable[i])


def test_tree_by_levels_sorted_by_name():
    nodes = ultraservers(2, 3)
    snap = build_snapshot(reversed(nodes), [], LEVELS)
    zone = snap.domains[snap.root.children[0]]
    assert zone.value == "z1" and zone.level == 0
    assert [snap.domains[c].value for c in zone.children] == ["us-1", "us-2"]
    us1 = snap.domains[zone.children[0]]
    assert [snap.domains[c].value for c in us1.children] == ["us1-n00", "us1-n01", "us1-n02"]
    assert [snap.nodes[n].name for n in snap.subtree_nodes(us1.id)] == ["us1-n00", "us1-n01", "us1-n02"]
    assert domain_of(snap, "us1-n01", 1).value == "us-1"
    assert snap.level_index(ULTRASERVER_LABEL) == 1 and snap.level_index("nope") is None


def test_free_capacity_aggregates_and_updates():
    snap = build_snapshot(ultraservers(2, 2), [], LEVELS)
    us1 = snap.domain_ids[("z1", "us-1")]
    assert domain_free(snap, us1, GPU) == 8
    assert domain_free(snap, 0, GPU) == 16
    snap.bind(BoundPod("ns", "p", "us1-n00", {GPU: 3, "cpu": 500}))
    assert domain_free(snap, us1, GPU) == 5
    assert domain_free(snap, us1, "pods") == 219
    assert snap.free[snap.node_ids["us1-n00"]][GPU] == 1
    snap.unbind("ns", "p")
    assert domain_free(snap, us1, GPU) == 8
    # node changes: NotReady drops it from the sums, a new node in a new UltraServer appears
    snap.upsert_node(node("us1-n00", "us-1", ready=False))
    assert domain_free(snap, us1, GPU) == 4
    snap.upsert_node(node("us3-n00", "us-3"))
    us3 = snap.domain_ids[("z1", "us-3")]
    assert domain_free(snap, us3, GPU) == 4
    assert [snap.domains[c].value for c in snap.domains[snap.root.children[0]].children] == [
        "us-1",
        "us-2",
        "us-3",
    ]
    snap.remove_node("us3-n00")
    assert domain_free(snap, us3, GPU) == 0
    assert snap.node("us3-n00") is None


def test_finished_and_unknown_pods_do_not_count():
    snap = build_snapshot(
        [node("a")],
        [
            BoundPod("ns", "done", "a", {GPU: 4}, "Succeeded"),
            BoundPod("ns", "failed", "a", {GPU: 4}, "Failed"),
            BoundPod("ns", "elsewhere", "zzz", {GPU: 4}),
            BoundPod("ns", "run", "a", {GPU: 1}),
        ],
        LEVELS,
    )
    i = snap.node_ids["a"]
    assert snap.free[i][GPU] == 3 and snap.accelerated[i] == 1


def test_pods_rebound_on_node_update():
    snap = build_snapshot([node("a")], [BoundPod("ns", "p", "a", {GPU: 2})], LEVELS)
    snap.upsert_node(node("a", allocatable={GPU: 8, "pods": 10}))
    i = snap.node_ids["a"]
    assert snap.free[i] == {GPU: 6, "pods": 9}


def test_a_node_running_pods_without_accelerators_is_still_idle_for_spares():
    # What every node of a real cluster runs (DaemonSets, CoreDNS) leaves it a spare; a GPU pod does not.
    system = [BoundPod("kube-system", f"ds-{n}", n, {"cpu": 100}) for n in ("us1-n02", "us1-n03")]
    snap = build_snapshot(ultraservers(1, 4), [*system, BoundPod("ns", "p", "us1-n03", {GPU: 1})], LEVELS)
    assert {snap.nodes[i].name for i in snap.spare_nodes(1)} == {"us1-n02"}
    assert snap.node_of("kube-system", "ds-us1-n02") == snap.node_ids["us1-n02"]


def test_spares_are_highest_idle_names_per_ultraserver():
    snap = build_snapshot(ultraservers(2, 4), [BoundPod("ns", "p", "us1-n03", {GPU: 1})], LEVELS)
    spares = {snap.nodes[i].name for i in snap.spare_nodes(1)}
    assert spares == {"us1-n02", "us2-n03"}
    assert {snap.nodes[i].name for i in snap.spare_nodes(2)} == {"us1-n01", "us1-n02", "us2-n02", "us2-n03"}
    assert snap.spare_nodes(0) == frozenset()
    snap.unbind("ns", "p")
    assert {snap.nodes[i].name for i in snap.spare_nodes(1)} == {"us1-n03", "us2-n03"}


def test_missing_labels_make_unlabeled_domains():
    snap = build_snapshot([node("a", us=None), node("b")], [], LEVELS)
    assert domain_of(snap, "a", 1).value is None
    assert domain_of(snap, "b", 1).value == "us-1"


def test_bad_levels_and_duplicates():
    with pytest.raises(InputError):
        validate_levels([])
    with pytest.raises(InputError):
        validate_levels([ZONE_LABEL, ZONE_LABEL])
    with pytest.raises(InputError, match="twice"):
        build_snapshot([Node("a"), Node("a")])
    assert Snapshot().levels == DEFAULT_LEVELS
    assert DEFAULT_LEVELS[-1] == HOSTNAME_LABEL
