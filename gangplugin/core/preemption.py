"""Topology-aware preemption of whole gangs: which admitted gangs to evict so that a waiting
gang (quota already reserved by Kueue) fits in one domain.

Kueue preempts for quota, blind to topology; a high-priority gang whose quota is free but whose
UltraServers are each fragmented by a few low-priority gangs would wait forever behind our
check. `find_victims` answers on the snapshot placement reads:

1. Who may be preempted is Kueue's own rule (`may_preempt`): the preemptor's ClusterQueue
   `spec.preemption` (`withinClusterQueue`, `reclaimWithinCohort`, `borrowWithinCohort`), read
   with Kueue's semantics (v0.17): never an equal or higher priority unless the setting says so.
2. Gangs already being evicted are counted as gone, at no cost: if that is enough, nobody else
   is preempted (the gang waits for them).
3. For every domain of the gang's required level (the whole cluster when it requires none; a
   spread is allowed then), the cheapest set of preemptible gangs with pods in that domain whose
   removal makes the gang fit there, by a branch and bound over per-node free capacity.
   Cheapest: fewest GPUs, then the lowest priorities, then the most recently started.
4. The best sets are checked with `placement.place` on the snapshot minus the victims; the first
   that really fits wins (the per-node count is exact for one podset, optimistic otherwise).

What every search on one snapshot reads alike (the running gangs' pods per domain, the
eligible nodes per domain) is a `VictimIndex` the searches of an admission pass share; a search
itself reads only free capacity, and only in the domains holding gangs it may preempt.

Pure: the snapshot is changed only for the check and given back as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gangplugin.core.placement import (
    Gang,
    Placement,
    PlacementPolicy,
    eligible_nodes,
    gang_levels,
    held_spares,
    place,
)
from gangplugin.core.resources import ACCELERATORS
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import BoundPod, Snapshot
from gangplugin.core.victim_search import DomainFit, Pods, least_gpus, search

WITHIN_CLUSTER_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM_WITHIN_COHORT = ("Never", "LowerPriority", "Any")
BORROW_WITHIN_COHORT = ("Never", "LowerPriority")
_MAX_CHECKS = 16  # candidate sets checked with `place`


@dataclass(frozen=True, slots=True)
class QueuePreemption:
    """A ClusterQueue's Kueue `spec.preemption` (Kueue's defaults: nothing is preempted)."""

    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: str = "Never"
    max_priority_threshold: int | None = None  # borrowWithinCohort.maxPriorityThreshold


@dataclass(frozen=True, slots=True)
class ClusterQueueState:
    """What preemption reads of a ClusterQueue: its cohort, its rules, and whether it uses
    more than its nominal quota now (Kueue's `status.flavorsReservation[].resources[].borrowed`)."""

    name: str
    cohort: str | None = None
    preemption: QueuePreemption = field(default_factory=QueuePreemption)
    borrowing: bool = False


@dataclass(frozen=True, slots=True)
class Contender:
    """The waiting gang that would preempt."""

    key: str
    priority: int
    cluster_queue: str
    created_at: float


@dataclass(frozen=True, slots=True)
class RunningGang:
    """An admitted gang. `pods`: the (namespace, name) keys the snapshot counts for it (its
    bound pods and the synthetic pods of its promise); `evicting`: already being evicted."""

    key: str
    priority: int
    cluster_queue: str
    created_at: float
    started_at: float
    gpus: int
    pods: tuple[tuple[str, str], ...]
    evicting: bool = False

    def victim(self, why: str) -> Victim:
        """This gang as one to evict, `why` saying what made it one."""
        return Victim(self.key, self.priority, self.gpus, self.started_at, why)


@dataclass(frozen=True, slots=True)
class Victim:
    key: str
    priority: int
    gpus: int
    started_at: float
    why: str  # why this gang: its cost and the Kueue rule that allows it


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """`victims`: the gangs to evict (none: no preemption); `waiting_for`: gangs already being
    evicted whose leaving lets the gang fit; `level`/`domain`: the domain freed (level None: no
    topology asked, the gang may spread); `nodes`: the nodes to hold for the gang."""

    victims: tuple[Victim, ...]
    waiting_for: tuple[str, ...]
    level: str | None
    domain: str | None
    nodes: tuple[str, ...]
    reason: str
    #: `reason` without the counts that change while the gang waits (empty: none in it).
    summary: str = ""

    @property
    def preempts(self) -> bool:
        return bool(self.victims)


def _satisfies(policy: str, preemptor: Contender, victim: RunningGang) -> tuple[bool, str]:
    """Kueue's `SatisfiesPreemptionPolicy`: LowerPriority, LowerOrNewerEqualPriority (equal
    priority, queued later), Any; Never (or anything else) refuses."""
    p, v = preemptor.priority, victim.priority
    if policy == "Any":
        return True, "any priority"
    if policy == "LowerOrNewerEqualPriority" and v == p and victim.created_at > preemptor.created_at:
        return True, "equal priority, newer"
    if policy in ("LowerPriority", "LowerOrNewerEqualPriority"):
        return v < p, f"priority {v} {'<' if v < p else '>='} {p}"
    return False, "never"


def may_preempt(
    preemptor: Contender, victim: RunningGang, queues: Mapping[str, ClusterQueueState]
) -> tuple[bool, str]:
    """Whether Kueue's preemption settings of the preemptor's ClusterQueue let it preempt
    `victim`, and the rule that decided, as Kueue v0.17 classifies a candidate: same
    ClusterQueue, `withinClusterQueue`; another ClusterQueue of the cohort, only while it
    borrows, by `reclaimWithinCohort`, and while the preemptor's own ClusterQueue borrows also
    by `borrowWithinCohort` (lower priority, at most `maxPriorityThreshold`). Any other gang:
    never."""
    own = queues.get(preemptor.cluster_queue, ClusterQueueState(preemptor.cluster_queue))
    rules = own.preemption
    if victim.cluster_queue == preemptor.cluster_queue:
        ok, why = _satisfies(rules.within_cluster_queue, preemptor, victim)
        return ok, f"withinClusterQueue: {rules.within_cluster_queue}, {why}"
    other = queues.get(victim.cluster_queue)
    if own.cohort is None or other is None or other.cohort != own.cohort:
        return False, f"ClusterQueue {victim.cluster_queue} is not in the cohort of {own.name}"
    if not other.borrowing:
        return False, f"ClusterQueue {victim.cluster_queue} does not borrow from the cohort"
    ok, why = _satisfies(rules.reclaim_within_cohort, preemptor, victim)
    rule = f"reclaimWithinCohort: {rules.reclaim_within_cohort}, {why}"
    if not ok or not own.borrowing:
        return ok, rule
    policy, limit = rules.borrow_within_cohort, rules.max_priority_threshold
    rule += f"; {own.name} borrows, borrowWithinCohort: {policy}"
    if policy != "LowerPriority" or victim.priority >= preemptor.priority:
        return False, rule
    if limit is not None and victim.priority > limit:
        return False, f"{rule}, priority {victim.priority} above maxPriorityThreshold {limit}"
    return True, rule


def _set_key(members: Sequence[RunningGang]) -> tuple[object, ...]:
    """Fewest GPUs, then the lowest priorities, then the most recently started, then fewest."""
    return (
        sum(g.gpus for g in members),
        tuple(sorted((g.priority for g in members), reverse=True)),
        tuple(sorted(-g.started_at for g in members)),
        len(members),
        tuple(sorted(g.key for g in members)),
    )


@contextmanager
def without(snapshot: Snapshot, gangs: Sequence[RunningGang]) -> Iterator[None]:
    """The snapshot with the pods of `gangs` unbound, rebound on exit."""
    removed: list[BoundPod] = []
    try:
        for g in gangs:
            for ns, name in g.pods:
                pod = snapshot.pod(ns, name)
                if pod is not None:
                    removed.append(pod)
                    snapshot.unbind(ns, name)
        yield
    finally:
        for pod in removed:
            snapshot.bind(pod)


def _usage(snapshot: Snapshot, gang: RunningGang) -> Pods:
    """(node id, requests) of each of the gang's pods the snapshot counts: the snapshot's own
    entries, so no new object per pod (a search reads every running gang)."""
    return [e for key in gang.pods if (e := snapshot.pod_usage(*key)) is not None]


def _started(at: float) -> str:
    return format_time(datetime.fromtimestamp(at, UTC))


def find_victims(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy,
    preemptor: Contender,
    running: Sequence[RunningGang],
    queues: Mapping[str, ClusterQueueState],
    index: VictimIndex | None = None,
) -> PreemptionPlan:
    """The cheapest set of admitted gangs whose eviction lets `gang` fit, or why there is none
    (see the module docstring). Call it for a gang `place` found no room for. `index`: the one
    the searches on this snapshot share (built here when not given or built for other gangs)."""
    if index is None or not index.covers(snapshot, running):
        index = VictimIndex(snapshot, running)
    req, _ = gang_levels(snapshot, gang)
    evicting = [g for g in running if g.evicting and g.key != preemptor.key]
    allowed: list[tuple[RunningGang, str]] = []
    refused: dict[str, int] = {}
    # Kueue's rules read only a gang's ClusterQueue, its priority and whether it is newer than
    # the preemptor: decided once per such kind, not once per running gang.
    decided: dict[tuple[str, int, bool], tuple[bool, str]] = {}
    for g in running:
        if g.evicting or g.key == preemptor.key:
            continue
        kind = (g.cluster_queue, g.priority, g.created_at > preemptor.created_at)
        if (verdict := decided.get(kind)) is None:
            verdict = decided[kind] = may_preempt(preemptor, g, queues)
        ok, rule = verdict
        if ok:
            allowed.append((g, rule))
        else:
            refused[rule] = refused.get(rule, 0) + 1
    level = None if req is None else snapshot.levels[req]
    if allowed or evicting:  # else no gang can make room: nothing to search
        with without(snapshot, evicting):
            # Nothing being evicted: the caller has just found that the gang does not fit.
            placement = place(snapshot, gang, policy, explain=False) if evicting else None
            if placement is not None and placement.feasible:
                names = sorted(g.key for g in evicting)
                return PreemptionPlan(
                    (),
                    tuple(names),
                    level,
                    placement.domains[0] if level and placement.domains else None,
                    (),
                    f"capacity already being freed by {', '.join(names)} will do; waiting for it",
                )
            sets = _candidate_sets(snapshot, gang, policy, req, [g for g, _ in allowed], index)
            rules = {g.key: rule for g, rule in allowed}
            for members, domain_id in sets[:_MAX_CHECKS]:
                with without(snapshot, members):
                    fit = place(snapshot, gang, policy, explain=False)  # only whether it fits
                if fit.feasible:
                    return _plan(snapshot, preemptor, members, rules, level, domain_id, fit)
    none = f"no preemptible set of gangs frees {f'one {level}' if level else 'room for it'}"
    counted = "; ".join(f"{n} protected by {rule}" for rule, n in sorted(refused.items()))
    uncounted = "; ".join(f"protected by {rule}" for rule in sorted(refused))
    return PreemptionPlan(
        (),
        (),
        level,
        None,
        (),
        f"{none} ({counted})" if counted else none,
        f"{none} ({uncounted})" if uncounted else none,
    )


def _candidate_sets(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy,
    req: int | None,
    allowed: list[RunningGang],
    index: VictimIndex,
) -> list[tuple[list[RunningGang], int]]:
    """Sets that fit by the per-node count, cheapest first, each with its domain."""
    domains, free = snapshot.domains, snapshot.free
    eligible = index.eligible(gang, policy, req)
    allowed_by_key = {g.key: g for g in allowed}
    asked = [r for r in ACCELERATORS if any(ps.requests.get(r) for ps in gang.podsets)]
    wanted = gang_gpus(gang)
    # Per domain where the gang may go: its preemptible gangs (cheapest first) with their pods
    # there, and a lower bound of its cost: the GPUs the gang asks beyond those free there must
    # come from these gangs' GPUs there. A domain where some podset has no eligible node is
    # never searched, so it is left out here (it could only end the loop, as a costlier one does).
    gangs_in: dict[int, list[RunningGang]] = {}
    usage: dict[int, dict[str, Pods]] = {}
    least: dict[int, float] = {}
    for d, entries in index.gangs_in(req).items():
        nodes = eligible.get(d)
        if nodes is None:
            continue
        here = [(allowed_by_key[k], gpus, use) for k, gpus, use in entries if k in allowed_by_key]
        if not here:
            continue
        free_gpus = 0
        for n in nodes.union:
            at = free[n]
            for r in asked:
                if (q := at.get(r, 0)) > 0:
                    free_gpus += q
        gangs_in[d] = [g for g, _, _ in here]
        usage[d] = {g.key: use for g, _, use in here}
        least[d] = least_gpus([g.gpus for g, _, _ in here], [n for _, n, _ in here], wanted - free_gpus)
    bound = [1 << 62]
    found: list[tuple[tuple[object, ...], list[RunningGang], int]] = []
    for d in sorted(gangs_in, key=lambda d: (least[d], d)):
        if least[d] > bound[0]:
            break
        dom = DomainFit(snapshot, gang, eligible[d].per_podset, usage[d])
        for members in search(dom, gangs_in[d], bound):
            found.append((_set_key(members), members, d))
    found.sort(key=lambda t: (t[0], domains[t[2]].value or ""))
    return [(members, d) for _, members, d in found]


@dataclass(frozen=True, slots=True)
class _Eligible:
    """One domain's nodes a gang's pods may use: per podset (each non-empty), and their union."""

    per_podset: list[list[int]]
    union: list[int]


class VictimIndex:
    """What every victim search on one snapshot reads alike, built on first use and kept: per
    domain of a level, the running gangs with pods there (cheapest first), their GPUs and their
    pods' (node, requests) there; per pod shape, the eligible nodes grouped by domain. An
    admission pass builds one per snapshot and passes it to each `find_victims` it makes, so a
    search no longer reads every running gang's pods nor walks every node.

    Valid while the snapshot's nodes and the running gangs' pods stay as they are: a pass only
    charges the gangs it admits (never a running one), and `without` gives back what it takes.
    Free capacity is read live by each search, so those charges count."""

    def __init__(self, snapshot: Snapshot, running: Sequence[RunningGang]) -> None:
        self.snapshot = snapshot
        self._running = list(running)
        self._keys = frozenset(g.key for g in running)
        self._gangs_in: dict[int | None, dict[int, list[tuple[str, int, Pods]]]] = {}
        self._eligible: dict[tuple[object, ...], dict[int, _Eligible]] = {}

    def covers(self, snapshot: Snapshot, running: Sequence[RunningGang]) -> bool:
        """Built for this snapshot and these gangs (by key: being evicted since changes nothing here)."""
        return snapshot is self.snapshot and all(g.key in self._keys for g in running)

    def _domain_of(self, req: int | None) -> Callable[[int], int | None]:
        """The node's domain at level `req` (0: the whole cluster), None in an unlabelled one."""
        if req is None:
            return lambda n: 0
        snap = self.snapshot
        path, domains = snap.path, snap.domains
        labelled = {d for d in snap.by_level[req] if domains[d].value is not None}
        return lambda n: d if (d := path[n][req]) in labelled else None

    def gangs_in(self, req: int | None) -> Mapping[int, list[tuple[str, int, Pods]]]:
        """Per domain of level `req`: (key, GPUs there, pods there) of each running gang with
        pods there, cheapest first (fewest GPUs, lowest priority, latest started, key)."""
        kept = self._gangs_in.get(req)
        if kept is not None:
            return kept
        domain = self._domain_of(req)
        out: dict[int, list[tuple[str, int, Pods]]] = {}
        for g in sorted(self._running, key=lambda g: (g.gpus, g.priority, -g.started_at, g.key)):
            inside: dict[int, tuple[list[int], Pods]] = {}
            for n, requests in _usage(self.snapshot, g):
                if (d := domain(n)) is None:
                    continue
                if d not in inside:
                    inside[d] = ([0], [])
                gpus, pods = inside[d]
                gpus[0] += sum(requests.get(r, 0) for r in ACCELERATORS)
                pods.append((n, requests))
            for d, (gpus, pods) in inside.items():
                out.setdefault(d, []).append((g.key, gpus[0], pods))
        self._gangs_in[req] = out
        return out

    def eligible(self, gang: Gang, policy: PlacementPolicy, req: int | None) -> Mapping[int, _Eligible]:
        """Per domain of level `req`, the nodes each podset of `gang` may use there (`eligible_nodes`),
        only domains where every podset has one. Kept per pod constraints and held spares."""
        spares = held_spares(self.snapshot, policy)
        key = (req, tuple((ps.constraints, ps.excluded_nodes) for ps in gang.podsets), spares)
        kept = self._eligible.get(key)
        if kept is not None:
            return kept
        domain = self._domain_of(req)
        nodes: dict[int, list[list[int]]] = {}
        for p, elig in enumerate(eligible_nodes(self.snapshot, gang, policy)):
            for n in elig:
                if (d := domain(n)) is None:
                    continue
                if d not in nodes:
                    nodes[d] = [[] for _ in gang.podsets]
                nodes[d][p].append(n)
        out = {
            d: _Eligible(per, sorted(set().union(*per)) if len(per) > 1 else per[0])
            for d, per in nodes.items()
            if all(per)
        }
        self._eligible[key] = out
        return out


def _plan(
    snapshot: Snapshot,
    preemptor: Contender,
    members: list[RunningGang],
    rules: Mapping[str, str],
    level: str | None,
    domain_id: int,
    fit: Placement,
) -> PreemptionPlan:
    victims = tuple(
        g.victim(
            f"{g.key}: {g.gpus} GPUs, priority {g.priority}, started {_started(g.started_at)} "
            f"({rules[g.key]})"
        )
        for g in sorted(members, key=lambda g: g.key)
    )
    if level is not None:
        domain: str | None = snapshot.domains[domain_id].value
        nodes = tuple(sorted(n.name for i in snapshot.subtree_nodes(domain_id) if (n := snapshot.nodes[i])))
        where = f"{level}={domain}"
    else:
        domain = None
        nodes = tuple(sorted({a.node for a in fit.assignments}))
        where = f"{len(nodes)} node(s)"
    gpus = sum(v.gpus for v in victims)
    reason = (
        f"preempting {', '.join(v.key for v in victims)} ({gpus} GPUs) to free {where} for "
        f"{preemptor.key} (priority {preemptor.priority}): " + "; ".join(v.why for v in victims)
    )
    return PreemptionPlan(victims, (), level, domain, nodes, reason)


def exclude_nodes(gang: Gang, nodes: frozenset[str]) -> Gang:
    """The gang kept off `nodes` (a domain held for another gang's preemption)."""
    if not nodes:
        return gang
    return Gang(
        tuple(replace(ps, excluded_nodes=ps.excluded_nodes | nodes) for ps in gang.podsets), gang.name
    )


def gang_gpus(gang: Gang) -> int:
    """The accelerators a whole gang asks for (the cost of preempting it)."""
    return sum(ps.count * sum(ps.requests.get(r, 0) for r in ACCELERATORS) for ps in gang.podsets)


@dataclass(frozen=True, slots=True)
class Hold:
    """A domain held for a preempting gang until it is admitted or gives up: no other gang may
    be placed there meanwhile. Kept on the preemptor's Workload, so a restart resumes it.
    `quota_reserved_at`: the quota reservation it was made for (a requeued gang's hold is void);
    `at`: when it was taken."""

    level: str | None
    domain: str | None
    nodes: tuple[str, ...]
    victims: tuple[str, ...]
    quota_reserved_at: float
    at: float

    def live(self, quota_reserved_at: float, now: float, ttl: float) -> bool:
        """Still held: the same quota reservation, and not older than `ttl` seconds (a
        preemptor that never fits gives the domain back)."""
        return self.quota_reserved_at == quota_reserved_at and now < self.at + ttl

    def held_nodes(self, snapshot: Snapshot) -> frozenset[str]:
        """The nodes no other gang may use: the whole domain, or the nodes listed."""
        if self.level is None:
            return frozenset(self.nodes)
        idx = snapshot.level_index(self.level)
        if idx is None:
            return frozenset()
        return frozenset(
            n.name
            for d in snapshot.by_level[idx]
            if snapshot.domains[d].value == self.domain
            for i in snapshot.subtree_nodes(d)
            if (n := snapshot.nodes[i]) is not None
        )


def hold_of(plan: PreemptionPlan, quota_reserved_at: float, now: float) -> Hold:
    return Hold(
        plan.level,
        plan.domain,
        () if plan.level else plan.nodes,
        tuple(v.key for v in plan.victims),
        quota_reserved_at,
        now,
    )
