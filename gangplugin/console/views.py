"""View models: what each page draws, made from the console's values and what the user may
see. Pure (the instant is a parameter), so the pages' content is tested without a browser."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gangplugin.console.access import Namespaces
from gangplugin.console.model import (
    ClusterMap,
    GangRef,
    GangSummary,
    MapDomain,
    MapNode,
    NodeState,
    PlanSchedule,
    QueueUsage,
    ResourceQuota,
)
from gangplugin.core.gangs import Phase
from gangplugin.core.plans import Status
from gangplugin.core.resources import format_quantity
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import ULTRASERVER_LABEL, ZONE_LABEL

HIDDEN = "a gang of a namespace you may not see"
LEVEL_NAMES = {
    ZONE_LABEL: "zone",
    ULTRASERVER_LABEL: "UltraServer",
    **{f"topology.k8s.aws/network-node-layer-{i}": f"network layer {i}" for i in (1, 2, 3)},
}


#: Gang colours (Tableau's categorical colours and their darker and lighter kin), none red (a
#: NotReady node is red) nor grey (a node in use by a gang the user may not see is grey).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#7b4173",
    "#6baed6",
    "#74c476",
)
GangKey = tuple[str, str]  # (namespace, name)


def _hash(key: GangKey) -> int:
    return int(hashlib.sha256(f"{key[0]}/{key[1]}".encode()).hexdigest()[:8], 16)


def gang_colours(keys: Iterable[GangKey]) -> dict[GangKey, str]:
    """A colour per gang: its name's hash picks one, and a gang whose colour another already
    took (in name order) gets the next free one, so up to len(PALETTE) gangs all differ. The
    same gangs always get the same colours, on every page."""
    out: dict[GangKey, str] = {}
    taken: set[int] = set()
    for key in sorted(set(keys)):
        start = _hash(key) % len(PALETTE)
        free = [i for i in range(start, start + len(PALETTE)) if i % len(PALETTE) not in taken]
        index = free[0] % len(PALETTE) if free else start
        taken.add(index)
        out[key] = PALETTE[index]
    return out


def level_name(label: str) -> str:
    return LEVEL_NAMES.get(label, label or "no topology labels")


def when(at: datetime | None, now: datetime) -> str:
    """ "2026-12-01T11:30:00Z (3h ago)" or "(in 2d 4h)"."""
    if at is None:
        return ""
    return f"{format_time(at)} ({ago(at, now)})"


def ago(at: datetime, now: datetime) -> str:
    seconds = int((now - at).total_seconds())
    text = span(abs(seconds))
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def span(seconds: int) -> str:
    """A short length of time, the two largest units: "45s", "3m 20s", "2d 4h"."""
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


# -- the map --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCell:
    name: str
    state: NodeState
    colour: str  # the gang's colour ("" when no visible gang runs there)
    title: str  # the hover text


@dataclass(frozen=True, slots=True)
class DomainBox:
    caption: str
    children: tuple[DomainBox, ...]
    cells: tuple[NodeCell, ...]
    room: str  # an UltraServer's room for one more gang ("" elsewhere)
    ultraserver: bool


@dataclass(frozen=True, slots=True)
class MapPage:
    boxes: tuple[DomainBox, ...]
    counts: tuple[tuple[NodeState, int], ...]
    node_count: int
    spares_per_ultraserver: int


def _gang_line(ref: GangRef, seen: Namespaces) -> str:
    if ref.namespace not in seen:
        return f"{HIDDEN}: {ref.pods} pod{'s' if ref.pods != 1 else ''}"
    job = f" ({ref.job})" if ref.job else ""
    return f"{ref.namespace}/{ref.name}{job}: {ref.pods} pod{'s' if ref.pods != 1 else ''}"


def node_cell(node: MapNode, seen: Namespaces, colours: Mapping[GangKey, str]) -> NodeCell:
    lines = [f"{node.name}: {node.state.value}"]
    if node.gpus:
        lines[0] += f", {node.gpus_used}/{node.gpus} GPUs used"
    lines += [_gang_line(ref, seen) for ref in node.gangs]
    if node.other_pods:
        lines.append(f"{node.other_pods} other pod{'s' if node.other_pods != 1 else ''}")
    main = max(node.gangs, key=lambda r: r.pods, default=None)
    colour = colours.get((main.namespace, main.name), "") if main and main.namespace in seen else ""
    return NodeCell(node.name, node.state, colour, "\n".join(lines))


def _box(domain: MapDomain, seen: Namespaces, colours: Mapping[GangKey, str]) -> DomainBox:
    ultraserver = domain.level == ULTRASERVER_LABEL
    room = ""
    if ultraserver and domain.largest_gang is not None:
        room = f"room for a gang of {domain.largest_gang} node{'s' if domain.largest_gang != 1 else ''}"
    caption = f"{level_name(domain.level)} {domain.value}".strip()
    return DomainBox(
        caption=caption,
        children=tuple(_box(c, seen, colours) for c in domain.children),
        cells=tuple(node_cell(n, seen, colours) for n in domain.nodes),
        room=room,
        ultraserver=ultraserver,
    )


def _count(domains: Sequence[MapDomain], into: dict[NodeState, int]) -> None:
    for d in domains:
        for n in d.nodes:
            into[n.state] = into.get(n.state, 0) + 1
        _count(d.children, into)


def map_page(cmap: ClusterMap, seen: Namespaces, colours: Mapping[GangKey, str]) -> MapPage:
    """The map as a user sees it: gangs of namespaces they may not read drawn as in use, unnamed;
    `colours`: each gang's (`gang_colours`)."""
    counts: dict[NodeState, int] = {}
    _count(cmap.domains, counts)
    return MapPage(
        boxes=tuple(_box(d, seen, colours) for d in cmap.domains),
        counts=tuple((s, counts.get(s, 0)) for s in NodeState),
        node_count=cmap.node_count,
        spares_per_ultraserver=cmap.spares_per_ultraserver,
    )


