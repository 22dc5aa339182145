"""The guarantees of a gang, in each `GangPolicy.spec.bindMode`, on the real local cluster.

Ungate (the default): pods are created behind the placement gate; gangplugin pins each to its
node and removes the gate; kube-scheduler binds it. Extender: the extender's filter and bind
barrier bind the gang. In both: the gang runs whole inside its domain; a gang left partly bound
is requeued whole after `unscheduledTimeout`; plain GPU pods racing it for the same nodes never
leave it half-bound for good; a restart of gangplugin in the middle of a release completes it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from gangplugin.core.names import BIND_MODE_LABEL, PLACEMENT_GATE
from gangplugin.core.policy import PINNED_BIND_MODES
from gangplugin.kube.client import EVENTS, JOBS, PODS, Client
from tests.e2e.conftest import E2ECluster, e2e_local_cluster
from tests.e2e.kube import GB200, gpu_job, job_pods, trainer_pod_spec, unique, wait_for
from tests.e2e.test_admission import (
    HOSTNAME,
    US,
    _fail_node,
    _heal_node,
    _retries,
    check_of,
    node_us,
    running_gang,
    submit,
    submit_one_per_zone,
    workload,
)

MODES = ["Ungate", "Extender"]


def _holds_node(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and not pod["metadata"].get("deletionTimestamp")


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def assert_whole_in_domain(
    client: Client, namespace: str, job: str, mode: str, pods: list[dict[str, Any]]
) -> str:
    check = check_of(workload(client, namespace, job))
    (update,) = check["podSetUpdates"]
    domain = update["nodeSelector"][US]
    assert update["labels"][BIND_MODE_LABEL] == mode
    us = node_us(client)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert {us[n] for n in nodes} == {domain}, nodes
    assert len(set(nodes)) == len(nodes)  # one 4-GPU pod per 4-GPU node
    for p in pods:
        assert not _gates(p), p["spec"]
        pin = p["spec"]["nodeSelector"].get(HOSTNAME)
        pinned = mode in PINNED_BIND_MODES
        assert pin == (p["spec"]["nodeName"] if pinned else None), p["spec"]["nodeSelector"]
    return domain


@pytest.mark.parametrize("mode", MODES)
def test_gang_runs_whole_in_its_domain(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(bindMode=mode), 8)
    assert_whole_in_domain(client, namespace, job, mode, running_gang(client, namespace, job, 8))


@pytest.mark.parametrize("mode", MODES)
def test_a_gang_that_stays_partly_bound_is_requeued_whole(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    """A gang only one of whose pods can be bound (`submit_one_per_zone`): after
    unscheduledTimeout it is evicted whole: no pod of it stays bound, in either mode."""
    client = cluster.client
    queue = gang_queue(
        bindMode=mode, unscheduledTimeout="3s", readyTimeout="10m", requeue={"backoffBaseSeconds": 600}
    )
    name = submit_one_per_zone(client, namespace, queue, 2)
    (retry,) = _retries(client, namespace, name, 1, 120)
    assert retry["state"] == "Retry" and "after backoff 10m" in retry["message"], retry
    # 0/2 with the extender's bind barrier (all or nothing), 1/2 with kube-scheduler alone
    assert "/2 pods bound to nodes" in retry["message"] and "unscheduledTimeout 3s" in retry["message"]

    # Requeued whole, at once (not after the 10m backoff): the Job is suspended again, none of
    # its pods keeps a node, and the check holds it back for the backoff.
    def bound() -> list[str]:
        pods = job_pods(client, namespace, name)
        return [f"{p['metadata']['name']}@{p['spec']['nodeName']}" for p in pods if _holds_node(p)]

    deadline = time.monotonic() + 20
    while bound() and time.monotonic() < deadline:
        time.sleep(0.5)
    wl = workload(client, namespace, name)
    conditions = [(c["type"], c["status"], c.get("reason")) for c in wl["status"].get("conditions") or []]
    assert not bound(), f"still bound after the eviction: {bound()}; Workload conditions {conditions}"
    assert client.get(JOBS, name, namespace)["spec"]["suspend"] is True
    wait_for(
        lambda: "backoff until" in check_of(workload(client, namespace, name)).get("message", ""),
        60,
        "the check to hold the gang back for its backoff",
    )
    assert client.get(JOBS, name, namespace)["spec"]["suspend"] is True


def _plain_pods(client: Client, namespace: str, count: int) -> list[str]:
    """4-GPU pods with no gang, for any GB200 node, all created at once."""
    names = []
    for _ in range(count):
        name = unique("plain")
        spec = trainer_pod_spec(4)
        spec["nodeSelector"] = {"node.kubernetes.io/instance-type": GB200}
        client.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            },
        )
        names.append(name)
    return names


@pytest.mark.parametrize("mode", MODES)
def test_plain_gpu_pods_racing_a_gang_never_leave_it_half_bound_for_good(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    client = cluster.client
    timeout = 10.0
    queue = gang_queue(bindMode=mode, unscheduledTimeout=f"{timeout:g}s", requeue={"backoffBaseSeconds": 1})
    size = 16
    job = submit(client, namespace, queue, size)
    plain = _plain_pods(client, namespace, 30)  # racing for the GB200 nodes while the gang is placed
    partial_since: float | None = None
    longest = 0.0
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        bound = sum(1 for p in job_pods(client, namespace, job) if _holds_node(p))
        now = time.monotonic()
        if 0 < bound < size:
            partial_since = partial_since or now
            longest = max(longest, now - partial_since)
        else:
            partial_since = None
        time.sleep(0.5)
    # The watchdog requeues a partly bound gang whole after unscheduledTimeout (plus its scan).
    assert longest < timeout + 10, f"the gang stayed partly bound for {longest:.0f}s"
    for name in plain:
        client.delete(PODS, name, namespace)
    pods = running_gang(client, namespace, job, size)
    assert_whole_in_domain(client, namespace, job, mode, pods)


def test_gangplugin_killed_while_releasing_an_ungate_gang_completes_it(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """gangplugin is SIGKILLed as soon as the first pod of a 32-pod gang is pinned (most of the
    gang is then still gated); the restarted ungater pins the rest next to the pinned ones."""
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    queue = gang_queue(bindMode="Ungate")
    size = 32
    name = unique("job")
    client.create(
        JOBS,
        gpu_job(
            name, namespace, queue, size, 2, metadata={"annotations": {"gangplugin.io/required-topology": US}}
        ),
    )

    def released_in_part() -> list[dict[str, Any]] | None:
        pods = job_pods(client, namespace, name)
        pinned = [p for p in pods if not _gates(p)]
        return pods if len(pods) == size and pinned else None

    pods = wait_for(released_in_part, 120, f"the first pin of {name}", interval=0.02)
    gated_at_kill = sum(1 for p in pods if PLACEMENT_GATE in _gates(p))
    e2e_local_cluster().restart("gangplugin")
    print(f"gangplugin killed with {gated_at_kill} of {size} pods still gated")
    pods = running_gang(client, namespace, name, size)
    check = check_of(workload(client, namespace, name))
    domain = check["podSetUpdates"][0]["nodeSelector"][US]
    us = node_us(client)
    assert {us[p["spec"]["nodeName"]] for p in pods} == {domain}
    for p in pods:
        assert p["spec"]["nodeSelector"][HOSTNAME] == p["spec"]["nodeName"] and not _gates(p)


def test_a_pod_pinned_to_a_node_that_fails_before_it_is_bound_is_made_again_and_pinned_elsewhere(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """A pin is final, so with kube-scheduler down while an 8-pod Ungate gang is pinned, one
    pinned node failing strands its pod. gangplugin deletes it, the Job makes it again behind
    the gate, and it is pinned elsewhere in the gang's UltraServer; with kube-scheduler back the
    gang runs whole there, off the failed node."""
    assert cluster.local, "this test stops kube-scheduler, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    local = e2e_local_cluster()
    queue = gang_queue(bindMode="Ungate")
    local.stop_process("kube-scheduler")
    failed: str | None = None
    try:
        job = submit(client, namespace, queue, 8)

        def pinned(avoid: str | None, gone: str | None) -> list[dict[str, Any]] | None:
            pods = [p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")]
            pins = [p["spec"].get("nodeSelector", {}).get(HOSTNAME) for p in pods]
            names = {p["metadata"]["name"] for p in pods}
            whole = len(pods) == 8 and all(pins) and not any(_gates(p) for p in pods)
            return pods if whole and avoid not in pins and gone not in names else None

        pods = wait_for(lambda: pinned(None, None), 120, "8 pods pinned")
        assert not any(p["spec"].get("nodeName") for p in pods), "kube-scheduler is down: nothing bound"
        stranded = min(pods, key=lambda p: p["metadata"]["name"])
        failed = stranded["spec"]["nodeSelector"][HOSTNAME]
        _fail_node(client, failed)
        pods = wait_for(
            lambda: pinned(failed, stranded["metadata"]["name"]), 90, f"a pod pinned again off {failed}"
        )
        wl = workload(client, namespace, job)["metadata"]["name"]
        events = client.list(EVENTS, namespace, field_selector=f"involvedObject.name={wl}")["items"]
        lost = [e["message"] for e in events if e["reason"] == "PinnedNodeLost"]
        assert len(lost) == 1 and f"pinned to {failed}, which is NotReady" in lost[0], lost
    finally:
        local.restart("kube-scheduler")
        if failed is not None:
            _heal_node(client, failed)
    pods = running_gang(client, namespace, job, 8)
    assert_whole_in_domain(client, namespace, job, "Ungate", pods)
    assert failed not in {p["spec"]["nodeName"] for p in pods}
