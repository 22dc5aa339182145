"""The search inside one domain that preemption runs (`core.preemption.find_victims`): which
sets of running gangs, evicted, make a waiting gang fit there, by a branch and bound over
per-node free capacity, with the bounds that cut it short."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from gangplugin.core.placement import Gang, fit_counter
from gangplugin.core.resources import PODS
from gangplugin.core.topology import Snapshot

MAX_STEPS = 4000  # branch-and-bound steps in one domain before settling for the best so far

#: (node id, requests) of each pod of a gang the snapshot counts.
Pods = list[tuple[int, Mapping[str, int]]]


class Candidate(Protocol):
    """A running gang the search may evict: its key and its GPUs."""

    @property
    def key(self) -> str: ...

    @property
    def gpus(self) -> int: ...


C = TypeVar("C", bound=Candidate)


class DomainFit:
    """Fast fit counting inside one domain: per node, free capacity plus what victims free.
    `eligible`: per podset, the ids of the domain's nodes its pods may use."""

    def __init__(
        self,
        snapshot: Snapshot,
        gang: Gang,
        eligible: list[list[int]],
        usage: Mapping[str, Pods],
    ) -> None:
        self.snapshot, self.gang, self.usage = snapshot, gang, usage
        self.fit = [fit_counter(ps) for ps in gang.podsets]
        free = snapshot.free
        # per podset: node id -> how many of its pods fit there now
        self.nodes = [{n: fit(free[n], {}) for n in ns} for fit, ns in zip(self.fit, eligible, strict=True)]
        self.base = [sum(ns.values()) for ns in self.nodes]

    def gains(self, candidates: Sequence[Candidate]) -> list[list[int]]:
        """Per candidate and podset, an upper bound of the pods its eviction adds: on each of
        its nodes, what fits once every candidate has left it. A set never adds more than the
        sum of its members' gains."""
        freed = self._freed([g.key for g in candidates])
        full = {
            n: [
                self.fit[p](self.snapshot.free[n], extra) - here[n] if n in here else 0
                for p, here in enumerate(self.nodes)
            ]
            for n, extra in freed.items()
        }
        return [
            [sum(full[n][p] for n in {n for n, _ in self.usage[g.key]}) for p in range(len(self.nodes))]
            for g in candidates
        ]

    def _freed(self, keys: Sequence[str]) -> dict[int, dict[str, int]]:
        """Per node, what the pods of these gangs hold there (pod slots included)."""
        freed: dict[int, dict[str, int]] = {}
        for k in keys:
            for n, requests in self.usage[k]:
                acc = freed.get(n)
                if acc is None:
                    acc = freed[n] = {PODS: 0}
                for r, q in requests.items():
                    acc[r] = acc.get(r, 0) + q
                acc[PODS] += 1
        return freed

    def fits(self, keys: Sequence[str]) -> bool:
        freed = self._freed(keys)
        for p, ps in enumerate(self.gang.podsets):
            count, here = self.base[p], self.nodes[p]
            for n, extra in freed.items():
                if n in here:
                    count += self.fit[p](self.snapshot.free[n], extra) - here[n]
            if count < ps.count:
                return False
        return True


def search(dom: DomainFit, candidates: list[C], bound: list[int]) -> list[list[C]]:
    """Minimal sets of `candidates` (sorted cheapest first) that make the gang fit in `dom`,
    by branch and bound: a branch is cut when it costs more GPUs than `bound[0]` (the fewest
    of a fitting set found so far, in any domain) or when even all the gangs left could not
    add the pods missing (`DomainFit.gains`)."""
    need = [ps.count - b for ps, b in zip(dom.gang.podsets, dom.base, strict=True)]
    gains = dom.gains(candidates)
    total = [sum(g[p] for g in gains) for p in range(len(need))]
    if any(t < n for t, n in zip(total, need, strict=True)):
        return []  # even all of them could not make room
    if cheapest_possible([c.gpus for c in candidates], [g[0] for g in gains], need[0]) > bound[0]:
        return []
    left = [[0] * len(need) for _ in range(len(candidates) + 1)]  # gains of candidates[i:]
    for i in range(len(candidates) - 1, -1, -1):
        left[i] = [a + b for a, b in zip(left[i + 1], gains[i], strict=True)]
    found: list[list[C]] = []
    steps = 0
    chosen: list[C] = []

    def dfs(start: int, gpus: int, got: list[int]) -> None:
        nonlocal steps
        for i in range(start, len(candidates)):
            steps += 1
            if steps > MAX_STEPS or any(g + r < n for g, r, n in zip(got, left[i], need, strict=True)):
                return
            c = candidates[i]
            cost = gpus + c.gpus
            if cost > bound[0]:
                continue
            chosen.append(c)
            now = [a + b for a, b in zip(got, gains[i], strict=True)]
            if all(g >= n for g, n in zip(now, need, strict=True)) and dom.fits([g.key for g in chosen]):
                found.append(list(chosen))
                bound[0] = min(bound[0], cost)
            else:
                dfs(i + 1, cost, now)
            chosen.pop()

    dfs(0, 0, [0] * len(need))
    return found


def least_gpus(costs: Sequence[int], inside: Sequence[int], missing: int) -> float:
    """The fewest GPUs of whole gangs (`costs`) whose GPUs in the domain (`inside`) add up to
    `missing`: exact over subsets when there are few gangs, the fractional bound otherwise."""
    if missing <= 0:
        return min(costs, default=0)
    if len(costs) > 10:
        return cheapest_possible(costs, inside, missing)
    best = float("inf")
    for r in range(1, len(costs) + 1):
        for subset in itertools.combinations(range(len(costs)), r):
            if sum(inside[i] for i in subset) >= missing:
                best = min(best, sum(costs[i] for i in subset))
    return best


def cheapest_possible(gpus: Sequence[int], gains: Sequence[int], missing: int) -> float:
    """A lower bound of the GPUs to preempt for `missing` more pods: the fractional knapsack
    over the candidates' (cost, gain); infinity when all of them together fall short."""
    if missing <= 0:
        return 0.0
    cost = 0.0
    for g, gain in sorted(
        ((g, n) for g, n in zip(gpus, gains, strict=True) if n > 0), key=lambda t: t[0] / t[1]
    ):
        if gain >= missing:
            return cost + g * missing / gain
        cost += g
        missing -= gain
    return float("inf")
