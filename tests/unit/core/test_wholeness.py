"""A gang that can never start whole is told so: larger than every domain of its required level
(spares kept back, NotReady and cordoned nodes counted), with the numbers and the fix."""

from dataclasses import replace

from gangplugin.core.eligibility import PodConstraints, Taint, Toleration
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, never_whole, place
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, build_snapshot
from tests.support.core import GPU, gang, node, ultraservers

US = ULTRASERVER_LABEL
SPARE = PlacementPolicy(spares_per_ultraserver=1)


def pytorchjob(workers: int) -> Gang:
    """1 master and `workers` workers of 4 GPUs, required in one UltraServer."""
    requests = {GPU: 4, "cpu": 1000}
    return Gang(
        (
            PodSet("master", 1, requests, required_topology=US),
            PodSet("worker", workers, requests, required_topology=US),
        ),
        "llama",
    )


def test_the_held_out_pytorchjob_is_told_it_can_never_start_whole():
    snap = build_snapshot(ultraservers(3, 18))
    never = never_whole(snap, pytorchjob(18), SPARE)
    assert never is not None
    assert (never.needed, never.room, never.nodes, never.spares) == (19, 17, 18, 1)
    assert never.message.startswith(
        "can never start whole: it needs 19 pods (76 GPUs) in one topology.k8s.aws/ultraserver-id; "
        "the largest, us-1, has room for 17 of its 19 pods (18 nodes, 1 held as spare); "
    )
    assert (
        "slice-size" in never.message and "preferred-topology instead of required-topology" in never.message
    )
    # one worker fewer fits once the UltraServer is empty: a wait, not a refusal
    assert never_whole(snap, pytorchjob(16), SPARE) is None
    # without the spare 18 nodes still cannot take 19 pods, but 18 pods fit
    assert never_whole(snap, pytorchjob(18), PlacementPolicy()) is not None
    assert never_whole(snap, pytorchjob(17), PlacementPolicy()) is None


def test_pods_running_now_are_a_wait_not_a_refusal():
    nodes = ultraservers(2, 18)
    busy = [BoundPod("ns", f"p{i}", n.name, {GPU: 4}) for i, n in enumerate(nodes[::2])]
    snap = build_snapshot(nodes, busy)  # half of each UltraServer busy
    assert not place(snap, pytorchjob(10), SPARE).feasible
    assert never_whole(snap, pytorchjob(10), SPARE) is None


def test_notready_and_cordoned_nodes_count_a_lasting_taint_does_not():
    nodes = ultraservers(1, 18)
    down = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
    nodes[0] = replace(nodes[0], ready=False, taints=(down,))
    nodes[1] = replace(
        nodes[1], unschedulable=True, taints=(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),)
    )
    snap = build_snapshot(nodes)
    assert not place(snap, gang(17, required=US), SPARE).feasible  # not now
    assert never_whole(snap, gang(17, required=US), SPARE) is None  # but once they are back
    tainted = [
        replace(n, taints=(Taint("dedicated", "infer", "NoSchedule"),)) if i < 2 else n
        for i, n in enumerate(nodes)
    ]
    snap = build_snapshot(tainted)
    never = never_whole(snap, gang(17, required=US), SPARE)
    assert never is not None and never.room == 15
    tolerant = gang(
        17, required=US, constraints=PodConstraints(tolerations=(Toleration("dedicated", "Exists"),))
    )
    assert never_whole(snap, tolerant, SPARE) is None


def test_without_a_required_level_the_whole_cluster_counts():
    snap = build_snapshot(ultraservers(2, 18))
    assert never_whole(snap, gang(34, preferred=US), SPARE) is None
    never = never_whole(snap, gang(35, preferred=US), SPARE)
    assert never is not None and never.level is None
    assert never.message == (
        "can never start whole: it needs 35 pods (140 GPUs); the cluster has room for 34 of its 35 "
        "pods (36 nodes, 2 held as spare); make the gang smaller, or add nodes"
    )


def test_an_unlabelled_node_is_in_no_domain_of_the_level_and_a_node_change_is_seen():
    nodes = ultraservers(1, 4)
    snap = build_snapshot(nodes)
    assert never_whole(snap, gang(5, required=US), PlacementPolicy()) is not None
    snap.upsert_node(node("us1-n09", "us-1"))  # the UltraServer grows: the kept answer goes
    assert never_whole(snap, gang(5, required=US), PlacementPolicy()) is None
    snap.upsert_node(node("loose", None))
    assert never_whole(snap, gang(6, required=US), PlacementPolicy()) is not None


def test_several_shapes_are_refused_only_when_one_cannot_fit():
    snap = build_snapshot(ultraservers(1, 4))
    small = PodSet("a", 4, {GPU: 2, "cpu": 1000}, required_topology=US)
    big = PodSet("b", 2, {GPU: 4, "cpu": 1000}, required_topology=US)
    # each shape fits alone, their 16 GPUs match the 16 there: not refused (it may fit)
    assert never_whole(snap, Gang((small, big)), PlacementPolicy()) is None
    bigger = replace(big, count=3)  # 8 + 12 GPUs > 16: can never
    assert never_whole(snap, Gang((small, bigger)), PlacementPolicy()) is not None
