"""Watch caches: list once, then watch, keep a local copy current, tell handlers what changed.

This is the machinery; controllers only supply handlers and reconcile functions
(the kopf split). Objects are stored raw, or as whatever `transform` makes of them,
so hot paths can keep slim records instead of whole objects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from gangplugin.kube.client import JSON, ApiError, Client, Resource

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[str, "T | None", "T | None"], None]  # (event type, old, new)


def object_key(obj: JSON) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class Informer(Generic[T]):
    """A current copy of every object of one resource, kept by one background thread."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        transform: Callable[[JSON], T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        name: str | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._transform = transform
        self._namespace = namespace
        self._selector = label_selector
        self._store: dict[str, T] = {}
        self._lock = threading.RLock()
        self._handlers: list[Handler[T]] = []
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=name or f"informer-{resource.plural}", daemon=True
        )

    def add_handler(self, handler: Handler[T]) -> None:
        self._handlers.append(handler)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[T]:
        with self._lock:
            return list(self._store.values())

    def _emit(self, kind: str, old: T | None, new: T | None) -> None:
        for handler in self._handlers:
            try:
                handler(kind, old, new)
            except Exception:  # a handler's bug must not stop the cache
                log.exception("informer %s: handler failed on %s", self._resource.plural, kind)

    def _relist(self) -> str:
        listing = self._client.list(self._resource, self._namespace, label_selector=self._selector)
        fresh = {object_key(o): self._transform(o) for o in listing["items"]}
        with self._lock:
            old = self._store
            self._store = fresh
        for key, obj in fresh.items():
            prev = old.get(key)
            self._emit("ADDED" if prev is None else "MODIFIED", prev, obj)
        for key, prev in old.items():
            if key not in fresh:
                self._emit("DELETED", prev, None)
        self._synced.set()
        return str(listing["metadata"].get("resourceVersion", ""))

    def _run(self) -> None:
        backoff = 0.5
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                for event in self._client.watch(
                    self._resource, self._namespace, resource_version=rv, label_selector=self._selector
                ):
                    if self._stop.is_set():
                        return
                    rv = self._apply(event, rv)
                backoff = 0.5
            except ApiError as err:
                if err.status == 410:  # our resourceVersion is too old: start over
                    rv = None
                    continue
                log.warning("informer %s: %s; retrying in %.1fs", self._resource.plural, err, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except (httpx.HTTPError, OSError) as err:
                log.warning("informer %s: %s; retrying in %.1fs", self._resource.plural, err, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _apply(self, event: JSON, rv: str | None) -> str | None:
        kind, obj = event.get("type"), event.get("object", {})
        if kind == "ERROR":
            code = obj.get("code", 500)
            raise ApiError(int(code), obj.get("reason", ""), obj.get("message", ""))
        new_rv = obj.get("metadata", {}).get("resourceVersion", rv)
        if kind == "BOOKMARK":
            return str(new_rv)
        key = object_key(obj)
        if kind == "DELETED":
            with self._lock:
                prev = self._store.pop(key, None)
            self._emit("DELETED", prev, None)
        else:
            value = self._transform(obj)
            with self._lock:
                prev = self._store.get(key)
                self._store[key] = value
            self._emit("ADDED" if prev is None else "MODIFIED", prev, value)
        return str(new_rv)


def identity(obj: JSON) -> JSON:
    return obj


def wait_all_synced(informers: list[Informer[Any]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in informers)
