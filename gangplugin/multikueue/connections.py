"""A connection to one worker cluster: an API client from its MultiKueueCluster's kubeconfig
Secret, and the read model over the worker's watch caches (what `worker.WorkerView` reads),
with its handlers on a dispatcher of their own (a slow or silent worker delays nobody else)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gangplugin.kube.client import Client, Resource
from gangplugin.kube.config import kubeconfig_config
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity
from gangplugin.multikueue.worker import WorkerView
from gangplugin.readmodel.model import Config, Follower, ReadModel
from gangplugin.readmodel.records import NodeRecord, PodRecord, WorkloadRecord


def client_from_kubeconfig(data: bytes) -> Client:
    """A client of the cluster a kubeconfig (as MultiKueue keeps it in a Secret: everything
    inline) names; ConfigError when it cannot be used. The kubeconfig is read from a private
    temporary file, deleted at once."""
    with tempfile.TemporaryDirectory(prefix="gangplugin-worker-") as directory:
        path = Path(directory) / "kubeconfig"
        path.touch(mode=0o600)
        path.write_bytes(data)
        return Client.from_config(kubeconfig_config(str(path)))


class _Changed(Follower):
    """Every change the read model holds can alter what the dispatcher decides (it skips node
    heartbeats and pod fields it does not read)."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        self.on_change()

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        self.on_change()

    def node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        self.on_change()

    def config(self, kind: Config, name: str, present: bool) -> None:
        self.on_change()


class WorkerConnection:
    """The worker `name`'s read model; `on_change` runs (on the worker's own dispatcher) for every
    change that can alter what the dispatcher decides."""

    def __init__(self, name: str, client: Client, on_change: Callable[[], None]) -> None:
        self.name = name
        self.client = client
        self.dispatcher = Dispatcher(f"worker-{name}")
        self.informers: list[Informer[Any]] = []  # the read model's caches of the worker

        def cache(resource: Resource, transform: Callable[[Any], Any] = identity) -> Informer[Any]:
            inf: Informer[Any] = Informer(
                client, resource, transform, name=f"worker-{name}-{resource.plural}"
            )
            self.informers.append(inf)
            return inf

        self.model = ReadModel(cache, self.dispatcher)
        self.model.follow(_Changed(on_change))
        self.view = WorkerView(name, self.model)

    def start(self) -> None:
        self.dispatcher.start()
        for inf in self.informers:
            inf.start()

    def synced(self) -> bool:
        """Whether every cache holds its first list (and its handlers have seen it)."""
        return all(inf.wait_synced(0) for inf in self.informers)

    def stop(self) -> None:
        for inf in self.informers:
            inf.stop()
        self.dispatcher.stop()
        self.client.close()  # ends the watches it holds open
