"""What every component gets: an API client, shared watch caches, and a way to stop."""

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

    def informer(self, resource: Resource, transform: Callable[[JSON], Any] = identity) -> Informer[Any]:
        """One cache per resource and transform, shared by every component that asks for it."""
        key = (resource.api_version, resource.plural, transform)
        if key not in self._informers:
            self._informers[key] = Informer(self.client, resource, transform)
        return self._informers[key]

    def start_informers(self) -> None:
        for inf in self._informers.values():
            inf.start()

    def informers(self) -> list[Informer[Any]]:
        return list(self._informers.values())
