"""Node objects shaped like a SageMaker HyperPod cluster, from a `LocalClusterShape`
(deploy/local/cluster-shape.yaml): the local cluster creates them as kwok nodes, and
`gangctl simulate` replays a trace on them. Pure: a parsed document in, Node dicts out."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.core.keys import did_you_mean

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


def _count(group: Mapping[str, Any], key: str, field: str) -> int:
    value = group.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{field}.{key}", f"{value!r} is not a whole number >= 1")
    return value


def _text(group: Mapping[str, Any], key: str, field: str) -> str:
    value = group.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"{field}.{key}", "is required (a non-empty string)")
    return value


#: The fields of a shape, its spec and each group: any other is an error (a misspelt
#: `instancesPerNetworkLayers` would silently give the nodes no network layers).
SHAPE_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec"})
SPEC_FIELDS = frozenset({"groups"})
GROUP_FIELDS = frozenset(
    {
        "name",
        "instanceType",
        "ultraServerType",
        "availabilityZone",
        "ultraServerCount",
        "instancesPerUltraServer",
        "instanceCount",
        "instancesPerNetworkLayer",
        "allocatable",
    }
)


def _known_fields(obj: Mapping[str, Any], known: frozenset[str], field: str) -> None:
    for key in obj:
        if key not in known:
            where = f"{field}.{key}" if field else str(key)
            raise InputError(where, f"is not a field of a LocalClusterShape{did_you_mean(str(key), known)}")


def nodes_from_shape(shape: object) -> list[dict[str, Any]]:
    """Every Node of the shape; network layer domains nest, widest first. InputError naming
    the field when the document is not a usable shape, unknown fields included."""
    if isinstance(shape, Mapping):
        _known_fields(shape, SHAPE_FIELDS, "")
    spec = shape.get("spec") if isinstance(shape, Mapping) else None
    if isinstance(spec, Mapping):
        _known_fields(spec, SPEC_FIELDS, "spec")
    groups = spec.get("groups") if isinstance(spec, Mapping) else None
    if not isinstance(groups, list) or not groups:
        raise InputError("spec.groups", "a LocalClusterShape needs a list of node groups")
    nodes: list[dict[str, Any]] = []
    for g, group in enumerate(groups):
        field = f"spec.groups[{g}]"
        if not isinstance(group, Mapping):
            raise InputError(field, "each group is a mapping")
        _known_fields(group, GROUP_FIELDS, field)
        name = _text(group, "name", field)
        zone = _text(group, "availabilityZone", field)
        instance_type = _text(group, "instanceType", field)
        per_layer = group.get("instancesPerNetworkLayer", [])
        if not isinstance(per_layer, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in per_layer
        ):
            raise InputError(f"{field}.instancesPerNetworkLayer", "must be a list of whole numbers >= 1")
        if not isinstance(group.get("allocatable"), Mapping):
            raise InputError(f"{field}.allocatable", "is required: a mapping of resource to quantity")
        allocatable = {k: str(v) for k, v in group["allocatable"].items()}
        per_us = (
            _count(group, "instancesPerUltraServer", field) if "instancesPerUltraServer" in group else None
        )
        if per_us:
            total = _count(group, "ultraServerCount", field) * per_us
        else:
            total = _count(group, "instanceCount", field)
        for i in range(total):
            labels = {
                INSTANCE_TYPE: instance_type,
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
