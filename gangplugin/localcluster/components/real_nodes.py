"""The real nodes (GANGPLUGIN_WITH=real-nodes, optional): a kubelet per node of
deploy/local/real-nodes-shape.yaml, each with its own containerd, runc and CNI network in a mount
namespace of its own, a fake-GPU device plugin, kube-proxy for the Services, and CoreDNS (a
Deployment on them). The machinery is `gangplugin/localcluster/realnodes/`; docs/real-nodes.md
says what runs and why.

`power_off` cuts a node (its kubelet, runtime and containers, as a machine lost), `power_on`
boots it again."""

from __future__ import annotations

import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gangplugin.kube.client import NODES, Client, Resource
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import http_ok, wait
from gangplugin.localcluster.realnodes import cgroups, network
from gangplugin.localcluster.realnodes import images as node_images
from gangplugin.localcluster.realnodes.configs import (
    NodeRun,
    kube_proxy_config,
    node_binds,
    node_kubeconfig,
    write_node,
)
from gangplugin.localcluster.realnodes.pool import GPU, KIND_LABEL, Pool, RealNode, plan, recorded
from gangplugin.localcluster.realnodes.runner import EXITED
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import REPO, versions

if TYPE_CHECKING:
    from gangplugin.localcluster.cluster import LocalCluster

COREDNS = REPO / "deploy" / "real-nodes" / "coredns.yaml"
DEPLOYMENTS = Resource("apps/v1", "deployments")
# What the host must have (Debian packages): the runtime, the CNI plugins, nftables for kube-proxy.
HOST_PROGRAMS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "unshare": "util-linux",
    "nft": "nftables",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
}
# Nodes boot at once; on a loaded 2-core machine a cold start (image loads) takes a while.
READY_TIMEOUT = 600.0


def check_host() -> None:
    missing = sorted({pkg for prog, pkg in HOST_PROGRAMS.items() if shutil.which(prog) is None})
    if missing:
        raise ClusterError(f"the real nodes need {', '.join(missing)}: apt-get install {' '.join(missing)}")
    if not cgroups.hierarchies():
        raise ClusterError(
            "the real nodes run on cgroup v1 hierarchies under /sys/fs/cgroup; none is mounted"
        )


