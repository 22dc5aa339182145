"""A MultiKueue setup on this machine: a manager control plane (etcd, kube-apiserver,
kube-controller-manager, Kueue with MultiKueue; no nodes) and worker clusters (kwok nodes of a
HyperPod shape, kube-scheduler, Kueue, gangplugin with its gang check), each a `LocalCluster`
of its own (state directory, ports 1,000 apart), wired as docs/install.md's MultiKueue section
says: a kubeconfig Secret and a MultiKueueCluster per worker, the MultiKueueConfig `workers`,
and deploy/local/multikueue/manager-queues.yaml.

The manager's Kueue dispatches with `dispatcher`: gangplugin's (`gangplugin.io/dispatcher`,
Kueue's External mode, with `gangplugin serve --components multikueue,api` on the manager), or
one of Kueue's own (AllAtOnce, Incremental; the manager's gangplugin then serves only the API).
`use(dispatcher)` restarts the manager's Kueue and gangplugin with another one. Each cluster
runs one `gangplugin serve` (no follower): a test stops a worker's gang check by stopping it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gangplugin.core.names import DISPATCHER_NAME
from gangplugin.kube.client import ApiError, Client
from gangplugin.kube.resources import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS
from gangplugin.localcluster import manifests
from gangplugin.localcluster.cluster import LocalCluster
from gangplugin.localcluster.components.kueue import KUEUE_NAMESPACE
from gangplugin.localcluster.ports import Ports
from gangplugin.localcluster.probes import INSTALL_DEADLINE, wait
from gangplugin.localcluster.upstream import REPO, versions

ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
DISPATCHERS = {"gangplugin": DISPATCHER_NAME, "AllAtOnce": ALL_AT_ONCE, "Incremental": INCREMENTAL}
MANAGER_QUEUES = REPO / "deploy" / "local" / "multikueue" / "manager-queues.yaml"
WORKER_SHAPES = {
    "worker-a": REPO / "deploy" / "local" / "multikueue" / "worker-a.yaml",
    "worker-b": REPO / "deploy" / "local" / "multikueue" / "worker-b.yaml",
}
MANAGER_COMPONENTS = ("kube-controller-manager", "kueue", "gangplugin")
WORKER_COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok", "kueue", "gangplugin")
CONFIG_NAME = "workers"


def inline_kubeconfig(cluster: LocalCluster) -> bytes:
    """The cluster's admin kubeconfig with its certificates inline, as MultiKueue reads a
    worker's from a Secret (it refuses paths to files)."""
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    for c in doc["clusters"]:
        c["cluster"].pop("extensions", None)
        c["cluster"]["certificate-authority-data"] = _b64(Path(c["cluster"].pop("certificate-authority")))
    for u in doc["users"]:
        u["user"]["client-certificate-data"] = _b64(Path(u["user"].pop("client-certificate")))
        u["user"]["client-key-data"] = _b64(Path(u["user"].pop("client-key")))
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def manager_kueue_config(dispatcher: str) -> dict[str, Any]:
    """The manager's Kueue settings: the dispatcher, a short worker-lost timeout (the local
    tests take workers away), and no garbage collection pauses longer than the tests."""
    return {"multiKueue": {"dispatcherName": dispatcher, "workerLostTimeout": "1m", "gcInterval": "30s"}}


