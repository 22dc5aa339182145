"""The stack is real: Kueue gates Jobs, kube-scheduler binds their pods to kwok nodes, kwok readies them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.kube.client import CLUSTER_QUEUES, JOBS, NODES, PODS, WORKLOADS, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.localcluster.cluster import versions as _versions
from tests.support.cluster import E2ECluster
from tests.support.kube import condition, job_pods, unique, wait_for, workload_of
from tests.support.objects import gpu_job, pod_group_member, queue_objects

GB200 = "ml.p6e-gb200.36xlarge"


@pytest.fixture
def queue(cluster: E2ECluster, namespace: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A flavor, ClusterQueue and LocalQueue of their own; quota and hold from the test's marker."""
    params = request.node.get_closest_marker("queue")
    kwargs = params.kwargs if params else {}
    name = unique("cq")
    objs = queue_objects(
        name, namespace, kwargs.get("gpu_quota", 64), GB200, kwargs.get("stop_policy", "None")
    )
    for res, obj in objs:
        cluster.client.apply(res, obj, field_manager="e2e")
    yield name
    for res, obj in reversed(objs):
        meta = obj["metadata"]
        cluster.client.delete(res, meta["name"], meta.get("namespace"))


def _suspended(client: Client, namespace: str, name: str) -> bool:
    return bool(client.get(JOBS, name, namespace)["spec"].get("suspend"))


def test_control_plane_reports_the_pinned_release(cluster: E2ECluster) -> None:
    version = cluster.client.request("GET", "/version")
    if cluster.local:
        assert version["gitVersion"] == _versions()["KUBERNETES_VERSION"]
    assert int(version["minor"].rstrip("+")) >= 30


def test_fake_nodes_are_ready_and_labelled_like_hyperpod(cluster: E2ECluster) -> None:
    nodes = cluster.client.list(NODES, label_selector=f"node.kubernetes.io/instance-type={GB200}")["items"]
    assert len(nodes) >= 18
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["topology.k8s.aws/ultraserver-id"]
        assert labels["topology.k8s.aws/network-node-layer-3"]
        assert int(node["status"]["allocatable"]["nvidia.com/gpu"]) == 4
    wait_for(lambda: all(is_true(n, "Ready") for n in cluster.client.list(NODES)["items"]), 60, "nodes Ready")


@pytest.mark.compat
@pytest.mark.queue(gpu_quota=64, stop_policy="Hold")
def test_job_is_held_until_kueue_admits_it_then_bound_and_ready(
    cluster: E2ECluster, namespace: str, queue: str
) -> None:
    client = cluster.client
    job = unique("gang")
    client.create(JOBS, gpu_job(job, namespace, queue, pods=4, gpus=4))

    # Kueue makes a Workload for it and says why the held ClusterQueue does not admit it: the
    # Job stays suspended.
    def held() -> dict[str, object] | None:
        wl = workload_of(client, namespace, job)
        c = wl and condition(wl, "QuotaReserved")
        return c if c and c["status"] == "False" and "inactive" in c.get("message", "") else None

    wait_for(held, 30, "Kueue to write that the held ClusterQueue is inactive")
    assert _suspended(client, namespace, job)
    assert job_pods(client, namespace, job) == []
    assert not is_true(workload_of(client, namespace, job) or {}, "Admitted")

    client.patch(CLUSTER_QUEUES, queue, {"spec": {"stopPolicy": "None"}})
    wl = wait_for(
        lambda: (w := workload_of(client, namespace, job)) and is_true(w, "Admitted") and w, 30, "admission"
    )
    assert wl["status"]["admission"]["clusterQueue"] == queue
    wait_for(lambda: not _suspended(client, namespace, job), 30, "Kueue to unsuspend the Job")

    def all_ready() -> list[dict[str, object]] | None:
        pods = job_pods(client, namespace, job)
        return pods if len(pods) == 4 and all(is_true(p, "Ready") for p in pods) else None

    pods = wait_for(all_ready, 60, "4 pods bound and Ready")
    nodes = {p["spec"]["nodeName"] for p in pods}  # type: ignore[index]
    assert len(nodes) == 4, "4 GPUs per pod on 4-GPU nodes: one pod per node"
    for name in nodes:
        node = client.get(NODES, str(name))
        assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == GB200
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    # Like a training job, the pods keep running: the Job controller, having counted them Ready,
    # counts none finished (kwok's stages have no pod-complete, deploy/kwok/stages.yaml).
    status = wait_for(
        lambda: (st := client.get(JOBS, job, namespace).get("status") or {}).get("ready") == 4 and st,
        60,
        "the Job controller to count 4 Ready pods",
    )
    assert not status.get("succeeded") and not status.get("failed"), status
    assert all(p["status"]["phase"] == "Running" for p in job_pods(client, namespace, job))


