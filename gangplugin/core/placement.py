"""All-or-nothing, topology-aware placement of a gang, and replacement of a failed node.

The algorithm, over a `Snapshot` built once (see `topology.py`), in the spirit of Kueue's
`tas_flavor_snapshot.go`:

1. For each podset, count per node how many of its (identical) pods fit: the node must be
   Ready, not cordoned, not a spare, tolerate the taints and match nodeSelector/affinity;
   the count is the minimum over requested resources of free // request, and free pod slots.
2. Sum the counts bottom-up over the domain tree.
3. Pick the level. The gang's level comes from the pod-template annotations
   `gangplugin.io/required-topology` and `gangplugin.io/preferred-topology` (the narrowest of
   each across podsets; the whole gang goes into one domain). Starting at the preferred level
   (or the required one, or — with neither — the narrowest level), walk up towards the
   required level (or the widest) and take the first level where one domain holds every pod.
   Among the domains that do, the best fit wins: least room left over, ties by name.
4. If no single domain fits: with a required level the gang is infeasible; otherwise it is
   spread over the fewest domains of the preferred level (without annotations, the narrowest
   level above hostname): largest first, the last one the tightest that holds the rest.
5. Inside a chosen domain, descend level by level with the same rule (fewest children,
   largest first, the last one best fit) down to the nodes. Pods get nodes in tree order,
   so consecutive indexes sit close together.

Slices: a podset may ask for slices (`gangplugin.io/slice-size: N` with
`gangplugin.io/slice-required-topology` or `slice-preferred-topology: <level A>`): each
consecutive group of N pods lands inside one domain of level A, and the gang's own level (B,
above A, optional) holds all slices together. A domain above A can hold the sum over its
level-A domains of (pods that fit there) // N slices; the descent then picks domains in slice
units (fewest, fullest: largest first, the last one the tightest) down to level A, and inside
each level-A domain places its slices' pods as above. Each level-A domain gets whole slices,
so consecutive indexes (tree order) form the slices. A preferred slice level that cannot be
met is widened level by level towards B, then dropped.

Several podsets are filled one after another (podsets asking for extended resources first,
then larger ones) on a working copy of free capacity, in every fill order when there are few
podsets; when no order fits a small domain, `packing.pack` searches every way of sharing its
nodes between the shapes, so a feasible packing there is never missed. A domain is accepted
only if all fit. Nothing is ever half placed: the result has an assignment for every pod, or none.

Spares: with `spares_per_ultraserver = k`, the k idle nodes with the highest names in each
UltraServer are held back from every gang except one already running in that UltraServer,
for which they are the first choice to replace a failed node (`held_spares` is that one rule,
for the admission check's `place` and `recover` and the extender's plan of a recreated pod).
The answer is a pure function of its inputs; input order never matters.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.errors import InputError
from gangplugin.core.names import PREFERRED_TOPOLOGY_ANNOTATION as PREFERRED_ANNOTATION
from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION as REQUIRED_ANNOTATION
from gangplugin.core.names import (
    SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)
from gangplugin.core.packing import EXACT_MAX_NODES, pack
from gangplugin.core.resources import CPU, MEMORY, PODS, format_quantity
from gangplugin.core.topology import (
    HOSTNAME_LABEL,
    ULTRASERVER_LABEL,
    Requests,
    Snapshot,
    pods_fitting,
    request_items,
)


@dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods; `requests` per pod in canonical units (without `pods`).

    `excluded_nodes`: nodes these pods may not use although the snapshot shows room there
    (kube-scheduler rejected them for such a pod: its view of the node differs for a while).
    `slice_size` with `slice_required_topology` (or `slice_preferred_topology`): consecutive
    groups of that many pods each inside one domain of that level (see the module docstring).
    """

    name: str
    count: int
    requests: Mapping[str, int] = field(default_factory=dict)
    constraints: PodConstraints = field(default_factory=PodConstraints)
    required_topology: str | None = None
    preferred_topology: str | None = None
    excluded_nodes: frozenset[str] = frozenset()
    slice_size: int | None = None
    slice_required_topology: str | None = None
    slice_preferred_topology: str | None = None

    def unsliced(self) -> PodSet:
        return dataclasses.replace(
            self, slice_size=None, slice_required_topology=None, slice_preferred_topology=None
        )


@dataclass(frozen=True, slots=True)
class Gang:
    """Every pod of a Kueue Workload: it runs whole or not at all."""

    podsets: tuple[PodSet, ...]
    name: str = ""


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    spares_per_ultraserver: int = 0
    #: False: try one domain at the starting level only, never a wider one (Kueue's TAS BestFit
    #: does not climb; the capacity simulator compares with it).
    climb_levels: bool = True


@dataclass(frozen=True, slots=True)
class Assignment:
    pod_set: str
    index: int
    node: str

    def to_dict(self) -> dict[str, Any]:
        return {"podSet": self.pod_set, "index": self.index, "node": self.node}


@dataclass(frozen=True, slots=True)
class Placement:
    """`level`: node label of the level whose one domain holds the gang (None when spread or
    infeasible); `domains`: the values used at that level (or at the preferred level when spread)."""

    feasible: bool
    level: str | None
    domains: tuple[str, ...]
    assignments: tuple[Assignment, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "level": self.level,
            "domains": list(self.domains),
            "assignments": [a.to_dict() for a in self.assignments],
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Replacement:
    """Where the pods of a failed node go: one node for all of them, or infeasible."""

    feasible: bool
    node: str | None
    used_spare: bool
    assignments: tuple[Assignment, ...]  # the moved pods only, at their new node
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "node": self.node,
            "usedSpare": self.used_spare,
            "assignments": [a.to_dict() for a in self.assignments],
            "reason": self.reason,
        }


