import random

import pytest

from gangplugin.core.eligibility import PodConstraints, Requirement, Taint, Toleration
from gangplugin.core.errors import InputError
from gangplugin.core.placement import (
    Assignment,
    Gang,
    PlacementPolicy,
    PodSet,
    place,
    replace,
)
from gangplugin.core.topology import (
    DEFAULT_LEVELS,
    HOSTNAME_LABEL,
    INSTANCE_TYPE_LABEL,
    ULTRASERVER_LABEL,
    ZONE_LABEL,
    BoundPod,
    Node,
    build_snapshot,
)
from tests.support.core import GPU, GPU_NODE, LEVELS, gang, node, ultraservers

US = ULTRASERVER_LABEL


def nodes_of(result):
    return {a.node for a in result.assignments}


def test_fits_in_one_ultraserver_with_required_level():
    snap = build_snapshot(ultraservers(2, 18), [], LEVELS)
    r = place(snap, gang(16, required=US))
    assert r.feasible and r.level == US and r.domains == ("us-1",)
    assert len(r.assignments) == 16
    assert [a.index for a in r.assignments] == list(range(16))
    assert nodes_of(r) == {f"us1-n{i:02d}" for i in range(16)}


def test_all_or_nothing_when_short():
    snap = build_snapshot(ultraservers(1, 4), [], LEVELS)
    r = place(snap, gang(5))
    assert not r.feasible and r.assignments == () and r.level is None and r.domains == ()
    assert "needs 5 pods with 4 nvidia.com/gpu" in r.reason and "room for 4" in r.reason


def test_required_is_never_spread():
    snap = build_snapshot(ultraservers(2, 18), [], LEVELS)
    r = place(snap, gang(20, required=US))
    assert not r.feasible
    assert r.reason.startswith(
        "needs 20 pods with 4 nvidia.com/gpu in one topology.k8s.aws/ultraserver-id; "
        "best is us-1 with room for 18"
    )


def test_preferred_climbs_to_the_tightest_wider_level():
    snap = build_snapshot(ultraservers(2, 18, "z1") + ultraservers(1, 18, "z2", prefix="b"), [], LEVELS)
    r = place(snap, gang(20, preferred=US))
    assert r.feasible and r.level == ZONE_LABEL and r.domains == ("z1",)
    # fewest UltraServers inside the zone: 18 from one, 2 from the other
    per_us = sorted(sum(1 for a in r.assignments if a.node.startswith(p)) for p in ("us1", "us2"))
    assert per_us == [2, 18]


def test_preferred_spreads_over_fewest_domains_when_nothing_holds_it():
    nodes = ultraservers(1, 10, "z1")
    nodes += [
        node(f"b{u}-{i}", f"bus-{u}", "z2") for u, size in ((1, 4), (2, 6), (3, 4)) for i in range(size)
    ]
    snap = build_snapshot(nodes, [], LEVELS)
    r = place(snap, gang(16, preferred=US))
    assert r.feasible and r.level is None
    # fewest UltraServers: 10 from us-1 and the tightest other that holds 6
    assert r.domains == ("bus-2", "us-1")
    assert "spread over 2" in r.reason


def test_best_fit_picks_the_tightest_domain_ties_by_name():
    nodes = ultraservers(1, 8, prefix="a") + ultraservers(1, 5, prefix="b") + ultraservers(1, 5, prefix="c")
    snap = build_snapshot(nodes, [], LEVELS)
    assert place(snap, gang(4, required=US)).domains == ("bus-1",)
    assert place(snap, gang(6, required=US)).domains == ("aus-1",)
    assert place(snap, gang(5, required=US)).domains == ("bus-1",)


def test_without_annotations_the_gang_is_packed():
    snap = build_snapshot(ultraservers(2, 4), [], LEVELS)
    r = place(snap, gang(4, gpus=1))
    assert r.feasible and r.level == HOSTNAME_LABEL and r.domains == ("us1-n00",)
    r = place(snap, gang(3))
    assert r.level == US and r.domains == ("us-1",)
    r = place(snap, gang(6))
    assert r.level == ZONE_LABEL


def test_bound_pods_count_and_finished_do_not():
    pods = [BoundPod("ns", f"p{i}", f"us1-n{i:02d}", {GPU: 4}) for i in range(3)]
    pods.append(BoundPod("ns", "done", "us1-n03", {GPU: 4}, "Succeeded"))
    snap = build_snapshot(ultraservers(1, 4), pods, LEVELS)
    r = place(snap, gang(1, required=US))
    assert nodes_of(r) == {"us1-n03"}
    assert not place(snap, gang(2, required=US)).feasible


