"""Core values for the tests of slices: a network node of UltraServers of 4-GPU nodes, a gang
in slices of an UltraServer, and where a placement put each pod."""

from __future__ import annotations

from typing import Any

from gangplugin.core.placement import Gang, Placement, PodSet
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, ZONE_LABEL, Node, Snapshot
from tests.support.core import GPU, GPU_NODE

NN = "topology.k8s.aws/network-node-layer-3"
US = ULTRASERVER_LABEL
LEVELS = (ZONE_LABEL, NN, US, HOSTNAME_LABEL)


def cluster(layout: dict[str, dict[str, int]]) -> list[Node]:
    """{network node: {UltraServer: node count}}: 4-GPU nodes named <us>-nNN."""
    return [
        Node(
            f"{us}-n{i:02d}",
            {ZONE_LABEL: "z1", NN: nn, US: us, HOSTNAME_LABEL: f"{us}-n{i:02d}"},
            dict(GPU_NODE),
        )
        for nn, uss in layout.items()
        for us, count in uss.items()
        for i in range(count)
    ]


def sliced(count: int, size: int, *, gpus: int = 4, level: str | None = US, **kw: Any) -> Gang:
    ps = PodSet("main", count, {GPU: gpus, "cpu": 1000}, slice_size=size, slice_required_topology=level, **kw)
    return Gang((ps,))


def us_of(snap: Snapshot, result: Placement) -> list[str]:
    """The UltraServer of each pod of `result`, in its assignments' order."""
    out = []
    for a in result.assignments:
        node = snap.node(a.node)
        assert node is not None
        out.append(node.labels[US])
    return out
