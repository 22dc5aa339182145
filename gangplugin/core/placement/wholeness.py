"""Whether a gang could ever start whole on this cluster: not now, but with every pod gone.

A gang larger than every domain of its required level (or, without one, than the whole
cluster) waits forever with "does not fit now", and waiting changes nothing. Counted on the
nodes as they are, every pod gone: each UltraServer's spares kept back as placement keeps
them, nodes that are cordoned or NotReady counted (they come back), the pods' other
constraints (taints, the flavor's node labels) applied. One shape of pods is counted exactly;
a gang of several shapes is refused only when one of them, or their GPUs together, cannot fit
(a necessary condition: never a refusal of a gang that could fit).

`never_whole` answers; placement's refusal (`explain.refusal`), the gang check's gate and
`gangctl place` all ask it. Kept per snapshot until a node changes (pods do not matter).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gangplugin.core.eligibility import BLOCKING_EFFECTS, PodConstraints
from gangplugin.core.placement.capacity import request_shape
from gangplugin.core.placement.levels import gang_levels
from gangplugin.core.placement.model import Gang, PlacementPolicy
from gangplugin.core.resources import ACCELERATORS
from gangplugin.core.topology import ULTRASERVER_LABEL, Node, Requests, Snapshot, pods_fitting

#: Taints that come and go with a node's state (NotReady, unreachable, cordoned): a node
#: carrying one now may take the gang later.
TRANSIENT_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
    }
)
FIX = (
    "split it into slices (gangplugin.io/slice-size with gangplugin.io/slice-required-topology), "
    "make the gang smaller, or ask gangplugin.io/preferred-topology instead of required-topology"
)
_FIX_SPREAD = "make the gang smaller, or add nodes"


@dataclass(frozen=True, slots=True)
class NeverWhole:
    """Why a gang can never start whole: what it needs, what the largest domain offers."""

    level: str | None  # None: the whole cluster (the gang requires no level)
    needed: int  # pods
    largest: str | None  # the domain with the most room (None: the cluster)
    room: int  # pods of the gang's shape that domain could ever hold
    nodes: int  # its nodes
    spares: int  # of them held as spares
    message: str


def _usable_ever(node: Node, constraints: PodConstraints) -> bool:
    """The pod's constraints allow the node, its state aside (a NotReady or cordoned node
    comes back; its transient taints go with it)."""
    lasting = tuple(t for t in node.taints if t.key not in TRANSIENT_TAINTS)
    if any(t.effect in BLOCKING_EFFECTS for t in lasting) and constraints.untolerated(lasting) is not None:
        return False
    return constraints.selects(node.labels, node.name)


def _spares(snapshot: Snapshot, nodes: Sequence[int], per_ultraserver: int) -> set[int]:
    """The nodes an empty cluster holds as spares: the highest names of each UltraServer."""
    if per_ultraserver <= 0:
        return set()
    groups: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for i in nodes:
        node = snapshot.nodes[i]
        if node is not None and (us := node.labels.get(ULTRASERVER_LABEL)) is not None:
            groups[us].append((node.name, i))
    held: set[int] = set()
    for members in groups.values():
        held.update(i for _, i in sorted(members)[-per_ultraserver:])
    return held


@dataclass(frozen=True, slots=True)
class _Room:
    """What one domain could ever hold: pods per shape, GPUs and pod slots of its nodes."""

    per_shape: tuple[int, ...]
    gpus: int
    nodes: int
    spares: int


def _room(
    snapshot: Snapshot, domain: int, shapes: Sequence[tuple[Requests, PodConstraints]], spares: int
) -> _Room:
    nodes = [i for i in snapshot.subtree_nodes(domain) if snapshot.nodes[i] is not None]
    held = _spares(snapshot, nodes, spares)
    per_shape = [0] * len(shapes)
    gpus = 0
    for i in nodes:
        node = snapshot.nodes[i]
        assert node is not None
        if i in held:
            continue
        gpus += _gpus(node.allocatable.items())
        for s, (req, constraints) in enumerate(shapes):
            if _usable_ever(node, constraints):
                per_shape[s] += pods_fitting(node.allocatable, req)
    return _Room(tuple(per_shape), gpus, len(nodes), len(held))


def _gpus(requests: Iterable[tuple[str, int]]) -> int:
    return sum(q for r, q in requests if r in ACCELERATORS)


def _shapes(gang: Gang) -> tuple[list[tuple[Requests, PodConstraints]], list[int]]:
    """The gang's pod shapes and how many pods of each: podsets of one shape counted together."""
    shapes: list[tuple[Requests, PodConstraints]] = []
    counts: list[int] = []
    for ps in gang.podsets:
        shape = (request_shape(ps), ps.constraints)
        if shape in shapes:
            counts[shapes.index(shape)] += ps.count
        else:
            shapes.append(shape)
            counts.append(ps.count)
    return shapes, counts


