"""A gang of each job kind people run through Kueue (PyTorchJob, TrainJob, JobSet,
LeaderWorkerSet, RayJob, RayCluster), run by its real controller, in bindMode Ungate and
Extender, on the real local cluster.

One story per kind and mode, on a ClusterQueue whose only flavor is one UltraServer (18 GB200
nodes, one kept spare): the gang is admitted whole into it; a node under it fails and is
replaced from the spare, its controller making the pod again; a node fails again under
`nodeFailure: Requeue` and `recoveryTimeout` requeues the gang whole, its controller's new pods
placed again once its backoff ends; a higher-priority Job that fits only without it preempts it
whole, and it runs again when the Job is gone. A RayJob's story skips the two node failures: the
watchdog acts on Kueue's PodsReady, which for a RayJob KubeRay never reports here (see
`Kind.reports_ready`); the RayCluster's story runs the same pods through them. A RayJob in
K8sJobMode, which could never start whole, is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gangplugin.core.admission import gang_id
from gangplugin.core.names import (
    BACKOFF_UNTIL_ANNOTATION,
    BIND_MODE_LABEL,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
)
from gangplugin.kube.client import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    PODS,
    WORKLOADS,
    ApiError,
    Client,
    Resource,
)
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS
from tests.support.cluster import E2ECluster
from tests.support.gangs import (
    HOSTNAME,
    SESSION_BIND_MODES,
    US,
    check_of,
    events_of,
    node_us,
    rejected,
    requeued,
    retries,
    workload,
)
from tests.support.jobkinds import KINDS, PRIORITY_LABEL, Kind, gang_pods, running, sample
from tests.support.kube import unique, wait_active, wait_for, wait_until
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import (
    GB200,
    WORKLOAD_PRIORITY_CLASSES,
    admission_check,
    cluster_queue,
    gang_policy,
    gpu_job,
    local_queue,
    resource_flavor,
    workload_priority_class,
)

# The UltraServer the stories run in (their flavor's only one): 18 nodes.
DOMAIN = "gb200-us-4"
DOMAIN_NODES = 18


@dataclass(frozen=True)
class Queue:
    policy: str
    queue: str
    low: str
    high: str


@contextlib.contextmanager
def one_ultraserver_queue(client: Client, namespace: str, mode: str) -> Iterator[Queue]:
    """A GangPolicy (bindMode `mode`, one spare, failed nodes replaced, requeued after 1 s of
    backoff), its AdmissionCheck, a flavor of the nodes of DOMAIN only, a ClusterQueue whose gangs
    preempt lower priorities (quota for the whole UltraServer), its LocalQueue, and two
    priorities; the cluster-scoped ones deleted afterwards."""
    name = unique("kinds")
    made: list[tuple[Resource, str]] = []

    def create(res: Resource, obj: dict[str, Any]) -> None:
        client.create(res, obj)
        made.append((res, obj["metadata"]["name"]))

    try:
        policy = {
            "bindMode": mode,
            "sparesPerUltraServer": 1,
            "nodeFailure": "ReplaceFromSpare",
            "recoveryTimeout": "10m",
            "readyTimeout": "10m",
            "requeue": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 1},
        }
        create(GANG_POLICIES, gang_policy(name, **policy))
        create(ADMISSION_CHECKS, admission_check(name, policy=name))
        create(RESOURCE_FLAVORS, resource_flavor(name, GB200, **{US: DOMAIN}))
        lower = {"withinClusterQueue": "LowerPriority"}
        create(CLUSTER_QUEUES, cluster_queue(name, name, 4 * DOMAIN_NODES, checks=[name], preemption=lower))
        client.create(LOCAL_QUEUES, local_queue(name, namespace), namespace)
        low, high = f"{name}-low", f"{name}-high"
        for prio, value in ((low, 100), (high, 1000)):
            create(WORKLOAD_PRIORITY_CLASSES, workload_priority_class(prio, value))
        wait_active(client, name)
        yield Queue(name, name, low, high)
    finally:
        for res, obj_name in reversed(made):
            with contextlib.suppress(ApiError):
                client.delete(res, obj_name)


def assert_whole_in_domain(
    client: Client, wl: dict[str, Any], pods: list[dict[str, Any]], kind: Kind, mode: str
) -> None:
    """Every pod of the gang in DOMAIN, with the gang's labels and size, no gate left; pinned
    to its node under Ungate (where its controller makes it after admission), else not."""
    check = check_of(wl)
    assert check["state"] == "Ready", check
    assert {u["nodeSelector"][US] for u in check["podSetUpdates"]} == {DOMAIN}, check["podSetUpdates"]
    us = node_us(client)
    gpu_nodes = [p["spec"]["nodeName"] for p in pods if _gpus(p)]
    assert len(gpu_nodes) == kind.gpu_pods and len(set(gpu_nodes)) == len(gpu_nodes), gpu_nodes
    pinned = mode == "Ungate" and kind.pinned_in_ungate
    for p in pods:
        name, node = p["metadata"]["name"], p["spec"]["nodeName"]
        assert us[node] == DOMAIN, (name, node)
        assert p["metadata"]["labels"][GANG_LABEL] == gang_id(wl["metadata"]["name"]), name
        assert p["metadata"]["labels"][BIND_MODE_LABEL] == mode, name
        assert p["metadata"]["annotations"][GANG_SIZE_ANNOTATION] == str(kind.pods), name
        assert not p["spec"].get("schedulingGates"), (name, p["spec"].get("schedulingGates"))
        assert p["spec"]["nodeSelector"].get(HOSTNAME) == (node if pinned else None), (name, p["spec"])


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"]["containers"]
    )


def _alone_on_its_node(pods: list[dict[str, Any]]) -> str:
    """The node of the last GPU pod (by name) that holds no other pod of the gang."""
    nodes = [p["spec"]["nodeName"] for p in pods]
    return next(
        p["spec"]["nodeName"]
        for p in sorted(pods, key=lambda p: p["metadata"]["name"], reverse=True)
        if _gpus(p) and nodes.count(p["spec"]["nodeName"]) == 1
    )


def _uids(pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods}


def _pods_ready(client: Client, namespace: str, job: str) -> None:
    """Until Kueue says the gang is running (PodsReady), which the watchdog reads."""
    wait_for(
        lambda: is_true(workload(client, namespace, job), "PodsReady"), 120, f"{job}'s Workload PodsReady"
    )


def _replaced_from_spare(client: Client, namespace: str, job: str, kind: Kind, mode: str) -> None:
    """A node under the gang fails: the check moves its pod to the spare and the controller
    makes it again (only it, unless the controller restarts its group); whole again, no requeue."""
    pods = running(client, namespace, job, kind)
    wl_name = workload(client, namespace, job)["metadata"]["name"]
    victim, before = _alone_on_its_node(pods), _uids(pods)
    fail_nodes(client, victim)
    try:
        replaced = wait_for(
            lambda: [e for e in events_of(client, namespace, wl_name) if e["reason"] == "NodeReplaced"],
            120,
            f"a NodeReplaced event on {wl_name}",
        )
        assert victim in replaced[0]["message"] and "spare" in replaced[0]["message"], replaced

        def whole_again() -> list[dict[str, Any]] | None:
            now = running(client, namespace, job, kind)
            return now if victim not in {p["spec"]["nodeName"] for p in now} else None

        again = wait_until(whole_again, 180, lambda: f"the {kind.name} gang whole again off {victim}")
        assert_whole_in_domain(client, workload(client, namespace, job), again, kind, mode)
        if kind.keeps_peers:
            kept = {u: v for u, v in before.items() if v[1] != victim}
            assert {u: v for u, v in _uids(again).items() if u in kept} == kept, (
                "a healthy member was touched"
            )
        reasons = [e["reason"] for e in events_of(client, namespace, wl_name)]
        assert "GangRequeued" not in reasons, reasons
    finally:
        heal_nodes(client, victim)
    _pods_ready(client, namespace, job)


def _requeued_whole_after_recovery_timeout(
    client: Client, namespace: str, job: str, kind: Kind, mode: str, policy: str
) -> None:
    """Under nodeFailure Requeue a failed node requeues the gang whole after recoveryTimeout:
    none of its pods holds a node while the check holds it back (a long backoff, ended by hand
    once the policy has a long recoveryTimeout again: Kueue's PodsReady can lag a readmission
    by moments, which a 3 s recoveryTimeout would take for a loss); then its controller's new
    pods are placed again."""
    slow = {"backoffBaseSeconds": 3600, "backoffMaxSeconds": 3600}
    client.patch(
        GANG_POLICIES, policy, {"spec": {"nodeFailure": "Requeue", "recoveryTimeout": "3s", "requeue": slow}}
    )
    pods = running(client, namespace, job, kind)
    victim, before = _alone_on_its_node(pods), _uids(pods)
    fail_nodes(client, victim)
    try:
        (retry,) = retries(client, namespace, job, 1, 120)
        assert requeued(retry) and "recoveryTimeout 3s" in retry["message"], retry
    finally:
        heal_nodes(client, victim)
    client.patch(
        GANG_POLICIES, policy, {"spec": {"nodeFailure": "ReplaceFromSpare", "recoveryTimeout": "10m"}}
    )

    def held_whole() -> dict[str, Any] | None:
        wl = workload(client, namespace, job)
        gone = not any(p["spec"].get("nodeName") for p in gang_pods(client, namespace, wl))
        return wl if gone and "backoff until" in check_of(wl).get("message", "") else None

    wl = wait_until(
        held_whole,
        120,
        lambda: (
            f"no pod of {job} on a node, its check in backoff: {check_of(workload(client, namespace, job))}"
        ),
    )
    assert not set(_uids([p for p in gang_pods(client, namespace, wl) if p["spec"].get("nodeName")])) & set(
        before
    )
    # The backoff ended by hand as the watchdog ends one: the annotation, then Kueue's requeueAt.
    client.patch(
        WORKLOADS,
        wl["metadata"]["name"],
        {"metadata": {"annotations": {BACKOFF_UNTIL_ANNOTATION: None}}},
        namespace,
    )
    client.patch(
        WORKLOADS,
        wl["metadata"]["name"],
        {"status": {"requeueState": {"requeueAt": None}}},
        namespace,
        subresource="status",
    )

    def made_again() -> list[dict[str, Any]] | None:
        now = running(client, namespace, job, kind, 240)
        return None if set(_uids(now)) & set(before) else now

    again = wait_until(made_again, 240, lambda: f"the {kind.name} gang running again, every pod new")
    assert_whole_in_domain(client, workload(client, namespace, job), again, kind, mode)


def _preempted_whole(client: Client, namespace: str, job: str, kind: Kind, mode: str, q: Queue) -> None:
    """A higher priority Job that fits in the UltraServer only without the gang preempts it
    whole; the gang runs again once the Job is gone."""
    high = unique("high")
    pods = DOMAIN_NODES - kind.gpu_pods  # one more than fits beside the gang and the spare
    big = gpu_job(
        high, namespace, q.queue, pods, 4, metadata={"annotations": {REQUIRED_TOPOLOGY_ANNOTATION: US}}
    )
    big["metadata"]["labels"][PRIORITY_LABEL] = q.high
    client.create(JOBS, big)
    try:
        wl_name = workload(client, namespace, job)["metadata"]["name"]
        wait_for(
            lambda: [e for e in events_of(client, namespace, wl_name) if e["reason"] == "Preempted"],
            120,
            f"a Preempted event on {wl_name}",
        )

        def left() -> list[str]:
            return [
                p["metadata"]["name"] for p in gang_pods(client, namespace, workload(client, namespace, job))
            ]

        wait_until(lambda: not left(), 120, lambda: f"every pod of the preempted gang gone; left: {left()}")
        preemptor = wait_for(
            lambda: (w := workload(client, namespace, high)) and is_true(w, "PodsReady") and w,
            180,
            f"the preempting Job {high} running",
        )
        assert check_of(preemptor)["state"] == "Ready"
        # Our check holds the gang back while the Job runs. Kueue keeps an evicted Workload
        # Admitted until the job's controller reports it inactive, which on a busy machine can
        # come after the Job runs: its admission is waited for to end, not read at once.
        assert check_of(workload(client, namespace, job))["state"] != "Ready"
        wait_until(
            lambda: not is_true(workload(client, namespace, job), "Admitted"),
            120,
            lambda: f"the preempted gang no longer Admitted: {workload(client, namespace, job)['status']}",
        )
        assert check_of(workload(client, namespace, job))["state"] != "Ready"
    finally:
        client.request("DELETE", JOBS.path(namespace, high), body={"propagationPolicy": "Background"})
    back = running(client, namespace, job, kind, 240)
    assert_whole_in_domain(client, workload(client, namespace, job), back, kind, mode)


@pytest.mark.parametrize("mode", SESSION_BIND_MODES)
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_gang_admitted_replaced_requeued_and_preempted_whole(
    job_controllers: E2ECluster, namespace: str, kind: Kind, mode: str
) -> None:
    client = job_controllers.client
    with one_ultraserver_queue(client, namespace, mode) as q:
        job = unique(kind.name[:6])
        kind.submit(client, job, namespace, q.queue, q.low)
        try:
            pods = running(client, namespace, job, kind)
            assert_whole_in_domain(client, workload(client, namespace, job), pods, kind, mode)
            # The watchdog's node replacement and recovery timeout act on a gang Kueue says runs.
            if kind.reports_ready:
                _pods_ready(client, namespace, job)
                _replaced_from_spare(client, namespace, job, kind, mode)
                _requeued_whole_after_recovery_timeout(client, namespace, job, kind, mode, q.policy)
            _preempted_whole(client, namespace, job, kind, mode, q)
        finally:
            _gone(client, namespace, kind, job)


def _gone(client: Client, namespace: str, kind: Kind, job: str) -> None:
    """The job deleted and none of the namespace's pods on a node any more: the next story
    starts with the whole UltraServer (KubeRay, say, takes its time over a RayJob's finalizer)."""
    client.delete(kind.resource, job, namespace)

    def on_nodes() -> list[str]:
        pods = client.list(PODS, namespace)["items"]
        return [
            p["metadata"]["name"]
            for p in pods
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    wait_until(
        lambda: not on_nodes(),
        300,
        lambda: f"{kind.name} {job} deleted, its pods off the nodes: {on_nodes()}",
    )


def test_rayjob_in_k8sjobmode_is_refused_with_the_fix(
    job_controllers: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """KubeRay makes a RayJob's submitter pod only once its Ray cluster runs: a gang of the two
    could never start whole, so the check rejects it, naming the field and what to use."""
    client = job_controllers.client
    rayjob = next(k for k in KINDS if k.name == "rayjob")
    obj = {**sample("rayjob-gang.yaml"), "metadata": {}}
    obj["spec"] = {**obj["spec"], "submissionMode": "K8sJobMode"}
    name = unique("k8sjob")
    kind = Kind("rayjob-k8sjobmode", rayjob.resource, lambda: obj, rayjob.pods + 1, rayjob.gpu_pods)
    kind.submit(client, name, namespace, gang_queue())
    wl, event = rejected(client, namespace, name)
    assert "RayJob spec.submissionMode" in event["message"] and "HTTPMode" in event["message"], event
    assert not gang_pods(client, namespace, wl)