@pytest.mark.queue(gpu_quota=16)
def test_job_over_quota_stays_suspended(cluster: E2ECluster, namespace: str, queue: str) -> None:
    client = cluster.client
    first, second = unique("fits"), unique("over")
    client.create(JOBS, gpu_job(first, namespace, queue, pods=4, gpus=4))
    wait_for(
        lambda: (w := workload_of(client, namespace, first)) and is_true(w, "Admitted"), 30, "first admitted"
    )
    client.create(JOBS, gpu_job(second, namespace, queue, pods=2, gpus=4))

    def pending_for_quota() -> dict[str, object] | None:
        wl = workload_of(client, namespace, second)
        c = wl and condition(wl, "QuotaReserved")
        return c if c and c["status"] == "False" and "quota" in c.get("message", "").lower() else None

    # Kueue's decision, written on the Workload, is the evidence it had its chance.
    reason = wait_for(pending_for_quota, 30, "the second Workload to wait for quota")
    assert "nvidia.com/gpu" in str(reason["message"])
    assert _suspended(client, namespace, second)
    assert job_pods(client, namespace, second) == []
    assert not _suspended(client, namespace, first)


@pytest.mark.queue(gpu_quota=16)
def test_deleted_pods_held_by_kueue_finalizer_terminate_and_go(
    cluster: E2ECluster, namespace: str, queue: str
) -> None:
    """A running pod of a Kueue pod group carries Kueue's finalizer; deleting it with its Workload
    must end with the pod gone, not a Terminating pod holding its node forever."""
    client = cluster.client
    group = unique("pg")
    for i in range(2):
        client.create(PODS, pod_group_member(group, i, namespace, queue, 2, 4))

    def running() -> list[dict[str, object]] | None:
        pods = client.list(PODS, namespace)["items"]
        return pods if len(pods) == 2 and all(is_true(p, "Ready") for p in pods) else None

    pods = wait_for(running, 60, "the pod group Running")
    assert all("kueue.x-k8s.io/managed" in p["metadata"].get("finalizers", []) for p in pods)  # type: ignore[index]
    # What deleting the namespace does: the pods and their Workload go. Kueue lets go of a pod
    # only once it has stopped, which the kubelet (here kwok's pod-terminate stage) reports.
    for p in pods:
        client.delete(PODS, str(p["metadata"]["name"]), namespace)  # type: ignore[index]
    client.delete(WORKLOADS, group, namespace)
    wait_for(lambda: not client.list(PODS, namespace)["items"], 60, "the deleted pods to be gone")


def test_running_pod_marked_not_ready_on_a_healthy_node_is_ready_again(
    cluster: E2ECluster, namespace: str
) -> None:
    """kube-controller-manager marks a pod NotReady when it binds to a node the controller last saw
    NotReady (its view lags the node's own status by up to one monitor pass), as just after a node
    comes back; kubelet's status sync then reports it Ready again, and so must kwok. Before, kwok
    readied a pod only while it was Pending, and such a pod stayed NotReady for good."""
    client = cluster.client
    node = next(n for n in client.list(NODES)["items"] if is_true(n, "Ready"))["metadata"]["name"]
    name = unique("marked")
    spec = {"nodeName": node, "containers": [{"name": "c", "image": "trainer"}]}
    client.create(PODS, {"metadata": {"name": name, "namespace": namespace}, "spec": spec})

    def ready() -> dict[str, Any] | None:
        pod = client.get(PODS, name, namespace)
        return pod if is_true(pod, "Ready") else None

    pod = wait_for(ready, 60, "the pod Ready")
    # What the node lifecycle controller's MarkPodsNotReady writes: the Ready condition, False.
    marked = [{**c, "status": "False"} if c["type"] == "Ready" else c for c in pod["status"]["conditions"]]
    written = client.patch(PODS, name, {"status": {"conditions": marked}}, namespace, subresource="status")
    assert not is_true(written, "Ready")
    again = wait_for(ready, 60, "the pod Ready again (kwok's pod-ready-again stage)")
    assert int(again["metadata"]["resourceVersion"]) > int(written["metadata"]["resourceVersion"])
    assert again["status"]["phase"] == "Running" and again["metadata"]["uid"] == pod["metadata"]["uid"]
