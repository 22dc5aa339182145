"""What every component gets: an API client, shared watch caches, and a way to stop; and what
`serve` knows of its own liveness (the threads that must stay alive, a fatal failure)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gangplugin.kube.client import JSON, Client, Resource
from gangplugin.kube.informer import Informer, identity


@dataclass
class Runtime:
    client: Client
    stop: threading.Event = field(default_factory=threading.Event)
    _informers: dict[tuple[str, str, Callable[[JSON], Any]], Informer[Any]] = field(default_factory=dict)
    # Threads whose death means the process no longer works (liveness fails, the pod restarts).
    _vital: list[threading.Thread] = field(default_factory=list)
    failure: str | None = None  # set by `fail`: serve exits non-zero with it

    def informer(self, resource: Resource, transform: Callable[[JSON], Any] = identity) -> Informer[Any]:
        """One cache per resource and transform, shared by every component that asks for it."""
        key = (resource.api_version, resource.plural, transform)
        if key not in self._informers:
            self._informers[key] = Informer(self.client, resource, transform)
        return self._informers[key]

    def start_informers(self) -> None:
        # Only the watch threads themselves: a thread that happened to start meanwhile (a health
        # probe's request) is not vital, and its end must not fail liveness.
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