class MultiKueueClusters:
    """The manager at `base` and each worker of `workers` (name -> LocalClusterShape) at
    `base` + 1,000 x its position, under `root`. `gangplugin_args`: more `serve` flags for the
    manager's gangplugin (the dispatcher's timeouts)."""

    def __init__(
        self,
        root: Path,
        base: int,
        workers: Mapping[str, Path] | None = None,
        *,
        dispatcher: str = DISPATCHER_NAME,
        kueue_version: str | None = None,
        gangplugin_args: Iterable[str] = (),
        log: Callable[[str], None] = print,
    ) -> None:
        self.root, self.base, self.log = root, base, log
        self.kueue_version = kueue_version or versions()["KUEUE_NEWEST_VERSION"]
        self.gangplugin_args = tuple(gangplugin_args)
        self.dispatcher = dispatcher
        self.workers = {
            name: LocalCluster(
                root / name,
                Ports(base + 1000 * (i + 1)),
                log,
                components=WORKER_COMPONENTS,
                kueue_version=self.kueue_version,
                shape=shape,
                gangplugin_args=(),
                kueue_config={},
                gangplugin_replicas=1,
            )
            for i, (name, shape) in enumerate(sorted((workers or WORKER_SHAPES).items()))
        }
        self.manager = self._manager(dispatcher)

    def _manager(self, dispatcher: str) -> LocalCluster:
        ours = dispatcher == DISPATCHER_NAME
        return LocalCluster(
            self.root / "manager",
            Ports(self.base),
            self.log,
            components=MANAGER_COMPONENTS,
            kueue_version=self.kueue_version,
            gangplugin_components=("multikueue", "api") if ours else ("api",),
            gangplugin_args=self.gangplugin_args if ours else (),
            kueue_config=manager_kueue_config(dispatcher),
            gangplugin_replicas=1,
        )

    def clusters(self) -> dict[str, LocalCluster]:
        return {"manager": self.manager, **self.workers}

    def up(self) -> None:
        """Start every worker, then the manager, then wire them; stops all of them on a failure."""
        try:
            for worker in self.workers.values():
                worker.up()
            self.manager.up()
            self.connect()
        except BaseException:
            self.down()
            raise

    def connect(self) -> None:
        """The workers' kubeconfig Secrets and MultiKueueClusters, the MultiKueueConfig, the
        manager's queues; then until Kueue is connected to every worker."""
        client = Client.from_kubeconfig(self.manager.kubeconfig)
        try:
            for name, worker in self.workers.items():
                secret = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{name}-kubeconfig", "namespace": KUEUE_NAMESPACE},
                    "data": {"kubeconfig": base64.b64encode(inline_kubeconfig(worker)).decode()},
                }
                source = {"kubeConfig": {"location": f"{name}-kubeconfig", "locationType": "Secret"}}
                cluster = {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "MultiKueueCluster",
                    "metadata": {"name": name},
                    "spec": {"clusterSource": source},
                }
                for doc in (secret, cluster):
                    client.apply(manifests.resource_for(doc), doc, field_manager=manifests.FIELD_MANAGER)
            config = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueConfig",
                "metadata": {"name": CONFIG_NAME},
                "spec": {"clusters": sorted(self.workers)},
            }
            client.apply(manifests.resource_for(config), config, field_manager=manifests.FIELD_MANAGER)
            manifests.apply_file(client, MANAGER_QUEUES)
            wait(
                lambda: self._active(client),
                INSTALL_DEADLINE,
                "Kueue on the manager to connect to every worker",
            )
        finally:
            client.close()

    def _active(self, client: Client) -> bool:
        try:
            objs = [client.get(MULTIKUEUE_CLUSTERS, name) for name in self.workers]
            objs.append(client.get(ADMISSION_CHECKS, "multikueue"))
        except ApiError:
            return False
        return all(
            any(
                c.get("type") == "Active" and c.get("status") == "True"
                for c in (o.get("status") or {}).get("conditions") or []
            )
            for o in objs
        )

    def use(self, dispatcher: str) -> None:
        """Restart the manager's Kueue and gangplugin with another dispatcher (gangplugin's runs
        only with its own)."""
        self.dispatcher = dispatcher
        self.manager = self._manager(dispatcher)
        self.manager.restart("kueue")
        self.manager.restart("gangplugin")
        client = Client.from_kubeconfig(self.manager.kubeconfig)
        try:
            wait(
                lambda: self._active(client),
                INSTALL_DEADLINE,
                "Kueue on the manager to connect to every worker",
            )
        finally:
            client.close()

    def down(self) -> None:
        for cluster in self.clusters().values():
            cluster.down(quiet=True)
