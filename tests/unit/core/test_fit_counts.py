"""The pod-shape counts a Snapshot keeps current equal a fresh count after any binds and unbinds,
and placement gives the same answers with them; `explain=False` and `climb_levels=False`."""

import random

import pytest

from gangplugin.core.eligibility import PodConstraints, Taint, Toleration
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.topology import BoundPod, Node, build_snapshot, pods_fitting

GPU = "nvidia.com/gpu"
US = "topology.k8s.aws/ultraserver-id"
L3 = "topology.k8s.aws/network-node-layer-3"


def nodes():
    out = []
    for u in range(4):
        for i in range(4):
            name = f"us{u}-n{i}"
            labels = {US: f"us-{u}", L3: f"l3-{u // 2}", "kubernetes.io/hostname": name}
            taints = (Taint("k", "v", "NoSchedule"),) if name == "us3-n3" else ()
            out.append(Node(name, labels, {GPU: 4, "pods": 8}, taints))
    return out


# a flavor's nodeSelector (layer 3 l3-1: UltraServers us-2 and us-3) and a toleration of the
# taint on us3-n3
FLAVOR = PodConstraints(
    node_selector=((L3, "l3-1"),), tolerations=(Toleration("k", "Equal", "v", "NoSchedule"),)
)


@pytest.mark.parametrize("constraints", [PodConstraints(), FLAVOR], ids=["plain", "flavor"])
def test_kept_counts_equal_a_fresh_count_after_binds_and_unbinds(constraints):
    rng = random.Random(3)
    snap = build_snapshot(nodes())
    req = ((GPU, 2),)
    snap.fit_counts(req, constraints)  # kept from here on
    bound = []
    for step in range(300):
        if bound and rng.random() < 0.4:
            snap.unbind("ns", bound.pop(rng.randrange(len(bound))))
        else:
            name = f"p{step}"
            snap.bind(
                BoundPod("ns", name, f"us{rng.randrange(4)}-n{rng.randrange(4)}", {GPU: rng.choice([1, 2])})
            )
            bound.append(name)
        fresh = build_snapshot(nodes())
        for key in bound:
            i, requests = snap._pods[("ns", key)]
            fresh.bind(BoundPod("ns", key, snap.nodes[i].name, dict(requests)))
        kept_nc, kept_dc = snap.fit_counts(req, constraints)
        nc, dc = fresh.fit_counts(req, constraints)
        assert dict(kept_nc) == dict(nc) and list(kept_dc) == list(dc)
    kept = snap.fit_counts(req, constraints)[0]
    allowed = {snap.nodes[i].name for i in kept}
    if constraints == FLAVOR:  # only layer l3-1's nodes, the tainted one among them
        assert allowed <= {f"us{u}-n{i}" for u in (2, 3) for i in range(4)}
        assert kept.get(snap.node_ids["us3-n3"], 0) == pods_fitting(snap.free[snap.node_ids["us3-n3"]], req)
    else:
        assert snap.node_ids["us3-n3"] not in kept  # tainted: not for plain pods


def test_explain_false_keeps_the_answer_and_drops_the_reason():
    snap = build_snapshot(nodes())
    gang = Gang((PodSet("main", 20, {GPU: 4}, required_topology=US),), "g")
    full, short = place(snap, gang), place(snap, gang, explain=False)
    assert not full.feasible and not short.feasible
    assert "best is" in full.reason and short.reason == "does not fit"


def test_without_climbing_a_gang_spreads_at_its_preferred_level():
    snap = build_snapshot(nodes())
    gang = Gang((PodSet("main", 6, {GPU: 4}, preferred_topology=US),), "g")
    climbed = place(snap, gang)
    # one layer-3 domain holds it; l3-1 has 7 usable nodes (one tainted), the tighter fit
    assert climbed.level == L3 and climbed.domains == ("l3-1",)
    flat = place(snap, gang, PlacementPolicy(climb_levels=False))
    # the fewest UltraServers: the largest first (us-0), the rest in the tightest that holds it (us-3)
    assert flat.feasible and flat.level is None and flat.domains == ("us-0", "us-3")


def test_a_heartbeat_keeps_the_counts_and_a_real_change_drops_them():
    # kwok and kubelets rewrite every Node's status every few minutes: at 5,000 nodes an upsert
    # that changes nothing must not cost the next decision a pass over every node.
    snap = build_snapshot(nodes())
    req = ((GPU, 2),)
    kept = snap.fit_counts(req)
    first = nodes()[0]
    snap.upsert_node(Node(first.name, dict(first.labels), dict(first.allocatable), first.taints))
    assert snap.fit_counts(req)[0] is kept[0]
    snap.upsert_node(Node(first.name, dict(first.labels), {GPU: 2, "pods": 8}, first.taints))
    fresh = snap.fit_counts(req)
    assert fresh[0] is not kept[0] and fresh[0][0] == 1


def test_with_no_room_anywhere_the_best_named_is_a_domain_the_flavor_may_use():
    snap = build_snapshot(nodes())
    for u in range(4):
        for i in range(4):
            snap.bind(BoundPod("ns", f"full-{u}-{i}", f"us{u}-n{i}", {GPU: 4}))
    ps = PodSet("main", 2, {GPU: 4}, required_topology=US, constraints=FLAVOR)
    refused = place(snap, Gang((ps,), "g"))
    assert not refused.feasible and "best is us-2 with room for 0" in refused.reason, refused.reason
    plain = place(snap, Gang((PodSet("main", 2, {GPU: 4}, required_topology=US),), "g"))
    assert "best is us-0 with room for 0" in plain.reason, plain.reason
