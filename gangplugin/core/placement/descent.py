"""From a chosen domain down to the nodes, level by level, by one rule (`choose`): the fewest
children that hold what is needed, largest first, the last one the tightest that holds the rest,
ties by name. Pods are counted in pods, or in whole slices down to a podset's slice level
(`descend_slices`); `spread` applies the same rule across every domain of a level."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def descend(snapshot: Snapshot, domain: int, need: int, counts: PodCounts) -> Picks | None:
    """`need` pods inside `domain`, down to its nodes; None if they do not fit."""
    domains, nodes = snapshot.domains, snapshot.nodes
    per_node, per_domain = counts.per_node, counts.per_domain
    picks: Picks = []
    stack = [(domain, need)]
    while stack:
        here, pods = stack.pop()
        current = domains[here]
        if len(current.nodes) == 1:  # a hostname domain: its one node holds them, or nothing does
            node = current.nodes[0]
            if per_node.get(node, 0) < pods:
                return None
            picks.append((node, pods))
            continue
        if current.nodes:  # the deepest level holds nodes and no child domains
            chosen = choose(
                [
                    Option(node, room, nodes[node].name)  # type: ignore[union-attr]
                    for node in current.nodes
                    if (room := per_node.get(node, 0)) > 0
                ],
                pods,
            )
            if chosen is None:
                return None
            picks += chosen
            continue
        chosen = choose(
            [
                Option(child, room, domains[child].value or "")
                for child in current.children
                if (room := per_domain[child]) > 0
            ],
            pods,
        )
        if chosen is None:
            return None
        stack += chosen
    return picks


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
    picks: Picks = []
    stack = [(domain, slices)]
    while stack:
        here, wanted = stack.pop()
        current = domains[here]
        if current.level == slicing.level:
            inside = descend(snapshot, here, wanted * slicing.size, counts)
            if inside is None:
                return None
            picks += inside
            continue
        chosen = choose(
            [
                Option(child, slices_per_domain[child], (per_domain[child], domains[child].value or ""))
                for child in current.children
            ],
            wanted,
        )
        if chosen is None:
            return None
        stack += chosen
    return picks


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