@pytest.mark.parametrize(
    ("bad_node", "reason"),
    [
        (node("x", ready=False), "not Ready"),
        (node("x", unschedulable=True), "cordoned"),
        (node("x", taints=(Taint("dedicated", "infer", "NoSchedule"),)), "taint dedicated=infer:NoSchedule"),
        (node("x", taints=(Taint("dedicated", "infer", "NoExecute"),)), "taint dedicated=infer:NoExecute"),
        (node("x", allocatable={**GPU_NODE, "cpu": 500}), "short of cpu"),
        (node("x", allocatable={**GPU_NODE, "memory": 10}), "short of memory"),
        (node("x", allocatable={**GPU_NODE, "pods": 0}), "short of pods"),
        (node("x", allocatable={**GPU_NODE, GPU: 2}), "short of nvidia.com/gpu"),
        (node("x", labels={INSTANCE_TYPE_LABEL: "ml.p5.48xlarge"}), "not matching nodeSelector/affinity"),
    ],
)
def test_node_eligibility(bad_node, reason):
    good = node("a", labels={INSTANCE_TYPE_LABEL: "ml.p6e-gb200.36xlarge"})
    g = Gang(
        (
            PodSet(
                "main",
                2,
                {GPU: 4, "cpu": 1000, "memory": 2**30},
                PodConstraints(node_selector=((INSTANCE_TYPE_LABEL, "ml.p6e-gb200.36xlarge"),))
                if "nodeSelector" in reason
                else PodConstraints(),
            ),
        )
    )
    snap = build_snapshot([good, bad_node], [], LEVELS)
    r = place(snap, g)
    assert not r.feasible
    assert f"1 {reason}" in r.reason


def test_tolerations_affinity_and_prefer_no_schedule():
    nodes = [
        node("a", taints=(Taint("nvidia.com/gpu", "", "NoSchedule"),), labels={"gen": "6"}),
        node("b", taints=(Taint("soft", "", "PreferNoSchedule"),), labels={"gen": "5"}),
        node("c", labels={"gen": "4"}),
    ]
    snap = build_snapshot(nodes, [], LEVELS)
    plain = Gang((PodSet("main", 2, {GPU: 4}),))
    assert nodes_of(place(snap, plain)) == {"b", "c"}
    tolerant = PodConstraints(tolerations=(Toleration("nvidia.com/gpu", "Exists"),))
    assert len(nodes_of(place(snap, Gang((PodSet("main", 3, {GPU: 4}, tolerant),))))) == 3
    newer = PodConstraints(
        affinity_terms=((Requirement("gen", "Gt", ("4",)),),), tolerations=(Toleration("", "Exists"),)
    )
    assert nodes_of(place(snap, Gang((PodSet("main", 2, {GPU: 4}, newer),)))) == {"a", "b"}


def test_several_pods_per_node_and_best_fit_nodes():
    nodes = [node("a", allocatable={GPU: 8, "pods": 110}), node("b", allocatable={GPU: 8, "pods": 110})]
    snap = build_snapshot(nodes, [BoundPod("ns", "p", "b", {GPU: 6})], LEVELS)
    r = place(snap, Gang((PodSet("main", 2, {GPU: 1}),)))
    # one node holds both: b is the tightest that does
    assert r.level == HOSTNAME_LABEL and nodes_of(r) == {"b"}
    r = place(snap, Gang((PodSet("main", 9, {GPU: 1}),)))
    assert r.feasible and sorted(a.node for a in r.assignments) == ["a"] * 8 + ["b"]


def test_spares_are_kept_from_fresh_gangs():
    snap = build_snapshot(ultraservers(2, 18), [BoundPod("ns", "x", "us2-n00", {GPU: 4})], LEVELS)
    policy = PlacementPolicy(spares_per_ultraserver=1)
    r = place(snap, gang(17, required=US), policy)
    assert r.feasible and r.domains == ("us-1",) and "us1-n17" not in nodes_of(r)
    r = place(snap, gang(17, required=US), PlacementPolicy(2))
    assert not r.feasible
    assert "best is us-1 with room for 16 (1 more held as spare)" in r.reason


