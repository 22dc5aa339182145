"""Several nodes failing at once under a running gang in slices, on the real local cluster.

A 32-pod Indexed Job asks for slices of 16 pods, each in one UltraServer, both slices in one
network-node-layer-2 (two UltraServers of 18 nodes): 16 nodes of each UltraServer run it and
`sparesPerUltraServer: 2` keeps the other two free. 1, 2 and then 3 nodes of one UltraServer
fail: up to `maxReplacedNodes: 2` they are replaced in one decision by that UltraServer's
spares (the slice keeps its UltraServer); 3 requeue the gang whole at once, long before
`recoveryTimeout`. A gang not in slices admitted over two UltraServers of a layer runs where
the check counted its pods (`gangplugin.io/slice-domains`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gangplugin.core.names import SLICE_DOMAINS_ANNOTATION
from gangplugin.core.placement.recorded import parse_slice_domains
from gangplugin.kube.client import JOBS, NODES, Client
from gangplugin.kube.kueue_records import is_true
from tests.support.cluster import E2ECluster
from tests.support.gangs import US, check_of, events_of, node_us, requeued, retries, running_gang, workload
from tests.support.kube import job_pods, unique, wait_for
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import gpu_job

LAYER2 = "topology.k8s.aws/network-node-layer-2"
INDEX = "batch.kubernetes.io/job-completion-index"


def _sliced_job(client: Client, namespace: str, queue: str) -> str:
    name = unique("sliced")
    annotations = {
        "gangplugin.io/required-topology": LAYER2,
        "gangplugin.io/slice-size": "16",
        "gangplugin.io/slice-required-topology": US,
    }
    client.create(JOBS, gpu_job(name, namespace, queue, 32, 4, metadata={"annotations": annotations}))
    return name


def _slices(pods: list[dict[str, Any]], us: dict[str, str]) -> list[set[str]]:
    """The UltraServers of pod indexes 0-15 and 16-31."""
    by_index = {int(p["metadata"]["annotations"][INDEX]): us[p["spec"]["nodeName"]] for p in pods}
    return [{by_index[i] for i in range(s, s + 16)} for s in (0, 16)]


def _story(client: Client, namespace: str, job: str, victims: list[str]) -> str:
    """What a failure message needs: the failed nodes' Ready, the check's state, our Events."""
    ready = {v: is_true(client.get(NODES, v), "Ready") for v in victims}
    wl = workload(client, namespace, job)
    state = check_of(wl)
    events = [f"{e['reason']}: {e['message']}" for e in events_of(client, namespace, wl["metadata"]["name"])]
    check = f"{state.get('state')}: {state.get('message')}"
    return f"failed {victims} (Ready: {ready}); check {check}; events {events}"


def test_a_gang_not_in_slices_runs_in_the_ultraservers_the_check_counted(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """24 pods in one network-node-layer-2, more than an UltraServer holds: the check records
    how many it counted in each UltraServer (its podSetUpdate, which Kueue stamps on the pods),
    and the ungater pins them there."""
    client = cluster.client
    queue = gang_queue()
    name = unique("wide")
    meta = {"annotations": {"gangplugin.io/required-topology": LAYER2}}
    client.create(JOBS, gpu_job(name, namespace, queue, 24, 4, metadata=meta))
    pods = running_gang(client, namespace, name, 24)
    (update,) = check_of(workload(client, namespace, name))["podSetUpdates"]
    assert set(update["nodeSelector"]) == {LAYER2}, update
    recorded = update["annotations"][SLICE_DOMAINS_ANNOTATION]
    assert {p["metadata"]["annotations"][SLICE_DOMAINS_ANNOTATION] for p in pods} == {recorded}
    us = node_us(client)
    ran = Counter(us[p["spec"]["nodeName"]] for p in pods)
    assert Counter(parse_slice_domains(recorded, "podSetUpdates")) == ran, (recorded, ran)
    assert len(ran) == 2, ran


@pytest.mark.parametrize("failed", [1, 2, 3])
def test_failed_nodes_of_one_ultraserver_replaced_up_to_max_then_requeued(
    cluster: E2ECluster, namespace: str, gang_queue: Any, failed: int
) -> None:
    client = cluster.client
    queue = gang_queue(
        nodeFailure="ReplaceFromSpare", sparesPerUltraServer=2, maxReplacedNodes=2, recoveryTimeout="5m"
    )
    job = _sliced_job(client, namespace, queue)
    pods = running_gang(client, namespace, job, 32)
    wait_for(lambda: is_true(workload(client, namespace, job), "PodsReady"), 60, "PodsReady")
    wl = workload(client, namespace, job)
    us = node_us(client)
    first, second = _slices(pods, us)
    assert len(first) == 1 and len(second) == 1 and first != second, (first, second)
    # pinned to the gang-level domain only: the slices are the extender's plan
    assert set(check_of(wl)["podSetUpdates"][0]["nodeSelector"]) == {LAYER2}
    # where the check counted each slice, which Kueue stamps on the pods, is where they run
    recorded = check_of(wl)["podSetUpdates"][0]["annotations"][SLICE_DOMAINS_ANNOTATION]
    assert recorded == f"{next(iter(first))},{next(iter(second))}", (recorded, first, second)
    assert {p["metadata"]["annotations"][SLICE_DOMAINS_ANNOTATION] for p in pods} == {recorded}
    (target,) = first
    victims = sorted(p["spec"]["nodeName"] for p in pods if us[p["spec"]["nodeName"]] == target)[:failed]
    fail_nodes(client, *victims)
    try:
        if failed > 2:
            (retry,) = retries(client, namespace, job, 1, 90)
            assert requeued(retry) and "more than maxReplacedNodes 2" in retry["message"], retry
            reasons = [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])]
            assert "GangRequeued" in reasons and "NodeReplaced" not in reasons, reasons
            return

        def replaced() -> list[dict[str, Any]] | None:
            evs = [
                e
                for e in events_of(client, namespace, wl["metadata"]["name"])
                if e["reason"] == "NodeReplaced"
            ]
            return evs if len(evs) >= failed else None

        try:
            events = wait_for(replaced, 90, f"{failed} NodeReplaced event(s)")
        except AssertionError as err:
            raise AssertionError(f"{err}; {_story(client, namespace, job, victims)}") from None
        assert {
            v for v in victims if any(v in e["message"] and "spare" in e["message"] for e in events)
        } == set(victims), [e["message"] for e in events]

        lagging: list[str] = []  # the pods that keep the gang from being whole, for the failure

        def whole_again() -> list[dict[str, Any]] | None:
            items = [
                p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")
            ]
            active = [p for p in items if p.get("status", {}).get("phase") not in ("Failed", "Succeeded")]
            lagging[:] = [f"{len(active)} of 32 pods active"] if len(active) != 32 else []
            lagging.extend(
                f"{p['metadata']['name']} on {p['spec'].get('nodeName')} "
                f"(pinned {(p['spec'].get('nodeSelector') or {}).get('kubernetes.io/hostname')}, "
                f"gated {bool(p['spec'].get('schedulingGates'))}, {p.get('status', {}).get('phase')})"
                for p in active
                if not (is_true(p, "Ready") and p["spec"]["nodeName"] not in victims)
            )
            return active if not lagging else None

        try:
            again = wait_for(whole_again, 120, "the gang whole again off the failed nodes")
        except AssertionError as err:
            raise AssertionError(
                f"{err}; not there: {lagging}; {_story(client, namespace, job, victims)}"
            ) from None
        assert _slices(again, us) == [first, second], "a slice left its UltraServer"
        reasons = [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])]
        assert "GangRequeued" not in reasons, reasons
        # Each failed node is replaced once: a second NodeReplaced is a decision made again on a
        # pod already deleted (a reconcile that ran before the watch showed the deletion).
        assert reasons.count("NodeReplaced") == failed, _story(client, namespace, job, victims)
        assert check_of(workload(client, namespace, job))["state"] == "Ready"
    finally:
        for v in victims:
            heal_nodes(client, v)
