"""Small cluster builders (core values: nodes, UltraServers, gangs) shared by the core tests."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

from gangplugin.core.placement import Gang, PodSet
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, ZONE_LABEL, Node

GPU = "nvidia.com/gpu"
LEVELS = (ZONE_LABEL, ULTRASERVER_LABEL, HOSTNAME_LABEL)
GPU_NODE = {"cpu": 144_000, "memory": 800 * 2**30, "pods": 110, GPU: 4}
# The property tests' search; GANGPLUGIN_PROPERTY_EXAMPLES=3000 searches deeper than the default run.
SETTINGS = settings(
    max_examples=int(os.environ.get("GANGPLUGIN_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def node(name: str, us: str | None = "us-1", zone: str | None = "z1", **kw: Any) -> Node:
    labels = {HOSTNAME_LABEL: name}
    if us is not None:
        labels[ULTRASERVER_LABEL] = us
    if zone is not None:
        labels[ZONE_LABEL] = zone
    labels.update(kw.pop("labels", {}))
    return Node(name, labels, dict(kw.pop("allocatable", GPU_NODE)), **kw)


def ultraservers(count: int, size: int, zone: str = "z1", prefix: str = "") -> list[Node]:
    return [
        node(f"{prefix}us{u + 1}-n{i:02d}", f"{prefix}us-{u + 1}", zone)
        for u in range(count)
        for i in range(size)
    ]


def gang(
    count: int, gpus: int = 4, *, required: str | None = None, preferred: str | None = None, **kw: Any
) -> Gang:
    requests = {GPU: gpus, "cpu": 1000}
    return Gang(
        (PodSet("main", count, requests, required_topology=required, preferred_topology=preferred, **kw),)
    )