# -- helpers ----------------------------------------------------------------------------------


def held_spares(
    snapshot: Snapshot, policy: PlacementPolicy, occupied: Collection[str] = ()
) -> frozenset[int]:
    """The spare nodes a gang may not use: every UltraServer's spares, except those of an
    UltraServer where the gang already has pods (`occupied`: their nodes), which exist to take
    its pods from a failed node."""
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    if not spares or not occupied:
        return spares
    own = {
        us
        for node in map(snapshot.node, occupied)
        if node is not None and (us := node.labels.get(ULTRASERVER_LABEL)) is not None
    }
    return frozenset(
        i
        for i in spares
        if (node := snapshot.nodes[i]) is None or node.labels.get(ULTRASERVER_LABEL) not in own
    )


_Req = Requests
_Picks = list[tuple[int, int]]  # (node id, pods) of one podset
_fit = pods_fitting


def _req_items(podset: PodSet) -> _Req:
    return request_items(podset.requests)


def _is_extended(resource: str) -> bool:
    return resource not in (CPU, MEMORY, PODS, "ephemeral-storage") and not resource.startswith("hugepages-")


def _describe(podset: PodSet, count: int | None = None) -> str:
    n = podset.count if count is None else count
    req = _req_items(podset)
    shown = [(r, q) for r, q in req if _is_extended(r)] or [(r, q) for r, q in req if r in (CPU, MEMORY)]
    what = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in shown) or "no requests"
    level = podset.slice_required_topology or podset.slice_preferred_topology
    sliced = f" in slices of {podset.slice_size} per {level}" if podset.slice_size and level else ""
    return f"{n} pod{'s' if n != 1 else ''} with {what}{sliced}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _choose(items: list[tuple[int, int, Any]], need: int) -> list[tuple[int, int]] | None:
    """Fewest items covering `need`: largest first, the last one the tightest that holds the rest.

    `items` are (id, count, tie-break key); returns (id, taken) pairs, or None if they fall short.
    """
    items = sorted((t for t in items if t[1] > 0), key=lambda t: (-t[1], t[2]))
    out: list[tuple[int, int]] = []
    rem, i = need, 0
    while rem > 0:
        if i >= len(items):
            return None
        ident, count, _ = items[i]
        if count < rem:
            out.append((ident, count))
            rem -= count
            i += 1
            continue
        j = i  # items[i:] are by count descending: find the smallest count still >= rem
        while j + 1 < len(items) and items[j + 1][1] >= rem:
            j += 1
        k = j
        while k - 1 >= i and items[k - 1][1] == items[j][1]:
            k -= 1
        out.append((items[k][0], rem))
        rem = 0
    return out


def _gang_levels(snap: Snapshot, gang: Gang) -> tuple[int | None, int | None]:
    """(required, preferred) level indexes for the gang: the narrowest of each across podsets."""
    req: int | None = None
    pref: int | None = None
    for i, ps in enumerate(gang.podsets):
        for label, ann in (
            (ps.required_topology, REQUIRED_ANNOTATION),
            (ps.preferred_topology, PREFERRED_ANNOTATION),
        ):
            if label is None:
                continue
            idx = snap.level_index(label)
            if idx is None:
                raise InputError(
                    f"podSets[{i}].template.metadata.annotations.{ann}",
                    f"unknown topology label {label!r}; the levels are {', '.join(snap.levels)}",
                )
            if ann == REQUIRED_ANNOTATION:
                req = idx if req is None else max(req, idx)
            else:
                pref = idx if pref is None else max(pref, idx)
    return req, pref


#: A podset's slices: (pods per slice, level index each slice stays inside, level required).
_Slicing = tuple[int, int, bool]


def _slicing(snap: Snapshot, gang: Gang, req: int | None, pref: int | None) -> list[_Slicing | None]:
    """Each podset's slices, checked against the snapshot's levels and the gang's level."""
    out: list[_Slicing | None] = []
    for i, ps in enumerate(gang.podsets):
        ann = f"podSets[{i}].template.metadata.annotations."
        size, label = ps.slice_size, ps.slice_required_topology or ps.slice_preferred_topology
        if size is None and label is None:
            out.append(None)
            continue
        if ps.slice_required_topology and ps.slice_preferred_topology:
            raise InputError(
                f"{ann}{SLICE_PREFERRED_TOPOLOGY_ANNOTATION}",
                f"give one of {SLICE_REQUIRED_TOPOLOGY_ANNOTATION} and {SLICE_PREFERRED_TOPOLOGY_ANNOTATION}",
            )
        if size is None:
            raise InputError(
                f"{ann}{SLICE_SIZE_ANNOTATION}", "is missing: a slice level needs the pods per slice"
            )
        field_name = (
            SLICE_REQUIRED_TOPOLOGY_ANNOTATION
            if ps.slice_required_topology
            else SLICE_PREFERRED_TOPOLOGY_ANNOTATION
        )
        if label is None:
            raise InputError(
                f"{ann}{SLICE_REQUIRED_TOPOLOGY_ANNOTATION}",
                f"is missing: {SLICE_SIZE_ANNOTATION} needs the level each slice must fit in "
                f"(or {SLICE_PREFERRED_TOPOLOGY_ANNOTATION})",
            )
        if size < 1 or ps.count % size:
            divisors = [d for d in range(1, ps.count + 1) if ps.count % d == 0]
            raise InputError(
                f"{ann}{SLICE_SIZE_ANNOTATION}",
                f"{size} does not divide the podset's {ps.count} pods: use a divisor of {ps.count} "
                f"({', '.join(map(str, divisors[-6:]))}) or make podSets[{i}].count a multiple of {size}",
            )
        level = snap.level_index(label)
        if level is None:
            raise InputError(
                f"{ann}{field_name}",
                f"unknown topology label {label!r}; the levels are {', '.join(snap.levels)}",
            )
        for gang_level in (req, pref):
            if gang_level is not None and level <= gang_level:
                raise InputError(
                    f"{ann}{field_name}",
                    f"{label} is not narrower than the gang's level {snap.levels[gang_level]}: name a "
                    "slice level below it (slices sit inside the gang's domain) or widen the gang's level",
                )
        out.append((size, level, bool(ps.slice_required_topology)))
    return out


