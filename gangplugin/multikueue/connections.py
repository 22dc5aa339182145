"""A connection to one worker cluster: an API client from its MultiKueueCluster's kubeconfig
Secret, and the watch caches the dispatcher reads there (`worker.WorkerView`), with their
handlers on a dispatcher of their own (a slow or silent worker delays nobody else)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, PODS, WORKLOADS, Client, Resource
from gangplugin.kube.config import kubeconfig_config
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)
from gangplugin.multikueue.worker import Caches, WorkerView, node_record, pod_record


def client_from_kubeconfig(data: bytes) -> Client:
    """A client of the cluster a kubeconfig (as MultiKueue keeps it in a Secret: everything
    inline) names; ConfigError when it cannot be used. The kubeconfig is read from a private
    temporary file, deleted at once."""
    with tempfile.TemporaryDirectory(prefix="gangplugin-worker-") as directory:
        path = Path(directory) / "kubeconfig"
        path.touch(mode=0o600)
        path.write_bytes(data)
        return Client.from_config(kubeconfig_config(str(path)))


class WorkerConnection:
    """The worker `name`'s caches; `on_change` runs (on the worker's own dispatcher) for every
    change that can alter what the dispatcher decides (node heartbeats are not such a change)."""

    def __init__(self, name: str, client: Client, on_change: Callable[[], None]) -> None:
        self.name = name
        self.client = client
        self.dispatcher = Dispatcher(f"worker-{name}")

        def changed(_kind: str, old: Any, new: Any) -> None:
            if old != new:  # records equal: a heartbeat or a field nothing here reads
                on_change()

        def cache(resource: Resource, transform: Callable[[Any], Any] = identity) -> Informer[Any]:
            inf: Informer[Any] = Informer(
                client, resource, transform, name=f"worker-{name}-{resource.plural}"
            )
            inf.add_handler(changed, self.dispatcher)
            return inf

        self.caches = Caches(
            nodes=cache(NODES, node_record),
            pods=cache(PODS, pod_record),
            workloads=cache(WORKLOADS),
            checks=cache(ADMISSION_CHECKS),
            policies=cache(GANG_POLICIES),
            topologies=cache(TOPOLOGIES),
            flavors=cache(RESOURCE_FLAVORS),
            cluster_queues=cache(CLUSTER_QUEUES),
            local_queues=cache(LOCAL_QUEUES),
            plans=cache(TRAINING_PLANS, rec.plan_or_none),
        )
        self.view = WorkerView(name, self.caches)
        self._informers: list[Informer[Any]] = list(vars(self.caches).values())

    def start(self) -> None:
        self.dispatcher.start()
        for inf in self._informers:
            inf.start()

    def synced(self) -> bool:
        """Whether every cache holds its first list (and its handlers have seen it)."""
        return all(inf.wait_synced(0) for inf in self._informers)

    def stop(self) -> None:
        for inf in self._informers:
            inf.stop()
        self.dispatcher.stop()
        self.client.close()  # ends the watches it holds open