def test_golden_hyperpod_gb200_36_pods_two_ultraservers():
    """ml.p6e-gb200.36xlarge: 4 GPUs per node, 18 nodes per UltraServer (a u-p6e-gb200x72)."""
    nodes = []
    for u, layer3 in ((1, "nn-aaa"), (2, "nn-bbb")):
        for i in range(18):
            labels = {
                ZONE_LABEL: "us-east-1a",
                "topology.k8s.aws/network-node-layer-1": "nn-l1",
                "topology.k8s.aws/network-node-layer-2": "nn-l2",
                "topology.k8s.aws/network-node-layer-3": layer3,
                ULTRASERVER_LABEL: f"us-{u}",
                HOSTNAME_LABEL: f"hyperpod-i-{u}{i:04d}",
                INSTANCE_TYPE_LABEL: "ml.p6e-gb200.36xlarge",
            }
            nodes.append(
                Node(
                    f"hyperpod-i-{u}{i:04d}",
                    labels,
                    {
                        "cpu": 143_900,
                        "memory": 884_763_524 * 1024,
                        "pods": 737,
                        GPU: 4,
                        "vpc.amazonaws.com/efa": 17,
                    },
                )
            )
    snap = build_snapshot(nodes, [], DEFAULT_LEVELS)
    pod = {GPU: 4, "cpu": 64_000, "memory": 512 * 2**30, "vpc.amazonaws.com/efa": 16}
    preferred = place(snap, Gang((PodSet("main", 36, pod, preferred_topology=US),)))
    assert preferred.feasible
    assert preferred.level == "topology.k8s.aws/network-node-layer-2" and preferred.domains == ("nn-l2",)
    assert len(nodes_of(preferred)) == 36
    # consecutive ranks share an UltraServer
    assert {a.node[11] for a in preferred.assignments[:18]} == {"1"}
    required = place(snap, Gang((PodSet("main", 36, pod, required_topology=US),)))
    assert not required.feasible and required.assignments == ()
    assert "in one topology.k8s.aws/ultraserver-id; best is us-1 with room for 18" in required.reason
    # with no common layer below the zone, preferred spreads over exactly the two UltraServers
    apart = [
        Node(
            n.name,
            {**n.labels, "topology.k8s.aws/network-node-layer-1": n.labels[ULTRASERVER_LABEL]},
            n.allocatable,
        )
        for n in nodes
    ]
    spread = place(
        build_snapshot(apart, [], DEFAULT_LEVELS), Gang((PodSet("main", 36, pod, preferred_topology=US),))
    )
    assert spread.feasible and spread.level == ZONE_LABEL
    spread = place(
        build_snapshot(
            [
                Node(n.name, {**n.labels, ZONE_LABEL: n.labels[ULTRASERVER_LABEL]}, n.allocatable)
                for n in apart
            ]
        ),
        Gang((PodSet("main", 36, pod, preferred_topology=US),)),
    )
    assert spread.feasible and spread.level is None and spread.domains == ("us-1", "us-2")
    # each UltraServer alone takes a half
    half = place(snap, Gang((PodSet("main", 18, pod, required_topology=US),)))
    assert half.feasible and half.domains == ("us-1",)


def test_several_podsets_go_into_one_domain_together():
    nodes = ultraservers(2, 4)
    cpu_node = node("launcher-0", "us-2", allocatable={"cpu": 8000, "pods": 10})
    snap = build_snapshot([*nodes, cpu_node], [], LEVELS)
    g = Gang(
        (
            PodSet("launcher", 1, {"cpu": 2000}, required_topology=US),
            PodSet("workers", 4, {GPU: 4, "cpu": 1000}),
        )
    )
    r = place(snap, g)
    assert r.feasible and r.domains == ("us-1",)
    assert [(a.pod_set, a.index) for a in r.assignments][:2] == [("launcher", 0), ("workers", 0)]
    # a launcher that cannot share a GPU node needs the UltraServer with the cpu node
    g2 = Gang(
        (
            PodSet(
                "launcher", 1, {"cpu": 2000, "memory": 1}, PodConstraints(node_selector=(("role", "cpu"),))
            ),
            PodSet("workers", 4, {GPU: 4, "cpu": 1000}, required_topology=US),
        )
    )
    cpu_node = node(
        "launcher-0", "us-2", allocatable={"cpu": 8000, "memory": 2**30, "pods": 10}, labels={"role": "cpu"}
    )
    snap = build_snapshot([*nodes, cpu_node], [], LEVELS)
    r = place(snap, g2)
    assert r.feasible and r.domains == ("us-2",)
    assert next(a.node for a in r.assignments if a.pod_set == "launcher") == "launcher-0"


def test_podsets_share_node_capacity():
    snap = build_snapshot([node("a", allocatable={GPU: 4, "pods": 10})], [], LEVELS)
    g = Gang((PodSet("a", 2, {GPU: 1}), PodSet("b", 3, {GPU: 1})))
    r = place(snap, g)
    assert not r.feasible
    assert "needs 2 pods with 1 nvidia.com/gpu + 3 pods with 1 nvidia.com/gpu" in r.reason
    assert "not for all of them together" in r.reason


def test_same_answer_for_any_input_order():
    nodes = ultraservers(3, 6)
    pods = [BoundPod("ns", f"p{i}", n.name, {GPU: 2}) for i, n in enumerate(nodes[::4])]
    first = place(build_snapshot(nodes, pods, LEVELS), gang(10, gpus=2, preferred=US))
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(nodes)
        rng.shuffle(pods)
        assert place(build_snapshot(nodes, pods, LEVELS), gang(10, gpus=2, preferred=US)) == first


