"""Watch caches: list once, then watch, keep a local copy current, tell handlers what changed.

This is the machinery; controllers only supply handlers and reconcile functions
(the kopf split). Objects are stored raw, or as whatever `transform` makes of them,
so hot paths can keep slim records instead of whole objects. The watch thread only decodes,
updates the store and hands each change to the dispatchers of the handlers registered for it
(`kube.dispatcher`): a slow handler delays its own component, never this cache nor another's.

The loop is client-go's reflector: a list (from the API server's watch cache at the last
resourceVersion seen, or, after 410 Gone, a paginated quorum list), then a watch with bookmarks
and a jittered `timeoutSeconds`, re-watched from the last resourceVersion when the server ends
it. Any failure (an error status, 410, 429, 5xx, a refused or dead connection, an undecodable
line, a bug in a transform, a watch that ends at once with no event) backs off with jitter
(longer when the server sends Retry-After), then lists again. A watch silent for longer than
the bookmark interval is replaced by a new one from the same resourceVersion: on a dead
connection the new request fails (and that failure backs off and lists again); on a live one it
costs one request. client-go gets the same from HTTP/2 pings, which httpx does not send.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from gangplugin.kube.client import JSON, ApiError, Client, Resource, status_error
from gangplugin.kube.dispatcher import Dispatcher

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")
Handler = Callable[[str, "T | None", "T | None"], None]  # (event type, old, new)


#: client-go's minWatchTimeout: each watch asks for a random timeout in [1, 2) times it, so the
#: watches of many replicas do not all end (and re-watch) at once.
WATCH_TIMEOUT = 300.0
#: The API server sends a watch a bookmark about every minute while its resource changes (a quiet
#: resource's watch may stay silent for longer: etcd's progress notices come every 10 minutes).
#: After this much silence the watch is made again, so a dead connection is noticed within about
#: a minute, not the 330 s a read timeout past the watch timeout would take.
READ_TIMEOUT = 70.0
PAGE_SIZE = 500
#: client-go's "very short watch": one that ends sooner than this with no event at all is a
#: failure (a proxy or a server closing every watch at once), backed off, not made again at once.
SHORT_WATCH = 1.0


class ShortWatch(Exception):
    """The server ended a watch at once, without an event."""


class Backoff:
    """client-go's wait.Backoff for reflectors: 0.8 s doubling to 30 s, each delay stretched by a
    random factor in [1, 2), starting over after 2 minutes without a failure (monotonic clock)."""

    def __init__(
        self,
        initial: float = 0.8,
        cap: float = 30.0,
        reset_after: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.initial, self.cap, self.reset_after, self.clock, self.rand = (
            initial,
            cap,
            reset_after,
            clock,
            rand,
        )
        self._failures = 0
        self._last: float | None = None

    def next(self) -> float:
        now = self.clock()
        if self._last is not None and now - self._last >= self.reset_after:
            self._failures = 0
        self._last = now
        delay = min(self.initial * 2.0**self._failures, self.cap)
        self._failures += 1
        return delay * (1.0 + self.rand())


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
        backoff: Backoff | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._transform = transform
        self._namespace = namespace
        self._selector = label_selector
        self._store: dict[str, T] = {}
        self._lock = threading.RLock()
        # dispatcher -> its handlers, in registration order (dispatchers in first-registration order)
        self._routes: dict[Dispatcher, tuple[Handler[T], ...]] = {}
        self._synced = threading.Event()
        self._handled: list[threading.Event] = []  # each dispatcher past the first list's events
        self._stop = threading.Event()
        self._backoff = backoff or Backoff()
        self._thread = threading.Thread(
            target=self._run, name=name or f"informer-{resource.plural}", daemon=True
        )
        # Caches of the same objects under other transforms, kept by this one's list and watch
        # (`follower`): one stream from the API server and one decode per event, not one each.
        self._followers: list[Informer[Any]] = []
        self._leader: Informer[Any] | None = None

    def follower(self, transform: Callable[[JSON], U]) -> Informer[U]:
        """A cache of the same objects under `transform`, kept current by this informer's list and
        watch (it has no stream of its own). Make it before `start`, as handlers are added."""
        if self._leader is not None:
            return self._leader.follower(transform)
        other: Informer[U] = Informer(
            self._client, self._resource, transform, namespace=self._namespace, label_selector=self._selector
        )
        other._leader, other._thread = self, self._thread
        self._followers.append(other)
        return other

    def add_handler(self, handler: Handler[T], dispatcher: Dispatcher) -> None:
        """Run `handler` on `dispatcher` for every change, after the handlers registered there
        before it. Register before `start`: a handler added later misses the first list."""
        self._routes[dispatcher] = (*self._routes.get(dispatcher, ()), handler)

    def start(self) -> threading.Thread:
        """Start the watch thread; returned so the caller can watch it live (a follower's is its
        leader's, which its leader's `start` starts)."""
        if self._leader is None:
            self._thread.start()
        return self._thread

    def stop(self) -> None:
        (self._leader or self)._stop.set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the store holds the first list and every handler has handled it (so what
        handlers build from it, a component's own cache, is there too); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        return self._synced.wait(left()) and all(done.wait(left()) for done in self._handled)

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[T]:
        with self._lock:
            return list(self._store.values())

    def _emit(self, kind: str, old: T | None, new: T | None) -> None:
        for dispatcher, handlers in self._routes.items():
            dispatcher.deliver(handlers, kind, old, new)

    def _relist(self, resource_version: str | None) -> str:
        # As client-go's reflector: a limit would send a list at a given resourceVersion to etcd
        # (an exact read); without one the watch cache answers. "0" and quorum lists page.
        paged = resource_version in (None, "0")
        listing = self._client.list(
            self._resource,
            self._namespace,
            label_selector=self._selector,
            resource_version=resource_version,
            limit=PAGE_SIZE if paged else None,
        )
        keyed = [(object_key(o), o) for o in listing["items"]]
        for cache in (self, *self._followers):
            cache._load(keyed)
        return str(listing["metadata"].get("resourceVersion", ""))

    def _load(self, listed: list[tuple[str, JSON]]) -> None:
        """Replace the store with a list's objects; tell handlers what that changed."""
        fresh = {key: self._transform(o) for key, o in listed}
        with self._lock:
            old = self._store
            self._store = fresh
        for key, obj in fresh.items():
            prev = old.get(key)
            self._emit("ADDED" if prev is None else "MODIFIED", prev, obj)
        for key, prev in old.items():
            if key not in fresh:
                self._emit("DELETED", prev, None)
        if not self._synced.is_set():
            self._handled = [d.mark() for d in self._routes]
            self._synced.set()

    def _run(self) -> None:
        rv: str | None = None  # the last resourceVersion seen, by list or watch
        relist, quorum = True, False
        while not self._stop.is_set():
            watching = False
            try:
                if relist:
                    # From the watch cache ("0": any state; rv: not older than it) unless the
                    # server said our resourceVersion is gone: then from etcd, in pages.
                    rv = self._relist(None if quorum else rv or "0")
                    relist = quorum = False
                watching, began, events = True, time.monotonic(), 0
                for event in self._client.watch(
                    self._resource,
                    self._namespace,
                    resource_version=rv,
                    label_selector=self._selector,
                    timeout_seconds=int(WATCH_TIMEOUT * (1.0 + random.random())),
                    read_timeout=READ_TIMEOUT,
                ):
                    if self._stop.is_set():
                        return
                    events += 1
                    rv = self._apply(event, rv)
                if not events and time.monotonic() - began < SHORT_WATCH:
                    raise ShortWatch(f"the watch from resourceVersion {rv} ended at once, without an event")
                # The server ended the watch at its timeout: watch on from rv, no list.
            except httpx.ReadTimeout as err:
                if not watching:  # a list that does not answer: a failure like any other (relist holds)
                    self._failed(err)
                else:
                    log.debug(
                        "informer %s: silent for %gs; watching again", self._resource.plural, READ_TIMEOUT
                    )
            except Exception as err:  # every failure: back off, then list again
                if self._stop.is_set():
                    return
                relist = True
                quorum = isinstance(err, ApiError) and err.status == 410
                self._failed(err)

    def _failed(self, err: Exception) -> None:
        """Wait out the backoff (or the server's Retry-After, if longer) before listing again."""
        delay = self._backoff.next()
        if isinstance(err, ApiError) and err.retry_after is not None:
            delay = max(delay, err.retry_after)
        log.warning(
            "informer %s: %s: %s; listing again in %.1fs",
            self._resource.plural,
            type(err).__name__,
            err,
            delay,
        )
        self._stop.wait(delay)

    def _apply(self, event: JSON, rv: str | None) -> str | None:
        kind, obj = event.get("type"), event.get("object", {})
        if kind == "ERROR":  # a Status: 410 when our resourceVersion is too old, 429, 5xx...
            raise status_error(obj)
        new_rv = obj.get("metadata", {}).get("resourceVersion", rv)
        if kind == "BOOKMARK":
            return str(new_rv)
        key = object_key(obj)
        for cache in (self, *self._followers):
            cache._change(kind == "DELETED", key, obj)
        return str(new_rv)

    def _change(self, deleted: bool, key: str, obj: JSON) -> None:
        if deleted:
            with self._lock:
                prev = self._store.pop(key, None)
            if prev is not None:  # as client-go: the deletion of an object never seen tells nobody
                self._emit("DELETED", prev, None)
        else:
            value = self._transform(obj)
            with self._lock:
                prev = self._store.get(key)
                self._store[key] = value
            self._emit("ADDED" if prev is None else "MODIFIED", prev, value)


def identity(obj: JSON) -> JSON:
    return obj


def wait_all_synced(informers: list[Informer[Any]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in informers)
