"""Slices: groups of consecutive pods each inside one domain of the slice level, all slices
inside the gang's domain; joint packing of podsets; recovery that keeps a slice's domain."""

import pytest

from gangplugin.core.admission import decide, remaining
from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangPod, assign, plan_gang
from gangplugin.core.packing import pack
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place, recover
from gangplugin.core.topology import (
    HOSTNAME_LABEL,
    ZONE_LABEL,
    BoundPod,
    Node,
    build_snapshot,
)
from gangplugin.kube import records
from tests.support import objects
from tests.support.core import GPU
from tests.support.slices import LEVELS, NN, US, cluster, sliced, us_of


def test_each_slice_of_consecutive_pods_in_one_ultraserver_all_in_one_network_node():
    snap = build_snapshot(
        cluster({"nn-a": {"us-1": 18, "us-2": 18}, "nn-b": {f"us-{i}": 18 for i in (3, 4, 5, 6)}}), [], LEVELS
    )
    r = place(snap, sliced(64, 16, required_topology=NN))
    assert r.feasible and r.level == NN and r.domains == ("nn-b",)
    where = us_of(snap, r)
    slices = [set(where[i : i + 16]) for i in range(0, 64, 16)]
    assert all(len(s) == 1 for s in slices) and len(set.union(*slices)) == 4
    assert "4 slices of 16 over 4 " + US in r.reason


def test_slices_packed_into_the_fewest_fullest_ultraservers():
    nodes = cluster({"nn-a": {"us-1": 18, "us-2": 18, "us-3": 18}})
    # us-2 has room for exactly two slices of 16 one-GPU pods (8 nodes free), the others for more
    pods = [BoundPod("x", f"p{i}", f"us-2-n{i:02d}", {GPU: 4}) for i in range(10)]
    snap = build_snapshot(nodes, pods, LEVELS)
    r = place(snap, sliced(32, 16, gpus=1, required_topology=NN))
    assert r.feasible and set(us_of(snap, r)) == {"us-2"}


BLOCK, RACK = "cloud.com/topology-block", "cloud.com/topology-rack"


@pytest.mark.parametrize(
    ("cpus", "count", "want"),
    [
        # "select domains with tight fit": x3 stays whole, x1 and x5 are filled exactly
        ({"x3": 3, "x5": 2, "x1": 2}, 4, {"x1": 2, "x5": 2}),
        # "prioritize more free slice capacity first and then tight fit"
        ({"x3": 6, "x5": 5, "x1": 4, "x6": 2}, 12, {"x1": 4, "x3": 6, "x6": 2}),
        # "optimize last domain"
        ({"x3": 4, "x5": 3, "x1": 2}, 6, {"x1": 2, "x3": 4}),
        ({"x3": 3, "x5": 3, "x1": 3}, 6, {"x1": 2, "x3": 2, "x5": 2}),
    ],
)
def test_each_slice_takes_the_hosts_that_leave_the_least_room_as_kueue_best_fit_does(cpus, count, want):
    """Kueue's TestFindTopologyAssignments (pkg/cache/scheduler/tas_cache_test.go), "block required
    for podset; host required for slices" with 1-cpu pods in slices of 2 per host, BestFit."""
    nodes = [
        Node(
            f"b1-r1-{host}", {BLOCK: "b1", RACK: "r1", HOSTNAME_LABEL: host}, {"cpu": cpu * 1000, "pods": 10}
        )
        for host, cpu in cpus.items()
    ]
    snap = build_snapshot(nodes, [], (BLOCK, RACK, HOSTNAME_LABEL))
    podset = PodSet(
        "main",
        count,
        {"cpu": 1000},
        required_topology=BLOCK,
        slice_size=2,
        slice_required_topology=HOSTNAME_LABEL,
    )
    r = place(snap, Gang((podset,)))
    assert r.feasible and r.level == BLOCK and r.domains == ("b1",)
    hosts = [snap.node(a.node).labels[HOSTNAME_LABEL] for a in r.assignments]
    assert {h: hosts.count(h) for h in hosts} == want


