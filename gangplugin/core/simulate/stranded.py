"""Stranded GPUs: free GPUs in domains too small for the gang at the head of the queue."""

from __future__ import annotations

from collections.abc import Sequence

from gangplugin.core.simulate.model import GPU, Job
from gangplugin.core.topology import HOSTNAME_LABEL, Snapshot

#: One GPU: the kept counts of this pod shape are the free GPUs per node and per domain.
_ONE_GPU = ((GPU, 1),)


def _free_gpus(snap: Snapshot, spares: int) -> tuple[Sequence[int], list[int]]:
    """Free GPUs per domain id (usable nodes without a blocking taint), kept current by the
    snapshot at each bind and unbind; and, per domain id, those of them on held spare nodes
    (no gang but one already running there may take them)."""
    per_node, per_domain = snap.fit_counts(_ONE_GPU)
    held = [0] * len(per_domain)
    for i in snap.spare_nodes(spares):
        gpus = per_node.get(i, 0)
        held[0] += gpus
        for d in snap.path[i]:
            held[d] += gpus
    return per_domain, held


def domain_capacity(snap: Snapshot, spares: int) -> list[int]:
    """Per level, the GPUs of its largest domain a gang could take (what one domain could ever
    hold, its held spares not counted)."""
    free, held = _free_gpus(snap, spares)
    return [
        max((free[d] - held[d] for d in snap.by_level[level]), default=0) for level in range(len(snap.levels))
    ]


def stranded(snap: Snapshot, head: Job, level_capacity: Sequence[int], spares: int) -> int:
    """Free GPUs in domains too small for the job at the head of the queue: domains of its
    topology level when one such domain could hold it, else nodes too small for one of its pods.
    Held spares are free GPUs the head may not take: a domain too small without them strands
    them too, and a spare node strands its GPUs at the node level."""
    label = head.required_topology or head.preferred_topology
    level = snap.level_index(label) if label else None
    need = head.gpus
    if level is None or level_capacity[level] < need:
        level = snap.level_index(HOSTNAME_LABEL)
        need = head.gpus_per_pod
        if level is None:
            return 0
    if snap.levels[level] == HOSTNAME_LABEL:  # the nodes with a free GPU, not every node
        held_nodes = snap.spare_nodes(spares)
        return sum(f for i, f in snap.fit_counts(_ONE_GPU)[0].items() if f < need or i in held_nodes)
    free, held = _free_gpus(snap, spares)
    return sum(free[d] for d in snap.by_level[level] if free[d] - held[d] < need)
