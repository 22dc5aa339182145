"""The gang admission check on the real local cluster (Kueue, kube-scheduler, kwok).

Each test makes its own GangPolicy, AdmissionCheck, ResourceFlavor, ClusterQueue (using the check
through admissionChecksStrategy) and LocalQueue, with short timeouts where the test controls them.
Pods that must never become Ready carry `e2e.gangplugin.io/never-ready` (kwok's pod-ready stage
skips them, deploy/kwok/stages.yaml); a node is made NotReady by labelling it
`e2e.gangplugin.io/not-ready` (kwok's node-initialize stage then leaves it alone) and setting its
Ready condition False, which the node lifecycle controller acts on as for a dead kubelet.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml

from gangplugin.core.names import (
    BIND_MODE_LABEL,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
)
from gangplugin.kube.client import EVENTS, PODS, ApiError, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import GANG_POLICIES, TOPOLOGIES
from gangplugin.localcluster.cluster import REPO
from tests.support import objects
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.gangs import (
    HOSTNAME,
    NEVER_READY,
    US,
    check_of,
    epoch,
    events_of,
    node_us,
    rejected,
    requeued,
    retries,
    running_gang,
    submit,
    workload,
)
from tests.support.kube import condition, job_pods, unique, wait_for, workload_of
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import JOBSETS, gang_policy, pod_group_member
from tests.support.scrape import wait_decided


@pytest.mark.compat
def test_gang_admitted_into_one_ultraserver(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    client = cluster.client
    queue = gang_queue()
    job = submit(client, namespace, queue, 4)
    pods = running_gang(client, namespace, job, 4)
    wl = workload(client, namespace, job)
    check = check_of(wl)
    assert check["state"] == "Ready", check
    (update,) = check["podSetUpdates"]
    domain = update["nodeSelector"][US]
    # bindMode defaults to Ungate: each pod was pinned to its node by gangplugin, then bound
    # by kube-scheduler there.
    assert update["labels"] == {GANG_LABEL: wl["metadata"]["name"], BIND_MODE_LABEL: "Ungate"}
    assert update["annotations"] == {GANG_SIZE_ANNOTATION: "4"}
    us = node_us(client)
    for pod in pods:
        assert pod["metadata"]["labels"][GANG_LABEL] == wl["metadata"]["name"]
        assert pod["metadata"]["annotations"][GANG_SIZE_ANNOTATION] == "4"
        assert pod["spec"]["nodeSelector"][US] == domain
        assert us[pod["spec"]["nodeName"]] == domain
        assert pod["spec"]["nodeSelector"][HOSTNAME] == pod["spec"]["nodeName"]
        assert not pod["spec"].get("schedulingGates"), pod["spec"]
    assert any(e["reason"] == "GangAdmitted" for e in events_of(client, namespace, wl["metadata"]["name"]))


@pytest.mark.compat
def test_jobset_gang_of_two_podsets_admitted_into_one_ultraserver(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """deploy/samples/jobset-gang.yaml, run by the real JobSet controller: a leader Job and two
    worker Jobs are one gang of 5 pods in two podsets; every pod carries the gang label, the
    whole gang's size and the same UltraServer."""
    client = cluster.client
    queue = gang_queue()
    name = unique("js")
    jobset = yaml.safe_load((REPO / "deploy" / "samples" / "jobset-gang.yaml").read_text())
    jobset["metadata"].update(name=name, namespace=namespace, labels={"kueue.x-k8s.io/queue-name": queue})
    client.create(JOBSETS, jobset)

    def ready_pods() -> list[dict[str, Any]] | None:
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        items = client.list(PODS, namespace, label_selector=selector)["items"]
        return items if len(items) == 5 and all(is_true(p, "Ready") for p in items) else None

    pods = wait_for(ready_pods, 120, f"5 Ready pods of JobSet {name}")
    wl = workload(client, namespace, name)
    check = check_of(wl)
    assert check["state"] == "Ready", check
    assert sorted(u["name"] for u in check["podSetUpdates"]) == ["leader", "workers"]
    domains = {u["nodeSelector"][US] for u in check["podSetUpdates"]}
    assert len(domains) == 1, check["podSetUpdates"]
    us = node_us(client)
    for pod in pods:
        assert pod["metadata"]["labels"][GANG_LABEL] == wl["metadata"]["name"]
        assert pod["metadata"]["annotations"][GANG_SIZE_ANNOTATION] == "5"
        assert us[pod["spec"]["nodeName"]] in domains


