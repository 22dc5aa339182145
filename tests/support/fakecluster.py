"""A cluster's API behind httpx.MockTransport, for the dispatcher's adapter tests: it fakes the
network and the object store, not Kubernetes' logic (the e2e tests run the real thing). Lists
and gets answer the stored objects; each watch streams every later change of its resource; a merge
patch or a server-side apply of `status.nominatedClusterNames` is refused with 409 when its
resourceVersion is not the stored one, and otherwise stored (and watched)."""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from gangplugin.kube.client import Client

JSON = dict[str, Any]


def _merge(into: JSON, patch: JSON) -> None:
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class FakeCluster:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, JSON]] = {}  # collection path -> key -> object
        self.rv = 1
        self.writes: list[tuple[str, str, JSON]] = []  # (method, path, body)
        self._watches: dict[str, list[queue.SimpleQueue[bytes | None]]] = {}
        self._log: list[tuple[int, str, bytes]] = []  # every change, for watches from a resourceVersion
        self._held: dict[str, list[tuple[str, bytes]]] = {}  # paused collection -> (key, line) not sent
        self._lock = threading.Lock()
        self.closed = threading.Event()

    def client(self) -> Client:
        return Client("https://fake.test", False, transport=httpx.MockTransport(self.handle))

    def close(self) -> None:
        self.closed.set()
        with self._lock:
            for qs in self._watches.values():
                for q in qs:
                    q.put(None)

    # -- the store ------------------------------------------------------------------------------

    @staticmethod
    def _collection(api_version: str, plural: str) -> str:
        return "/api/v1/" + plural if api_version == "v1" else f"/apis/{api_version}/{plural}"

    def put(self, api_version: str, plural: str, obj: JSON) -> JSON:
        """Store (create or replace) an object and tell the watches."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self._lock:
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            coll = self._collection(api_version, plural)
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            kind = "MODIFIED" if key in self.objects.setdefault(coll, {}) else "ADDED"
            self.objects[coll][key] = obj
            self._tell(coll, kind, obj)
        return obj

    def get(self, api_version: str, plural: str, name: str, namespace: str = "") -> JSON | None:
        with self._lock:
            found = self.objects.get(self._collection(api_version, plural), {}).get(f"{namespace}/{name}")
            return copy.deepcopy(found) if found is not None else None

    def delete(self, api_version: str, plural: str, name: str, namespace: str = "") -> None:
        with self._lock:
            coll = self._collection(api_version, plural)
            obj = self.objects.get(coll, {}).pop(f"{namespace}/{name}", None)
            if obj is not None:
                self.rv += 1
                self._tell(coll, "DELETED", obj)

    def _tell(self, coll: str, kind: str, obj: JSON) -> None:
        line = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        self._log.append((self.rv, coll, line))
        if coll in self._held:
            self._held[coll].append((obj["metadata"]["name"], line))
            return
        for q in self._watches.get(coll, []):
            q.put(line)

    def pause(self, api_version: str, plural: str) -> None:
        """Hold back the watch events of a resource (a watch that lags) until `release`."""
        with self._lock:
            self._held.setdefault(self._collection(api_version, plural), [])

    def release(self, api_version: str, plural: str, name: str) -> None:
        """Send the held events of one object (others stay held)."""
        coll = self._collection(api_version, plural)
        with self._lock:
            held = self._held[coll]
            for line in [line for n, line in held if n == name]:
                for q in self._watches.get(coll, []):
                    q.put(line)
            self._held[coll] = [(n, line) for n, line in held if n != name]

    # -- HTTP -----------------------------------------------------------------------------------

    def _parse(self, path: str) -> tuple[str, str | None, str | None, str | None]:
        """(collection, namespace, name, subresource) of an API path."""
        parts = path.strip("/").split("/")
        base = parts[:2] if parts[0] == "api" else parts[:3]
        rest = parts[len(base) :]
        ns = None
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        coll = "/" + "/".join([*base, rest[0]])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return coll, ns, name, sub

    def handle(self, request: httpx.Request) -> httpx.Response:
        coll, ns, name, sub = self._parse(request.url.path)
        if request.method == "GET" and name is None:
            if "watch" in request.url.params:
                since = int(request.url.params.get("resourceVersion") or 0)
                return httpx.Response(200, content=self._stream(coll, since))
            with self._lock:
                items = [
                    o
                    for o in self.objects.get(coll, {}).values()
                    if ns is None or o["metadata"].get("namespace") == ns
                ]
                body = {"metadata": {"resourceVersion": str(self.rv)}, "items": items}
            return httpx.Response(200, content=orjson.dumps(body))
        if request.method == "GET" and sub is None:
            with self._lock:
                found = self.objects.get(coll, {}).get(f"{ns or ''}/{name}")
            if found is None:
                return httpx.Response(404, content=b'{"reason":"NotFound","message":"not found"}')
            return httpx.Response(200, content=orjson.dumps(found))
        if request.method == "PATCH" and name is not None:
            body = orjson.loads(request.content)
            self.writes.append((request.method, request.url.path, body))
            with self._lock:
                stored = self.objects.get(coll, {}).get(f"{ns or ''}/{name}")
                if stored is None:
                    return httpx.Response(404, content=b'{"reason":"NotFound","message":"not found"}')
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want is not None and want != stored["metadata"]["resourceVersion"]:
                    return httpx.Response(409, content=b'{"reason":"Conflict","message":"changed"}')
                updated = copy.deepcopy(stored)
            if sub == "status":
                updated.setdefault("status", {})["nominatedClusterNames"] = body["status"][
                    "nominatedClusterNames"
                ]
            else:
                patch = copy.deepcopy(body)
                patch.get("metadata", {}).pop("resourceVersion", None)
                _merge(updated, patch)
            version, plural = coll.removeprefix("/apis/").removeprefix("/api/").rsplit("/", 1)
            written = self.put(version, plural, updated)
            return httpx.Response(200, content=orjson.dumps(written))
        return httpx.Response(405, content=b'{"reason":"MethodNotAllowed","message":"not faked"}')

    def _stream(self, coll: str, since: int) -> Iterator[bytes]:
        q: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        with self._lock:
            for rv, c, line in self._log:
                if c == coll and rv > since:
                    q.put(line)
            self._watches.setdefault(coll, []).append(q)
        try:
            while not self.closed.is_set():
                next_line = q.get()
                if next_line is None:
                    return
                yield next_line
        finally:
            with self._lock:
                self._watches[coll].remove(q)