# -- gangs ----------------------------------------------------------------------------------------


PHASE_CLASS = {
    Phase.QUEUED: "waiting",
    Phase.PENDING: "waiting",
    Phase.ADMITTED: "starting",
    Phase.RUNNING: "running",
    Phase.EVICTED: "trouble",
    Phase.DEACTIVATED: "trouble",
    Phase.REJECTED: "trouble",
    Phase.FINISHED: "done",
}


@dataclass(frozen=True, slots=True)
class GangsPage:
    rows: tuple[GangSummary, ...]
    namespaces: tuple[str, ...]  # the filter's choices
    queues: tuple[str, ...]
    namespace: str  # the filter chosen ("" for all)
    queue: str
    partial: bool  # some namespaces are not shown: the user may not list their Workloads


def gangs_page(gangs: Sequence[GangSummary], seen: Namespaces, namespace: str, queue: str) -> GangsPage:
    visible = [g for g in gangs if g.namespace in seen]
    rows = tuple(
        g
        for g in visible
        if (not namespace or g.namespace == namespace)
        and (not queue or queue in (g.cluster_queue, g.local_queue))
    )
    return GangsPage(
        rows=rows,
        namespaces=tuple(sorted({g.namespace for g in visible})),
        queues=tuple(sorted({g.cluster_queue for g in visible if g.cluster_queue})),
        namespace=namespace,
        queue=queue,
        partial=not seen.every,
    )


def domain_text(domain: tuple[str, str] | None) -> str:
    return f"{level_name(domain[0])} {domain[1]}" if domain else ""


# -- quota and plans ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaBar:
    flavor: str
    resource: str
    used_pct: float  # of the nominal quota, at most 100 (borrowing shows past it)
    borrowed_pct: float
    text: str
    from_plans: bool


def quota_bar(q: ResourceQuota) -> QuotaBar:
    def fmt(amount: int) -> str:
        return format_quantity(q.resource, amount)

    scale = max(q.nominal, q.used, 1)
    own = max(q.used - q.borrowed, 0)
    text = f"{fmt(q.used)} used of {fmt(q.nominal)} nominal"
    if q.borrowed:
        text += f", {fmt(q.borrowed)} borrowed"
    if q.borrowing_limit is not None:
        text += f" (may borrow {fmt(q.borrowing_limit)})"
    return QuotaBar(
        flavor=q.flavor,
        resource=q.resource,
        used_pct=round(100.0 * own / scale, 1),
        borrowed_pct=round(100.0 * q.borrowed / scale, 1),
        text=text,
        from_plans=q.from_plans,
    )


@dataclass(frozen=True, slots=True)
class QueueBox:
    usage: QueueUsage
    bars: tuple[QuotaBar, ...]
    next_change: str


#: The resources a queue box shows, first those, then the rest it has.
SHOWN_FIRST = ("nvidia.com/gpu", "aws.amazon.com/neuron")


def queue_box(usage: QueueUsage, now: datetime) -> QueueBox:
    order = sorted(
        usage.resources,
        key=lambda q: (q.resource not in SHOWN_FIRST, q.flavor, q.resource),
    )
    return QueueBox(usage, tuple(quota_bar(q) for q in order), when(usage.next_change, now))


@dataclass(frozen=True, slots=True)
class BlockBar:
    left_pct: float
    width_pct: float
    status: Status
    label: str
    title: str


@dataclass(frozen=True, slots=True)
class PlanRow:
    plan: PlanSchedule
    bars: tuple[BlockBar, ...]
    next_change: str


@dataclass(frozen=True, slots=True)
class TimeAxis:
    start: datetime
    end: datetime
    now_pct: float
    ticks: tuple[tuple[float, str], ...]


def time_axis(plans: Sequence[PlanSchedule], now: datetime) -> TimeAxis:
    """From a day before now (or the earliest block) to a day past the last block's end."""
    starts = [b.start for p in plans for b in p.blocks]
    ends = [b.end for p in plans for b in p.blocks]
    start = min([now - timedelta(days=1), *starts])
    end = max([now + timedelta(days=7), *ends]) + timedelta(days=1)
    total = (end - start).total_seconds()
    step = timedelta(days=max(1, int(total // 86400 // 8)))
    tick = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    ticks = []
    while tick < end:
        ticks.append((round(100.0 * (tick - start).total_seconds() / total, 2), tick.strftime("%b %d")))
        tick += step
    return TimeAxis(start, end, round(100.0 * (now - start).total_seconds() / total, 2), tuple(ticks))


def plan_row(plan: PlanSchedule, axis: TimeAxis, now: datetime) -> PlanRow:
    total = (axis.end - axis.start).total_seconds()
    bars = []
    for b in plan.blocks:
        left = 100.0 * (b.start - axis.start).total_seconds() / total
        width = 100.0 * (b.end - b.start).total_seconds() / total
        gives = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in b.gives)
        bars.append(
            BlockBar(
                left_pct=round(left, 2),
                width_pct=round(max(width, 0.3), 2),
                status=b.status,
                label=f"{b.instances} x {b.instance_type}",
                title=(
                    f"block {b.index}: {b.status.value}, {b.instances} x {b.instance_type} in {b.zone}, "
                    f"{format_time(b.start)} to {format_time(b.end)}; gives {gives or 'no quota'}"
                    + (
                        f" ({b.usable} of {b.instances} instances: spares kept)"
                        if b.usable != b.instances
                        else ""
                    )
                ),
            )
        )
    return PlanRow(plan, tuple(bars), when(plan.next_change, now))
