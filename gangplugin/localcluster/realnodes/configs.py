"""The files a real node runs from: containerd's config, the CNI network, the kubelet's config and
kubeconfig, the kernel settings the kubelet checks, and the runner's own (`NodeRun`); and
kube-proxy's config for the pool. Every choice that differs from a default says why."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from gangplugin.localcluster.credentials import client_kubeconfig
from gangplugin.localcluster.realnodes.pool import CLUSTER_DNS, CLUSTER_DOMAIN, Pool, RealNode
from gangplugin.localcluster.spec import ClusterSpec

PAUSE_IMAGE = "registry.k8s.io/pause:{version}"
# Debian's containernetworking-plugins.
CNI_BIN = "/usr/lib/cni"
# What the kubelet checks with protectKernelDefaults (pkg/kubelet/cm setupKernelTunables): it
# refuses to start when they differ, where without it it would write them into the host's
# kernel (panic_on_oops=1 on a shared machine). Each node sees these values, bind-mounted over
# /proc/sys in its own mount namespace; the host's stay as they are.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


@dataclass(frozen=True, slots=True)
class NodeRun:
    """What a node's runner (`python -m gangplugin.localcluster.realnodes.runner <file>`) starts:
    written as JSON by the component, read by the runner."""

    name: str
    directory: Path
    cgroup: str
    log_dir: Path
    containerd: Sequence[str]
    kubelet: Sequence[str]
    ctr: str
    socket: Path
    # OCI archives to load into the node's containerd (skipped when it holds the same digest).
    images: Sequence[Path]
    gpus: int
    # Directories bind-mounted over the host's in the node's mount namespace: host path -> node's.
    binds: dict[str, Path]

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), default=str, indent=2))

    @classmethod
    def read(cls, path: Path) -> NodeRun:
        data = json.loads(path.read_text())
        paths = ("directory", "log_dir", "socket")
        return cls(
            **{
                **data,
                **{k: Path(data[k]) for k in paths},
                "images": [Path(p) for p in data["images"]],
                "binds": {k: Path(v) for k, v in data["binds"].items()},
            }
        )


def containerd_config(node: RealNode, pause_version: str) -> str:
    d = node.directory
    # restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so runc cannot lower a
    # container's oom_score_adj below containerd's own (the pause container asks for -998).
    # Unprivileged ports, as containerd 2 has by default: a non-root CoreDNS binds port 53 in
    # its pod (CoreDNS's own image grants it by a file capability, which a scratch build lacks).
    # Its streaming server (exec, attach, port-forward, which the kubelet proxies) on loopback
    # at a port of the cluster's. The plugins that would read /opt or need other filesystems off.
    return f"""version = 2
root = "{d / "containerd"}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d / "containerd.sock"}"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE.format(version=pause_version)}"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "{node.stream_port}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d / "cni"}"
    max_conf_num = 1
"""


def cni_config(pool: Pool, node: RealNode) -> dict[str, object]:
    """The pool's bridge, this node's slice of its /16 (host-local keeps the leases in the node's
    /var/lib/cni); no masquerade (pods only talk inside the machine), hairpin so a pod reaches
    itself through a Service."""
    net = pool.network
    return {
        "cniVersion": "1.0.0",
        "name": "gangplugin-real-nodes",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [
                            {
                                "subnet": net.subnet,
                                "rangeStart": node.pod_first,
                                "rangeEnd": node.pod_last,
                                "gateway": net.gateway,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
        ],
    }


def kubelet_config(spec: ClusterSpec, node: RealNode) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        # kube-apiserver (logs, exec) with its kubelet client certificate; others by token.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(spec.pki_dir / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        # Kubernetes >= 1.35 refuses cgroup v1 unless told; this machine has nothing else.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup,
        "protectKernelDefaults": True,
        # Else it adds a DROP chain for 127/8 martians to the host's iptables.
        "makeIPTablesUtilChains": False,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
        "failSwapOn": False,
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [CLUSTER_DNS],
        "containerRuntimeEndpoint": f"unix://{node.directory / 'containerd.sock'}",
        "volumePluginDir": str(node.directory / "volume-plugins"),
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        # Every node shares the machine's disk, which others fill too: no disk pressure evicts,
        # and no image is collected (nothing could pull it again: the images are loaded).
        "evictionHard": {"memory.available": "100Mi"},
        "imageGCHighThresholdPercent": 100,
        "logging": {"verbosity": 1},
    }


def write_node(spec: ClusterSpec, pool: Pool, node: RealNode, pause_version: str) -> tuple[Path, Path]:
    """The node's files; returns its containerd config and its kubelet config."""
    d = node.directory
    for sub in ("cni", "run", "log", "varlib", "sysctl", "volume-plugins"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "containerd.toml").write_text(containerd_config(node, pause_version))
    (d / "cni" / "10-gangplugin.conflist").write_text(json.dumps(cni_config(pool, node), indent=2))
    (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(spec, node), sort_keys=False))
    for key, value in KERNEL_DEFAULTS.items():
        (d / "sysctl" / key.replace("/", ".")).write_text(value + "\n")
    return d / "containerd.toml", d / "kubelet.yaml"


def node_binds(node: RealNode) -> dict[str, Path]:
    """The host paths a node has its own of: the kubelet's fixed ones (/var/lib/kubelet, the
    device-plugin socket directory in it, /var/log/pods and /var/log/containers), containerd's
    (/run/containerd, /run/netns), the CNI plugins' (/var/lib/cni), and the kernel settings."""
    d = node.directory
    binds = {"/run": d / "run", "/var/log": d / "log", "/var/lib": d / "varlib"}
    for key in KERNEL_DEFAULTS:
        binds[f"/proc/sys/{key}"] = d / "sysctl" / key.replace("/", ".")
    return binds


def node_kubeconfig(spec: ClusterSpec, node: RealNode) -> Path:
    return client_kubeconfig(spec, f"node-{node.name}", f"system:node:{node.name}", "system:nodes")


def kube_proxy_config(spec: ClusterSpec, pool: Pool) -> Path:
    """nftables mode (its own tables, nothing in the host's iptables chains), one kube-proxy for
    every node (they share the host's network namespace), conntrack left as the host has it."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {
            "kubeconfig": str(client_kubeconfig(spec, "kube-proxy", "system:kube-proxy")),
        },
        "hostnameOverride": pool.nodes[0].name,
        # Its node's address without waiting for that node to register.
        "bindAddress": pool.nodes[0].ip,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
        "clusterCIDR": pool.network.subnet,
        "healthzBindAddress": f"127.0.0.1:{pool.kube_proxy_health}",
        "metricsBindAddress": f"127.0.0.1:{pool.kube_proxy_metrics}",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "nodePortAddresses": [f"{pool.network.gateway}/32"],
    }
    path = pool.directory / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
