"""Volcano, a peer the bench compares with (bench/peers.py; never started by `make up` or CI):
its webhook manager, controller manager and scheduler at VOLCANO_VERSION, from the binaries,
CRDs and Helm chart `hack/build-upstream.sh peers` puts in the cache, run as its chart runs them.

- Webhooks: the chart's `templates/webhooks.yaml` rendered by helm with the chart's defaults
  (its `enabled_admissions`, which the webhook manager is started with too), pointed at
  127.0.0.1 with the cluster CA; the webhook manager finds them by name and serves them.
- HyperNodes (the network topology): discovered from the node labels by the controller
  manager's label discoverer, the way Volcano's guide recommends ("HyperNode auto discovery"),
  from our level order: tier 1 per UltraServer, 2-4 per network layer 3, 2, 1, 5 per zone.
  The controller manager is started once its tree is whole (v1.14.1's discoverer can make a
  HyperNode twice at start: the extra one is deleted, which makes it discover again).
- The JobFlow CRDs too (its chart installs them): its controllers share one informer factory.
- The scheduler: the chart's configuration with the `network-topology-aware` plugin its
  network-topology guide adds (HyperNode-level bin packing weighted to GPUs, as the guide's
  example) and the `preempt` action its priority guide adds.

A gang is a Volcano Job (`batch.volcano.sh/v1alpha1`, `schedulerName: volcano`) with
`minAvailable` = its pods, `networkTopology: {mode: hard, highestTierAllowed: 1}` to require one
UltraServer, `soft` to prefer one, and a task's `partitionPolicy` for slices."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from gangplugin.core.topology import DEFAULT_LEVELS, ULTRASERVER_LABEL
from gangplugin.kube.client import Client, Resource
from gangplugin.localcluster import manifests, nodes
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import peer_version
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import INSTALL_DEADLINE, http_ok, https_ok, wait
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

NAMESPACE = "volcano-system"
SCHEDULER_NAME = "volcano"
# The controller manager's configuration (its hypernode controller reads this ConfigMap in its
# namespace, KUBE_POD_NAMESPACE, named after its release: "volcano").
CONTROLLER_CONFIGMAP = "volcano-controller-configmap"
QUEUES = Resource("scheduling.volcano.sh/v1beta1", "queues", namespaced=False)
HYPERNODES = Resource("topology.volcano.sh/v1alpha1", "hypernodes", namespaced=False)
CONFIGMAPS = Resource("v1", "configmaps")
DISCOVERY_TOPOLOGY = "hyperpod"
SOURCE_LABEL = "volcano.sh/network-topology-source"  # on every discovered HyperNode

NETWORK_TOPOLOGY_ARGUMENTS: dict[str, Any] = {
    "weight": 10,
    "hypernode.binpack.cpu": 1,
    "hypernode.binpack.memory": 1,
    "hypernode.binpack.resources": "nvidia.com/gpu",
    "hypernode.binpack.resources.nvidia.com/gpu": 5,
    "hypernode.binpack.normal-pod.enable": True,
}
SCHEDULER_CONF: dict[str, Any] = {
    "actions": "enqueue, allocate, preempt, backfill",
    "tiers": [
        {
            "plugins": [
                {"name": "priority"},
                {"name": "gang", "enablePreemptable": False},
                {"name": "conformance"},
            ]
        },
        {
            "plugins": [
                {"name": "overcommit"},
                {"name": "drf", "enablePreemptable": False},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
                # as its network-topology guide adds it, with GPUs as the resource its
                # HyperNode-level bin packing weighs (the guide's example names nvidia.com/gpu)
                {"name": "network-topology-aware", "arguments": NETWORK_TOPOLOGY_ARGUMENTS},
            ]
        },
    ],
}


def version() -> str:
    return peer_version("VOLCANO_VERSION")


def manifests_dir(spec: ClusterSpec) -> Path:
    return spec.cache / f"volcano-{version()}"


def chart_values(spec: ClusterSpec) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((manifests_dir(spec) / "chart" / "values.yaml").read_text())
    return values


def enabled_admissions(spec: ClusterSpec) -> str:
    return str(chart_values(spec)["custom"]["enabled_admissions"])


def rendered_webhooks(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The chart's webhook configurations, as `helm template` renders them."""
    chart = manifests_dir(spec) / "chart"
    proc = subprocess.run(
        [
            str(spec.bin_dir / "helm"),
            "template",
            "volcano",
            str(chart),
            f"--namespace={NAMESPACE}",
            "--show-only=templates/webhooks.yaml",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ClusterError(f"helm template of Volcano's chart failed: {proc.stderr.strip()[-500:]}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def discovery_config() -> dict[str, Any]:
    """The label discoverer's configuration: our levels, widest first, down to the hostname."""
    labels = [{"nodeLabel": label} for label in DEFAULT_LEVELS]
    return {
        "networkTopologyDiscovery": [
            {
                "source": "label",
                "enabled": True,
                "config": {"networkTopologyTypes": {DISCOVERY_TOPOLOGY: labels}},
            }
        ]
    }


# How long Volcano's HyperNode tree must stay whole before the cluster is up (see `started`).
HYPERNODES_STEADY_SECONDS = 5.0


def duplicate_hypernodes(hypernodes: list[dict[str, Any]]) -> list[str]:
    """HyperNodes the label discoverer made twice for one label value: all but the first by name,
    the one its next discovery keeps (it takes the first existing HyperNode of a value by name).
    v1.14.1 runs its discovery twice at start, the second before its lister has seen what the
    first created; the scheduler then finds a HyperNode with two parents and schedules no job
    with a network topology until the tree is whole again."""
    groups: dict[tuple[int, tuple[tuple[str, str], ...]], list[str]] = {}
    for h in hypernodes:
        labels = (h["metadata"].get("labels") or {}).items()
        key = tuple(sorted((k, v) for k, v in labels if k != SOURCE_LABEL))
        groups.setdefault((int(h["spec"].get("tier", 0)), key), []).append(h["metadata"]["name"])
    return sorted(name for names in groups.values() for name in sorted(names)[1:])


def one_parent_each(hypernodes: list[dict[str, Any]]) -> bool:
    """No HyperNode is a member of two: the tree the scheduler accepts."""
    children = [
        m["selector"]["exactMatch"]["name"]
        for h in hypernodes
        for m in h["spec"].get("members") or []
        if m.get("type") == "HyperNode" and "exactMatch" in (m.get("selector") or {})
    ]
    return len(children) == len(set(children))


def _serving(spec: ClusterSpec) -> tuple[str, ...]:
    return (
        f"--tls-cert-file={spec.serving_cert_dir / 'tls.crt'}",
        f"--tls-private-key-file={spec.serving_cert_dir / 'tls.key'}",
        f"--ca-cert-file={spec.pki_dir / 'ca.crt'}",
    )


@dataclass(frozen=True)
class _Volcano(Component):
    """One of Volcano's programs, `vc-<name without volcano->`: its ports by name (`at`, offsets),
    its health endpoint on the one at `health_at`, the scheduler name and healthz flags it
    shares with the others, then its own (`flags`)."""

    optional: ClassVar[bool] = True
    at: ClassVar[dict[str, int]]
    health_at: ClassVar[int]
    env: ClassVar[dict[str, str]] = {}

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / f"vc-{self.name.removeprefix('volcano-')}-{version()}",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {what: spec.ports.at(offset) for what, offset in self.at.items()}

    def flags(self, spec: ClusterSpec) -> tuple[str, ...]:
        raise NotImplementedError

    def healthy(self, spec: ClusterSpec, port: int) -> bool:
        return http_ok(f"http://127.0.0.1:{port}/healthz")

    def process(self, spec: ClusterSpec) -> Process:
        health = spec.ports.at(self.health_at)
        return Process(
            self.name,
            (
                str(self.binaries(spec)[0]),
                f"--kubeconfig={spec.kubeconfig}",
                *self.flags(spec),
                f"--scheduler-name={SCHEDULER_NAME}",
                "--enable-healthz=true",
                f"--healthz-address=127.0.0.1:{health}",
            ),
            env=dict(self.env),
            health=lambda: self.healthy(spec, health),
            ports=tuple(self.listens(spec).values()),
        )


@dataclass(frozen=True)
class VolcanoWebhookManager(_Volcano):
    name = "volcano-webhook-manager"
    at: ClassVar[dict[str, int]] = {"volcano webhook": 700, "volcano webhook health": 701}
    health_at = 701

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (*super().binaries(spec), spec.bin_dir / "helm")

    def install(self, spec: ClusterSpec, client: Client) -> None:
        # jobflow/ too: the controller manager's controllers share one informer factory and each
        # waits for all its informers, so without the JobFlow CRDs none (the HyperNode one) starts
        crds = [
            *manifests.read_crds(manifests_dir(spec), "*.yaml", "Volcano"),
            *manifests.read_crds(manifests_dir(spec) / "jobflow", "*.yaml", "Volcano JobFlow"),
        ]
        manifests.apply_crds(client, spec, crds, "Volcano")
        manifests.ensure_namespace(client, NAMESPACE)
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONTROLLER_CONFIGMAP, "namespace": NAMESPACE},
            "data": {"volcano-controller.conf": yaml.safe_dump(discovery_config(), sort_keys=False)},
        }
        client.apply(CONFIGMAPS, configmap, field_manager=manifests.FIELD_MANAGER)
        manifests.apply_webhooks(client, spec, rendered_webhooks(spec), spec.ports.at(700))

    def flags(self, spec: ClusterSpec) -> tuple[str, ...]:
        port = spec.ports.at(700)
        return (
            *_serving(spec),
            f"--webhook-url=https://127.0.0.1:{port}",
            "--listen-address=127.0.0.1",
            f"--port={port}",
            f"--enabled-admission={enabled_admissions(spec)}",
        )

    def healthy(self, spec: ClusterSpec, port: int) -> bool:
        return https_ok(f"https://127.0.0.1:{port}/healthz", spec.pki_dir / "ca.crt")

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """Until a dry-run create of a Queue goes through its webhooks."""
        probe = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "gangplugin-webhook-probe"},
            "spec": {"weight": 1},
        }
        manifests.wait_webhooks_answer(client, QUEUES, probe, INSTALL_DEADLINE, "Volcano")