def _slice_attempts(
    slicing: list[_Slicing | None], req: int | None, pref: int | None
) -> list[list[tuple[int, int] | None]]:
    """The slicings to try in turn: as asked, then preferred slice levels widened one level at a
    time while they stay below the gang's level, then without the preferred slices."""
    floor = max((lv for lv in (req, pref) if lv is not None), default=-1) + 1
    attempts = []
    widen = 0
    while True:
        attempt: list[tuple[int, int] | None] = []
        moved = False
        for sl in slicing:
            if sl is None:
                attempt.append(None)
            elif sl[2]:
                attempt.append((sl[0], sl[1]))
            elif sl[1] - widen >= floor:
                attempt.append((sl[0], sl[1] - widen))
                moved = True
            else:
                attempt.append(None)
        attempts.append(attempt)
        if not moved:
            return attempts
        widen += 1


def validate_gang(gang: Gang) -> None:
    if not gang.podsets:
        raise InputError("podSets", "a gang needs at least one podset")
    seen: set[str] = set()
    for i, ps in enumerate(gang.podsets):
        if ps.count < 1:
            raise InputError(f"podSets[{i}].count", f"must be at least 1, not {ps.count}")
        if ps.name in seen:
            raise InputError(f"podSets[{i}].name", f"podset {ps.name!r} appears twice")
        seen.add(ps.name)
        for r, q in ps.requests.items():
            if q < 0:
                raise InputError(f"podSets[{i}].requests.{r}", "must not be negative")


def gang_levels(snapshot: Snapshot, gang: Gang) -> tuple[int | None, int | None]:
    """(required, preferred) level indexes of the gang (InputError for an unknown label)."""
    return _gang_levels(snapshot, gang)


class _Plus(Mapping[str, int]):
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
    req = _req_items(podset)

    def count(free: Mapping[str, int], extra: Mapping[str, int] = _NOTHING) -> int:
        return _fit(_Plus(free, extra) if extra else free, req)

    return count


def eligible_nodes(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, occupied: Collection[str] = ()
) -> list[list[int]]:
    """Per podset, the ids of the nodes its pods may use (usable, not a held spare, taints
    tolerated, selected), whether or not they have room now: what `place` filters by."""
    planner = _Planner(snapshot, Gang((), gang.name), held_spares(snapshot, policy, occupied))
    return [planner._eligible(ps.constraints, ps.excluded_nodes) for ps in gang.podsets]


# -- the planner --------------------------------------------------------------------------------