@dataclass(frozen=True)
class RealNodes(Component):
    name = "real-nodes"
    requires = ("kube-controller-manager", "kube-scheduler")
    optional = True
    build_group = "nodes"

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return tuple(
            spec.bin_dir / b for b in ("kubelet", "kube-proxy", "coredns", "pause", "kube-scheduler")
        )

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        pool = plan(spec)
        ports = {"kube-proxy health": pool.kube_proxy_health, "kube-proxy metrics": pool.kube_proxy_metrics}
        for node in pool.nodes:
            ports |= {
                f"{node.name} kubelet": node.kubelet_port,
                f"{node.name} kubelet healthz": node.healthz_port,
                f"{node.name} containerd streaming": node.stream_port,
            }
        return ports

    def install(self, spec: ClusterSpec, client: Client) -> None:
        image = f"registry.k8s.io/coredns/coredns:{versions()['COREDNS_VERSION']}"
        for doc in yaml.safe_load_all(COREDNS.read_text()):
            if doc["kind"] == "Deployment":
                doc["spec"]["template"]["spec"]["containers"][0]["image"] = image
            client.apply(manifests.resource_for(doc), doc, field_manager=manifests.FIELD_MANAGER)

    def processes(self, spec: ClusterSpec) -> tuple[Process, ...]:
        """Every node's runner, then kube-proxy; first the host's side: the bridge, the images
        (built or reused), the nodes' files."""
        check_host()
        pool = plan(spec)
        pool.write()
        network.up(pool)
        if not reachable(pool.network.gateway, spec.ports.apiserver):
            raise ClusterError(
                "kube-apiserver does not listen where the real nodes' pods reach it (it was started "
                "without them): stop the cluster and start it with real-nodes (GANGPLUGIN_WITH=real-nodes)"
            )
        cgroups.create(pool.cgroup)
        cgroups.weigh(pool.cgroup, 2 * len(pool.nodes))  # each node as a 2-core machine
        built = node_images.build()
        built.write(pool.directory / "images.json")
        return (*(self._node(spec, pool, node, built) for node in pool.nodes), self._kube_proxy(spec, pool))

    def process_named(self, spec: ClusterSpec, name: str) -> Process | None:
        pool = recorded(spec)
        if pool is None:
            return None
        if name == "kube-proxy":
            return self._kube_proxy(spec, pool)
        for node in pool.nodes:
            if node.process_name == name:
                return self._node(
                    spec, pool, node, node_images.NodeImages.read(pool.directory / "images.json")
                )
        return None

    def _node(self, spec: ClusterSpec, pool: Pool, node: RealNode, built: node_images.NodeImages) -> Process:
        pause = versions()["PAUSE_VERSION"]
        containerd_config, kubelet_config = write_node(spec, pool, node, pause)
        labels = ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()))
        run = NodeRun(
            name=node.name,
            directory=node.directory,
            cgroup=node.cgroup,
            log_dir=spec.state_dir / "logs",
            containerd=(shutil.which("containerd") or "containerd", f"--config={containerd_config}"),
            kubelet=(
                str(spec.bin_dir / "kubelet"),
                f"--config={kubelet_config}",
                f"--kubeconfig={node_kubeconfig(spec, node)}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.ip}",
                f"--node-labels={labels}",
            ),
            ctr=shutil.which("ctr") or "ctr",
            socket=node.directory / "containerd.sock",
            images=tuple(built.archives.values()),
            gpus=node.gpus,
            binds=node_binds(node),
        )
        config = node.directory / "node.json"
        run.write(config)
        booted = node.directory / "booted"
        return Process(
            node.process_name,
            (
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "gangplugin.localcluster.realnodes.runner",
                str(config),
            ),
            # The runner writes it once containerd serves: the kubelets of all nodes then start
            # side by side, and `started` waits for every node to be Ready.
            health=booted.exists,
            startup_timeout=120.0,
            ports=(node.kubelet_port, node.healthz_port, node.stream_port),
        )

    def _kube_proxy(self, spec: ClusterSpec, pool: Pool) -> Process:
        health = pool.kube_proxy_health
        return Process(
            "kube-proxy",
            (str(spec.bin_dir / "kube-proxy"), f"--config={kube_proxy_config(spec, pool)}"),
            health=lambda: http_ok(f"http://127.0.0.1:{health}/livez"),
            ports=(pool.kube_proxy_health, pool.kube_proxy_metrics),
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        pool = plan(spec)
        t0 = time.monotonic()

        def all_ready() -> bool:
            for node in pool.nodes:
                exited = node.directory / EXITED
                if exited.exists():
                    raise ClusterError(f"real node {node.name} stopped: {exited.read_text()}")
            return all(node_ready(client, n) for n in pool.nodes)

        wait(
            all_ready,
            READY_TIMEOUT,
            "every real node Ready with its GPUs",
        )
        names = ", ".join(n.name for n in pool.nodes)
        log(f"  {len(pool.nodes)} real nodes Ready in {time.monotonic() - t0:.1f}s: {names}")
        wait(
            lambda: deployment_available(client, "kube-system", "coredns"), READY_TIMEOUT, "CoreDNS available"
        )
        log(f"  CoreDNS available at {time.monotonic() - t0:.1f}s")

    def stopped(self, spec: ClusterSpec) -> None:
        pool = recorded(spec)
        if pool is None:
            return
        for node in pool.nodes:
            cgroups.kill(node.cgroup)
        cgroups.remove(pool.cgroup)
        network.down(pool)
        # Each node's containerd store stays, with the images it loaded: the next `up` loads
        # only what changed (six nodes loading them all took minutes on a busy machine). Its
        # record of this cluster's containers goes with the kubelet's next start.
        for node in pool.nodes:
            for entry in node.directory.glob("*"):
                if entry.name == "containerd":
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
        (pool.directory / "pool.json").unlink(missing_ok=True)


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


def node_ready(client: Client, node: RealNode) -> bool:
    obj = client.get_or_none(NODES, node.name)
    if obj is None:
        return False
    status: dict[str, Any] = obj.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    return ready and status.get("allocatable", {}).get(GPU) == str(node.gpus)


def deployment_available(client: Client, namespace: str, name: str) -> bool:
    obj = client.get_or_none(DEPLOYMENTS, name, namespace) or {}
    want = (obj.get("spec") or {}).get("replicas", 1)
    return bool(obj) and (obj.get("status") or {}).get("availableReplicas", 0) >= want


def pool_of(cluster: LocalCluster) -> Pool:
    pool = recorded(cluster.spec)
    if pool is None:
        raise ClusterError(
            f"no real-node pool runs in {cluster.state_dir}: start the cluster with real-nodes"
        )
    return pool


def power_off(cluster: LocalCluster, node: str) -> None:
    """Node `node` lost at once, as a machine whose power is cut: silenced on the network (its
    pods' peers get no reset, they time out), its runner, containerd and kubelet killed, then
    every process left in its cgroups (the shims, the pods' containers). Its Node object stays,
    and goes NotReady when its lease runs out."""
    pool = pool_of(cluster)
    real = pool.node(node)
    network.silence(pool, real)
    cluster.stop_process(real.process_name, signal.SIGKILL)
    cgroups.kill(real.cgroup)


def power_on(cluster: LocalCluster, node: str) -> None:
    """Boot node `node` again (a fresh /run; its kubelet finds its pods gone and reports)."""
    pool = pool_of(cluster)
    real = pool.node(node)
    network.unsilence(pool, real)
    cluster.restart(real.process_name)


__all__ = ["KIND_LABEL", "RealNodes", "node_ready", "pool_of", "power_off", "power_on"]