def test_slices_without_a_gang_level_go_anywhere_each_slice_whole():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 12, "us-2": 12}, "nn-b": {"us-3": 12}}), [], LEVELS)
    r = place(snap, sliced(30, 10))
    assert r.feasible
    where = us_of(snap, r)
    assert all(len(set(where[i : i + 10])) == 1 for i in range(0, 30, 10))
    assert len(set(where)) == 3


def test_a_miss_is_explained_per_slice():
    layout = {"nn-b2": {"us-1": 16, "us-2": 16, "us-3": 16, "us-4": 11}, "nn-b3": {"us-5": 16}}
    snap = build_snapshot(cluster(layout), [], LEVELS)
    r = place(snap, sliced(64, 16, required_topology=NN))
    assert not r.feasible
    assert f"3 of 4 slices of 16 fit in one {US} under nn-b2; the 4th has room for 11 at most" in r.reason
    assert "in slices of 16 per " + US in r.reason


def test_preferred_slice_level_is_dropped_when_no_slice_fits_required_is_not():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 10, "us-2": 10}}), [], LEVELS)
    ps = PodSet("main", 16, {GPU: 4}, slice_size=16, slice_preferred_topology=US, required_topology=NN)
    assert place(snap, Gang((ps,))).feasible
    assert not place(snap, sliced(16, 16, required_topology=NN)).feasible


@pytest.mark.parametrize(
    ("podset", "field", "words"),
    [
        (PodSet("m", 10, slice_size=4, slice_required_topology=US), "slice-size", "does not divide"),
        (PodSet("m", 8, slice_size=4), "slice-required-topology", "is missing"),
        (PodSet("m", 8, slice_required_topology=US), "slice-size", "is missing"),
        (PodSet("m", 8, slice_size=4, slice_required_topology="rack"), "slice-required-topology", "unknown"),
        (
            PodSet("m", 8, slice_size=4, slice_required_topology=NN, required_topology=US),
            "slice-required-topology",
            "not narrower",
        ),
    ],
)
def test_bad_slices_name_the_field_and_the_fix(podset, field, words):
    snap = build_snapshot(cluster({"nn-a": {"us-1": 4}}), [], LEVELS)
    with pytest.raises(InputError) as err:
        place(snap, Gang((podset,)))
    assert err.value.field.endswith(f"annotations.gangplugin.io/{field}") and words in err.value.problem


def test_two_podsets_one_sliced_share_the_network_node():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 9, "us-2": 9}, "nn-b": {"us-3": 18}}), [], LEVELS)
    leader = PodSet("leader", 1, {"cpu": 1000}, required_topology=NN)
    workers = PodSet("workers", 16, {GPU: 4}, slice_size=8, slice_required_topology=US, required_topology=NN)
    r = place(snap, Gang((leader, workers)))
    assert r.feasible and r.domains == ("nn-a",)
    where = [snap.node(a.node).labels[US] for a in r.assignments if a.pod_set == "workers"]
    assert len(set(where[:8])) == 1 and len(set(where[8:])) == 1 and set(where) == {"us-1", "us-2"}


