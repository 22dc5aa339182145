"""The prose of a placement: what a gang needs, how its slices landed, and why it does not fit
(the best domain's room, what the held spares would add, how the nodes stand). Read by people in
`gangctl explain` and the Workload's check message, so it names numbers and domains."""

from __future__ import annotations

from collections import Counter

from gangplugin.core.placement.capacity import Picks, aggregate, is_extended, request_shape
from gangplugin.core.placement.model import Gang, PodSet
from gangplugin.core.placement.planner import Planner
from gangplugin.core.resources import CPU, MEMORY, PODS, format_quantity
from gangplugin.core.topology import Requests, Snapshot, pods_fitting


def _describe(podset: PodSet) -> str:
    """What a podset needs, e.g. `4 pods with 4 nvidia.com/gpu in slices of 2 per <level>`."""
    count = podset.count
    requests = request_shape(podset)
    shown = [(r, q) for r, q in requests if is_extended(r)] or [
        (r, q) for r, q in requests if r in (CPU, MEMORY)
    ]
    what = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in shown) or "no requests"
    level = podset.slice_required_topology or podset.slice_preferred_topology
    sliced = f" in slices of {podset.slice_size} per {level}" if podset.slice_size and level else ""
    return f"{count} pod{'s' if count != 1 else ''} with {what}{sliced}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fit_reason(planner: Planner, level: int, domain: int, result: list[Picks]) -> str:
    """Why the gang went into this one domain."""
    snapshot, podsets = planner.snapshot, planner.gang.podsets
    total = sum(podset.count for podset in podsets)
    value = snapshot.domains[domain].value or ""
    # Spare room is only a pod count when the gang has one kind of pod.
    room = (
        f"; room for {planner.counts[0].per_domain[domain] - podsets[0].count} more there"
        if len(podsets) == 1
        else ""
    )
    return (
        f"all {total} pods fit in {snapshot.levels[level]} {value} (best fit{room})"
        f"{_slices_note(planner, result)}"
    )


def spread_reason(planner: Planner, level: int, domains: int, preferred: bool, result: list[Picks]) -> str:
    """Why the gang is spread over `domains` domains of `level` (`preferred`: the gang's level)."""
    total = sum(podset.count for podset in planner.gang.podsets)
    wanted = "preferred" if preferred else "no topology requested"
    return (
        f"no single domain holds all {total} pods; spread over {domains} {planner.snapshot.levels[level]} "
        f"domains ({wanted}){_slices_note(planner, result)}"
    )


def _slices_note(planner: Planner, result: list[Picks]) -> str:
    """How the slices landed, for the placement's reason."""
    snapshot = planner.snapshot
    notes = []
    for podset, slicing in enumerate(planner.slicing):
        if slicing is not None:
            used = {snapshot.path[node][slicing.level] for node, _ in result[podset]}
            slices = planner.gang.podsets[podset].count // slicing.size
            notes.append(
                f"{slices} slice{'s' if slices != 1 else ''} of {slicing.size} over {len(used)} "
                f"{snapshot.levels[slicing.level]}"
            )
    return f"; {', '.join(notes)}" if notes else ""


def _node_summary(snapshot: Snapshot, podset: PodSet, spares: frozenset[int]) -> str:
    """How the nodes stand for one pod of `podset`: a pass over every node, so kept in the
    snapshot's memo until it changes."""
    requests = request_shape(podset)
    key = ("node summary", requests, podset.constraints, podset.excluded_nodes, spares)
    summary: str | None = snapshot.memo.get(key)
    if summary is None:
        summary = snapshot.memo[key] = _count_nodes(snapshot, podset, requests, spares)
    return summary


def _count_nodes(snapshot: Snapshot, podset: PodSet, requests: Requests, spares: frozenset[int]) -> str:
    why: Counter[str] = Counter()
    for i, node in enumerate(snapshot.nodes):
        if node is None:
            continue
        if not node.ready:
            why["not Ready"] += 1
        elif node.unschedulable:
            why["cordoned"] += 1
        elif (reason := podset.constraints.refusal(node.labels, node.name, node.taints)) is not None:
            why[reason] += 1
        elif node.name in podset.excluded_nodes:
            why["rejected by kube-scheduler"] += 1
        elif pods_fitting(snapshot.free[i], requests) == 0:
            free = snapshot.free[i]
            short = next((r for r, q in requests if free.get(r, 0) < q), PODS)
            why[f"short of {short}"] += 1
        elif i in spares:
            why["held as spare"] += 1
        else:
            why["with room"] += 1
    parts = sorted(why.items(), key=_with_room_first)
    return "nodes: " + ", ".join(f"{n} {what}" for what, n in parts) if parts else "no nodes"


def _with_room_first(entry: tuple[str, int]) -> tuple[bool, int, str]:
    what, count = entry
    return what != "with room", -count, what


