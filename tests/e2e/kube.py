"""Small helpers the e2e tests share: unique names, waiting on conditions, reading state."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gangplugin.kube.client import PODS, WORKLOADS, ApiError, Client, Resource
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from gangplugin.localcluster.probes import Deadline

T = TypeVar("T")

RESOURCE_FLAVORS = Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False)
CLUSTER_QUEUES = Resource("kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False)
GB200 = "ml.p6e-gb200.36xlarge"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    describe_state: Callable[[], str],
    interval: float = 0.3,
) -> T:
    """Poll `condition` until it returns something truthy and return that; past `timeout`, fail
    with `describe_state()` (what was awaited and what is seen now) and the condition's last answer.
    The timeout only bounds a wait for something that must happen: no verdict rests on it. It is
    in seconds of an idle machine: on a loaded one they pass slower (`probes.Deadline`), so the
    bound holds whatever else runs beside the tests."""
    deadline, began = Deadline(timeout), time.monotonic()
    while True:
        last = condition()
        if last:
            return last
        if deadline.passed():
            raise AssertionError(
                f"timed out after {timeout:g}s of an idle machine ({time.monotonic() - began:.0f}s of wall "
                f"time): {describe_state()} (last answer: {last!r})"
            )
        time.sleep(interval)


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
    """`wait_until` for a check whose last answer is all there is to show."""
    return wait_until(check, timeout, lambda: f"waiting for {what}", interval)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def is_true(obj: dict[str, Any], kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c["status"] == "True"


def workload_of(client: Client, namespace: str, job_name: str) -> dict[str, Any] | None:
    for wl in client.list(WORKLOADS, namespace)["items"]:
        if any(o.get("name") == job_name for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def job_pods(client: Client, namespace: str, job_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.list(
        PODS, namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}"
    )["items"]
    return items


def trainer_pod_spec(gpus: int) -> dict[str, Any]:
    """A pod spec with one trainer container asking for `gpus` nvidia.com/gpu."""
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "trainer:latest",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }


def gpu_job(
    name: str, namespace: str, queue: str, pods: int, gpus: int, **template_extra: Any
) -> dict[str, Any]:
    """A batch/v1 Job of `pods` pods with `gpus` nvidia.com/gpu each, submitted to `queue`."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "suspend": True,
            "template": {
                "metadata": template_extra.get("metadata", {}),
                "spec": trainer_pod_spec(gpus),
            },
        },
    }


def queue_objects(
    name: str, namespace: str, gpu_quota: int, instance_type: str, stop_policy: str = "None"
) -> list[tuple[Resource, dict[str, Any]]]:
    """A ResourceFlavor, a ClusterQueue with `gpu_quota` GPUs and a LocalQueue, all named `name`."""
    lq_res = Resource("kueue.x-k8s.io/v1beta2", "localqueues")
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": instance_type}},
    }
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "stopPolicy": stop_policy,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "10000"},
                                {"name": "memory", "nominalQuota": "100000Gi"},
                                {"name": "nvidia.com/gpu", "nominalQuota": str(gpu_quota)},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": name},
    }
    return [(RESOURCE_FLAVORS, flavor), (CLUSTER_QUEUES, cq), (lq_res, lq)]


@contextlib.contextmanager
def gang_queues(client: Client, namespace: str) -> Iterator[Callable[..., str]]:
    """Yields `make(gpu_quota=288, **policy_spec)` -> the name of a new GangPolicy, its
    AdmissionCheck, and a GB200 ResourceFlavor, ClusterQueue (Active, requiring the check) and
    LocalQueue; deletes the cluster-scoped ones afterwards."""
    made: list[tuple[Any, str]] = []

    def make(gpu_quota: int = 288, **spec: Any) -> str:
        name = unique("gq")
        client.create(
            GANG_POLICIES,
            {
                "apiVersion": "gangplugin.io/v1alpha1",
                "kind": "GangPolicy",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        made.append((GANG_POLICIES, name))
        client.create(
            ADMISSION_CHECKS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {
                    "controllerName": "gangplugin.io/gang",
                    "parameters": {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": name},
                },
            },
        )
        made.append((ADMISSION_CHECKS, name))
        for res, obj in queue_objects(name, namespace, gpu_quota, GB200):
            if obj["kind"] == "ClusterQueue":
                obj["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": name}]}
            client.create(res, obj)
            if not res.namespaced:
                made.append((res, name))
        wait_for(
            lambda: is_true(client.get(CLUSTER_QUEUES, name), "Active"), 60, f"ClusterQueue {name} Active"
        )
        return name

    try:
        yield make
    finally:
        for res, name in reversed(made):
            with contextlib.suppress(ApiError):
                client.delete(res, name)


def pod_group_member(
    group: str, index: int, namespace: str, queue: str, total: int, gpus: int, **annotations: str
) -> dict[str, Any]:
    """One pod of a Kueue plain pod group of `total` pods with `gpus` nvidia.com/gpu each."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{group}-{index}",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/pod-group-name": group},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total), **annotations},
        },
        "spec": trainer_pod_spec(gpus),
    }