def test_gang_too_big_for_any_ultraserver_waits_with_a_clear_message(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    queue = gang_queue()
    job = submit(client, namespace, queue, 20)  # an UltraServer has 18 nodes

    def pending_with_reason() -> dict[str, Any] | None:
        wl = workload_of(client, namespace, job)
        c = check_of(wl) if wl else {}
        return c if c.get("state") == "Pending" and "can never start whole" in c.get("message", "") else None

    # told at once that it never fits (the gate's `whole` step), not "does not fit now" forever
    check = wait_for(pending_with_reason, 60, "the check Pending with the reason")
    assert US in check["message"] and "split it into slices" in check["message"], check["message"]
    # A pass decided on the Workload as it is now, and left it waiting: never admitted in part.
    wait_decided(e2e_local_cluster(), workload(client, namespace, job))
    wl = workload(client, namespace, job)
    assert check_of(wl)["state"] == "Pending", check_of(wl)
    assert not is_true(wl, "Admitted") and not job_pods(client, namespace, job)


def test_never_ready_gang_is_requeued_with_backoff(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    queue = gang_queue(readyTimeout="3s", requeue={"backoffBaseSeconds": 4, "backoffMaxSeconds": 8})
    job = submit(client, namespace, queue, 2, labels={NEVER_READY: "true"})
    seen = retries(client, namespace, job, 3, 150)
    assert all(requeued(c) for c in seen), seen
    backoffs = [4, 8, 8]  # 4 * 2^(n-1), capped at 8
    for n, (c, backoff) in enumerate(zip(seen, backoffs, strict=True), 1):
        assert f"after backoff {backoff}s" in c["message"] and "readyTimeout 3s" in c["message"], c
        assert c.get("retryCount") == n, c  # each timeout counted once
        # Evicted at once (Kueue would hold the eviction itself for a requeueAfterSeconds).
        assert "requeueAfterSeconds" not in c, c
        evicted = condition(c["_wl"], "Evicted")
        assert evicted is not None and evicted["status"] == "True", c["_wl"]["status"]
    # Each backoff is waited out: the gang is admitted again only that long after its eviction.
    for (prev, nxt), backoff in zip(itertools.pairwise(seen), backoffs, strict=False):
        readmitted = condition(nxt["_wl"], "Admitted")
        assert readmitted is not None
        waited = epoch(readmitted["lastTransitionTime"]) - epoch(prev["lastTransitionTime"])
        assert waited >= backoff - 1, (waited, prev)
    wl = seen[-1]["_wl"]
    evicted = [
        e for e in events_of(client, namespace, wl["metadata"]["name"]) if e["reason"] == "GangRequeued"
    ]
    assert len(evicted) >= 3


@pytest.mark.compat
def test_gang_deactivated_after_backoff_limit(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    client = cluster.client
    queue = gang_queue(
        readyTimeout="2s", requeue={"backoffBaseSeconds": 1, "backoffMaxSeconds": 2, "backoffLimitCount": 1}
    )
    job = submit(client, namespace, queue, 2, labels={NEVER_READY: "true"})
    seen = retries(client, namespace, job, 2, 120)
    assert requeued(seen[0]) and seen[1]["state"] == "Rejected", seen
    assert "backoffLimitCount 1" in seen[1]["message"]
    wl = wait_for(
        lambda: (w := workload_of(client, namespace, job)) and w["spec"].get("active") is False and w,
        60,
        "the Workload deactivated by Kueue",
    )
    assert any(e["reason"] == "GangDeactivated" for e in events_of(client, namespace, wl["metadata"]["name"]))


def _make_ready(client: Client, namespace: str, job: str) -> None:
    for pod in job_pods(client, namespace, job):
        client.patch(PODS, pod["metadata"]["name"], {"metadata": {"labels": {NEVER_READY: None}}}, namespace)


@pytest.mark.parametrize("mode", ["Sequential", "Parallel"])
def test_sequential_admits_the_next_gang_only_after_the_first_is_ready(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    client = cluster.client
    queue = gang_queue(admission=mode, readyTimeout="10m")
    first = submit(client, namespace, queue, 2, labels={NEVER_READY: "true"})
    wait_for(
        lambda: (w := workload_of(client, namespace, first)) and is_true(w, "Admitted"), 60, "first admitted"
    )
    second = submit(client, namespace, queue, 2)
    if mode == "Parallel":
        running_gang(client, namespace, second, 2)
        assert not is_true(workload(client, namespace, first), "PodsReady")
        return

    def waiting() -> dict[str, Any] | None:
        wl = workload_of(client, namespace, second)
        c = check_of(wl) if wl else {}
        return c if c.get("state") == "Pending" and "Sequential" in c.get("message", "") else None

    check = wait_for(waiting, 60, "the second gang held by the sequential gate")
    assert workload(client, namespace, first)["metadata"]["name"] in check["message"]
    wait_decided(e2e_local_cluster(), workload(client, namespace, second))  # and held it again
    assert not is_true(workload(client, namespace, second), "Admitted")
    _make_ready(client, namespace, first)
    wait_for(lambda: is_true(workload(client, namespace, first), "PodsReady"), 60, "first gang Ready")
    ready_at = condition(workload(client, namespace, first), "PodsReady")["lastTransitionTime"]  # type: ignore[index]
    running_gang(client, namespace, second, 2)
    admitted = check_of(workload(client, namespace, second))
    assert admitted["state"] == "Ready" and admitted["lastTransitionTime"] >= ready_at


@pytest.mark.compat
def test_node_failure_replaced_from_spare(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    client = cluster.client
    queue = gang_queue(nodeFailure="ReplaceFromSpare", sparesPerUltraServer=1, recoveryTimeout="5m")
    job = submit(client, namespace, queue, 4)
    pods = running_gang(client, namespace, job, 4)
    wl = workload(client, namespace, job)
    wait_for(lambda: is_true(workload(client, namespace, job), "PodsReady"), 60, "PodsReady")
    domain = check_of(wl)["podSetUpdates"][0]["nodeSelector"][US]
    victim = sorted(p["spec"]["nodeName"] for p in pods)[0]
    fail_nodes(client, victim)
    try:
        ev = wait_for(
            lambda: [
                e
                for e in events_of(client, namespace, wl["metadata"]["name"])
                if e["reason"] == "NodeReplaced"
            ],
            90,
            "a NodeReplaced event",
        )
        assert victim in ev[0]["message"] and "spare" in ev[0]["message"]

        def whole_again() -> list[dict[str, Any]] | None:
            items = [
                p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")
            ]
            active = [p for p in items if p.get("status", {}).get("phase") not in ("Failed", "Succeeded")]
            ok = len(active) == 4 and all(
                is_true(p, "Ready") and p["spec"]["nodeName"] != victim for p in active
            )
            return active if ok else None

        again = wait_for(whole_again, 120, "the gang whole again off the failed node")
        us = node_us(client)
        assert {us[p["spec"]["nodeName"]] for p in again} == {domain}
        assert check_of(workload(client, namespace, job))["state"] == "Ready"
    finally:
        heal_nodes(client, victim)


def _seventeen_in_one_ultraserver(
    client: Client, namespace: str, gang_queue: Any, recovery_timeout: str
) -> tuple[str, dict[str, Any], dict[str, tuple[str, str]]]:
    """A 17-pod gang Running in one UltraServer of 18 (its 18th node left as the spare), in a
    queue that replaces a failed node from the spare within `recovery_timeout`:
    (job, Workload, pod name -> (uid, node))."""
    queue = gang_queue(
        nodeFailure="ReplaceFromSpare", sparesPerUltraServer=1, recoveryTimeout=recovery_timeout
    )
    job = submit(client, namespace, queue, 17)
    pods = running_gang(client, namespace, job, 17)
    wait_for(lambda: is_true(workload(client, namespace, job), "PodsReady"), 60, "PodsReady")
    return (
        job,
        workload(client, namespace, job),
        {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods},
    )


def test_node_failure_in_a_full_ultraserver_is_replaced_by_its_spare(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    # Long enough that no busy machine runs it out: that the gang was never requeued (no
    # GangRequeued below) is what shows it was whole again within recoveryTimeout.
    job, wl, before = _seventeen_in_one_ultraserver(client, namespace, gang_queue, "10m")
    domain = check_of(wl)["podSetUpdates"][0]["nodeSelector"][US]
    in_domain = sorted(n for n, us in node_us(client).items() if us == domain)
    (spare,) = sorted(set(in_domain) - {node for _, node in before.values()})
    victim = sorted(node for _, node in before.values())[0]
    fail_nodes(client, victim)
    try:

        def whole_again() -> list[dict[str, Any]] | None:
            items = [
                p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")
            ]
            ok = len(items) == 17 and all(is_true(p, "Ready") for p in items)
            return items if ok and victim not in {p["spec"]["nodeName"] for p in items} else None

        again = wait_for(whole_again, 300, "the gang whole again off the failed node")
        healthy = {n: v for n, v in before.items() if v[1] != victim}
        now = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in again}
        assert all(now.get(name) == v for name, v in healthy.items()), "a healthy member was touched"
        (moved,) = [p for p in again if p["metadata"]["name"] not in healthy]
        assert moved["spec"]["nodeName"] == spare
        reasons = [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])]
        assert "NodeReplaced" in reasons and "GangRequeued" not in reasons
        incomplete = [e for e in client.list(EVENTS, namespace)["items"] if e["reason"] == "GangIncomplete"]
        assert not incomplete, incomplete
        assert check_of(workload(client, namespace, job))["state"] == "Ready"
    finally:
        heal_nodes(client, victim)


def test_two_failed_nodes_with_one_spare_requeue_the_gang_whole_without_deleting_first(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    job, wl, before = _seventeen_in_one_ultraserver(client, namespace, gang_queue, "10s")
    victims = sorted(node for _, node in before.values())[:2]
    for v in victims:
        fail_nodes(client, v)
    try:
        (retry,) = retries(client, namespace, job, 1, 90)
        assert requeued(retry) and "recoveryTimeout 10s" in retry["message"], retry
        # Decided at once, for both nodes: no pod was moved to the spare before the requeue.
        reasons = [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])]
        assert "NodeReplacementImpossible" in reasons and "NodeReplaced" not in reasons, reasons
        assert not [e for e in client.list(EVENTS, namespace)["items"] if e["reason"] == "GangIncomplete"]
    finally:
        for v in victims:
            heal_nodes(client, v)


@pytest.mark.compat
def test_node_failure_requeues_after_recovery_timeout(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    queue = gang_queue(nodeFailure="Requeue", recoveryTimeout="3s")
    job = submit(client, namespace, queue, 2)
    pods = running_gang(client, namespace, job, 2)
    wait_for(lambda: is_true(workload(client, namespace, job), "PodsReady"), 60, "PodsReady")
    victim = pods[0]["spec"]["nodeName"]
    fail_nodes(client, victim)
    try:
        (retry,) = retries(client, namespace, job, 1, 90)
        assert requeued(retry) and "recoveryTimeout 3s" in retry["message"] and victim in retry["message"]
    finally:
        heal_nodes(client, victim)


@pytest.mark.compat
def test_plain_pod_group_is_a_gang(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    client = cluster.client
    queue = gang_queue()
    group = unique("pg")
    for i in range(2):
        member = pod_group_member(group, i, namespace, queue, 2, 4, **{"gangplugin.io/required-topology": US})
        client.create(PODS, member)

    def gang_ready() -> list[dict[str, Any]] | None:
        items = client.list(PODS, namespace, label_selector=f"kueue.x-k8s.io/pod-group-name={group}")["items"]
        return items if len(items) == 2 and all(is_true(p, "Ready") for p in items) else None

    pods = wait_for(gang_ready, 120, "the pod group Ready")
    us = node_us(client)
    assert len({p["metadata"]["labels"][GANG_LABEL] for p in pods}) == 1
    assert {p["metadata"]["annotations"][GANG_SIZE_ANNOTATION] for p in pods} == {"2"}
    assert len({us[p["spec"]["nodeName"]] for p in pods}) == 1


def test_controller_killed_during_admission_and_restarted(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    queue = gang_queue()
    jobs = [submit(client, namespace, queue, 4) for _ in range(3)]
    e2e_local_cluster().restart("gangplugin")  # SIGKILL while the gangs are being admitted
    us = node_us(client)
    for job in jobs:
        pods = running_gang(client, namespace, job, 4)
        wl = workload(client, namespace, job)
        check = check_of(wl)
        domain = check["podSetUpdates"][0]["nodeSelector"][US]
        assert {us[p["spec"]["nodeName"]] for p in pods} == {domain}, job
        admitted = [
            e for e in events_of(client, namespace, wl["metadata"]["name"]) if e["reason"] == "GangAdmitted"
        ]
        assert len(admitted) <= 1, admitted  # decided once; a restart does not decide again
    # Nothing changes after a second restart: every decision is read back from the API.
    before = {job: check_of(workload(client, namespace, job)) for job in jobs}
    e2e_local_cluster().restart("gangplugin")
    # The restarted controller's first pass over every Workload as it was has completed.
    wait_decided(e2e_local_cluster(), *(workload(client, namespace, job) for job in jobs))
    after = {job: check_of(workload(client, namespace, job)) for job in jobs}
    assert before == after


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"readyTimeout": "-5m"}, "spec.readyTimeout", "readyTimeout must be longer than 0s"),
        ({"unscheduledTimeout": "0s"}, "spec.unscheduledTimeout", "longer than 0s"),
        (
            {"requeue": {"backoffBaseSeconds": 100, "backoffMaxSeconds": 10}},
            "spec.requeue.backoffMaxSeconds",
            "must not be below backoffBaseSeconds",
        ),
        ({"admission": "OneByOne"}, "spec.admission", "Parallel"),
        ({"requeue": {"backoffLimitCount": -1}}, "spec.requeue.backoffLimitCount", "0"),
    ],
)
def test_bad_gang_policy_is_refused_naming_the_field(
    cluster: E2ECluster, spec: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(ApiError) as err:
        cluster.client.create(GANG_POLICIES, gang_policy(unique("bad"), **spec))
    assert err.value.status == 422
    assert field in str(err.value) and says in str(err.value), str(err.value)


def test_gang_policy_naming_a_missing_topology_is_refused_by_the_webhook(cluster: E2ECluster) -> None:
    """What CEL cannot see: the Topology a policy names must exist. gangplugin's validating
    webhook refuses the write, names the field, and lets it through once the Topology is there."""
    client = cluster.client
    topology = unique("topo")
    policy = gang_policy(unique("needs-topo"), topologyName=topology)
    with pytest.raises(ApiError) as err:
        client.create(GANG_POLICIES, policy)
    text = str(err.value)
    assert err.value.status == 422, text
    assert 'admission webhook "gangpolicies.gangplugin.io" denied the request' in text, text
    assert "spec.topologyName" in text and f"Kueue Topology {topology!r} does not exist" in text, text
    assert client.get_or_none(GANG_POLICIES, policy["metadata"]["name"]) is None  # nothing half-made
    client.create(TOPOLOGIES, objects.topology(topology, US, HOSTNAME))
    try:
        created = client.create(GANG_POLICIES, policy)
        assert created["spec"]["topologyName"] == topology
        client.delete(GANG_POLICIES, policy["metadata"]["name"])
    finally:
        client.delete(TOPOLOGIES, topology)


def test_workload_naming_an_unknown_topology_level_is_rejected(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    rack = {REQUIRED_TOPOLOGY_ANNOTATION: "example.com/rack"}
    name = submit(client, namespace, gang_queue(), 2, annotations=rack)
    _, event = rejected(client, namespace, name)
    assert "gangplugin.io/required-topology" in event["message"] and "example.com/rack" in event["message"]
    assert not job_pods(client, namespace, name)