def _spare_counts(planner: Planner, spares: frozenset[int]) -> list[list[int]]:
    """Per podset, the pods the held spares alone could take, summed per domain."""
    snapshot = planner.snapshot
    out = []
    for podset, requests in zip(planner.gang.podsets, planner.requests, strict=True):
        per_node = {}
        for i in spares:
            node = snapshot.nodes[i]
            assert node is not None
            if (
                node.name not in podset.excluded_nodes
                and podset.constraints.refusal(node.labels, node.name, node.taints) is None
            ):
                pods = pods_fitting(snapshot.free[i], requests)
                if pods:
                    per_node[i] = pods
        out.append(aggregate(snapshot, per_node))
    return out


def _slice_misses(planner: Planner, domain: int) -> str:
    """Per podset in slices that do not all fit in `domain`: how many do, and the most room any
    slice-level domain there has for the next one."""
    snapshot = planner.snapshot
    out = []
    current = snapshot.domains[domain]
    where = f" under {current.value}" if current.value is not None else ""
    for podset, slicing in enumerate(planner.slicing):
        if slicing is None or current.level >= slicing.level:
            continue
        want = planner.gang.podsets[podset].count // slicing.size
        fit = planner.base_slice_counts(podset)[domain]
        if fit >= want:
            continue
        per_domain = planner.counts[podset].per_domain
        prefix = current.key
        room = max(
            (
                per_domain[below] % slicing.size
                for below in snapshot.by_level[slicing.level]
                if snapshot.domains[below].value is not None
                and snapshot.domains[below].key[: len(prefix)] == prefix
            ),
            default=0,
        )
        name = f"podset {planner.gang.podsets[podset].name}: " if len(planner.gang.podsets) > 1 else ""
        out.append(
            f"{name}{fit} of {want} slices of {slicing.size} fit in one {snapshot.levels[slicing.level]}"
            f"{where}; the {_ordinal(fit + 1)} has room for {room} at most"
        )
    return "; ".join(out)


def may_use(snapshot: Snapshot, gang: Gang, domain: int) -> bool:
    """Whether a pod of the gang may ever run in the domain, by its nodeSelector and affinity
    (a flavor's domains only): no other is named as the best, or as reserved in its way."""
    for n in snapshot.subtree_nodes(domain):
        node = snapshot.nodes[n]
        if node is not None and any(ps.constraints.selects(node.labels, node.name) for ps in gang.podsets):
            return True
    return False


def requirement(planner: Planner, level: int | None) -> str:
    """What the gang needs, in one domain of `level` (None: anywhere): the part of a refusal
    that stays the same while the gang waits."""
    what = " + ".join(_describe(podset) for podset in planner.gang.podsets)
    return f"needs {what}" if level is None else f"needs {what} in one {planner.snapshot.levels[level]}"


def refusal(planner: Planner, level: int | None) -> str:
    """Why the gang fits no domain of `level` (None: not even spread over the cluster): what
    it needs (`requirement`), then the room the best domain and the nodes have now."""
    snapshot, gang, spares = planner.snapshot, planner.gang, planner.spares
    total = sum(podset.count for podset in gang.podsets)
    spare_counts = _spare_counts(planner, spares) if spares else None
    domain_counts = [counts.per_domain for counts in planner.counts]  # per podset

    def room(domain: int) -> int:
        return sum(min(domain_counts[i][domain], podset.count) for i, podset in enumerate(gang.podsets))

    def held(domain: int) -> str:
        if spare_counts is None:
            return ""
        extra = sum(
            min(spare_counts[i][domain], max(podset.count - domain_counts[i][domain], 0))
            for i, podset in enumerate(gang.podsets)
        )
        return f" ({extra} more held as spare)" if extra else ""

    head = requirement(planner, level)
    if level is None:
        best: int | None = 0
    else:
        labeled = [d for d in snapshot.by_level[level] if snapshot.domains[d].value is not None]
        best = min(labeled, key=lambda d: (-room(d), snapshot.domains[d].value or ""), default=None)
        if best is not None and room(best) == 0:  # none has room: name one the gang may use
            by_value = sorted(labeled, key=lambda d: snapshot.domains[d].value or "")
            best = next((d for d in by_value if may_use(snapshot, gang, d)), best)
    notes = _slice_misses(planner, 0 if best is None else best)
    if best is None:
        msg = f"{head}; no node has the label {snapshot.levels[level or 0]}"
    elif notes:
        msg = f"{head}; {notes}"
    else:
        where = "the cluster has" if level is None else f"best is {snapshot.domains[best].value} with"
        fitting = room(best)
        if fitting >= total:
            msg = f"{head}; {where} room for each podset but not for all of them together"
        else:
            of = "" if len(gang.podsets) == 1 else f" of {total}"
            msg = f"{head}; {where} room for {fitting}{of}{held(best)}"
    short = min(
        range(len(gang.podsets)),
        key=lambda i: (domain_counts[i][0] >= gang.podsets[i].count, i),
    )
    return f"{msg}; {_node_summary(snapshot, gang.podsets[short], spares)}"