def test_bad_gangs_raise_input_error():
    snap = build_snapshot(ultraservers(1, 2), [], LEVELS)
    with pytest.raises(InputError) as err:
        place(snap, Gang(()))
    assert err.value.field == "podSets"
    with pytest.raises(InputError) as err:
        place(snap, gang(0))
    assert err.value.field == "podSets[0].count"
    with pytest.raises(InputError) as err:
        place(snap, gang(1, required="topology.k8s.aws/network-node-layer-9"))
    assert "required-topology" in err.value.field and "unknown topology label" in err.value.problem
    with pytest.raises(InputError, match="twice"):
        place(snap, Gang((PodSet("a", 1), PodSet("a", 1))))


def test_to_dict_shape():
    snap = build_snapshot(ultraservers(1, 2), [], LEVELS)
    d = place(snap, gang(1, required=US)).to_dict()
    assert list(d) == ["feasible", "level", "domains", "assignments", "reason"]
    assert d["assignments"] == [{"podSet": "main", "index": 0, "node": "us1-n00"}]


# -- replacement ------------------------------------------------------------------------------


def _running(snap, g, policy):
    r = place(snap, g, policy)
    assert r.feasible
    for a in r.assignments:
        snap.bind(BoundPod("team", f"{a.pod_set}-{a.index}", a.node, g.podsets[0].requests))
    return r


def test_replace_prefers_own_ultraservers_spare():
    snap = build_snapshot(ultraservers(2, 6), [], LEVELS)
    policy = PlacementPolicy(spares_per_ultraserver=1)
    g = gang(5, required=US)
    r = _running(snap, g, policy)
    assert r.domains == ("us-1",)
    failed = r.assignments[2].node
    snap.upsert_node(node(failed, "us-1", ready=False))
    rep = replace(snap, g, r.assignments, failed, policy)
    assert rep.feasible and rep.used_spare and rep.node == "us1-n05"
    assert rep.assignments == (Assignment("main", 2, "us1-n05"),)
    assert "spare of UltraServer us-1" in rep.reason


def test_replace_stays_in_the_required_domain_and_never_takes_other_spares():
    snap = build_snapshot(ultraservers(2, 3), [], LEVELS)
    policy = PlacementPolicy(spares_per_ultraserver=1)
    g = gang(2, required=US)
    r = _running(snap, g, policy)
    failed = r.assignments[0].node
    snap.bind(BoundPod("other", "x", "us1-n02", {GPU: 4}))  # the spare got used by someone else
    rep = replace(snap, g, r.assignments, failed, policy)
    assert not rep.feasible and rep.node is None and "in the gang's" in rep.reason
    # without a required level it may leave the UltraServer, but not into us-2's spare
    g_pref = gang(2, preferred=US)
    rep = replace(snap, g_pref, r.assignments, failed, policy)
    assert rep.feasible and rep.node in {"us2-n00", "us2-n01"} and not rep.used_spare


def test_replace_when_node_is_gone_and_noop():
    snap = build_snapshot(ultraservers(1, 4), [], LEVELS)
    g = gang(2, required=US)
    r = _running(snap, g, PlacementPolicy())
    failed = r.assignments[1].node
    snap.remove_node(failed)
    rep = replace(snap, g, r.assignments, failed)
    assert rep.feasible and rep.node == "us1-n02"
    assert replace(snap, g, r.assignments, "nowhere").assignments == ()
    with pytest.raises(InputError):
        replace(snap, g, [Assignment("ghost", 0, "us1-n00")], "us1-n00")


def test_refusal_reason_follows_every_change_of_the_snapshot():
    # The node summary is kept between identical questions; each bind, unbind and node change
    # must show in the next answer.
    snap = build_snapshot(ultraservers(1, 2), [BoundPod("ns", "p0", "us1-n00", {GPU: 4})], LEVELS)
    g = gang(2)
    assert place(snap, g).reason.endswith("nodes: 1 with room, 1 short of nvidia.com/gpu")
    assert place(snap, g).reason.endswith("nodes: 1 with room, 1 short of nvidia.com/gpu")
    snap.bind(BoundPod("ns", "p1", "us1-n01", {GPU: 4}))
    assert place(snap, g).reason.endswith("nodes: 2 short of nvidia.com/gpu")
    snap.unbind("ns", "p0")
    assert place(snap, g).reason.endswith("nodes: 1 with room, 1 short of nvidia.com/gpu")
    snap.upsert_node(node("us1-n00", ready=False))
    assert place(snap, g).reason.endswith("nodes: 1 not Ready, 1 short of nvidia.com/gpu")
    snap.remove_node("us1-n00")
    assert place(snap, g).reason.endswith("nodes: 1 short of nvidia.com/gpu")
