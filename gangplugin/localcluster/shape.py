"""Fake Node objects shaped like a SageMaker HyperPod cluster, from deploy/local/cluster-shape.yaml."""

from __future__ import annotations

import hashlib
from typing import Any

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
NETWORK_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))
ULTRASERVER = "topology.k8s.aws/ultraserver-id"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
HOSTNAME = "kubernetes.io/hostname"


def _network_node_id(*parts: object) -> str:
    # Real network node ids look like "nn-0123456789abcdef0"; stable across runs.
    return "nn-" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:17]


def _node(name: str, labels: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # kwok manages only nodes carrying this annotation.
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {**labels, HOSTNAME: name, "kubernetes.io/os": "linux", "type": "kwok"},
        },
        "spec": {},
        "status": {
            "allocatable": dict(allocatable),
            "capacity": dict(allocatable),
            "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake", "operatingSystem": "linux"},
            "phase": "Running",
        },
    }


def nodes_from_shape(shape: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Node of the shape; network layer domains nest, widest first."""
    nodes: list[dict[str, Any]] = []
    for group in shape["spec"]["groups"]:
        name, zone = group["name"], group["availabilityZone"]
        per_layer = list(group.get("instancesPerNetworkLayer", []))
        allocatable = {k: str(v) for k, v in group["allocatable"].items()}
        per_us = group.get("instancesPerUltraServer")
        total = group["ultraServerCount"] * per_us if per_us else group["instanceCount"]
        for i in range(total):
            labels = {
                INSTANCE_TYPE: group["instanceType"],
                ZONE: zone,
                REGION: zone[:-1],
                "sagemaker.amazonaws.com/instance-group-name": name,
                "sagemaker.amazonaws.com/node-health-status": "Schedulable",
            }
            for layer, size in zip(NETWORK_LAYERS, per_layer, strict=False):
                labels[layer] = _network_node_id(zone, name, layer, i // size)
            if per_us:
                us, slot = divmod(i, per_us)
                labels[ULTRASERVER] = f"{name}-us-{us + 1}"
                node_name = f"{name}-us{us + 1}-{slot + 1:02d}"
            else:
                node_name = f"{name}-{i + 1:02d}"
            nodes.append(_node(node_name, labels, allocatable))
    return nodes
