"""How many pods of a podset fit, per node and summed up the domain tree (`PodCounts`), by the
one counting rule (`fit_counter`); which nodes a podset may use at all (`eligible_nodes`); and the
working copy of free capacity (`Overlay`) that podsets filled one after another draw from.

The tree itself and the counts it keeps current per pod shape are the snapshot's
(`topology.Snapshot.fit_counts`); a placement works on copies of them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.placement.model import Gang, PlacementPolicy, PodSet
from gangplugin.core.placement.spares import held_spares
from gangplugin.core.resources import CPU, MEMORY, PODS
from gangplugin.core.topology import Requests, Snapshot, pods_fitting, request_items

#: node id -> its free capacity after earlier podsets of the same gang took from it
Overlay = dict[int, dict[str, int]]
#: (node id, pods) of one podset
Picks = list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class PodCounts:
    """How many pods of one shape fit: the placement's working numbers for one podset."""

    per_node: dict[int, int]  # node id -> pods that fit there (only nodes where some do)
    per_domain: list[int]  # domain id -> pods that fit under it (id 0: the whole cluster)


def request_shape(podset: PodSet) -> Requests:
    return request_items(podset.requests)


def is_extended(resource: str) -> bool:
    return resource not in (CPU, MEMORY, PODS, "ephemeral-storage") and not resource.startswith("hugepages-")


class FreePlus(Mapping[str, int]):
    """Free capacity plus what would come free, read without building a new dict."""

    __slots__ = ("extra", "free")

    def __init__(self, free: Mapping[str, int], extra: Mapping[str, int]) -> None:
        self.free, self.extra = free, extra

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.free:  # a node without a pod limit stays without one
            return default if key == PODS else self.extra.get(key, default)
        return self.free[key] + self.extra.get(key, 0)

    def __getitem__(self, key: str) -> int:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return int(value)

    def __iter__(self) -> Iterator[str]:
        return iter(set(self.free) | set(self.extra))

    def __len__(self) -> int:
        return len(set(self.free) | set(self.extra))


_NOTHING: Mapping[str, int] = {}


def fit_counter(podset: PodSet) -> Callable[[Mapping[str, int], Mapping[str, int]], int]:
    """How many pods of `podset` fit in a node's free capacity plus `extra` (what would come
    free there): the rule `place` counts by."""
    requests = request_shape(podset)

    def count(free: Mapping[str, int], extra: Mapping[str, int] = _NOTHING) -> int:
        return pods_fitting(FreePlus(free, extra) if extra else free, requests)

    return count


def podset_counts(
    snapshot: Snapshot, requests: Requests, podset: PodSet, spares: frozenset[int]
) -> PodCounts:
    """The snapshot's kept counts for the podset's pod shape, less the held spares and the nodes
    kube-scheduler rejected."""
    kept_per_node, kept_per_domain = snapshot.fit_counts(requests, podset.constraints)
    per_node, per_domain = dict(kept_per_node), list(kept_per_domain)
    path, ids = snapshot.path, snapshot.node_ids
    off = spares.union(i for name in podset.excluded_nodes if (i := ids.get(name)) is not None)
    for node in off:
        pods = per_node.pop(node, 0)
        if pods:
            per_domain[0] -= pods
            for domain in path[node]:
                per_domain[domain] -= pods
    return PodCounts(per_node, per_domain)


def aggregate(snapshot: Snapshot, per_node: Mapping[int, int]) -> list[int]:
    """Per-node counts summed per domain (id 0: all)."""
    per_domain = [0] * len(snapshot.domains)
    path = snapshot.path
    total = 0
    for node, pods in per_node.items():
        total += pods
        for domain in path[node]:
            per_domain[domain] += pods
    per_domain[0] = total
    return per_domain


def recount(snapshot: Snapshot, counts: PodCounts, requests: Requests, overlay: Overlay) -> PodCounts:
    """`counts` after earlier podsets took what `overlay` records."""
    if not overlay:
        return counts
    per_node = dict(counts.per_node)
    per_domain = list(counts.per_domain)
    path = snapshot.path
    for node, free in overlay.items():
        old = per_node.get(node)
        if old is None:
            continue
        pods = pods_fitting(free, requests)
        if pods:
            per_node[node] = pods
        else:
            del per_node[node]
        if pods != old:  # only the changed nodes' domains: not a pass over every node
            per_domain[0] += pods - old
            for domain in path[node]:
                per_domain[domain] += pods - old
    return PodCounts(per_node, per_domain)


def take(snapshot: Snapshot, requests: Requests, picks: Picks, overlay: Overlay) -> None:
    """Charge the picked pods to the nodes' free capacity in `overlay`."""
    for node, pods in picks:
        free = overlay.get(node)
        if free is None:
            free = overlay[node] = dict(snapshot.free[node])
        for resource, amount in requests:
            free[resource] = free.get(resource, 0) - pods * amount
        if PODS in free:
            free[PODS] -= pods


def eligible_nodes(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, occupied: Collection[str] = ()
) -> list[list[int]]:
    """Per podset, the ids of the nodes its pods may use (usable, not a held spare, taints
    tolerated, selected), whether or not they have room now: what `place` filters by."""
    spares = held_spares(snapshot, policy, occupied)
    seen: dict[tuple[PodConstraints, frozenset[str]], list[int]] = {}
    out = []
    for podset in gang.podsets:
        key = (podset.constraints, podset.excluded_nodes)
        if key not in seen:
            excluded = podset.excluded_nodes
            seen[key] = [
                i
                for i, node in enumerate(snapshot.nodes)
                if i not in spares
                and snapshot.allows(i, podset.constraints)
                and not (excluded and node.name in excluded)  # type: ignore[union-attr]
            ]
        out.append(seen[key])
    return out
