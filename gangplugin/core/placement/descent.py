"""From a chosen domain down to the nodes, level by level, by one rule (`choose`): the fewest
children that hold what is needed, largest first, the last one the tightest that holds the rest,
ties by name. Pods are counted in pods, or in whole slices down to a podset's slice level
(`descend_slices`); `spread` applies the same rule across every domain of a level."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from gangplugin.core.placement.capacity import Picks, PodCounts
from gangplugin.core.placement.slices import Slicing
from gangplugin.core.topology import Snapshot


class Option(NamedTuple):
    """A child domain or node that can take some of what is needed."""

    ident: int  # domain or node id
    room: int  # pods (or slices) it holds
    tie: Any  # orders options of equal room, least first: a name, a domain's values, (pods, name)


def _most_room_first(option: Option) -> tuple[int, Any]:
    return -option.room, option.tie


def choose(options: Iterable[Option], need: int) -> list[tuple[int, int]] | None:
    """Fewest options covering `need`: largest first, the last one the tightest that holds the
    rest (the first such in that order). Returns (ident, taken) pairs, or None if they fall short."""
    ranked = sorted((option for option in options if option.room > 0), key=_most_room_first)
    taken: list[tuple[int, int]] = []
    remaining = need
    for i, option in enumerate(ranked):
        if remaining <= 0:
            break
        if option.room < remaining:
            taken.append((option.ident, option.room))
            remaining -= option.room
            continue
        # ranked[i:] go by room descending: the tightest is the first with the least room >= remaining
        tightest = option
        for other in ranked[i + 1 :]:
            if other.room < remaining:
                break
            if other.room < tightest.room:
                tightest = other
        taken.append((tightest.ident, remaining))
        return taken
    return taken if remaining <= 0 else None


#: What one step down from a domain makes of the amount asked of it: picks to keep, and
#: (child, amount) pairs to walk down next; None when the amount does not fit.
Step = tuple[Picks, list[tuple[int, int]]] | None


def _walk(domain: int, amount: int, step: Callable[[int, int], Step]) -> Picks | None:
    """The picks of `amount` inside `domain`, taking `step` from each domain reached (depth
    first, the last child chosen first); None as soon as one step does not fit."""
    picks: Picks = []
    stack = [(domain, amount)]
    while stack:
        taken = step(*stack.pop())
        if taken is None:
            return None
        kept, below = taken
        picks += kept
        stack += below
    return picks


def _children(chosen: list[tuple[int, int]] | None) -> Step:
    return None if chosen is None else ([], chosen)


def descend(snapshot: Snapshot, domain: int, need: int, counts: PodCounts) -> Picks | None:
    """`need` pods inside `domain`, down to its nodes; None if they do not fit."""
    domains, nodes = snapshot.domains, snapshot.nodes
    per_node, per_domain = counts.per_node, counts.per_domain

    def step(here: int, pods: int) -> Step:
        current = domains[here]
        if len(current.nodes) == 1:  # a hostname domain: its one node holds them, or nothing does
            node = current.nodes[0]
            return ([(node, pods)], []) if per_node.get(node, 0) >= pods else None
        if current.nodes:  # the deepest level holds nodes and no child domains
            chosen = choose(
                [
                    Option(node, room, nodes[node].name)  # type: ignore[union-attr]
                    for node in current.nodes
                    if (room := per_node.get(node, 0)) > 0
                ],
                pods,
            )
            return None if chosen is None else (chosen, [])
        return _children(
            choose(
                [
                    Option(child, room, domains[child].value or "")
                    for child in current.children
                    if (room := per_domain[child]) > 0
                ],
                pods,
            )
        )

    return _walk(domain, need, step)


def descend_slices(
    snapshot: Snapshot,
    domain: int,
    slices: int,
    slicing: Slicing,
    counts: PodCounts,
    slices_per_domain: Sequence[int],
) -> Picks | None:
    """Like `descend`, in whole slices down to the slice level, then in pods inside each domain
    of that level; None if they do not fit. Of children holding as many slices, the one with
    fewer pods of room first (Kueue's BestFit): its slices strand less capacity."""
    domains, per_domain = snapshot.domains, counts.per_domain

    def step(here: int, wanted: int) -> Step:
        if domains[here].level == slicing.level:
            inside = descend(snapshot, here, wanted * slicing.size, counts)
            return None if inside is None else (inside, [])
        return _children(
            choose(
                [
                    Option(child, slices_per_domain[child], (per_domain[child], domains[child].value or ""))
                    for child in domains[here].children
                ],
                wanted,
            )
        )

    return _walk(domain, slices, step)


def spread(snapshot: Snapshot, level: int, need: int, counts: PodCounts) -> Picks | None:
    """`need` pods over the fewest domains of `level`, then down to their nodes; None if short."""
    per_domain, domains = counts.per_domain, snapshot.domains
    if per_domain[0] < need:
        return None
    chosen = choose(
        [
            Option(domain, per_domain[domain], tuple(value or "" for value in domains[domain].key))
            for domain in snapshot.by_level[level]
        ],
        need,
    )
    if chosen is None:
        return None
    picks: Picks = []
    for domain, pods in chosen:
        inside = descend(snapshot, domain, pods, counts)
        if inside is None:
            return None
        picks += inside
    return picks
