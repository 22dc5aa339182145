"""What a pool of real nodes is: its nodes (from a LocalClusterShape, labelled as the fake ones),
its addresses on a bridge of its own, its ports, directories and cgroups. Plain data, derived from
the cluster's spec; written to `<state>/real-nodes/pool.json` when the pool starts, so that `down`
from another shell removes what was made even if the shape file changed since."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.shape import HOSTNAME, nodes_from_shape
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.upstream import REPO

SHAPE_ENV = "GANGPLUGIN_REAL_NODES_SHAPE"
DEFAULT_SHAPE = REPO / "deploy" / "local" / "real-nodes-shape.yaml"
GPU = "nvidia.com/gpu"
# kube-apiserver's --service-cluster-ip-range, and the DNS Service's address in it.
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
# Every real node carries it (as kwok's carry type=kwok): what system pods select.
KIND_LABEL = ("type", "real")
# Ports (offsets from the cluster's base): kube-proxy's health and metrics, then three per node
# (kubelet's API, its healthz, containerd's streaming server), up to MAX_NODES nodes.
KUBE_PROXY_OFFSET = 960
NODE_OFFSET = 962
MAX_NODES = 12


@dataclass(frozen=True, slots=True)
class Network:
    """One bridge per pool, its name and its /16 derived from the port base: pods of node i
    take 10.<o>.<i+1>.2-254, the host is 10.<o>.0.1 on the bridge (the pods' gateway, and where
    they reach kube-apiserver), node i is 10.<o>.255.<i+1> (kubelet refuses a loopback node IP)."""

    base: int

    @property
    def octet(self) -> int:
        return 200 + (self.base // 1000) % 50

    @property
    def bridge(self) -> str:
        return f"gp{self.base}"

    @property
    def subnet(self) -> str:
        return f"10.{self.octet}.0.0/16"

    @property
    def gateway(self) -> str:
        return f"10.{self.octet}.0.1"

    def node_ip(self, index: int) -> str:
        return f"10.{self.octet}.255.{index + 1}"

    def pod_range(self, index: int) -> tuple[str, str]:
        return f"10.{self.octet}.{index + 1}.2", f"10.{self.octet}.{index + 1}.254"


@dataclass(frozen=True, slots=True)
class RealNode:
    name: str
    index: int
    # What the kubelet registers the node with (--node-labels): the shape's labels but those
    # the kubelet sets itself.
    labels: dict[str, str]
    gpus: int
    ip: str
    pod_first: str
    pod_last: str
    kubelet_port: int
    healthz_port: int
    stream_port: int
    directory: Path
    cgroup: str

    @property
    def process_name(self) -> str:
        return f"real-node-{self.name}"


@dataclass(frozen=True, slots=True)
class Pool:
    directory: Path
    network: Network
    nodes: tuple[RealNode, ...]
    kube_proxy_health: int
    kube_proxy_metrics: int
    cgroup: str

    def node(self, name: str) -> RealNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ClusterError(f"{name} is not a real node; the pool has {', '.join(n.name for n in self.nodes)}")

    def write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "pool.json").write_text(json.dumps(asdict(self), default=str, indent=2))


def pool_dir(spec: ClusterSpec) -> Path:
    return spec.state_dir / "real-nodes"


def plan(spec: ClusterSpec) -> Pool:
    """The pool of the cluster `spec` describes, from GANGPLUGIN_REAL_NODES_SHAPE or the default
    shape; a shape with more than MAX_NODES nodes, or a node without GPUs, is an error."""
    shape = Path(os.environ.get(SHAPE_ENV) or DEFAULT_SHAPE)
    shaped = nodes_from_shape(yaml.safe_load(shape.read_text()))
    if len(shaped) > MAX_NODES:
        raise ClusterError(f"{shape} has {len(shaped)} nodes; a real-node pool runs at most {MAX_NODES}")
    net, ports, directory = Network(spec.ports.base), spec.ports, pool_dir(spec)
    cgroup = f"/gangplugin-real-nodes-{spec.ports.base}"
    nodes = []
    for i, node in enumerate(shaped):
        name = node["metadata"]["name"]
        gpus = int(node["status"]["allocatable"].get(GPU, "0"))
        if gpus < 1:
            raise ClusterError(
                f"{shape}: node {name} has no {GPU} in its group's allocatable; give it 1 or more"
            )
        labels = {
            k: v
            for k, v in node["metadata"]["labels"].items()
            if k not in (HOSTNAME, "kubernetes.io/os", "type")
        }
        first, last = net.pod_range(i)
        port = ports.at(NODE_OFFSET + 3 * i)
        nodes.append(
            RealNode(
                name=name,
                index=i,
                labels={**labels, KIND_LABEL[0]: KIND_LABEL[1]},
                gpus=gpus,
                ip=net.node_ip(i),
                pod_first=first,
                pod_last=last,
                kubelet_port=port,
                healthz_port=port + 1,
                stream_port=port + 2,
                directory=directory / name,
                cgroup=f"{cgroup}/{name}",
            )
        )
    return Pool(
        directory=directory,
        network=net,
        nodes=tuple(nodes),
        kube_proxy_health=ports.at(KUBE_PROXY_OFFSET),
        kube_proxy_metrics=ports.at(KUBE_PROXY_OFFSET + 1),
        cgroup=cgroup,
    )


def recorded(spec: ClusterSpec) -> Pool | None:
    """The pool as it was started (pool.json), None when none was."""
    try:
        data: dict[str, Any] = json.loads((pool_dir(spec) / "pool.json").read_text())
    except (OSError, ValueError):
        return None
    nodes = tuple(RealNode(**{**n, "directory": Path(n["directory"])}) for n in data["nodes"])
    return Pool(
        directory=Path(data["directory"]),
        network=Network(**data["network"]),
        nodes=nodes,
        kube_proxy_health=data["kube_proxy_health"],
        kube_proxy_metrics=data["kube_proxy_metrics"],
        cgroup=data["cgroup"],
    )