def never_whole(snapshot: Snapshot, gang: Gang, policy: PlacementPolicy) -> NeverWhole | None:
    """Why `gang` could never start whole here (see the module docstring), or None when it
    could once enough pods are gone. InputError for a topology label the levels do not have."""
    return _at_level(snapshot, gang, policy, gang_levels(snapshot, gang).required)


def holds_whole(snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, level: int | None) -> bool:
    """Whether some domain of `level` (None: the cluster) could hold `gang` whole once every
    pod is gone (the level a reservation for it may take)."""
    return _at_level(snapshot, gang, policy, level) is None


def largest_room(snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, level: int | None) -> int:
    """Pods of the gang's shapes the roomiest domain of `level` (None: the cluster) could ever
    hold, every pod gone (spares kept back)."""
    shapes, counts = _shapes(gang)
    key = ("largest room", tuple(shapes), tuple(counts), level, policy.spares_per_ultraserver)
    if key not in snapshot.node_memo:
        domains = (
            [0]
            if level is None
            else [d for d in snapshot.by_level[level] if snapshot.domains[d].value is not None]
        )
        rooms = [_room(snapshot, d, shapes, policy.spares_per_ultraserver) for d in domains]
        total = sum(counts)
        snapshot.node_memo[key] = max(  # the gang's mix of shapes, scaled to what fits
            (int(min(r / c for r, c in zip(room.per_shape, counts, strict=True)) * total) for room in rooms),
            default=0,
        )
    room: int = snapshot.node_memo[key]
    return room


def _at_level(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, level: int | None
) -> NeverWhole | None:
    shapes, counts = _shapes(gang)
    key = ("never whole", tuple(shapes), tuple(counts), level, policy.spares_per_ultraserver)
    if key in snapshot.node_memo:
        kept: NeverWhole | None = snapshot.node_memo[key]
        return kept
    answer = _never_whole(snapshot, gang, shapes, counts, level, policy.spares_per_ultraserver)
    snapshot.node_memo[key] = answer
    return answer


def _never_whole(
    snapshot: Snapshot,
    gang: Gang,
    shapes: Sequence[tuple[Requests, PodConstraints]],
    counts: Sequence[int],
    required: int | None,
    spares: int,
) -> NeverWhole | None:
    domains = (
        [0]
        if required is None
        else [d for d in snapshot.by_level[required] if snapshot.domains[d].value is not None]
    )
    gpus = sum(ps.count * _gpus(ps.requests.items()) for ps in gang.podsets)
    rooms = {d: _room(snapshot, d, shapes, spares) for d in domains}
    for room in rooms.values():
        if all(r >= c for r, c in zip(room.per_shape, counts, strict=True)) and room.gpus >= gpus:
            return None
    needed = sum(counts)

    def fitting(d: int) -> int:
        return sum(min(r, c) for r, c in zip(rooms[d].per_shape, counts, strict=True))

    best = max(domains, key=lambda d: (fitting(d), rooms[d].nodes), default=None)
    level = None if required is None else snapshot.levels[required]
    shown = _shown(gang)
    if best is None:
        return NeverWhole(
            level,
            needed,
            None,
            0,
            0,
            0,
            f"can never start whole: it needs {shown} in one {level}, "
            f"and no node has the label {level}; {FIX}",
        )
    room = rooms[best]
    name = snapshot.domains[best].value
    held = f", {room.spares} held as spare" if room.spares else ""
    where = "the cluster" if level is None else f"the largest, {name},"
    offers = fitting(best)
    message = (
        f"can never start whole: it needs {shown}"
        + ("" if level is None else f" in one {level}")
        + f"; {where} has room for {offers} of its {needed} pods ({room.nodes} nodes{held})"
        + f"; {FIX if level is not None else _FIX_SPREAD}"
    )
    return NeverWhole(level, needed, name, offers, room.nodes, room.spares, message)


def _shown(gang: Gang) -> str:
    """What the gang needs, e.g. `19 pods (76 nvidia.com/gpu)`."""
    pods = sum(ps.count for ps in gang.podsets)
    gpus = sum(ps.count * _gpus(ps.requests.items()) for ps in gang.podsets)
    extra = f" ({gpus} GPUs)" if gpus else ""
    return f"{pods} pod{'s' if pods != 1 else ''}{extra}"
