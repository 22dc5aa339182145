"""The console over watch caches fed plain objects, and an API server's reviews answered from a
table: what the console's unit tests run on.

The caches are the runtime's real `Informer`s, never started: objects go in through the path a
watch event takes (`_apply`), and each change waits until the console's dispatcher handled it.
The reviews (TokenReview, SubjectAccessReview) run through the real `AccessReviews` over an
httpx transport that answers as an API server with the given users and rights would; the real
ones run in tests/e2e/test_console.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.testclient import TestClient

from gangplugin.console.app import make_app
from gangplugin.console.caches import CacheSource
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
            status = {"authenticated": True, "user": {"username": user}} if user else {"authenticated": False}
            return httpx.Response(201, content=orjson.dumps({"status": status}))
        if request.url.path.endswith("/subjectaccessreviews"):
            spec = orjson.loads(request.content)["spec"]
            self.reviews.append(spec)
            allowed = self.allowed(spec["user"], spec["resourceAttributes"])
            return httpx.Response(201, content=orjson.dumps({"status": {"allowed": allowed}}))
        self.writes.append(request)
        status, body = self.answer_write
        return httpx.Response(status, content=orjson.dumps(body))


class World:
    def __init__(self) -> None:
        self.api = ApiServer()
        self.client = Client("https://api.test", False, transport=httpx.MockTransport(self.api.handle))
        self.runtime = Runtime(self.client)
        self.source = CacheSource(self.runtime)
        self.dispatcher = self.runtime.dispatcher("console")
        self.dispatcher.start()

    def put(self, resource: Resource, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.runtime.informer(resource)._apply({"type": "MODIFIED", "object": obj}, None)
        assert self.dispatcher.caught_up(10)

    def delete(self, resource: Resource, obj: dict[str, Any]) -> None:
        self.runtime.informer(resource)._apply({"type": "DELETED", "object": obj}, None)
        assert self.dispatcher.caught_up(10)

    @contextmanager
    def browser(self, token: str | None = None) -> Iterator[TestClient]:
        """The console's application, with `token` as a signed-in browser's cookie."""
        changes = Changes(asyncio.new_event_loop())
        app = make_app(Console(self.source, AccessReviews(self.client, ttl=0), self.client, changes))
        with TestClient(app, base_url="https://console.test") as browser:
            if token is not None:
                browser.cookies.set("gangplugin-console-token", token, domain="console.test")
            yield browser
