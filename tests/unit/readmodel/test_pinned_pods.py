"""A gang's pods the ungater pinned to nodes and kube-scheduler has not bound yet hold those
nodes in the gang check's capacity: they are counted where they are pinned, and the gang's
promise covers only its pods not pinned. Before, the promise of the pods not bound was placed
anew, by best fit, in other UltraServers of a wide domain than the pins, and the check admitted
a gang onto the nodes the pinned pods were about to take (the ungater then held it back)."""

from __future__ import annotations

from gangplugin.core.admission import promised_pods
from gangplugin.core.names import PLACEMENT_GATE, REQUIRED_TOPOLOGY_ANNOTATION, SLICE_DOMAINS_ANNOTATION
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, ZONE_LABEL
from gangplugin.kube.client import NODES, PODS
from tests.support import objects
from tests.support.caches import model_of

LAYER = "topology.k8s.aws/network-node-layer-3"
LEVELS = (ZONE_LABEL, LAYER, ULTRASERVER_LABEL, HOSTNAME_LABEL)


def _model(recorded: str | None = None):  # type: ignore[no-untyped-def]
    """A gang of 4 admitted into a layer of three UltraServers of 2 nodes (4 GPUs each), its pods
    counted in the UltraServers `recorded` names (`gangplugin.io/slice-domains`) when given."""
    update = {"name": "main", "nodeSelector": {LAYER: "l1"}}
    if recorded:
        update["annotations"] = {SLICE_DOMAINS_ANNOTATION: recorded}
    podset = objects.podset(4, annotations={REQUIRED_TOPOLOGY_ANNOTATION: LAYER})
    check = objects.check_state("gang", "Ready", podSetUpdates=[update])
    wl = objects.admitted_by_check("wide", "ns", podset, check, resourceVersion="1")
    checks, policies = [objects.admission_check("gang", policy="p")], [objects.gang_policy("p")]
    caches, model = model_of(workloads=[wl], checks=checks, policies=policies)
    for us in ("us-1", "us-2", "us-3"):
        for i in range(2):
            caches.put(NODES, objects.node(f"{us}-{i}", us, labels={LAYER: "l1"}))
    return caches, model, wl


def _pod(i: int, pinned: str | None = None, gated: bool = False):  # type: ignore[no-untyped-def]
    p = objects.pod(f"wide-{i}", gang="wide", size=4, uid=f"u{i}")
    if pinned:
        p["spec"]["nodeSelector"] = {HOSTNAME_LABEL: pinned}
    if gated:
        p["spec"]["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    return p


def _ultraservers(snap, names) -> list[str]:  # type: ignore[no-untyped-def]
    held = [snap.node_of("ns", n) for n in names]
    return sorted(snap.nodes[i].labels[ULTRASERVER_LABEL] for i in held if i is not None)


def test_pinned_pods_hold_their_nodes_and_the_promise_covers_only_the_rest() -> None:
    caches, model, wl = _model()
    caches.put(PODS, _pod(0, pinned="us-3-0"))
    caches.put(PODS, _pod(1, pinned="us-3-1"))
    caches.put(PODS, _pod(2, gated=True))
    caches.put(PODS, _pod(3, gated=True))

    snap = model.promised_snapshot(LEVELS)

    assert _ultraservers(snap, ["wide-0", "wide-1"]) == ["us-3", "us-3"]  # where they are pinned
    gang = model.promised_gang(wl)
    assert gang is not None
    promised = _ultraservers(snap, list(promised_pods(gang[0])))
    assert len(promised) == 2 and "us-3" not in promised, promised  # the other two, elsewhere


def test_a_pod_still_gated_or_being_deleted_holds_no_node_by_its_selector() -> None:
    caches, model, _ = _model()
    gated = _pod(0, pinned="us-3-0", gated=True)
    deleting = _pod(1, pinned="us-3-1")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    caches.put(PODS, gated)
    caches.put(PODS, deleting)
    snap = model.capacity.build(LEVELS)
    assert snap.node_of("ns", "wide-0") is None and snap.node_of("ns", "wide-1") is None


def test_a_pinned_pod_once_bound_is_counted_once() -> None:
    caches, model, _ = _model()
    caches.put(PODS, _pod(0, pinned="us-3-0"))
    bound = _pod(0, pinned="us-3-0")
    bound["spec"]["nodeName"] = "us-3-0"
    bound["status"]["phase"] = "Running"
    caches.put(PODS, bound)
    snap = model.capacity.build(LEVELS)
    node = snap.node_of("ns", "wide-0")
    assert node is not None and snap.nodes[node].name == "us-3-0"
    assert {podset: len(on) for podset, on in model.index.placed("ns", "wide").items()} == {"main": 1}


def test_a_plain_pod_is_never_counted_by_its_selector_and_one_bound_beside_a_pin_counts_too() -> None:
    """Only a gang's pods are pinned by the ungater: a plain pod waiting with a hostname
    selector holds nothing yet. A plain pod kube-scheduler bound on a node a gang's pod is pinned
    to (the race the pin loses) is counted beside it: the node is full, not offered again."""
    caches, model, _ = _model()
    waiting = objects.pod("plain-0", uid="p0")
    waiting["spec"]["nodeSelector"] = {HOSTNAME_LABEL: "us-1-0"}
    caches.put(PODS, waiting)
    caches.put(PODS, _pod(0, pinned="us-2-0"))
    caches.put(PODS, objects.pod("plain-1", node="us-2-0", uid="p1"))
    snap = model.capacity.build(LEVELS)
    assert snap.node_of("ns", "plain-0") is None
    node = snap.node_of("ns", "wide-0")
    assert node is not None and snap.node_of("ns", "plain-1") == node
    assert snap.overcommitted(node)


def test_the_rest_of_a_gang_pinned_in_part_is_promised_in_its_record_less_its_pins() -> None:
    """The check counted the gang 2 in us-1 and 2 in us-3; the ungater has pinned one pod to us-1:
    the rest is promised 1 in us-1 and 2 in us-3 (where its pins will go), not by best fit
    (which takes us-2, room the check may have counted for another gang since)."""

    def rest_of(recorded: str | None) -> list[str]:
        caches, model, wl = _model(recorded)
        caches.put(PODS, _pod(0, pinned="us-1-0"))
        for i in (1, 2, 3):
            caches.put(PODS, _pod(i, gated=True))
        snap = model.promised_snapshot(LEVELS)
        gang = model.promised_gang(wl)
        assert gang is not None and _ultraservers(snap, ["wide-0"]) == ["us-1"]
        return _ultraservers(snap, [n for n in promised_pods(gang[0]) if snap.node_of("ns", n) is not None])

    assert rest_of("us-1*2,us-3*2") == ["us-1", "us-3", "us-3"]
    assert rest_of(None) != ["us-1", "us-3", "us-3"]  # best fit, on its own
