"""The cluster map: every node in its topology domains (zone, network layers, UltraServer), drawn
by state, with the gangs running on it and the room each UltraServer has left. Pure: a core
`Snapshot` (with capacity promised to admitted gangs already charged) and the pods on each node
in, a `ClusterMap` out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gangplugin.console.model import ClusterMap, GangRef, MapDomain, MapNode, NodeState
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, Node, Snapshot

#: Accelerators counted as a node's GPUs (NVIDIA GPUs; AWS Trainium and Inferentia devices).
GPU_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron")


@dataclass(frozen=True, slots=True)
class PodOnNode:
    """An active pod bound to a node, as the map counts it."""

    namespace: str
    gang: str  # its gangplugin.io/gang label ("" for a pod of no gang)
    gpus: int


@dataclass(frozen=True, slots=True)
class GangName:
    """How the map names a gang (by its namespace and gang label)."""

    name: str
    job: str


def gpus(resources: Mapping[str, int]) -> int:
    return sum(resources.get(r, 0) for r in GPU_RESOURCES)


def _state(node: Node, pods: Sequence[PodOnNode], spare: bool) -> NodeState:
    if not node.ready:
        return NodeState.NOT_READY
    if node.unschedulable:
        return NodeState.CORDONED
    if pods:
        return NodeState.IN_USE
    return NodeState.SPARE if spare else NodeState.FREE


def map_node(
    node: Node, pods: Sequence[PodOnNode], spare: bool, names: Mapping[tuple[str, str], GangName]
) -> MapNode:
    counts: dict[tuple[str, str], int] = {}
    for pod in pods:
        if pod.gang:
            counts[(pod.namespace, pod.gang)] = counts.get((pod.namespace, pod.gang), 0) + 1
    refs = []
    for (ns, gang), n in sorted(counts.items()):
        known = names.get((ns, gang))
        refs.append(GangRef(ns, known.name if known else gang, known.job if known else "", n))
    return MapNode(
        name=node.name,
        state=_state(node, pods, spare),
        gangs=tuple(refs),
        other_pods=sum(1 for p in pods if not p.gang),
        gpus=gpus(node.allocatable),
        gpus_used=sum(p.gpus for p in pods),
    )


def largest_gang(snapshot: Snapshot, node_ids: Sequence[int], spares: frozenset[int]) -> int:
    """Whole nodes one gang can still get among `node_ids`: usable, with nothing bound or
    promised on them, and not held as spares."""
    return sum(1 for i in node_ids if snapshot.idle(i) and i not in spares)


def cluster_map(
    snapshot: Snapshot,
    pods: Mapping[str, Sequence[PodOnNode]],
    names: Mapping[tuple[str, str], GangName],
    spares_per_ultraserver: int,
) -> ClusterMap:
    """The map of every node of `snapshot`, grouped by its levels (widest first; a node lacking
    a level's label sits directly in the domain above). `pods`: the real pods on each node by
    node name (the snapshot may also hold promised ones, which only the room counts)."""
    spares = snapshot.spare_nodes(spares_per_ultraserver)
    levels = tuple(level for level in snapshot.levels if level != HOSTNAME_LABEL)
    # path of (level, value) pairs -> node ids
    leaves: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i in snapshot.live_node_ids():
        node = snapshot.nodes[i]
        assert node is not None
        path = tuple((level, node.labels[level]) for level in levels if node.labels.get(level))
        leaves.setdefault(path, []).append(i)

    def build(prefix: tuple[tuple[str, str], ...]) -> MapDomain:
        depth = len(prefix)
        below = sorted({p[depth] for p in leaves if len(p) > depth and p[:depth] == prefix})
        ids = leaves.get(prefix, [])
        nodes = []
        for i in ids:
            node = snapshot.nodes[i]
            assert node is not None
            nodes.append(map_node(node, pods.get(node.name, ()), i in spares, names))
        level, value = prefix[-1] if prefix else ("", "")
        return MapDomain(
            level=level,
            value=value,
            children=tuple(build((*prefix, step)) for step in below),
            nodes=tuple(nodes),
            largest_gang=largest_gang(snapshot, ids, spares) if level == ULTRASERVER_LABEL else None,
        )

    root = build(())
    tops = root.children
    if root.nodes:  # nodes with no topology label at all
        tops = (*tops, MapDomain(level="", value="", nodes=root.nodes))
    return ClusterMap(
        domains=tops, spares_per_ultraserver=spares_per_ultraserver, node_count=len(snapshot.node_ids)
    )