@dataclass(frozen=True)
class VolcanoControllerManager(_Volcano):
    name = "volcano-controller-manager"
    requires = ("volcano-webhook-manager",)
    at: ClassVar[dict[str, int]] = {"volcano controllers health": 702, "volcano controllers": 703}
    health_at = 702
    env: ClassVar[dict[str, str]] = {"KUBE_POD_NAMESPACE": NAMESPACE}

    def flags(self, spec: ClusterSpec) -> tuple[str, ...]:
        return ("--leader-elect=false", f"--listen-address=127.0.0.1:{spec.ports.at(703)}")

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """Until a tier-1 HyperNode stands for every UltraServer in one tree. A HyperNode its
        discoverer made twice is deleted: deleting a HyperNode makes it discover again, and
        that run, with its lister caught up, re-parents the tree on the one kept."""
        ultraservers = {
            u for n in nodes.from_shape(spec.shape) if (u := n["metadata"]["labels"].get(ULTRASERVER_LABEL))
        }

        whole_since: list[float] = []

        def whole() -> bool:
            items = client.list(HYPERNODES)["items"]
            if twice := duplicate_hypernodes(items):
                log(f"Volcano discovered HyperNodes twice; deleting {', '.join(twice)} to rediscover")
                for name in twice:
                    client.delete(HYPERNODES, name)
                whole_since.clear()
                return False
            tier1 = [h for h in items if h["spec"].get("tier") == 1]
            if not (len(tier1) >= len(ultraservers) and one_parent_each(items)):
                whole_since.clear()
                return False
            # Whole for a while: the start's second discovery, 0.5 s after the first was whole,
            # made one network layer's HyperNode again after a single look had passed it.
            whole_since[:1] = whole_since[:1] or [time.monotonic()]
            return time.monotonic() - whole_since[0] >= HYPERNODES_STEADY_SECONDS

        wait(whole, 300, f"Volcano's HyperNodes: {len(ultraservers)} UltraServers in one tree")


@dataclass(frozen=True)
class VolcanoScheduler(_Volcano):
    name = "volcano-scheduler"
    requires = ("volcano-controller-manager",)
    at: ClassVar[dict[str, int]] = {"volcano scheduler health": 704, "volcano scheduler": 705}
    health_at = 704

    def flags(self, spec: ClusterSpec) -> tuple[str, ...]:
        conf = spec.state_dir / "volcano-scheduler.conf"
        conf.write_text(yaml.safe_dump(SCHEDULER_CONF, sort_keys=False))
        return (
            f"--scheduler-conf={conf}",
            "--leader-elect=false",
            "--enable-metrics=true",
            f"--listen-address=127.0.0.1:{spec.ports.at(705)}",
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """Until the default queue (the scheduler makes it) is there."""
        wait(lambda: bool(client.get(QUEUES, "default")), INSTALL_DEADLINE, "Volcano's default queue")


VOLCANO = ("volcano-webhook-manager", "volcano-controller-manager", "volcano-scheduler")