class _Planner:
    """One placement question over one snapshot: per-podset counts and the descent."""

    def __init__(self, snap: Snapshot, gang: Gang, spares: frozenset[int]) -> None:
        self.snap = snap
        self.gang = gang
        self.spares = spares
        self.reqs = [_req_items(ps) for ps in gang.podsets]
        # fill order: podsets with extended resources first, then larger ones, then gang order
        self.order = sorted(
            range(len(gang.podsets)),
            key=lambda p: (-any(_is_extended(r) for r, _ in self.reqs[p]), -gang.podsets[p].count, p),
        )
        self.eligible: dict[tuple[PodConstraints, frozenset[str]], list[int]] = {}
        self.node_counts: list[dict[int, int]] = []
        self.dom_counts: list[list[int]] = []
        for p, ps in enumerate(gang.podsets):
            nc, dc = self._counts(self.reqs[p], ps)
            self.node_counts.append(nc)
            self.dom_counts.append(dc)
        # (pods per slice, slice level) per podset, for the attempt under way (`place` sets it)
        self.slicing: list[tuple[int, int] | None] = [None] * len(gang.podsets)
        self._slice_cache: dict[tuple[int, tuple[int, int]], list[int]] = {}

    def _counts(self, req: _Req, ps: PodSet) -> tuple[dict[int, int], list[int]]:
        """The snapshot's kept counts for the podset's pod shape, less the spares and the nodes
        kube-scheduler rejected."""
        kept_nc, kept_dc = self.snap.fit_counts(req, ps.constraints)
        nc, dc = dict(kept_nc), list(kept_dc)
        path = self.snap.path
        ids = self.snap.node_ids
        off = self.spares.union(i for name in ps.excluded_nodes if (i := ids.get(name)) is not None)
        for n in off:
            c = nc.pop(n, 0)
            if c:
                dc[0] -= c
                for d in path[n]:
                    dc[d] -= c
        return nc, dc

    def _eligible(self, cons: PodConstraints, excluded: frozenset[str] = frozenset()) -> list[int]:
        cached = self.eligible.get((cons, excluded))
        if cached is not None:
            return cached
        snap, spares = self.snap, self.spares
        out = [
            i
            for i, node in enumerate(snap.nodes)
            if i not in spares and snap.allows(i, cons) and not (excluded and node.name in excluded)  # type: ignore[union-attr]
        ]
        self.eligible[(cons, excluded)] = out
        return out

    def _aggregate(self, node_counts: Mapping[int, int]) -> list[int]:
        counts = [0] * len(self.snap.domains)
        path = self.snap.path
        total = 0
        for n, c in node_counts.items():
            total += c
            for d in path[n]:
                counts[d] += c
        counts[0] = total
        return counts

    def _recount(self, p: int, overlay: Mapping[int, dict[str, int]]) -> tuple[dict[int, int], list[int]]:
        """Counts for podset p after earlier podsets took what `overlay` records."""
        if not overlay:
            return self.node_counts[p], self.dom_counts[p]
        nc = dict(self.node_counts[p])
        dc = list(self.dom_counts[p])
        for n, free in overlay.items():
            old = nc.get(n)
            if old is None:
                continue
            c = _fit(free, self.reqs[p])
            if c:
                nc[n] = c
            else:
                del nc[n]
            if c != old:  # only the changed nodes' domains: not a pass over every node
                dc[0] += c - old
                for d in self.snap.path[n]:
                    dc[d] += c - old
        return nc, dc

    def _descend(
        self, domain: int, need: int, nc: Mapping[int, int], dc: list[int]
    ) -> list[tuple[int, int]] | None:
        snap = self.snap
        out: list[tuple[int, int]] = []
        stack = [(domain, need)]
        while stack:
            d, k = stack.pop()
            dom = snap.domains[d]
            items: list[tuple[int, int, Any]] = [
                (c, dc[c], snap.domains[c].value or "") for c in dom.children
            ]
            items += [(n, nc.get(n, 0), snap.nodes[n].name) for n in dom.nodes]  # type: ignore[union-attr]
            chosen = _choose(items, k)
            if chosen is None:
                return None
            for ident, taken in chosen:
                if dom.nodes:  # the deepest level holds nodes and no child domains
                    out.append((ident, taken))
                else:
                    stack.append((ident, taken))
        return out

    def _take(self, p: int, picks: list[tuple[int, int]], overlay: dict[int, dict[str, int]]) -> None:
        for n, k in picks:
            free = overlay.get(n)
            if free is None:
                free = overlay[n] = dict(self.snap.free[n])
            for r, q in self.reqs[p]:
                free[r] = free.get(r, 0) - k * q
            if PODS in free:
                free[PODS] -= k

    def base_slice_counts(self, p: int) -> list[int]:
        sl = self.slicing[p]
        assert sl is not None
        cached = self._slice_cache.get((p, sl))
        if cached is None:
            cached = self._slice_cache[p, sl] = self.slice_counts(p, self.dom_counts[p])
        return cached

    def slice_counts(self, p: int, dc: Sequence[int]) -> list[int]:
        """Slices of podset p each domain at or above its slice level holds: a labelled domain
        of the slice level holds (pods that fit) // slice size; a wider one, its children's sum."""
        sl = self.slicing[p]
        assert sl is not None
        k, level = sl
        domains = self.snap.domains
        sc = [0] * len(domains)
        for a in self.snap.by_level[level]:
            v = dc[a] // k
            if v and domains[a].value is not None:
                d = a
                while d >= 0:
                    sc[d] += v
                    d = domains[d].parent
        return sc

    def fits(self, p: int, d: int) -> bool:
        """Podset p fits domain d on its own (in slices where d is above the slice level)."""
        count, sl, dom = self.gang.podsets[p].count, self.slicing[p], self.snap.domains[d]
        if sl is None:
            return self.dom_counts[p][d] >= count
        if dom.level < sl[1]:
            return self.base_slice_counts(p)[d] >= count // sl[0]
        return dom.key[sl[1]] is not None and self.dom_counts[p][d] >= count

    def _descend_slices(
        self, domain: int, slices: int, p: int, nc: Mapping[int, int], dc: list[int], sc: list[int]
    ) -> list[tuple[int, int]] | None:
        """Like `_descend`, in slice units down to the slice level, then in pods inside each
        domain of that level (whole slices only)."""
        sl = self.slicing[p]
        assert sl is not None
        k, level = sl
        snap = self.snap
        out: list[tuple[int, int]] = []
        stack = [(domain, slices)]
        while stack:
            d, t = stack.pop()
            dom = snap.domains[d]
            if dom.level == level:
                sub = self._descend(d, t * k, nc, dc)
                if sub is None:
                    return None
                out += sub
                continue
            chosen = _choose([(c, sc[c], snap.domains[c].value or "") for c in dom.children], t)
            if chosen is None:
                return None
            stack.extend(chosen)
        return out

    def _fill_podset(
        self, p: int, domain: int, overlay: dict[int, dict[str, int]]
    ) -> list[tuple[int, int]] | None:
        need, sl = self.gang.podsets[p].count, self.slicing[p]
        nc, dc = self._recount(p, overlay)
        if sl is not None and self.snap.domains[domain].level < sl[1]:
            sc = self.slice_counts(p, dc) if overlay else self.base_slice_counts(p)
            if sc[domain] < need // sl[0]:
                return None
            return self._descend_slices(domain, need // sl[0], p, nc, dc, sc)
        if dc[domain] < need:
            return None
        return self._descend(domain, need, nc, dc)

    def _orders(self) -> Sequence[Sequence[int]]:
        # podsets are few: every fill order (the preferred one first), up to 24 of them
        return list(itertools.permutations(self.order)) if len(self.order) <= 4 else [self.order]

    def _fill(
        self, fill_podset: Callable[[int, dict[int, dict[str, int]]], _Picks | None], domain: int
    ) -> list[_Picks] | None:
        """Every podset by `fill_podset`, in each fill order in turn; then the exact search in
        `domain`; or None."""
        for order in self._orders():
            overlay: dict[int, dict[str, int]] = {}
            result: list[_Picks] = [[] for _ in self.gang.podsets]
            for p in order:
                picks = fill_podset(p, overlay)
                if picks is None:
                    break
                result[p] = picks
                self._take(p, picks, overlay)
            else:
                return result
        return self.fill_exact(domain)

    def fill_one(self, domain: int) -> list[_Picks] | None:
        """Every podset inside one domain, or None."""
        return self._fill(lambda p, overlay: self._fill_podset(p, domain, overlay), domain)

    def fill_spread(self, level: int) -> list[_Picks] | None:
        """Every podset over the fewest domains of `level` (each podset in turn; a podset in
        slices by its slices from the root), or None."""

        def fill_podset(p: int, overlay: dict[int, dict[str, int]]) -> _Picks | None:
            if self.slicing[p] is not None:
                return self._fill_podset(p, 0, overlay)
            return self._spread_podset(p, level, overlay)

        return self._fill(fill_podset, 0)

    def _spread_podset(
        self, p: int, level: int, overlay: dict[int, dict[str, int]]
    ) -> list[tuple[int, int]] | None:
        snap, need = self.snap, self.gang.podsets[p].count
        nc, dc = self._recount(p, overlay)
        if dc[0] < need:
            return None
        items: list[tuple[int, int, Any]] = [
            (d, dc[d], tuple(v or "" for v in snap.domains[d].key)) for d in snap.by_level[level]
        ]
        chosen = _choose(items, need)
        if chosen is None:
            return None
        picks: list[tuple[int, int]] = []
        for d, k in chosen:
            sub = self._descend(d, k, nc, dc)
            if sub is None:
                return None
            picks += sub
        return picks

    def fill_exact(self, domain: int) -> list[list[tuple[int, int]]] | None:
        """Every podset inside one small domain by exact search (`packing.pack`), or None; only
        for several podsets (one podset's greedy fill misses nothing)."""
        snap, podsets = self.snap, self.gang.podsets
        if len(podsets) < 2:
            return None
        nodes = [n for n in snap.subtree_nodes(domain) if any(n in nc for nc in self.node_counts)]
        if len(nodes) > EXACT_MAX_NODES:
            return None
        top = snap.domains[domain].level
        groups: list[list[int] | None] = []
        caps = [[self.node_counts[p].get(n, 0) for p in range(len(podsets))] for n in nodes]
        for p, sl in enumerate(self.slicing):
            if sl is None or top >= sl[1]:
                groups.append(None)
                continue
            groups.append([snap.path[n][sl[1]] for n in nodes])
            for i, n in enumerate(nodes):
                if snap.domains[snap.path[n][sl[1]]].value is None:
                    caps[i][p] = 0
        sizes = [sl[0] if sl is not None else 1 for sl in self.slicing]
        found = pack(
            [snap.free[n] for n in nodes],
            caps,
            self.reqs,
            [ps.count for ps in podsets],
            groups,
            sizes,
        )
        if found is None:
            return None
        return [[(nodes[i], k) for i, k in picks] for picks in found]

    def assignments(self, result: list[list[tuple[int, int]]]) -> tuple[Assignment, ...]:
        snap = self.snap
        out: list[Assignment] = []
        for p, ps in enumerate(self.gang.podsets):
            picks = sorted(result[p], key=lambda t: self._tree_key(t[0]))
            index = 0
            for n, k in picks:
                name = snap.nodes[n].name  # type: ignore[union-attr]
                for _ in range(k):
                    out.append(Assignment(ps.name, index, name))
                    index += 1
        return tuple(out)

    def _tree_key(self, n: int) -> tuple[tuple[str, ...], str]:
        snap = self.snap
        leaf = snap.domains[snap.path[n][-1]]
        return tuple(v or "" for v in leaf.key), snap.nodes[n].name  # type: ignore[union-attr]


# -- explanations -------------------------------------------------------------------------------


def _node_summary(snap: Snapshot, ps: PodSet, spares: frozenset[int]) -> str:
    """How the nodes stand for one pod of `ps`: a pass over every node, so kept in the
    snapshot's memo until it changes."""
    req = _req_items(ps)
    key = ("node summary", req, ps.constraints, ps.excluded_nodes, spares)
    summary: str | None = snap.memo.get(key)
    if summary is None:
        summary = snap.memo[key] = _count_nodes(snap, ps, req, spares)
    return summary


def _count_nodes(snap: Snapshot, ps: PodSet, req: _Req, spares: frozenset[int]) -> str:
    why: Counter[str] = Counter()
    for i, node in enumerate(snap.nodes):
        if node is None:
            continue
        if not node.ready:
            why["not Ready"] += 1
        elif node.unschedulable:
            why["cordoned"] += 1
        elif (refusal := ps.constraints.refusal(node.labels, node.name, node.taints)) is not None:
            why[refusal] += 1
        elif node.name in ps.excluded_nodes:
            why["rejected by kube-scheduler"] += 1
        elif _fit(snap.free[i], req) == 0:
            free = snap.free[i]
            short = next((r for r, q in req if free.get(r, 0) < q), PODS)
            why[f"short of {short}"] += 1
        elif i in spares:
            why["held as spare"] += 1
        else:
            why["with room"] += 1
    parts = sorted(why.items(), key=lambda kv: (kv[0] != "with room", -kv[1], kv[0]))
    return "nodes: " + ", ".join(f"{n} {what}" for what, n in parts) if parts else "no nodes"


def _spare_counts(snap: Snapshot, planner: _Planner, spares: frozenset[int]) -> list[list[int]]:
    out = []
    for p, ps in enumerate(planner.gang.podsets):
        nc = {}
        for n in spares:
            node = snap.nodes[n]
            assert node is not None
            if (
                node.name not in ps.excluded_nodes
                and ps.constraints.refusal(node.labels, node.name, node.taints) is None
            ):
                c = _fit(snap.free[n], planner.reqs[p])
                if c:
                    nc[n] = c
        out.append(planner._aggregate(nc))
    return out


def _slice_misses(snap: Snapshot, planner: _Planner, domain: int) -> str:
    """Per podset in slices that do not all fit in `domain`: how many do, and the most room any
    slice-level domain there has for the next one."""
    out = []
    dom = snap.domains[domain]
    where = f" under {dom.value}" if dom.value is not None else ""
    for p, sl in enumerate(planner.slicing):
        if sl is None or dom.level >= sl[1]:
            continue
        k, level = sl
        want, fit = planner.gang.podsets[p].count // k, planner.base_slice_counts(p)[domain]
        if fit >= want:
            continue
        dc = planner.dom_counts[p]
        prefix = dom.key
        room = max(
            (
                dc[a] % k
                for a in snap.by_level[level]
                if snap.domains[a].value is not None and snap.domains[a].key[: len(prefix)] == prefix
            ),
            default=0,
        )
        name = f"podset {planner.gang.podsets[p].name}: " if len(planner.gang.podsets) > 1 else ""
        out.append(
            f"{name}{fit} of {want} slices of {k} fit in one {snap.levels[level]}{where}; "
            f"the {_ordinal(fit + 1)} has room for {room} at most"
        )
    return "; ".join(out)


def _explain(snap: Snapshot, planner: _Planner, spares: frozenset[int], level: int | None) -> str:
    gang = planner.gang
    needs = " + ".join(_describe(ps) for ps in gang.podsets)
    total = sum(ps.count for ps in gang.podsets)
    spare_dc = _spare_counts(snap, planner, spares) if spares else None

    def room(d: int) -> int:
        return sum(min(planner.dom_counts[p][d], ps.count) for p, ps in enumerate(gang.podsets))

    def held(d: int) -> str:
        if spare_dc is None:
            return ""
        extra = sum(
            min(spare_dc[p][d], max(ps.count - planner.dom_counts[p][d], 0))
            for p, ps in enumerate(gang.podsets)
        )
        return f" ({extra} more held as spare)" if extra else ""

    if level is None:
        best: int | None = 0
        head = f"needs {needs}"
    else:
        label = snap.levels[level]
        head = f"needs {needs} in one {label}"
        labeled = [d for d in snap.by_level[level] if snap.domains[d].value is not None]
        best = min(labeled, key=lambda d: (-room(d), snap.domains[d].value or ""), default=None)
    notes = _slice_misses(snap, planner, 0 if best is None else best)
    if best is None:
        msg = f"{head}; no node has the label {snap.levels[level or 0]}"
    elif notes:
        msg = f"{head}; {notes}"
    else:
        where = "the cluster has" if level is None else f"best is {snap.domains[best].value} with"
        r = room(best)
        if r >= total:
            msg = f"{head}; {where} room for each podset but not for all of them together"
        else:
            of = "" if len(gang.podsets) == 1 else f" of {total}"
            msg = f"{head}; {where} room for {r}{of}{held(best)}"
    short = min(
        range(len(gang.podsets)),
        key=lambda p: (planner.dom_counts[p][0] >= gang.podsets[p].count, p),
    )
    return f"{msg}; {_node_summary(snap, gang.podsets[short], spares)}"


# -- public API -----------------------------------------------------------------------------------


def place(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy | None = None,
    occupied: Collection[str] = (),
    *,
    explain: bool = True,
) -> Placement:
    """Where every pod of `gang` goes, or why it cannot run now. See the module docstring.
    `occupied`: nodes where other pods of the gang already run (their UltraServers' spares are
    the gang's to use).

    `explain=False` skips the reason of a refusal (a pass over every node): for callers that
    ask again and again and only need the answer, such as the capacity simulator.

    Raises InputError for a gang without podsets, a count below 1, or a topology annotation
    naming a label that is not one of the snapshot's levels.
    """
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    req, pref = _gang_levels(snapshot, gang)
    slicing = _slicing(snapshot, gang, req, pref)
    spares = held_spares(snapshot, policy, occupied)
    planner = _Planner(snapshot, gang, spares)
    first: Placement | None = None
    for attempt in _slice_attempts(slicing, req, pref):
        planner.slicing = attempt
        result = _place(snapshot, planner, spares, req, pref, policy.climb_levels, explain)
        if result.feasible:
            return result
        first = first or result  # the miss as asked explains best
    assert first is not None
    return first


def _slices_note(snap: Snapshot, planner: _Planner, result: list[list[tuple[int, int]]]) -> str:
    """How the slices landed, for the placement's reason."""
    notes = []
    for p, sl in enumerate(planner.slicing):
        if sl is not None:
            k, level = sl
            used = {snap.path[n][level] for n, _ in result[p]}
            n = planner.gang.podsets[p].count // k
            notes.append(f"{n} slice{'s' if n != 1 else ''} of {k} over {len(used)} {snap.levels[level]}")
    return f"; {', '.join(notes)}" if notes else ""


def _place(
    snapshot: Snapshot,
    planner: _Planner,
    spares: frozenset[int],
    req: int | None,
    pref: int | None,
    climb: bool,
    explain: bool,
) -> Placement:
    """One attempt of `place` with the planner's slicing."""
    gang = planner.gang
    levels = snapshot.levels
    narrowest = len(levels) - 1
    stop = req if req is not None else 0
    start = pref if pref is not None and pref >= stop else (req if req is not None else narrowest)
    needs = [ps.count for ps in gang.podsets]
    total = sum(needs)
    dcs = planner.dom_counts
    last = stop if climb else start
    first, first_need = dcs[0], needs[0]  # the cheap test first: most domains fail it
    for level in range(start, last - 1, -1):
        fitting = [
            d
            for d in snapshot.by_level[level]
            if first[d] >= first_need
            and snapshot.domains[d].value is not None
            # a narrower domain counts only inside a labelled domain of the required level
            and (req is None or snapshot.domains[d].key[req] is not None)
            and all(planner.fits(p, d) for p in range(len(needs)))
        ]
        fitting.sort(
            key=lambda d: (
                sum(dcs[p][d] - n for p, n in enumerate(needs)),
                snapshot.domains[d].value,
                tuple(v or "" for v in snapshot.domains[d].key),
            )
        )
        for d in fitting:
            result = planner.fill_one(d)
            if result is not None:
                value = snapshot.domains[d].value or ""
                # Spare room is only a pod count when the gang has one kind of pod.
                room = f"; room for {dcs[0][d] - needs[0]} more there" if len(needs) == 1 else ""
                return Placement(
                    True,
                    levels[level],
                    (value,),
                    planner.assignments(result),
                    f"all {total} pods fit in {levels[level]} {value} (best fit{room})"
                    f"{_slices_note(snapshot, planner, result)}",
                )
    if req is not None:
        why = _explain(snapshot, planner, spares, req) if explain else "does not fit"
        return Placement(False, None, (), (), why)
    if pref is not None:
        spread_level = pref
    else:
        above_host = [i for i, label in enumerate(levels) if label != HOSTNAME_LABEL]
        spread_level = above_host[-1] if above_host else narrowest
    spread = planner.fill_spread(spread_level)
    if spread is None:
        why = _explain(snapshot, planner, spares, None) if explain else "does not fit"
        return Placement(False, None, (), (), why)
    used = {snapshot.path[n][spread_level] for picks in spread for n, _ in picks}
    values = tuple(sorted({v for d in used if (v := snapshot.domains[d].value) is not None}))
    wanted = "preferred" if pref is not None else "no topology requested"
    return Placement(
        True,
        None,
        values,
        planner.assignments(spread),
        f"no single domain holds all {total} pods; spread over {len(used)} {levels[spread_level]} "
        f"domains ({wanted}){_slices_note(snapshot, planner, spread)}",
    )


def replace(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_node: str,
    policy: PlacementPolicy | None = None,
) -> Replacement:
    """One node to take every pod `assignments` put on `failed_node`.

    The snapshot must already count the gang's pods on its other nodes. Candidates keep the
    gang's required domain and the required slice domain of the moved pods; the closest in the
    topology to the gang win (deepest shared level), within that a spare of an UltraServer the
    gang runs in first, then the tightest fit, then the name. Spares of other UltraServers are
    never used (`held_spares`).
    """
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    held = held_spares(snapshot, policy, {a.node for a in assignments})
    return _replace(snapshot, gang, assignments, failed_node, spares, held, {})


def _replace(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_node: str,
    spares: frozenset[int],
    held: frozenset[int],
    taken: Mapping[int, Mapping[str, int]],
) -> Replacement:
    """`replace` with the spare sets given and `taken` (node id -> requests) already used by
    earlier moves of the same decision. Candidates are searched ring by ring outwards from the
    failed node's domains: once the best found shares a level no node outside the ring can,
    the wider rings cannot beat it."""
    req, _ = _gang_levels(snapshot, gang)
    moving = [a for a in assignments if a.node == failed_node]
    if not moving:
        return Replacement(True, None, False, (), f"no pod of the gang is on {failed_node}")
    by_name = {ps.name: ps for ps in gang.podsets}
    per_set: Counter[str] = Counter()
    for a in moving:
        if a.pod_set not in by_name:
            raise InputError("assignments", f"podset {a.pod_set!r} is not in the gang")
        per_set[a.pod_set] += 1
    # A pod of a slice stays in its slice's domain (the failed node's: its slice is all there).
    slicing = _slicing(snapshot, gang, req, None)
    whose = "the gang's"
    for p, ps in enumerate(gang.podsets):
        sl = slicing[p]
        if ps.name in per_set and sl is not None and sl[2] and (req is None or sl[1] > req):
            req, whose = sl[1], "its slice's"
    need: dict[str, int] = {PODS: len(moving)}
    for name, k in per_set.items():
        for r, q in _req_items(by_name[name]):
            need[r] = need.get(r, 0) + k * q
    anchor_id = snapshot.node_ids.get(failed_node)
    if anchor_id is None:
        others = sorted({a.node for a in assignments if a.node != failed_node})
        anchor_id = next((i for n in others if (i := snapshot.node_ids.get(n)) is not None), None)
    anchor = snapshot.nodes[anchor_id] if anchor_id is not None else None
    anchor_key = tuple(anchor.labels.get(label) for label in snapshot.levels) if anchor is not None else None
    constraints = {by_name[name].constraints for name in per_set}

    # rings: the anchor's domains from the narrowest up to the required level (or the root)
    rings: list[tuple[int, int]] = []  # (domain id, level)
    if anchor_id is not None:
        top = req if req is not None else -1
        rings = [(snapshot.path[anchor_id][lv], lv) for lv in range(len(snapshot.levels) - 1, top - 1, -1)]
        if req is None:
            rings.append((0, -1))
        elif anchor_key is not None and anchor_key[req] is None:
            rings = []
    elif req is None:
        rings = [(0, -1)]
    best: tuple[tuple[int, int, int, str], int] | None = None
    seen: set[int] = set()
    for domain, level in rings:
        for i in snapshot.subtree_nodes(domain):
            if i in seen:
                continue
            seen.add(i)
            rank = _candidate_rank(
                snapshot, i, failed_node, need, constraints, anchor_key, spares, held, taken
            )
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is not None and -best[0][0] > level:
            break  # outside this ring a node shares at most `level` levels with the failed one
    moved = sorted(moving, key=lambda a: (a.pod_set, a.index))
    if best is None:
        where = f" in {whose} {snapshot.levels[req]}" if req is not None and anchor_key is not None else ""
        return Replacement(
            False,
            None,
            False,
            (),
            f"no node{where} can take the {len(moving)} pod(s) of {failed_node} "
            f"({', '.join(f'{format_quantity(r, q)} {r}' for r, q in sorted(need.items()))})",
        )
    rank, i = best
    node = snapshot.nodes[i]
    assert node is not None
    used_spare = rank[1] == 0
    kind = f"spare of UltraServer {node.labels.get(ULTRASERVER_LABEL)}" if used_spare else "node"
    return Replacement(
        True,
        node.name,
        used_spare,
        tuple(Assignment(a.pod_set, a.index, node.name) for a in moved),
        f"{failed_node} replaced by {kind} {node.name}",
    )


def _candidate_rank(
    snapshot: Snapshot,
    i: int,
    failed_node: str,
    need: Mapping[str, int],
    constraints: Collection[PodConstraints],
    anchor_key: tuple[str | None, ...] | None,
    spares: frozenset[int],
    held: frozenset[int],
    taken: Mapping[int, Mapping[str, int]],
) -> tuple[int, int, int, str] | None:
    """(-levels shared with the failed node, 0 for a spare, leftover extended resources, name)
    for a node that can take the moved pods, else None."""
    node = snapshot.nodes[i]
    if node is None or node.name == failed_node or not snapshot.usable[i] or i in held:
        return None
    free = snapshot.free[i]
    used = taken.get(i)
    if used is not None:
        free = {r: q - used.get(r, 0) for r, q in free.items()}
    if PODS not in free:
        free = {**free, PODS: need[PODS]}
    if any(free.get(r, 0) < q for r, q in need.items()):
        return None
    if any(c.refusal(node.labels, node.name, node.taints) is not None for c in constraints):
        return None
    depth = 0
    if anchor_key is not None:
        key = tuple(node.labels.get(label) for label in snapshot.levels)
        while depth < len(key) and key[depth] is not None and key[depth] == anchor_key[depth]:
            depth += 1
    leftover = sum(free.get(r, 0) - q for r, q in need.items() if r != PODS and _is_extended(r))
    return (-depth, 0 if i in spares else 1, leftover, node.name)


@dataclass(frozen=True, slots=True)
class Recovery:
    """Where the pods of every failed node go, decided together: a move per node, or none."""

    feasible: bool
    moves: tuple[Replacement, ...]
    reason: str


def recover(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_nodes: Collection[str],
    policy: PlacementPolicy | None = None,
) -> Recovery:
    """Replace every node of `failed_nodes` at once (`replace` for each, in name order, each
    seeing what the ones before it took, with the spares as they were when the nodes failed):
    all moves, or none when one node cannot be replaced, so a gang is never half moved. A pod
    of a slice stays in its slice's domain. The snapshot is not changed."""
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    by_name = {ps.name: ps for ps in gang.podsets}
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    held = held_spares(snapshot, policy, {a.node for a in assignments})
    current = list(assignments)
    moves: list[Replacement] = []
    taken: dict[int, dict[str, int]] = {}
    for failed in sorted(set(failed_nodes)):
        r = _replace(snapshot, gang, current, failed, spares, held, taken)
        if not r.feasible:
            n = len(set(failed_nodes))
            what = "the failed node" if n == 1 else f"all {n} failed nodes"
            return Recovery(False, (), f"{what} cannot be replaced: {r.reason}")
        if r.node is None:
            continue
        moves.append(r)
        moved = {(a.pod_set, a.index): a for a in r.assignments}
        current = [moved.get((a.pod_set, a.index), a) for a in current]
        used = taken.setdefault(snapshot.node_ids[r.node], {})
        for a in r.assignments:
            for res, q in by_name[a.pod_set].requests.items():
                used[res] = used.get(res, 0) + q
            used[PODS] = used.get(PODS, 0) + 1
    reason = "; ".join(m.reason for m in moves) or "no pod of the gang is on a failed node"
    return Recovery(True, tuple(moves), reason)