def test_exact_packing_shares_nodes_between_shapes():
    # two nodes; a: 2 cpu pods of 3 and 2 GPU pods; only a mixed split of both nodes fits all
    frees = [{"cpu": 4, GPU: 1, "pods": 10}, {"cpu": 4, GPU: 1, "pods": 10}]
    reqs = [(("cpu", 3),), (("cpu", 1), (GPU, 1))]
    caps = [[1, 1], [1, 1]]
    found = pack(frees, caps, reqs, [2, 2], [None, None], [1, 1])
    assert found == [[(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    assert pack(frees, caps, reqs, [2, 3], [None, None], [1, 1]) is None


def test_exact_packing_gives_each_slice_domain_whole_slices():
    frees = [{"cpu": 3}, {"cpu": 1}, {"cpu": 4}]
    found = pack(frees, [[3], [1], [4]], [(("cpu", 1),)], [4], [[7, 7, 8]], [2])
    assert found is not None and sum(k for i, k in found[0] if i < 2) % 2 == 0


def _running(snap, gang, policy):
    r = place(snap, gang, policy)
    assert r.feasible
    for a in r.assignments:
        snap.bind(BoundPod("team", f"{a.pod_set}-{a.index}", a.node, dict(gang.podsets[0].requests)))
    return r


POLICY = PlacementPolicy(spares_per_ultraserver=2)


def test_recovery_of_several_nodes_keeps_each_slice_in_its_ultraserver():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 18, "us-2": 18}}), [], LEVELS)
    g = sliced(32, 16, required_topology=NN)
    r = _running(snap, g, POLICY)
    failed = sorted({a.node for a in r.assignments if snap.node(a.node).labels[US] == "us-1"})[:2]
    failed.append(next(a.node for a in r.assignments if snap.node(a.node).labels[US] == "us-2"))
    rec = recover(snap, g, r.assignments, failed, POLICY)
    assert rec.feasible and len(rec.moves) == 3
    for move in rec.moves:
        assert move.used_spare
        old = next(
            a.node
            for a in r.assignments
            if (a.pod_set, a.index) == (move.assignments[0].pod_set, move.assignments[0].index)
        )
        assert snap.node(move.node).labels[US] == snap.node(old).labels[US]


def test_recovery_never_moves_a_slice_out_of_its_ultraserver():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 16, "us-2": 18}}), [], LEVELS)
    g = sliced(16, 16, required_topology=NN)
    r = _running(snap, g, PlacementPolicy())
    assert set(us_of(snap, r)) == {"us-1"}
    rec = recover(snap, g, r.assignments, [r.assignments[0].node], PlacementPolicy())
    assert not rec.feasible and f"in its slice's {US}" in rec.reason
    unsliced = Gang((PodSet("main", 16, {GPU: 4, "cpu": 1000}, required_topology=NN),))
    assert recover(snap, unsliced, r.assignments, [r.assignments[0].node], PlacementPolicy()).feasible


def test_podsets_that_fit_only_sharing_a_node_are_packed_jointly():
    # Every fill order puts both pods of one podset on n00 and n02 (the fewest domains) and
    # the other podset then fits only once; the exact search shares n01 between the two.
    def plain(name, gpus, cpu, pods, us=None):
        labels = {HOSTNAME_LABEL: name} | ({ZONE_LABEL: "z0", US: us} if us else {})
        return Node(name, labels, {GPU: gpus, "cpu": cpu, "pods": pods})

    nodes = [plain("n00", 2, 2000, 1), plain("n01", 2, 3000, 2, "us-0"), plain("n02", 2, 2000, 1)]
    nodes.append(plain("n03", 0, 1000, 1))
    gang = Gang((PodSet("cpu", 2, {"cpu": 2000}), PodSet("gpu", 2, {GPU: 2, "cpu": 500})))
    r = place(build_snapshot(nodes, [], (ZONE_LABEL, US, HOSTNAME_LABEL)), gang)
    assert r.feasible
    assert sorted((a.pod_set, a.node) for a in r.assignments if a.node == "n01") == [
        ("cpu", "n01"),
        ("gpu", "n01"),
    ]


def _workload(annotations, topology_request=None, count=32):
    ps = objects.podset(count, annotations=annotations)
    if topology_request:
        ps["topologyRequest"] = topology_request
    return objects.workload("wl", "ns", ps)


