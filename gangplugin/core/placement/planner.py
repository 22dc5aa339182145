"""One placement question over one snapshot (`Planner`): each podset's counts, whether a podset
fits a domain, and filling every podset into one domain (`fill_one`) or over the fewest domains
of a level (`fill_spread`).

Podsets are filled one after another (those asking for extended resources first, then larger
ones) on a working copy of free capacity, in every fill order when there are few podsets; when
no order fits a small domain, `packing.pack` searches every way of sharing its nodes between the
shapes (`fill_exact`), so a feasible packing there is never missed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from gangplugin.core.packing import EXACT_MAX_NODES, pack
from gangplugin.core.placement.capacity import (
    Overlay,
    Picks,
    PodCounts,
    is_extended,
    podset_counts,
    recount,
    request_shape,
    take,
)
from gangplugin.core.placement.descent import descend, descend_slices, spread
from gangplugin.core.placement.model import Assignment, Gang
from gangplugin.core.placement.slices import Slicing, slices_per_domain
from gangplugin.core.topology import Snapshot

#: podsets up to this many are filled in every order (4! = 24 orders at most)
_EVERY_ORDER_UP_TO = 4


class Planner:
    """Per-podset counts over the snapshot, and the fills. `slicing` is the attempt under way
    (`place` sets it): per podset, its slices or None."""

    def __init__(self, snapshot: Snapshot, gang: Gang, spares: frozenset[int]) -> None:
        self.snapshot = snapshot
        self.gang = gang
        self.spares = spares
        self.requests = [request_shape(podset) for podset in gang.podsets]
        self.needs = [podset.count for podset in gang.podsets]
        # fill order: podsets with extended resources first, then larger ones, then gang order
        self.order = sorted(
            range(len(gang.podsets)),
            key=lambda i: (
                -any(is_extended(resource) for resource, _ in self.requests[i]),
                -self.needs[i],
                i,
            ),
        )
        self.counts: list[PodCounts] = [
            podset_counts(snapshot, self.requests[i], podset, spares) for i, podset in enumerate(gang.podsets)
        ]
        self.slicing: list[Slicing | None] = [None] * len(gang.podsets)
        self._slices: dict[tuple[int, Slicing], list[int]] = {}

    def base_slice_counts(self, podset: int) -> list[int]:
        """Slices of the podset each domain holds before any podset takes capacity (kept)."""
        slicing = self.slicing[podset]
        assert slicing is not None
        kept = self._slices.get((podset, slicing))
        if kept is None:
            kept = self._slices[podset, slicing] = slices_per_domain(
                self.snapshot, slicing, self.counts[podset].per_domain
            )
        return kept

    def fits(self, podset: int, domain: int) -> bool:
        """The podset fits `domain` on its own (in slices where the domain is above the slice level)."""
        slicing, count = self.slicing[podset], self.needs[podset]
        if slicing is None:
            return self.counts[podset].per_domain[domain] >= count
        current = self.snapshot.domains[domain]
        if current.level < slicing.level:
            return self.base_slice_counts(podset)[domain] >= count // slicing.size
        return current.key[slicing.level] is not None and self.counts[podset].per_domain[domain] >= count

    def _fill_podset(self, podset: int, domain: int, overlay: Overlay) -> Picks | None:
        need, slicing = self.needs[podset], self.slicing[podset]
        counts = recount(self.snapshot, self.counts[podset], self.requests[podset], overlay)
        if slicing is not None and self.snapshot.domains[domain].level < slicing.level:
            slices = (
                slices_per_domain(self.snapshot, slicing, counts.per_domain)
                if overlay
                else self.base_slice_counts(podset)
            )
            if slices[domain] < need // slicing.size:
                return None
            return descend_slices(self.snapshot, domain, need // slicing.size, slicing, counts, slices)
        if counts.per_domain[domain] < need:
            return None
        return descend(self.snapshot, domain, need, counts)

    def _orders(self) -> Sequence[Sequence[int]]:
        if len(self.order) <= _EVERY_ORDER_UP_TO:
            return list(itertools.permutations(self.order))  # the preferred order first
        return [self.order]

    def _fill(self, fill_podset: Callable[[int, Overlay], Picks | None], domain: int) -> list[Picks] | None:
        """Every podset by `fill_podset`, in each fill order in turn; then the exact search in
        `domain`; or None."""
        for order in self._orders():
            overlay: Overlay = {}
            result: list[Picks] = [[] for _ in self.gang.podsets]
            for podset in order:
                picks = fill_podset(podset, overlay)
                if picks is None:
                    break
                result[podset] = picks
                if podset != order[-1]:  # what the last one takes, no podset reads
                    take(self.snapshot, self.requests[podset], picks, overlay)
            else:
                return result
        return self.fill_exact(domain)

    def fill_one(self, domain: int) -> list[Picks] | None:
        """Every podset inside one domain, or None."""
        return self._fill(lambda podset, overlay: self._fill_podset(podset, domain, overlay), domain)

    def fill_spread(self, level: int) -> list[Picks] | None:
        """Every podset over the fewest domains of `level` (each podset in turn; a podset in
        slices by its slices from the root), or None."""

        def fill_podset(podset: int, overlay: Overlay) -> Picks | None:
            if self.slicing[podset] is not None:
                return self._fill_podset(podset, 0, overlay)
            counts = recount(self.snapshot, self.counts[podset], self.requests[podset], overlay)
            return spread(self.snapshot, level, self.needs[podset], counts)

        return self._fill(fill_podset, 0)

    def fill_exact(self, domain: int) -> list[Picks] | None:
        """Every podset inside one small domain by exact search (`packing.pack`), or None; only
        for several podsets (one podset's greedy fill misses nothing)."""
        snapshot, podsets = self.snapshot, self.gang.podsets
        if len(podsets) < 2:
            return None
        nodes = [
            node
            for node in snapshot.subtree_nodes(domain)
            if any(node in counts.per_node for counts in self.counts)
        ]
        if len(nodes) > EXACT_MAX_NODES:
            return None
        top = snapshot.domains[domain].level
        groups: list[list[int] | None] = []
        capacities = [[counts.per_node.get(node, 0) for counts in self.counts] for node in nodes]
        for podset, slicing in enumerate(self.slicing):
            if slicing is None or top >= slicing.level:
                groups.append(None)
                continue
            groups.append([snapshot.path[node][slicing.level] for node in nodes])
            for i, node in enumerate(nodes):
                if snapshot.domains[snapshot.path[node][slicing.level]].value is None:
                    capacities[i][podset] = 0
        found = pack(
            [snapshot.free[node] for node in nodes],
            capacities,
            self.requests,
            self.needs,
            groups,
            [slicing.size if slicing is not None else 1 for slicing in self.slicing],
        )
        if found is None:
            return None
        return [[(nodes[i], pods) for i, pods in picks] for picks in found]

    def assignments(self, result: list[Picks]) -> tuple[Assignment, ...]:
        """Pods numbered in tree order, so consecutive indexes sit close together (and form slices)."""
        nodes = self.snapshot.nodes
        out: list[Assignment] = []
        for podset, picks in zip(self.gang.podsets, result, strict=True):
            index = 0
            for node, pods in sorted(picks, key=self._tree_order):
                name = nodes[node].name  # type: ignore[union-attr]
                for _ in range(pods):
                    out.append(Assignment(podset.name, index, name))
                    index += 1
        return tuple(out)

    def _tree_order(self, pick: tuple[int, int]) -> tuple[tuple[str, ...], str]:
        node, _ = pick
        snapshot = self.snapshot
        leaf = snapshot.domains[snapshot.path[node][-1]]
        return tuple(value or "" for value in leaf.key), snapshot.nodes[node].name  # type: ignore[union-attr]
