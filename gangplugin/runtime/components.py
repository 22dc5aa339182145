"""What every component gets: an API client, shared watch caches, the dispatchers their
handlers run on, objects components share, and a way to stop; and what `serve` knows of its
own liveness (the threads that must stay alive, a fatal failure). `Component` is what a
component gives `serve`; `LeaderController` one whose controller only the leader runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from gangplugin.kube.client import JSON, Client, Resource
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity
from gangplugin.runtime.metrics import DISPATCH_BACKLOG

T = TypeVar("T")
C = TypeVar("C")


@dataclass
class Runtime:
    client: Client
    stop: threading.Event = field(default_factory=threading.Event)
    _informers: dict[tuple[str, str, Callable[[JSON], Any], str | None], Informer[Any]] = field(
        default_factory=dict
    )
    _dispatchers: dict[str, Dispatcher] = field(default_factory=dict)
    _shared: dict[str, Any] = field(default_factory=dict)
    # Threads whose death means the process no longer works (liveness fails, the pod restarts).
    _vital: list[threading.Thread] = field(default_factory=list)
    failure: str | None = None  # set by `fail`: serve exits non-zero with it

    def informer(
        self, resource: Resource, transform: Callable[[JSON], Any] = identity, namespace: str | None = None
    ) -> Informer[Any]:
        """One cache per resource, transform and namespace (None: all), shared by every component
        that asks for it; the caches of one resource and namespace share one list and watch."""
        key = (resource.api_version, resource.plural, transform, namespace)
        if key not in self._informers:
            stream = next(
                (i for k, i in self._informers.items() if k[:2] == key[:2] and k[3] == namespace), None
            )
            self._informers[key] = (
                Informer(self.client, resource, transform, namespace=namespace)
                if stream is None
                else stream.follower(transform)
            )
        return self._informers[key]

    def dispatcher(self, name: str) -> Dispatcher:
        """The dispatcher of that name, shared by every handler registered on it: one thread,
        handlers in registration order (give a component its own, unless its handlers must run
        in order with another's)."""
        if name not in self._dispatchers:
            self._dispatchers[name] = dispatcher = Dispatcher(name)
            DISPATCH_BACKLOG.labels(name).set_function(dispatcher.backlog)
        return self._dispatchers[name]

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """The one object of that name the components of this process share (made on first ask):
        how two components use one thing without importing each other's modules."""
        if name not in self._shared:
            self._shared[name] = make()
        value: T = self._shared[name]
        return value

    def start_informers(self) -> None:
        # Only the dispatch and watch threads themselves: a thread that happened to start
        # meanwhile (a health probe's request) is not vital, and its end must not fail liveness.
        self._vital += [d.start() for d in self._dispatchers.values()]
        self._vital += [inf.start() for inf in self._informers.values()]

    def informers(self) -> list[Informer[Any]]:
        return list(self._informers.values())

    def vital(self, thread: threading.Thread) -> None:
        self._vital.append(thread)

    def fail(self, reason: str) -> None:
        """Something the process cannot go on without broke: stop, and exit non-zero."""
        self.failure = reason
        self.stop.set()

    def live(self) -> tuple[bool, str]:
        dead = sorted(t.name for t in self._vital if not t.is_alive())
        if self.failure is not None:
            return False, self.failure
        return (False, f"threads stopped: {', '.join(dead)}") if dead else (True, "ok")


class Component(Protocol):
    """A part `gangplugin serve` runs, made with its settings (one typed object, passed in).
    `setup` asks for caches and registers handlers (before the caches start); `start` starts its
    threads once they are synced. `needs_leader`: started only while this replica holds the
    leader Lease (it writes, or plans in memory); otherwise on every replica."""

    needs_leader: bool

    def setup(self, runtime: Runtime) -> None: ...

    def start(self, runtime: Runtime) -> None: ...


class LeaderController(Generic[C]):
    """A component whose one controller only the leader runs (it writes): `build` makes it in
    `setup`, so its handlers exist before the caches start; `run` starts it in `start`."""

    name: ClassVar[str]
    needs_leader: bool = True

    def __init__(self) -> None:
        self._controller: C | None = None

    def build(self, runtime: Runtime) -> C:
        raise NotImplementedError

    def run(self, runtime: Runtime, controller: C) -> None:
        raise NotImplementedError

    def setup(self, runtime: Runtime) -> None:
        self._controller = self.build(runtime)

    def start(self, runtime: Runtime) -> None:
        if self._controller is None:
            raise RuntimeError(f"{self.name}: start() before setup()")
        self.run(runtime, self._controller)
