"""Kueue's own Topology Aware Scheduling, a peer the bench compares with (bench/peers.py; never
started by `make up` or CI): the Kueue this cluster runs, with a `Topology` of our level order
(zone, the three network layers, the UltraServer, the hostname) and a ResourceFlavor per
instance type of the shape naming it, as Kueue's TAS docs configure a cluster. No process of
its own: TopologyAwareScheduling is beta and on by default from Kueue v0.14. Its replacement of a
failed node is turned on by name (FEATURE_GATES), as Kueue's TAS docs describe it: on by default
in v0.17 and v0.19 too, written out so that the bench compares with it whatever the version.

Jobs ask for it on their pod templates: `kueue.x-k8s.io/podset-required-topology` (or
`podset-preferred-topology`) and, for slices, `podset-slice-size` with
`podset-slice-required-topology`; a ClusterQueue lists the flavor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gangplugin.kube.client import Client
from gangplugin.kube.resources import RESOURCE_FLAVORS, TOPOLOGIES
from gangplugin.kube.shape import INSTANCE_TYPE
from gangplugin.localcluster import manifests, nodes
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import TOPOLOGY, level_topology
from gangplugin.localcluster.spec import ClusterSpec


def topology() -> dict[str, Any]:
    return level_topology("kueue.x-k8s.io/v1beta2")


def flavor_name(instance_type: str) -> str:
    """The TAS flavor of an instance type: `ml.p6e-gb200.36xlarge` -> `p6e-gb200-36xlarge`."""
    return instance_type.removeprefix("ml.").replace(".", "-")


def flavors(shape: Path | None) -> list[dict[str, Any]]:
    """One ResourceFlavor per instance type of the shape's nodes, each on the Topology."""
    types = sorted({n["metadata"]["labels"][INSTANCE_TYPE] for n in nodes.from_shape(shape)})
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(t)},
            "spec": {"nodeLabels": {INSTANCE_TYPE: t}, "topologyName": TOPOLOGY},
        }
        for t in types
    ]


# A failed node's pods are moved to another node of the gang's domain: once the node is NotReady
# and its pods are gone (TASReplaceNodeOnPodTermination), the workload whole if none is found at
# the first try (FailFast), rather than waiting for one.
FEATURE_GATES = (
    "TASFailedNodeReplacement=true",
    "TASFailedNodeReplacementFailFast=true",
    "TASReplaceNodeOnPodTermination=true",
)


@dataclass(frozen=True)
class KueueTas(Component):
    name = "kueue-tas"
    requires = ("kueue",)
    optional = True
    kueue_feature_gates = FEATURE_GATES

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return ()  # Kueue's own

    def process(self, spec: ClusterSpec) -> None:
        return None

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """After Kueue: its webhooks validate the Topology and the flavors."""
        client.apply(TOPOLOGIES, topology(), field_manager=manifests.FIELD_MANAGER)
        for flavor in flavors(spec.shape):
            client.apply(RESOURCE_FLAVORS, flavor, field_manager=manifests.FIELD_MANAGER)
