"""The console over the read model of watch caches fed plain objects, and an API server's reviews
answered from a table: what the console's unit tests run on.

The caches are the runtime's real `Informer`s, never started: objects go in through the path a
watch event takes (`_apply`, into every cache of the resource, whatever its transform), and each
change waits until the read model's and the console's dispatchers handled it.
The reviews (TokenReview, SubjectAccessReview) run through the real `AccessReviews` over an
httpx transport that answers as an API server with the given users and rights would; the real
ones run in tests/e2e/test_console.py.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

with warnings.catch_warnings():  # Starlette 1.x prefers a fork of httpx for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from gangplugin.console.app import make_app
from gangplugin.console.from_model import ReadModelSource
from gangplugin.console.live import Changes
from gangplugin.console.web import Console
from gangplugin.kube.access import AccessReviews
from gangplugin.kube.client import Client, Resource
from gangplugin.runtime.components import Runtime

ADMIN, READER, NOBODY = "admin-token", "reader-token", "nobody-token"
USERS = {ADMIN: "admin", READER: "reader", NOBODY: "nobody"}


@dataclass
class ApiServer:
    """Answers TokenReviews for `USERS`, SubjectAccessReviews from `rights` (user -> allowed
    (verb, resource, namespace) triples; "*" in any place allows all), and records writes."""

    rights: dict[str, set[tuple[str, str, str]]] = field(
        default_factory=lambda: {"admin": {("*", "*", "*")}, "reader": set(), "nobody": set()}
    )
    reviews: list[dict[str, Any]] = field(default_factory=list)
    writes: list[httpx.Request] = field(default_factory=list)
    answer_write: tuple[int, dict[str, Any]] = (200, {})

    def allowed(self, user: str, attrs: dict[str, Any]) -> bool:
        want = (attrs["verb"], attrs["resource"], attrs.get("namespace", ""))
        for verb, resource, ns in self.rights.get(user, set()):
            if verb in ("*", want[0]) and resource in ("*", want[1]) and ns in ("*", want[2]):
                return True
        return False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/tokenreviews"):
            token = orjson.loads(request.content)["spec"]["token"]
            user = USERS.get(token)
            review: dict[str, object] = {"authenticated": bool(user)}
            if user:
                review["user"] = {"username": user}
            return httpx.Response(201, content=orjson.dumps({"status": review}))
        if request.url.path.endswith("/subjectaccessreviews"):
            spec = orjson.loads(request.content)["spec"]
            self.reviews.append(spec)
            allowed = self.allowed(spec["user"], spec["resourceAttributes"])
            return httpx.Response(201, content=orjson.dumps({"status": {"allowed": allowed}}))
        self.writes.append(request)
        code, body = self.answer_write
        return httpx.Response(code, content=orjson.dumps(body))


class World:
    def __init__(self) -> None:
        self.api = ApiServer()
        self.client = Client("https://api.test", False, transport=httpx.MockTransport(self.api.handle))
        self.runtime = Runtime(self.client)
        self.source = ReadModelSource(self.runtime, floor=0.0, factor=0.0)  # every read up to date
        self.dispatchers = [self.runtime.dispatcher(name) for name in ("read-model", "console")]
        for dispatcher in self.dispatchers:
            dispatcher.start()

    def _caches(self, resource: Resource) -> list[Any]:
        return [inf for inf in self.runtime.informers() if inf._resource == resource]

    def _settle(self) -> None:
        assert all(d.caught_up(10) for d in self.dispatchers)

    def put(self, resource: Resource, *objs: dict[str, Any]) -> None:
        for obj in objs:
            for cache in self._caches(resource):
                cache._apply({"type": "MODIFIED", "object": obj}, None)
        self._settle()

    def delete(self, resource: Resource, obj: dict[str, Any]) -> None:
        for cache in self._caches(resource):
            cache._apply({"type": "DELETED", "object": obj}, None)
        self._settle()

    @contextmanager
    def browser(self, token: str | None = None) -> Iterator[TestClient]:
        """The console's application, with `token` as a signed-in browser's cookie."""
        changes = Changes(asyncio.new_event_loop())
        app = make_app(Console(self.source, AccessReviews(self.client, ttl=0), self.client, changes))
        with TestClient(app, base_url="https://console.test") as browser:
            if token is not None:
                browser.cookies.set("gangplugin-console-token", token, domain="console.test")
            yield browser


def policy(name: str = "default", rv: str = "5", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "GangPolicy",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"readyTimeout": "5m", **spec},
    }


def check(name: str = "gang", policy_name: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "controllerName": "gangplugin.io/gang",
            "parameters": {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": policy_name},
        },
    }


def cluster_queue(
    name: str = "training", gpus: str = "32", used: str = "0", borrowed: str = "0"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": "teams",
            "admissionChecksStrategy": {"admissionChecks": [{"name": "gang"}]},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gb200",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus, "borrowingLimit": "8"},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {
            "flavorsUsage": [
                {
                    "name": "gb200",
                    "resources": [{"name": "nvidia.com/gpu", "total": used, "borrowed": borrowed}],
                }
            ],
            "admittedWorkloads": 1,
            "pendingWorkloads": 2,
        },
    }


def local_queue(name: str = "training", namespace: str = "team-a", cq: str = "training") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}}


def standard(world: World) -> None:
    """A GangPolicy with one spare per UltraServer behind check `gang`, the `training` queues,
    and two UltraServers of 4 GB200 nodes (4 GPUs each)."""
    from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, NODES
    from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
    from tests.support.caches import gpu_node

    world.put(GANG_POLICIES, policy(sparesPerUltraServer=1, nodeFailure="ReplaceFromSpare"))
    world.put(ADMISSION_CHECKS, check())
    world.put(CLUSTER_QUEUES, cluster_queue())
    world.put(LOCAL_QUEUES, local_queue())
    for us in (1, 2):
        world.put(NODES, *(gpu_node(f"us{us}-{i}", f"us-{us}") for i in range(4)))
