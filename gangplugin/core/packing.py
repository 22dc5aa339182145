"""How many pods fit on a node, and the exact joint packing of several pod shapes on a few nodes.

The placement engine fills podsets greedily (`placement.planner.Planner`); on a small domain where
every fill order fails, `pack` searches all ways of sharing each node between the shapes, so
a feasible packing is never missed there. It is a depth-first search over the nodes (in tree
order) choosing how many pods of each podset go on the node, with two prunings: the capacity
still reachable on later nodes must cover what is left, and a state (node, pods left, pods in
the current slice domain) that failed once is never searched again. A step budget bounds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangplugin.core.resources import PODS
from gangplugin.core.topology import Requests as Req
from gangplugin.core.topology import pods_fitting as fit

#: Above this many candidate nodes the exact search is not tried (the greedy fill is the answer).
EXACT_MAX_NODES = 64
#: Vectors tried before the exact search gives up (it then answers "no packing found").
EXACT_BUDGET = 200_000


def _take(free: Mapping[str, int], req: Req, k: int) -> dict[str, int]:
    out = dict(free)
    for r, q in req:
        out[r] = out.get(r, 0) - k * q
    if PODS in out:
        out[PODS] -= k
    return out


def pack(
    frees: Sequence[Mapping[str, int]],
    caps: Sequence[Sequence[int]],
    reqs: Sequence[Req],
    needs: Sequence[int],
    groups: Sequence[Sequence[int] | None],
    sizes: Sequence[int],
    budget: int = EXACT_BUDGET,
) -> list[list[tuple[int, int]]] | None:
    """Pods per node for every podset, or None when there is no packing (or the budget ran out).

    `frees[i]`: node i's free capacity; `caps[i][p]`: pods of podset p node i could take alone
    (0: not eligible); `groups[p]`: for a podset in slices of `sizes[p]` pods, the slice-domain
    id of each node (nodes of one domain are consecutive), else None. Each slice domain then
    receives a whole number of slices. Returns, per podset, (node position, pods) pairs."""
    n, ps = len(frees), range(len(needs))
    suffix = [[0] * len(needs) for _ in range(n + 1)]
    for i in reversed(range(n)):
        suffix[i] = [suffix[i + 1][p] + caps[i][p] for p in ps]
    sliced = [g is not None for g in groups]
    ends = [[g is not None and (i == n - 1 or g[i + 1] != g[i]) for g in groups] for i in range(n)]
    failed: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    picks: list[tuple[int, ...]] = []
    steps = 0

    def vectors(i: int, rem: Sequence[int]) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []

        def walk(p: int, free: Mapping[str, int], acc: tuple[int, ...]) -> None:
            if p == len(rem):
                out.append(acc)
                return
            top = fit(free, reqs[p], min(rem[p], caps[i][p])) if caps[i][p] else 0
            for x in range(top, -1, -1):
                walk(p + 1, _take(free, reqs[p], x) if x else free, (*acc, x))

        walk(0, frees[i], ())
        return out

    def search(i: int, rem: tuple[int, ...], cur: tuple[int, ...]) -> bool:
        nonlocal steps
        if not any(rem):  # a slice domain left unfinished must hold whole slices too
            return all(c % sizes[p] == 0 for p, c in enumerate(cur) if c)
        if i == n or any(suffix[i][p] < rem[p] for p in ps):
            return False
        key = (i, rem, cur)
        if key in failed:
            return False
        for vec in vectors(i, rem):
            steps += 1
            if steps > budget:
                return False
            nxt = tuple(c + x if sliced[p] else 0 for p, (c, x) in enumerate(zip(cur, vec, strict=True)))
            if any(ends[i][p] and nxt[p] % sizes[p] for p in ps):
                continue
            nxt = tuple(0 if ends[i][p] else c for p, c in enumerate(nxt))
            picks.append(vec)
            if search(i + 1, tuple(r - x for r, x in zip(rem, vec, strict=True)), nxt):
                return True
            picks.pop()
        failed.add(key)
        return False

    start = tuple(0 for _ in ps)
    if not search(0, tuple(needs), start):
        return None
    return [[(i, vec[p]) for i, vec in enumerate(picks) if vec[p]] for p in ps]
