"""A GangService and PlanService over watch caches fed plain objects, served on loopback.

The caches are real `Informer`s that are never started: objects go in through the same code
path a watch event takes (`_apply`), and each change waits until the handlers' dispatcher has
handled it. No API server is called; the client points nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from gangplugin.api.component import new_server
from gangplugin.api.gangs import GangService
from gangplugin.api.plans import PlanService
from gangplugin.api.proto import gangs_pb2_grpc, plans_pb2_grpc
from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, PODS, WORKLOADS, Client, Resource
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity, object_key
from gangplugin.kube.resources import ADMISSION_CHECKS, TRAINING_PLANS
from gangplugin.readmodel.model import ReadModel

NOW = 1_800_000_000.0
CREATED = "2027-01-15T08:00:00Z"  # 1_800_000_000 is 2027-01-15T08:00:00Z


class Caches:
    """One cache per resource and transform, as the runtime keeps them; an object put in goes
    to every cache of its resource, made before or after."""

    def __init__(self) -> None:
        self.client = Client("https://127.0.0.1:9", False)  # never reached: nothing is started
        self._informers: dict[tuple[str, str, Callable[[Any], Any]], Informer[Any]] = {}
        self._objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.dispatcher = Dispatcher("api-test")
        self.dispatcher.start()
        self._model: ReadModel | None = None

    def informer(self, resource: Resource, transform: Callable[[Any], Any] = identity) -> Informer[Any]:
        key = (resource.api_version, resource.plural, transform)
        if key not in self._informers:
            inf = self._informers[key] = Informer(self.client, resource, transform)
            for obj in self._objects.get(key[:2], {}).values():
                inf._apply({"type": "MODIFIED", "object": obj}, None)
        return self._informers[key]

    def _of(self, resource: Resource) -> list[Informer[Any]]:
        return [
            inf
            for (api, plural, _), inf in self._informers.items()
            if (api, plural) == (resource.api_version, resource.plural)
        ]

    def put(self, resource: Resource, obj: dict[str, Any]) -> None:
        self._objects.setdefault((resource.api_version, resource.plural), {})[object_key(obj)] = obj
        for inf in self._of(resource) or [self.informer(resource)]:
            inf._apply({"type": "MODIFIED", "object": obj}, None)
        assert self.dispatcher.caught_up(10)

    def model(self) -> ReadModel:
        """The read model over these caches (made once, on the test dispatcher, and told of the
        objects already in them)."""
        if self._model is None:
            self._model = ReadModel(self.informer, self.dispatcher)
            self.replay()
        return self._model

    def replay(self) -> None:
        """Tell handlers registered after the objects went in about them (as a relist does)."""
        for inf in self._informers.values():
            for obj in inf.items():
                inf._emit("ADDED", None, obj)
        assert self.dispatcher.caught_up(10)

    def delete(self, resource: Resource, obj: dict[str, Any]) -> None:
        self._objects.get((resource.api_version, resource.plural), {}).pop(object_key(obj), None)
        for inf in self._of(resource):
            inf._apply({"type": "DELETED", "object": obj}, None)
        assert self.dispatcher.caught_up(10)


def gpu_node(name: str, us: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": "us-east-1a",
        "topology.k8s.aws/ultraserver-id": us,
        "node.kubernetes.io/instance-type": "ml.p6e-gb200.36xlarge",
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "144", "memory": "800Gi", "pods": "110", "nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": CREATED}],
        },
    }


def cond(kind: str, status: str = "True", reason: str = "R") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": CREATED}


def workload(
    name: str,
    count: int,
    *,
    queue: str = "training",
    check: str | None = "Pending",
    message: str = "",
    admitted: bool = False,
    pinned: dict[str, str] | None = None,
    retries: int = 0,
) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": {"gangplugin.io/required-topology": "topology.k8s.aws/ultraserver-id"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}}}]
        },
    }
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "creationTimestamp": CREATED,
            "resourceVersion": "1",
        },
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": count, "template": template}]},
        "status": {},
    }
    if check is not None:
        state: dict[str, Any] = {
            "name": "gang",
            "state": check,
            "message": message,
            "lastTransitionTime": CREATED,
        }
        if pinned:
            state["podSetUpdates"] = [{"name": "main", "nodeSelector": pinned}]
        if retries:
            state["retryCount"] = retries
        conditions = [cond("QuotaReserved")] + ([cond("Admitted")] if admitted else [])
        wl["status"] = {
            "admission": {
                "clusterQueue": "training",
                "podSetAssignments": [{"name": "main", "count": count}],
            },
            "admissionChecks": [state],
            "conditions": conditions,
        }
    return wl


def owned(
    wl: dict[str, Any], kind: str = "Job", name: str = "train", api: str = "batch/v1"
) -> dict[str, Any]:
    """The Workload as Kueue makes it for a job: the job is its controller ownerReference."""
    ref = {"apiVersion": api, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    wl["metadata"]["ownerReferences"] = [ref]
    return wl


def pod(
    name: str, gang: str, *, node: str | None = None, ready: bool = False, size: int | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "uid": f"uid-{name}",
        "creationTimestamp": CREATED,
        "labels": {GANG_LABEL: gang, rec.PODSET_LABEL: "main"},
        "annotations": {GANG_SIZE_ANNOTATION: str(size)} if size is not None else {},
    }
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}
    if node:
        spec["nodeName"] = node
    status = {
        "phase": "Running" if node else "Pending",
        "conditions": [cond("Ready", "True" if ready else "False")],
    }
    return {"metadata": meta, "spec": spec, "status": status}


def standard(caches: Caches) -> None:
    """Two UltraServers of 4 nodes (4 GPUs each); the `training` queues route to check `gang`."""
    caches.put(
        ADMISSION_CHECKS, {"metadata": {"name": "gang"}, "spec": {"controllerName": "gangplugin.io/gang"}}
    )
    caches.put(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "training"},
            "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "gang"}]}},
        },
    )
    caches.put(CLUSTER_QUEUES, {"metadata": {"name": "plain"}, "spec": {}})
    for lq, cq in (("training", "training"), ("plain", "plain")):
        caches.put(
            LOCAL_QUEUES, {"metadata": {"name": lq, "namespace": "team-a"}, "spec": {"clusterQueue": cq}}
        )
    for us in (1, 2):
        for i in range(4):
            caches.put(NODES, gpu_node(f"us{us}-{i}", f"us-{us}"))


@contextmanager
def serving(caches: Caches, stop: threading.Event | None = None) -> Iterator[grpc.Channel]:
    """Both services (no auth) on a loopback port; yields a channel to them."""
    with served(caches, stop) as address, grpc.insecure_channel(address) as channel:
        yield channel


@contextmanager
def served(caches: Caches, stop: threading.Event | None = None) -> Iterator[str]:
    """Both services (no auth) on a loopback port; yields its address (for gangctl --server)."""
    stop = stop or threading.Event()
    gangs = GangService(caches.model(), stop, clock=lambda: NOW + 90)
    plans = PlanService(caches.client, caches.model().nodes, caches.informer(TRAINING_PLANS))
    caches.replay()
    server, _ = new_server(None)
    gangs_pb2_grpc.add_GangServiceServicer_to_server(gangs, server)
    plans_pb2_grpc.add_PlanServiceServicer_to_server(plans, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop.set()
        server.stop(0)


__all__ = ["NOW", "PODS", "WORKLOADS", "Caches", "owned", "pod", "served", "serving", "standard", "workload"]
