"""Reservation with backfill for big gangs (pure): no gang waits forever behind smaller ones.

A gang that needs a whole domain waits while small gangs keep taking the nodes that free up
there. Once it has waited its GangPolicy's `spec.reservation.afterWaiting` (since its quota was
reserved), the gang check reserves for it the domain of its level where it can start soonest:

- its level (`reservation_level`): the one it requires, else the narrowest, from the one it
  prefers up, of which one domain could ever hold it whole; never wider than
  `spec.reservation.level`;
- its domain (`Reservations.choose`): of those not overlapping another gang's reservation, the
  one where it is expected to start soonest (`expected_start`): the running gangs there end,
  first-ending first, until it fits; each gang's end is what it declares (its Job's
  activeDeadlineSeconds, `gangplugin.io/max-runtime`, the end of the plan block it runs on;
  `GangEnd`). A domain where a gang it must outwait declares no end has no expected start, and
  comes after those that have one, fewest GPUs in use first.

From then on (`Reservations.exclusions`) a gang is placed in that domain only if it has a
higher priority than the holder (a reservation never blocks one), or if it will end before the
expected start (backfill: its own declared run time says so); with no expected start, only the
former. Where the ClusterQueue's Kueue rules allow preempting them and the policy allows it
(`spec.reservation.maxCheckpointableEvictions`), lower-priority gangs in the domain that declare
themselves checkpointable are evicted early, fewest GPU-hours lost first (`clearing`).

The reservation is recorded on the waiting gang (`Reservation`; the gang check keeps it in an
annotation, so a restart resumes it) and lasts as long as that quota reservation: it ends when
the gang is admitted, requeued, deleted or deactivated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gangplugin.core.admission import PROMISED_PREFIX, promised_pods, with_selector
from gangplugin.core.errors import InputError
from gangplugin.core.placement import (
    Gang,
    PlacementPolicy,
    fit_counter,
    gang_levels,
    holds_whole,
    place,
)
from gangplugin.core.placement.explain import may_use
from gangplugin.core.placement.wholeness import largest_room
from gangplugin.core.preemption import (
    ClusterQueueState,
    Contender,
    PreemptionPlan,
    RunningGang,
    gang_gpus,
    may_preempt,
    without,
)
from gangplugin.core.resources import ACCELERATORS, PODS
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL, Snapshot, holds_accelerator


@dataclass(frozen=True, slots=True)
class Reservation:
    """A domain reserved for a waiting gang. `quota_reserved_at`: the quota reservation it was
    taken for (a requeued gang's reservation is void); `at`: when it was taken."""

    level: str
    domain: str
    quota_reserved_at: float
    at: float

    def live(self, quota_reserved_at: float) -> bool:
        return self.quota_reserved_at == quota_reserved_at

    @property
    def where(self) -> str:
        return f"{self.level}={self.domain}"


@dataclass(frozen=True, slots=True)
class GangEnd:
    """What a reservation reads of an admitted gang: when it is expected to end (None: it
    declares no end) and whether it may be evicted early (`gangplugin.io/checkpointable`)."""

    ends_at: float | None
    checkpointable: bool = False


def occupant(
    contender: Contender, gang: Gang, now: float, runtime: float | None
) -> tuple[RunningGang, GangEnd]:
    """A gang admitted now that runs at most `runtime` (None: it does not say), as the running
    gang it is about to be: its pods the promised ones the snapshot charges for it."""
    namespace = contender.key.split("/", 1)[0]
    pods = tuple((namespace, name) for name in promised_pods(gang))
    running = RunningGang(
        contender.key,
        contender.priority,
        contender.cluster_queue,
        contender.created_at,
        now,
        gang_gpus(gang),
        pods,
    )
    return running, GangEnd(None if runtime is None else now + runtime)


@dataclass(frozen=True, slots=True)
class Holder:
    """A waiting gang holding a reservation, as everyone else's placement reads it."""

    contender: Contender
    gang: Gang
    policy: PlacementPolicy
    reservation: Reservation
    #: How many checkpointable gangs may be evicted to clear its domain (0: none).
    evictions: int = 0


@dataclass(frozen=True, slots=True)
class Start:
    """When a gang is expected to start in a domain: `at` (None: unknown, `undeclared` declare
    no end), after `waiting_for` end. `possible`: False when it would not fit even with every
    running gang gone (held spares, other holds)."""

    at: float | None
    waiting_for: tuple[str, ...] = ()
    undeclared: tuple[str, ...] = ()
    possible: bool = True


def _time(at: float) -> str:
    return format_time(datetime.fromtimestamp(at, UTC))


def describe(reservation: Reservation, start: Start) -> str:
    """The waiting gang's side: the domain reserved, since when, and when it should start."""
    head = f"{reservation.where} reserved for this gang since {_time(reservation.at)}"
    if start.at is None:
        names = ", ".join(start.undeclared)
        return (
            f"{head}; expected start unknown: {names} declare no end (activeDeadlineSeconds, "
            "gangplugin.io/max-runtime or a plan block), so only gangs of higher priority are "
            "admitted there meanwhile"
        )
    after = f" when {', '.join(start.waiting_for)} end" if start.waiting_for else ""
    return f"{head}; expected start {_time(start.at)}{after}; gangs that end before then still run there"


def reservation_level(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, widest: str | None
) -> int | None:
    """The level a reservation for `gang` takes (see the module docstring); None when it needs
    a domain wider than `widest`, or none could ever hold it. InputError when `widest` is not
    one of the snapshot's levels."""
    cap = 0
    if widest is not None:
        found = snapshot.level_index(widest)
        if found is None:
            raise InputError(
                "spec.reservation.level",
                f"{widest!r} is not one of the levels ({', '.join(snapshot.levels)}); no domain is reserved",
            )
        cap = found
    required, preferred = gang_levels(snapshot, gang)
    if required is not None:
        return required if required >= cap and _needs_whole(snapshot, gang, policy, required) else None
    above_host = [i for i, label in enumerate(snapshot.levels) if label != HOSTNAME_LABEL]
    start = (
        preferred if preferred is not None else (above_host[-1] if above_host else len(snapshot.levels) - 1)
    )
    for level in range(start, cap - 1, -1):
        if holds_whole(snapshot, gang, policy, level):
            return level if _needs_whole(snapshot, gang, policy, level) else None
    return None


def _needs_whole(snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, level: int) -> bool:
    """Whether the gang needs more than half of the roomiest domain of `level`: no two such
    gangs share a domain, so it runs only once that domain is nearly empty, which small gangs
    coming and going may never leave it (a smaller gang fits in what one of them leaves)."""
    return 2 * sum(ps.count for ps in gang.podsets) > largest_room(snapshot, gang, policy, level)


def _domain_id(snapshot: Snapshot, level: str, value: str) -> int | None:
    index = snapshot.level_index(level)
    if index is None:
        return None
    return next((d for d in snapshot.by_level[index] if snapshot.domains[d].value == value), None)


def _occupants(snapshot: Snapshot, domain: int, running: Iterable[RunningGang]) -> list[RunningGang]:
    """The running gangs with a pod (bound or promised) in the domain."""
    out = []
    for g in running:
        for key in g.pods:
            usage = snapshot.pod_usage(*key)
            if usage is not None and domain in snapshot.path[usage[0]]:
                out.append(g)
                break
    return out


def domain_nodes(snapshot: Snapshot, domain: int) -> frozenset[str]:
    """The names of a domain's nodes (kept until a node changes)."""
    key = ("domain nodes", domain)
    kept: frozenset[str] | None = snapshot.node_memo.get(key)
    if kept is None:
        kept = frozenset(
            n.name for i in snapshot.subtree_nodes(domain) if (n := snapshot.nodes[i]) is not None
        )
        snapshot.node_memo[key] = kept
    return kept


def _fits(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, domain: int, gone: Sequence[RunningGang] = ()
) -> bool:
    """Whether `gang` fits whole in `domain` once the gangs `gone` have left. A gang of one
    podset without slices fits where its pods fit, held spares aside, as placement counts it
    (counted here on each node's free capacity plus what `gone` frees there, the snapshot left
    as it is); any other is placed inside the domain with `gone` taken out."""
    ps = gang.podsets[0]
    if len(gang.podsets) > 1 or ps.slice_size or ps.excluded_nodes:
        node = snapshot.domains[domain]
        assert node.value is not None
        inside = with_selector(gang, {snapshot.levels[node.level]: node.value})
        with without(snapshot, gone):
            return place(snapshot, inside, policy, explain=False).feasible
    freed: dict[int, dict[str, int]] = {}
    left: dict[int, int] = {}  # pods holding an accelerator leaving each node
    for g in gone:
        for key in g.pods:
            usage = snapshot.pod_usage(*key)
            if usage is None:
                continue
            n, requests = usage
            extra = freed.setdefault(n, {PODS: 0})
            for r, q in requests.items():
                extra[r] = extra.get(r, 0) + q
            extra[PODS] += 1
            left[n] = left.get(n, 0) + holds_accelerator(requests)
    fit = fit_counter(ps)
    idle: dict[str, list[tuple[str, int]]] = {}  # per UltraServer, its nodes idle then
    room = 0
    per_node: dict[int, int] = {}
    for i in snapshot.subtree_nodes(domain):
        member = snapshot.nodes[i]
        if member is None or not snapshot.usable[i]:
            continue
        us = member.labels.get(ULTRASERVER_LABEL)
        if us is not None and snapshot.accelerated[i] - left.get(i, 0) == 0:
            idle.setdefault(us, []).append((member.name, i))  # as `Snapshot.spare_nodes` holds them
        if snapshot.allows(i, ps.constraints):
            per_node[i] = fit(snapshot.free[i], freed.get(i, {}))
            room += per_node[i]
    spares = policy.spares_per_ultraserver
    if spares > 0:
        room -= sum(per_node.get(i, 0) for nodes in idle.values() for _, i in sorted(nodes)[-spares:])
    return room >= ps.count


def expected_start(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy,
    domain: int,
    running: Sequence[RunningGang],
    ends: Mapping[str, GangEnd],
    now: float,
    early: frozenset[str] = frozenset(),
) -> Start:
    """When `gang` could start in `domain` if nothing else started there: the running gangs
    there leave first-ending first (those being evicted, and `early` ones, at once) until it
    fits; the smallest such set is found by bisection (a fit only gets likelier as gangs leave)."""
    if _fits(snapshot, gang, policy, domain):
        return Start(now)

    def end(g: RunningGang) -> float:
        if g.evicting or g.key in early:
            return now
        e = ends.get(g.key)
        return float("inf") if e is None or e.ends_at is None else max(e.ends_at, now)

    leaving = sorted(_occupants(snapshot, domain, running), key=lambda g: (end(g), g.key))
    leaving += _stale_promises(snapshot, domain, running)
    if not _fits(snapshot, gang, policy, domain, leaving):
        return Start(None, possible=False)
    low, high = 1, len(leaving)  # the fewest first-ending gangs whose leaving lets it fit
    while low < high:
        mid = (low + high) // 2
        if _fits(snapshot, gang, policy, domain, leaving[:mid]):
            high = mid
        else:
            low = mid + 1
    gone = leaving[:low]
    unknown = tuple(g.key for g in gone if end(g) == float("inf"))
    waited = tuple(g.key for g in gone if end(g) > now)
    if unknown:
        return Start(None, waited, unknown)
    return Start(max(end(g) for g in gone), waited)


def _stale_promises(snapshot: Snapshot, domain: int, running: Sequence[RunningGang]) -> list[RunningGang]:
    """The promised pods in the domain of no running gang, as one gang leaving now: a promise
    outlives its gang's admission by a pass or two (a gang that finished before its pods bound),
    and counted as there for good it made the domain look as if it could never hold the gang."""
    covered = {k for g in running for k in g.pods}
    stale = tuple(
        k
        for i in snapshot.subtree_nodes(domain)
        for k in sorted(snapshot.pods_on(i))
        if k[1].startswith(f"{PROMISED_PREFIX}/") and k not in covered
    )
    if not stale:
        return []
    return [RunningGang(f"{PROMISED_PREFIX} of no running gang", 0, "", 0.0, 0.0, 0, stale, evicting=True)]


def may_backfill(runtime: float | None, now: float, start: Start) -> bool:
    """A gang ends before the reserved start: it runs at most `runtime` from `now` on."""
    return runtime is not None and start.at is not None and now + runtime <= start.at


def _gpus_in_use(snapshot: Snapshot, domain: int) -> int:
    used = 0
    for i in snapshot.subtree_nodes(domain):
        node = snapshot.nodes[i]
        if node is not None:
            free = snapshot.free[i]
            used += sum(q - free.get(r, 0) for r, q in node.allocatable.items() if r in ACCELERATORS)
    return used


class Reservations:
    """What one admission pass (or one explain, or one simulated pass) knows of reservations:
    the live ones by holder, and when each holder is expected to start, computed once per pass
    on first use from the admitted gangs and their ends as read then (`running`, `ends`).

    `order`: each waiting gang's place in the queue (the pass decides them in it). Gangs rank
    by priority, then by that place: a reservation binds only the gangs ranked after its
    holder (never one of higher priority), and each holder chooses (or keeps) its domain among
    those the gangs ranked before it left, so the older gang of a priority comes first."""

    def __init__(
        self,
        holders: Mapping[str, Holder],
        running: Callable[[], Sequence[RunningGang]],
        ends: Callable[[], Mapping[str, GangEnd]],
        now: float,
        order: Mapping[str, int],
    ) -> None:
        self.holders = dict(holders)
        self.order = order
        self._read_running, self._read_ends, self.now = running, ends, now
        self._running: Sequence[RunningGang] | None = None
        self._ends: Mapping[str, GangEnd] | None = None
        # gangs admitted but not running yet (`admitted`), occupants all the same
        self._admitted: dict[str, tuple[RunningGang, GangEnd]] = {}
        # per holder and level order (each snapshot of a pass has its own)
        self._starts: dict[tuple[str, tuple[str, ...]], Start] = {}
        #: The nodes a gang would reserve but for the reservations of gangs ranked before it,
        #: by gang (with its rank): no gang ranked after it reserves there first (computed
        #: again each pass, in queue order).
        self.claims: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}

    @property
    def running(self) -> Sequence[RunningGang]:
        if self._running is None:
            self._running = self._read_running()
        seen = {g.key for g in self._running}  # a running gang is counted as it runs
        return [*self._running, *(g for k, (g, _) in self._admitted.items() if k not in seen)]

    @property
    def ends(self) -> Mapping[str, GangEnd]:
        if self._ends is None:
            self._ends = self._read_ends()
        return {**{k: end for k, (_, end) in self._admitted.items()}, **self._ends}

    def admitted(self, occupant: tuple[RunningGang, GangEnd]) -> None:
        """A gang was admitted (in this pass, or its admission is not seen yet; `occupant`): its
        reservation, if any, binds no one, and it occupies its domain as a running gang does.
        Not counted so, the capacity charged for it could never leave, and its domain would
        look as if it could never hold the gang that reserved it."""
        gang = occupant[0]
        self.release(gang.key)
        self._admitted[gang.key] = occupant
        self._starts.clear()  # each start computed before counted it nowhere

    def recorded(self, key: str) -> Reservation | None:
        holder = self.holders.get(key)
        return None if holder is None else holder.reservation

    def start(self, key: str, snapshot: Snapshot) -> Start:
        """When the holder `key` is expected to start in its domain."""
        kept = self._starts.get((key, snapshot.levels))
        if kept is not None:
            return kept
        h = self.holders[key]
        domain = _domain_id(snapshot, h.reservation.level, h.reservation.domain)
        if domain is None:
            start = Start(None, possible=False)
        else:
            early = frozenset(g.key for g in self._clearable(h, snapshot, domain, None))
            start = expected_start(
                snapshot, h.gang, h.policy, domain, self.running, self.ends, self.now, early
            )
        self._starts[(key, snapshot.levels)] = start
        return start

    def nodes(self, key: str, snapshot: Snapshot) -> frozenset[str]:
        """The nodes of the domain reserved for `key`."""
        r = self.holders[key].reservation
        domain = _domain_id(snapshot, r.level, r.domain)
        return frozenset() if domain is None else domain_nodes(snapshot, domain)

    def _rank(self, contender: Contender) -> tuple[int, int]:
        """Priority first, then the place in the queue (a gang out of it comes last)."""
        return -contender.priority, self.order.get(contender.key, len(self.order))

    def exclusions(
        self, contender: Contender, gang: Gang, runtime: float | None, snapshot: Snapshot
    ) -> tuple[frozenset[str], tuple[str, ...]]:
        """The nodes reserved for gangs ranked before `contender` (its `gang` running at most
        `runtime`) that it may not use, and for each such reservation a note naming it (none
        for a domain the gang could never use anyway: another flavor's)."""
        excluded: set[str] = set()
        notes = []
        rank = self._rank(contender)
        for key, h in self.holders.items():
            if key == contender.key or self._rank(h.contender) >= rank:
                continue
            domain = _domain_id(snapshot, h.reservation.level, h.reservation.domain)
            if domain is None or not may_use(snapshot, gang, domain):
                continue
            start = self.start(key, snapshot)
            if may_backfill(runtime, self.now, start):
                continue
            excluded |= self.nodes(key, snapshot)
            when = "its start unknown" if start.at is None else f"from {_time(start.at)}"
            notes.append(f"{h.reservation.where}, reserved for {key} ({when}; this gang would end after it)")
        return frozenset(excluded), tuple(notes)

    def release(self, key: str) -> None:
        """The holder `key` was admitted: its reservation no longer binds anyone."""
        self.holders.pop(key, None)
        self._forget(key)

    def _forget(self, key: str) -> None:
        for k in [k for k in self._starts if k[0] == key]:
            del self._starts[k]

    def reserve(self, holder: Holder, level: int, snapshot: Snapshot) -> tuple[Reservation, Start] | None:
        """The reservation of a waiting gang at `level`: the one it holds, while the gangs ranked
        before it leave that domain be and it could still start there; else a new one
        (`choose`); None when every domain overlaps theirs (it then claims them). It binds the
        gangs decided after it in this pass."""
        key = holder.contender.key
        own = self.holders.get(key)
        kept: Start | None = None
        if (
            own is not None
            and own.reservation.level == snapshot.levels[level]
            and self.nodes(key, snapshot).isdisjoint(self._taken(holder.contender, snapshot))
        ):
            kept = self.start(key, snapshot)
        if own is not None and kept is not None and kept.possible:
            return own.reservation, kept  # kept while the gangs before it leave it be
        chosen = self.choose(holder.contender, holder.gang, holder.policy, level, snapshot)
        if chosen is None:
            self.release(key)
            return None
        domain, start = chosen
        taken = Reservation(snapshot.levels[level], domain, holder.reservation.quota_reserved_at, self.now)
        self.holders[key] = Holder(holder.contender, holder.gang, holder.policy, taken, holder.evictions)
        self._forget(key)
        self._starts[(key, snapshot.levels)] = start
        return taken, start

    def _taken(self, contender: Contender, snapshot: Snapshot) -> set[str]:
        """The nodes reserved for, or claimed by, the gangs ranked before `contender`."""
        rank, taken = self._rank(contender), set[str]()
        for other, h in self.holders.items():
            if other != contender.key and self._rank(h.contender) < rank:
                taken |= self.nodes(other, snapshot)
        for other, (claimed, nodes) in self.claims.items():
            if other != contender.key and claimed < rank:
                taken |= nodes
        return taken

    def choose(
        self, contender: Contender, gang: Gang, policy: PlacementPolicy, level: int, snapshot: Snapshot
    ) -> tuple[str, Start] | None:
        """The domain of `level` to reserve for `contender`: not overlapping the reservations
        or claims of the gangs ranked before it, where it is expected to start soonest (see the
        module docstring). None when every domain overlaps: the gang then claims them, so that
        no gang ranked after it takes a reservation there first."""
        taken = self._taken(contender, snapshot)
        best: tuple[tuple[object, ...], str, Start] | None = None
        overlapping: set[str] = set()
        for d in snapshot.by_level[level]:
            value = snapshot.domains[d].value
            if value is None:
                continue
            names = domain_nodes(snapshot, d)
            if not names.isdisjoint(taken):
                overlapping |= names
                continue
            start = expected_start(snapshot, gang, policy, d, self.running, self.ends, self.now)
            if not start.possible:
                continue
            rank = (start.at is None, start.at or 0.0, _gpus_in_use(snapshot, d), value)
            if best is None or rank < best[0]:
                best = (rank, value, start)
        if best is None:
            self.claims[contender.key] = (self._rank(contender), frozenset(overlapping))
            return None
        return best[1], best[2]

    def _clearable(
        self, h: Holder, snapshot: Snapshot, domain: int, queues: Mapping[str, ClusterQueueState] | None
    ) -> list[RunningGang]:
        """The gangs in the holder's domain it may evict early: checkpointable, not already
        being evicted, allowed by Kueue's rules (`queues`; None: as they read for the expected
        start, lower priority), fewest GPU-hours lost first, at most its policy's count."""
        if h.evictions <= 0:
            return []
        out = []
        for g in _occupants(snapshot, domain, self.running):
            e = self.ends.get(g.key)
            if g.evicting or e is None or not e.checkpointable:
                continue
            allowed = (
                g.priority < h.contender.priority
                if queues is None
                else may_preempt(h.contender, g, queues)[0]
            )
            if allowed:
                out.append(g)
        out.sort(key=lambda g: (g.gpus * max(self.now - g.started_at, 0.0), g.key))
        return out[: h.evictions]

    def clearing(
        self, key: str, snapshot: Snapshot, queues: Mapping[str, ClusterQueueState]
    ) -> PreemptionPlan | None:
        """Evictions of checkpointable gangs that let the holder `key` start in its domain now,
        fewest GPU-hours lost first; None when they would not be enough (or none may go)."""
        h = self.holders[key]
        domain = _domain_id(snapshot, h.reservation.level, h.reservation.domain)
        if domain is None:
            return None
        candidates = self._clearable(h, snapshot, domain, queues)
        evicting = [g for g in _occupants(snapshot, domain, self.running) if g.evicting]
        for k in range(1, len(candidates) + 1):
            if _fits(snapshot, h.gang, h.policy, domain, [*evicting, *candidates[:k]]):
                return _clearing_plan(h, candidates[:k], snapshot, domain, self.now, h.reservation.domain)
        return None


def _clearing_plan(
    h: Holder, victims: Sequence[RunningGang], snapshot: Snapshot, domain: int, now: float, value: str
) -> PreemptionPlan:
    lost = {g.key: g.gpus * max(now - g.started_at, 0.0) / 3600 for g in victims}
    chosen = tuple(
        g.victim(
            f"{g.key}: checkpointable, priority {g.priority}, {lost[g.key]:.1f} GPU-hours since it started"
        )
        for g in victims
    )
    nodes = tuple(sorted(domain_nodes(snapshot, domain)))
    where = h.reservation.where
    reason = (
        f"clearing {where}, reserved for this gang: evicting checkpointable "
        f"{', '.join(v.key for v in chosen)} early; " + "; ".join(v.why for v in chosen)
    )
    return PreemptionPlan(
        victims=chosen, waiting_for=(), level=h.reservation.level, domain=value, nodes=nodes, reason=reason
    )