@pytest.mark.parametrize(
    ("annotations", "topology_request"),
    [
        ({"gangplugin.io/slice-size": "16", "gangplugin.io/slice-required-topology": US}, None),
        (
            {"kueue.x-k8s.io/podset-slice-size": "16", "kueue.x-k8s.io/podset-slice-required-topology": US},
            None,
        ),
        ({}, {"podSetSliceSize": 16, "podSetSliceRequiredTopology": US}),
    ],
)
def test_slice_annotations_and_kueues_topology_request_read_the_same(annotations, topology_request):
    (ps,) = records.gang_from_k8s(_workload(annotations, topology_request)).podsets
    assert (ps.slice_size, ps.slice_required_topology, ps.slice_preferred_topology) == (16, US, None)


def test_bad_slice_size_names_the_annotation():
    with pytest.raises(InputError) as err:
        records.gang_from_k8s(_workload({"gangplugin.io/slice-size": "sixteen"}))
    assert err.value.field == "spec.podSets[0].template.metadata.annotations.gangplugin.io/slice-size"


def test_a_sliced_gang_is_pinned_to_its_gang_level_domain_only():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 18, "us-2": 18}}), [], LEVELS)
    with_level = decide(snap, sliced(32, 16, required_topology=NN), "g", PlacementPolicy())
    assert with_level.ready and with_level.domain == {NN: "nn-a"}
    assert all(u.node_selector == {NN: "nn-a"} for u in with_level.pod_set_updates)
    without = decide(snap, sliced(32, 16), "g", PlacementPolicy())
    assert without.ready and without.domain == {} and without.pod_set_updates[0].node_selector == {}


def test_the_extender_completes_a_started_slice_in_its_ultraserver():
    # 32 pods in slices of 16 on us-1 and us-2; one pod of the us-2 slice is recreated.
    snap = build_snapshot(cluster({"nn-a": {"us-1": 18, "us-2": 18, "us-3": 18}}), [], LEVELS)
    slices = (16, US, None)

    def pod(i, node=None):
        return GangPod("ns", f"p{i}", f"u{i}", "g", 32, node, {GPU: 4}, required_topology=NN, slices=slices)

    bound = [pod(i, f"us-1-n{i:02d}") for i in range(16)] + [pod(16 + i, f"us-2-n{i:02d}") for i in range(15)]
    for m in bound:
        snap.bind(BoundPod("ns", m.name, m.node or "", {GPU: 4}))
    # without slices every free node is as good: the first by name (in us-1) would win
    new = pod(99)
    plan = plan_gang(snap, new, [*bound, new], keep_bound=True)
    assert plan.feasible and len(plan.slots) == 1
    assert snap.node(plan.slots[0].node).labels[US] == "us-2"
    assert assign(plan, new, {}) == 0


def test_the_extender_gives_each_pod_the_slot_at_its_index_so_slices_follow_indexes():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 18, "us-2": 18}}), [], LEVELS)
    slices = (16, US, None)
    pods = [
        GangPod("ns", f"p{i}", f"u{i}", "g", 32, None, {GPU: 4}, required_topology=NN, slices=slices, index=i)
        for i in range(32)
    ]
    plan = plan_gang(snap, pods[0], pods)
    claims: dict = {}
    for p in reversed(pods):  # arriving in any order
        claims[p.key] = assign(plan, p, claims)
    where = [snap.node(plan.slots[claims[p.key]].node).labels[US] for p in pods]
    assert len(set(where[:16])) == 1 and len(set(where[16:])) == 1 and where[0] != where[16]


def test_the_rest_of_a_partly_bound_sliced_gang_is_promised_without_broken_slices():
    snap = build_snapshot(cluster({"nn-a": {"us-1": 18, "us-2": 18}}), [], LEVELS)
    g = sliced(32, 16, required_topology=NN)
    whole = remaining(g, {"main": 16}).podsets[0]
    assert (whole.count, whole.slice_size) == (16, 16)
    part = remaining(g, {"main": 10})
    assert (part.podsets[0].count, part.podsets[0].slice_size) == (22, None)
    assert place(snap, part).feasible
