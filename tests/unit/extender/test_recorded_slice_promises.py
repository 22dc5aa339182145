"""The ungater's reservations hold a gang admitted in slices into a network layer where the gang
check counted its slices (`gangplugin.io/slice-domains` on its podSetUpdate), not where they
would place it on their own; its pods are pinned there too. Placed on their own, the promise
took the room the check had counted for a gang admitted into one UltraServer of the layer,
and at 500 nodes one gang a burst stayed gated. A gang not in slices admitted into the layer is
held and pinned in the UltraServers the check counted its pods in, as well."""

from __future__ import annotations

import pytest

from gangplugin.admission.writes import as_admitted
from gangplugin.core.admission import promised_pods
from gangplugin.core.names import (
    REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_DOMAINS_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, ZONE_LABEL
from gangplugin.extender.reservations import UNSEEN_ADMISSION, GangReservations
from gangplugin.extender.shared import admitted_of, policy_of
from gangplugin.kube.client import NODES
from gangplugin.readmodel.records import node_record
from tests.support import objects
from tests.support.caches import model_of
from tests.support.extender import add, ungate_pod

LAYER = "topology.k8s.aws/network-node-layer-3"
SLICES = {
    REQUIRED_TOPOLOGY_ANNOTATION: LAYER,
    SLICE_SIZE_ANNOTATION: "2",
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION: ULTRASERVER_LABEL,
}


def _wide(recorded: str | None, asked: dict[str, str] = SLICES) -> dict:
    """4 pods in slices of 2 (or as `asked`), admitted into the layer; the check counted them on
    `recorded`."""
    annotations = {SLICE_DOMAINS_ANNOTATION: recorded} if recorded else {}
    update = {"name": "main", "nodeSelector": {LAYER: "l1"}, "annotations": annotations}
    check = objects.check_state("gang", "Ready", podSetUpdates=[update])
    return objects.admitted_by_check(
        "wide", "ns", objects.podset(4, annotations=asked), check, resourceVersion="1"
    )


def _reservations(*workloads: dict) -> GangReservations:
    """A layer of three UltraServers of 2 nodes each."""
    checks, policies = [objects.admission_check("gang", policy="p")], [objects.gang_policy("p")]
    _, model = model_of(workloads=list(workloads), checks=checks, policies=policies)
    res = GangReservations(policy_of=policy_of(model), admitted_of=admitted_of(model))
    for us in ("us-1", "us-2", "us-3"):
        for i in range(2):
            res.on_node("ADDED", None, node_record(objects.node(f"{us}-{i}", us, labels={LAYER: "l1"})))
    return res


def _promised_on(res: GangReservations) -> set[str]:
    res._settle()
    return {n.rsplit("-", 1)[0] for n in res.promises.nodes() if ("ns", "wide") in res.promises.on(n)}


def test_the_promise_sits_where_the_check_counted_the_slices() -> None:
    unrecorded = _reservations(wide := _wide(None))
    unrecorded.on_workload("ADDED", None, wide)
    assert _promised_on(unrecorded) == {"us-1", "us-2"}  # on its own: the first by name

    recorded = _reservations(wide := _wide("us-3,us-2"))
    recorded.on_workload("ADDED", None, wide)
    assert _promised_on(recorded) == {"us-2", "us-3"}


def test_a_gang_not_in_slices_is_promised_where_the_check_counted_its_pods() -> None:
    asked = {REQUIRED_TOPOLOGY_ANNOTATION: LAYER}
    unrecorded = _reservations(wide := _wide(None, asked))
    unrecorded.on_workload("ADDED", None, wide)
    assert _promised_on(unrecorded) == {"us-1", "us-2"}

    recorded = _reservations(wide := _wide("us-3*2,us-2*2", asked))
    recorded.on_workload("ADDED", None, wide)
    assert _promised_on(recorded) == {"us-2", "us-3"}


@pytest.mark.parametrize(
    ("asked", "record"), [(SLICES, "us-3,us-2"), ({REQUIRED_TOPOLOGY_ANNOTATION: LAYER}, "us-3*2,us-2*2")]
)
def test_the_pods_are_pinned_where_the_check_counted_the_slices(asked: dict[str, str], record: str) -> None:
    res = _reservations(wide := _wide(record, asked))
    res.on_workload("ADDED", None, wide)
    pods = [ungate_pod(f"wide-{i}", "wide", 4) for i in range(4)]
    for i, p in enumerate(pods):
        p["metadata"]["annotations"].update({**asked, SLICE_DOMAINS_ANNOTATION: record})
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
        p["spec"]["nodeSelector"] = {LAYER: "l1"}
    add(res, *pods)

    pins, why = res.pins(("ns", "wide"), now=0.0)

    by_pod = {m.name: node.rsplit("-", 1)[0] for m, node in pins}
    assert sorted(by_pod.values()) == ["us-2", "us-2", "us-3", "us-3"], why
    if asked is SLICES:
        assert by_pod == {"wide-0": "us-3", "wide-1": "us-3", "wide-2": "us-2", "wide-3": "us-2"}, why


def test_a_restarted_check_counts_the_slices_where_it_recorded_them() -> None:
    """The record is on the Workload, not in memory: a gang check started fresh over the same
    API objects (its read model, as after a kill -9) holds the same UltraServers as the
    ungater, not the first ones by name."""

    checks, policies = [objects.admission_check("gang", policy="p")], [objects.gang_policy("p")]
    caches, model = model_of(workloads=[_wide("us-3,us-2")], checks=checks, policies=policies)
    for us in ("us-1", "us-2", "us-3"):
        for i in range(2):
            caches.put(NODES, objects.node(f"{us}-{i}", us, labels={LAYER: "l1"}))
    levels = (ZONE_LABEL, LAYER, ULTRASERVER_LABEL, HOSTNAME_LABEL)

    snap = model.promised_snapshot(levels)

    gang = model.promised_gang(_wide("us-3,us-2"))
    assert gang is not None
    held = [snap.node_of("ns", p) for p in promised_pods(gang[0])]
    where = [snap.nodes[i].labels[ULTRASERVER_LABEL] for i in held if i is not None]
    assert where == ["us-3", "us-3", "us-2", "us-2"]


@pytest.mark.parametrize(
    ("asked", "record", "pinned"),
    [
        ({REQUIRED_TOPOLOGY_ANNOTATION: LAYER}, "us-3*2,us-2*2", ["us-3-0"]),
        (SLICES, "us-3,us-2", ["us-3-0", "us-3-1"]),
    ],
)
def test_the_rest_of_a_gang_pinned_in_part_is_promised_where_the_check_counted_it(
    asked: dict[str, str], record: str, pinned: list[str]
) -> None:
    """The ungater pins a gang pod by pod: meanwhile the rest is held in the recorded domains its
    pinned pods have not taken, where its pins will go, not where best fit would (on us-1, the
    room the check may have counted for another gang)."""
    res = _reservations(wide := _wide(record, asked))
    res.on_workload("ADDED", None, wide)
    pods = [
        ungate_pod(f"wide-{i}", "wide", 4, pinned=pinned[i] if i < len(pinned) else None) for i in range(4)
    ]
    for p in pods:
        p["metadata"]["annotations"].update({**asked, SLICE_DOMAINS_ANNOTATION: record})
    add(res, *pods)
    assert _promised_on(res) == ({"us-2", "us-3"} if len(pinned) == 1 else {"us-2"})


def test_a_gang_announced_but_not_seen_on_the_watch_waits_for_what_the_check_saw_before_it() -> None:
    """The check saw a gang leave us-3 (its Workload deleted) and admitted a wide gang counted
    there, announcing it before its write; the reservations' Workload watch, behind, still held
    the one that left. Pinned then, the record did not fit and the wide gang went where the check
    had not counted it (`test_node_failures`, once in CI, beside the samples' gangs leaving).
    It waits for its own write on the watch, which comes after everything the check saw."""
    asked, record = {REQUIRED_TOPOLOGY_ANNOTATION: LAYER}, "us-3*2,us-2*2"
    pinned = objects.check_state("gang", "Ready", pinned={ULTRASERVER_LABEL: "us-3"})
    leaving = objects.admitted_by_check("leaving", "ns", objects.podset(2), pinned, resourceVersion="1")
    written = _wide(record, asked)
    decided_on = {**written, "metadata": {**written["metadata"], "resourceVersion": "7"}}
    decided_on["status"] = {**written["status"], "admissionChecks": [objects.check_state("gang", "Pending")]}
    written["metadata"]["resourceVersion"] = "9"
    res = _reservations(written, leaving)
    res.on_workload("ADDED", None, leaving)
    res.on_workload("ADDED", None, decided_on)
    updates = written["status"]["admissionChecks"][0]["podSetUpdates"]
    res.on_admitting(as_admitted(decided_on, "gang", updates))
    pods = [ungate_pod(f"wide-{i}", "wide", 4) for i in range(4)]
    for p in pods:
        p["metadata"]["annotations"].update({**asked, SLICE_DOMAINS_ANNOTATION: record})
        p["spec"]["nodeSelector"] = {LAYER: "l1"}
    add(res, *pods)

    assert res.pins(("ns", "wide"), now=0.0) == ([], UNSEEN_ADMISSION)

    res.on_workload("DELETED", leaving, None)  # the watch catches up: first what the check saw,
    res.on_workload("MODIFIED", decided_on, written)  # then the admission's own write
    pins, why = res.pins(("ns", "wide"), now=0.0)
    assert sorted(node.rsplit("-", 1)[0] for _, node in pins) == ["us-2", "us-2", "us-3", "us-3"], why
