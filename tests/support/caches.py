"""A GangService and PlanService over watch caches fed plain objects, served on loopback.

The caches are real `Informer`s that are never started: objects go in through the same code
path a watch event takes (`_apply`), and each change waits until the handlers' dispatcher has
handled it. No API server is called; the client points nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from gangplugin.api.component import new_server
from gangplugin.api.gangs import GangService
from gangplugin.api.plans import PlanService
from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc, plans_pb2_grpc
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import CLUSTER_QUEUES, JSON, LOCAL_QUEUES, NODES, WORKLOADS, Client, Resource
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity, object_key
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)
from gangplugin.readmodel.model import ReadModel
from tests.support import objects

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
            self._model = ReadModel(self.informer, self.dispatcher, jobs=True)
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


def model_of(
    *,
    workloads: Iterable[JSON] = (),
    checks: Iterable[JSON] = (),
    policies: Iterable[JSON] = (),
    topologies: Iterable[JSON] = (),
    flavors: Iterable[JSON] = (),
) -> tuple[Caches, ReadModel]:
    """Caches holding these objects, and the read model over them."""
    caches = Caches()
    for resource, objs in (
        (WORKLOADS, workloads),
        (ADMISSION_CHECKS, checks),
        (GANG_POLICIES, policies),
        (TOPOLOGIES, topologies),
        (RESOURCE_FLAVORS, flavors),
    ):
        for obj in objs:
            caches.put(resource, obj)
    return caches, caches.model()


def gpu_node(name: str, us: str) -> dict[str, Any]:
    """A GB200 node of 4 GPUs in UltraServer `us`, zone us-east-1a, Ready since CREATED."""
    labels = {"topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": objects.GB200}
    ready = objects.condition("Ready", lastTransitionTime=CREATED)
    return objects.node(name, us, labels=labels, conditions=[ready])


def cond(kind: str, status: str = "True", reason: str = "R") -> dict[str, Any]:
    return objects.condition(kind, status, reason=reason, message="", lastTransitionTime=CREATED)


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
    """A gang's Workload in team-a's `queue`; its quota reserved by ClusterQueue `training` and our
    check in state `check` (None: neither), Admitted when told."""
    main = objects.podset(
        count,
        requests={"cpu": "1", objects.GPU: "4"},
        annotations={"gangplugin.io/required-topology": "topology.k8s.aws/ultraserver-id"},
    )
    if check is None:
        return objects.workload(
            name, "team-a", main, queue=queue, creationTimestamp=CREATED, resourceVersion="1"
        )
    state = objects.check_state(
        "gang", check, pinned=pinned or None, message=message, lastTransitionTime=CREATED
    )
    if retries:
        state["retryCount"] = retries
    return objects.workload(
        name,
        "team-a",
        main,
        queue=queue,
        reserved_by="training",
        checks=[state],
        conditions=[cond("QuotaReserved")] + ([cond("Admitted")] if admitted else []),
        creationTimestamp=CREATED,
        resourceVersion="1",
    )


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
    """A pod of `gang` (podSet main) in team-a, bound to `node` when given."""
    return objects.pod(
        name,
        "team-a",
        gang=gang,
        size=size,
        node=node,
        conditions=[cond("Ready", "True" if ready else "False")],
        labels={rec.PODSET_LABEL: "main"},
        uid=f"uid-{name}",
        creationTimestamp=CREATED,
    )


def standard(caches: Caches | None = None) -> Caches:
    """Two UltraServers of 4 nodes (4 GPUs each); the `training` queues route to check `gang`.
    Into `caches` when given, else new ones."""
    caches = caches or Caches()
    caches.put(ADMISSION_CHECKS, objects.admission_check("gang"))
    caches.put(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "training"},
            "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "gang"}]}},
        },
    )
    caches.put(CLUSTER_QUEUES, {"metadata": {"name": "plain"}, "spec": {}})
    for name in ("training", "plain"):
        caches.put(LOCAL_QUEUES, objects.local_queue(name, "team-a"))
    for us in (1, 2):
        for i in range(4):
            caches.put(NODES, gpu_node(f"us{us}-{i}", f"us-{us}"))
    return caches


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


def explain(caches: Caches, name: str) -> gangs_pb2.GangExplanation:
    """gangctl explain's question, ExplainGang of gang `name` in team-a, over the served caches."""
    with serving(caches) as channel:
        stub = gangs_pb2_grpc.GangServiceStub(channel)
        reply: gangs_pb2.GangExplanation = stub.ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name=name), timeout=10
        )
    return reply
