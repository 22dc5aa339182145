"""The job kinds Kueue integrates, as the e2e tests submit them: each from its sample in
deploy/samples/ (a RayCluster from the RayJob's cluster), renamed into the test's namespace and
queue, run by its real controller (the `job_controllers` fixture starts them)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from gangplugin.core.admission import gang_id
from gangplugin.core.names import GANG_LABEL
from gangplugin.kube.client import PODS, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.localcluster.cluster import REPO
from tests.support.kube import wait_until, workload_of

SAMPLES = REPO / "deploy" / "samples"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@functools.cache
def sample(file: str) -> dict[str, Any]:
    """The first document of a sample (the job; a Service may follow it)."""
    return next(d for d in yaml.safe_load_all((SAMPLES / file).read_text()) if d)


def _raycluster() -> dict[str, Any]:
    rayjob = sample("rayjob-gang.yaml")
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": rayjob["spec"]["rayClusterSpec"]}


@dataclass(frozen=True)
class Kind:
    name: str
    resource: Resource
    build: Callable[[], dict[str, Any]]
    pods: int
    gpu_pods: int
    # Under bindMode Ungate its pods are pinned: its controller makes them after admission, with
    # the gang's labels, so the pod webhook gates them. A LeaderWorkerSet's pods are made before
    # (Kueue holds a pod group behind its own gate and labels the pods as it lets them go): they
    # are bound through the extender's plan and barrier, in the domain.
    pinned_in_ungate: bool = True
    # A pod deleted from a failed node is all its controller makes again; a LeaderWorkerSet
    # (RecreateGroupOnPodRestart) makes its whole group again.
    keeps_peers: bool = True
    # Kueue's PodsReady comes true in the local cluster. A RayJob's is KubeRay's report that its
    # cluster is Ready, which KubeRay writes only once it reached the Ray dashboard, and kwok's
    # pods run no dashboard: the watchdog never sees it running (a RayCluster's pods, the same
    # pods, show what it does with them).
    reports_ready: bool = True

    def submit(
        self, client: Client, name: str, namespace: str, queue: str, priority: str | None = None
    ) -> None:
        obj = copy.deepcopy(self.build())
        labels = {QUEUE_LABEL: queue, **({PRIORITY_LABEL: priority} if priority else {})}
        obj["metadata"] = {"name": name, "namespace": namespace, "labels": labels}
        client.create(self.resource, obj, namespace)


KINDS = [
    Kind(
        "pytorchjob",
        Resource("kubeflow.org/v1", "pytorchjobs"),
        lambda: sample("pytorchjob-gang.yaml"),
        8,
        8,
    ),
    Kind(
        "trainjob",
        Resource("trainer.kubeflow.org/v1alpha1", "trainjobs"),
        lambda: sample("trainjob-gang.yaml"),
        8,
        8,
    ),
    Kind("jobset", Resource("jobset.x-k8s.io/v1alpha2", "jobsets"), lambda: sample("jobset-gang.yaml"), 5, 5),
    Kind(
        "leaderworkerset",
        Resource("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
        lambda: sample("leaderworkerset-gang.yaml"),
        8,
        8,
        pinned_in_ungate=False,
        keeps_peers=False,
    ),
    Kind(
        "rayjob",
        Resource("ray.io/v1", "rayjobs"),
        lambda: sample("rayjob-gang.yaml"),
        8,
        7,
        reports_ready=False,
    ),
    Kind("raycluster", Resource("ray.io/v1", "rayclusters"), _raycluster, 8, 7),
]


def gang_pods(client: Client, namespace: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of the Workload's gang (its label), but those being deleted."""
    selector = f"{GANG_LABEL}={gang_id(workload['metadata']['name'])}"
    items = client.list(PODS, namespace, label_selector=selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def running(
    client: Client, namespace: str, job: str, kind: Kind, timeout: float = 180
) -> list[dict[str, Any]]:
    """Until every pod of the job's gang is bound and Ready; those pods."""
    seen: list[str] = []

    def ready() -> list[dict[str, Any]] | None:
        wl = workload_of(client, namespace, job)
        pods = gang_pods(client, namespace, wl) if wl else []
        seen[:] = [
            f"{p['metadata']['name']}@{p['spec'].get('nodeName')} ready={is_true(p, 'Ready')}" for p in pods
        ]
        ok = len(pods) == kind.pods and all(is_true(p, "Ready") for p in pods)
        return pods if ok else None

    return wait_until(
        ready, timeout, lambda: f"all {kind.pods} pods of {kind.name} {job} Ready; its gang's pods: {seen}"
    )
