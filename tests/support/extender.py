"""The extender's unit harness: nodes and pods as its caches see them, GangReservations over plain
objects, the HTTP app served on loopback with a recorder in place of the API server, and a
scripted API server for the ungater."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import orjson

from gangplugin.core.gangplan import TOO_FULL, GangPod
from gangplugin.core.names import (
    BIND_MODE_LABEL,
    PLACEMENT_GATE,
)
from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.extender.barrier import Barrier
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.server import ExtenderHandlers, make_app
from gangplugin.extender.shared import admitted_of, policy_of
from gangplugin.kube.client import JSON
from gangplugin.localcluster.probes import Deadline
from gangplugin.readmodel.records import node_record
from gangplugin.runtime.asgi import serve
from tests.support import objects
from tests.support.caches import model_of
from tests.support.objects import GPU, node

T = TypeVar("T")


def pod(name: str, gang: str | None = None, size: Any = None, node_name: str | None = None) -> dict[str, Any]:
    """A pod of 4 GPUs in namespace ns as the extender sees it arrive: a member of `gang` (of
    `size`) when given, bound to `node_name` when given."""
    requests = {GPU: "4", "cpu": "1"}
    return objects.pod(
        name, gang=gang, size=size, node=node_name, requests=requests, phase="Pending", uid=f"uid-{name}"
    )


NODES = [f"n{i}" for i in range(4)]


def make_cache() -> GangReservations:
    cache = GangReservations()
    for n in NODES:
        cache.on_node("ADDED", None, node_record(node(n, "us-1")))
    return cache


class Recorder:
    """Bindings (in place of the API server) and refusals (in place of their Events); `barrier`
    is the one the app serves, for tests to see who waits there."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.refusals: list[tuple[str, str]] = []  # (pod name, why)
        self.barrier: Barrier | None = None

    def waiting(self, gang: str) -> set[str]:
        """The members of `gang` (namespace ns) waiting at the barrier now."""
        assert self.barrier is not None
        held = self.barrier.gangs.get(("ns", gang))
        return set() if held is None else {name for _, name in held.waiters}

    async def __call__(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.calls.append((namespace, name, uid, node))

    def refused(self, pod: GangPod, why: str) -> None:
        self.refusals.append((pod.name, why))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(
    coro_fn: Callable[[httpx.AsyncClient, Recorder], Awaitable[T]],
    cache: GangReservations,
    timeout: float = 2.0,
) -> T:
    """`coro_fn(client, recorder)` against the extender app served on loopback over `cache`."""

    async def main() -> T:
        rec = Recorder()
        barrier = rec.barrier = Barrier(cache, rec, timeout, rec.refused)
        app = make_app(ExtenderHandlers(cache), barrier)
        port = free_port()
        server = await serve(app, "127.0.0.1", port, None)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                return await coro_fn(client, rec)
        finally:
            server.cancel()

    return asyncio.run(main())


async def until(check: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Wait on the event loop until `check` holds, or fail saying what was awaited and seen;
    `timeout` in seconds of an idle machine (`probes.Deadline`: a busy one stretches it)."""
    deadline = Deadline(timeout)
    while not (value := check()):
        if deadline.passed():
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(0.01)
    return value


async def post(client: httpx.AsyncClient, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    resp = await client.post(path, content=data)
    return resp.status_code, orjson.loads(resp.content)


async def filtered(client: httpx.AsyncClient, pod: JSON, nodes: list[str] = NODES) -> tuple[int, Any]:
    """kube-scheduler's filter call for `pod` over `nodes`."""
    return await post(client, "/filter", {"Pod": pod, "NodeNames": nodes})


async def bind(client: httpx.AsyncClient, name: str, node: str, uid: str | None = None) -> tuple[int, Any]:
    """kube-scheduler's bind call: pod `name` of namespace ns (uid `uid-<name>` unless told) onto
    `node`."""
    body = {"PodName": name, "PodNamespace": "ns", "PodUID": uid or f"uid-{name}", "Node": node}
    return await post(client, "/bind", body)


HOST = "kubernetes.io/hostname"


def ungate_pod(name: str, gang: str, size: int, pinned: str | None = None, **kw: Any) -> dict[str, Any]:
    """A pod of an Ungate gang: gated as the webhook creates it, or pinned as the ungater leaves it."""
    obj = pod(name, gang, size, **kw)
    obj["metadata"]["labels"][BIND_MODE_LABEL] = "Ungate"
    if pinned is None:
        obj["spec"]["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    else:
        obj["spec"]["nodeSelector"] = {HOST: pinned}
    return obj


def cache_of(us_sizes: dict[str, int]) -> GangReservations:
    cache = GangReservations()
    for us, count in us_sizes.items():
        for i in range(count):
            cache.on_node("ADDED", None, node_record(node(f"{us}-{i}", us)))
    return cache


def add(cache: GangReservations, *objs: dict[str, Any]) -> None:
    for obj in objs:
        cache.on_pod("ADDED", None, gang_pod_from_k8s(obj))


class Objects:
    """A watch cache's read side over plain objects."""

    def __init__(self, *objs: JSON) -> None:
        self.objs = {
            "/".join(filter(None, (o["metadata"].get("namespace"), o["metadata"]["name"]))): o for o in objs
        }

    def get(self, key: str) -> JSON | None:
        return self.objs.get(key)

    def items(self) -> list[JSON]:
        return list(self.objs.values())


WORKLOAD = objects.workload("g", "ns", uid="wl-uid")


class Api:
    """Answers the ungater's calls: the Workload, PodGroups (create answers `create_status`),
    Events, and pin patches (the pod, pinned)."""

    def __init__(self, pods: list[dict[str, Any]], create_status: int = 201, existing: Any = None) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.create_status = create_status
        self.existing = existing
        self.workload: dict[str, Any] | None = WORKLOAD
        self.calls: list[tuple[str, str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content) if request.content else None
        path = request.url.path
        self.calls.append((request.method, path, body))
        if "/workloads/" in path:
            wanted = path.rsplit("/", 1)[1]
            named = self.workload is not None and self.workload["metadata"]["name"] == wanted
            return self._answer(self.workload if named else None)
        if path.endswith("/workloads"):  # a gang id that is no Workload name: list them
            items = [self.workload] if self.workload is not None else []
            return httpx.Response(200, content=orjson.dumps({"metadata": {}, "items": items}))
        if path.endswith("/podgroups"):
            if self.create_status == 201:
                return httpx.Response(201, content=orjson.dumps(body))
            return httpx.Response(self.create_status, content=orjson.dumps({"reason": "x", "message": "x"}))
        if "/podgroups/" in path:
            return self._answer(self.existing)
        if path.endswith("/events"):
            return httpx.Response(201, content=orjson.dumps(body))
        name = path.rsplit("/", 1)[1]
        assert body is not None, f"{request.method} {path} without a body"
        pinned = dict(self.pods[name])
        pinned["spec"] = {
            **pinned["spec"],
            "nodeSelector": body["spec"]["nodeSelector"],
            "schedulingGates": [],
        }
        return httpx.Response(200, content=orjson.dumps(pinned))

    @staticmethod
    def _answer(obj: dict[str, Any] | None) -> httpx.Response:
        if obj is None:
            return httpx.Response(404, content=orjson.dumps({"reason": "NotFound", "message": "gone"}))
        return httpx.Response(200, content=orjson.dumps(obj))

    def made(self, method: str, part: str) -> list[Any]:
        return [body for m, path, body in self.calls if m == method and part in path]


US1 = [f"us-1-{i}" for i in range(4)]


def workload(state: str = "Ready", count: int = 3, domain: str = "us-1") -> JSON:
    """The Workload of gang `train` (`count` 4-GPU pods) with our check in `state`, admitted
    into UltraServer `domain` when Ready."""
    pinned = {ULTRASERVER_LABEL: domain} if state == "Ready" else None
    return objects.workload(
        "train",
        "ns",
        objects.podset(count),
        reserved_by="cq",
        conditions=[objects.condition("QuotaReserved")],
        checks=[objects.check_state("gang", state, pinned=pinned)],
        resourceVersion="1",
    )


def reservations(*ultraservers: list[str]) -> GangReservations:
    ac = objects.admission_check("gang", policy="p")
    policy = objects.gang_policy("p")
    _, model = model_of(workloads=[workload()], checks=[ac], policies=[policy])
    res = GangReservations(policy_of=policy_of(model), admitted_of=admitted_of(model))
    for names in ultraservers:
        for name in names:
            res.on_node("ADDED", None, node_record(node(name, name.rsplit("-", 1)[0])))
    return res


PLAIN = gang_pod_from_k8s(pod("plain"))  # 4 GPUs, no gang: a whole node


def passed(res: GangReservations, candidates: list[str]) -> tuple[str, ...]:
    verdict, _ = res.filter(PLAIN, candidates, now=0.0)
    assert set(verdict.failed.values()) <= {TOO_FULL}
    return verdict.passed
