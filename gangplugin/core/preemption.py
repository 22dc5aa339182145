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

Pure: the snapshot is changed only for the check and given back as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gangplugin.core.placement import (
    Gang,
    Placement,
    PlacementPolicy,
    eligible_nodes,
    gang_levels,
    place,
    pods_that_fit,
)
from gangplugin.core.resources import PODS
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import BoundPod, Snapshot

WITHIN_CLUSTER_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM_WITHIN_COHORT = ("Never", "LowerPriority", "Any")
BORROW_WITHIN_COHORT = ("Never", "LowerPriority")
_MAX_NODES_PER_DOMAIN = 4000  # branch-and-bound steps in one domain before settling for the best so far
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

    @property
    def preempts(self) -> bool:
        return bool(self.victims)


def may_preempt(
    preemptor: Contender, victim: RunningGang, queues: Mapping[str, ClusterQueueState]
) -> tuple[bool, str]:
    """Whether Kueue's preemption settings of the preemptor's ClusterQueue let it preempt
    `victim`, and the rule that decided. Same ClusterQueue: `withinClusterQueue`. Another
    ClusterQueue of the cohort that borrows: `reclaimWithinCohort`, or `borrowWithinCohort`
    when the preemptor's own ClusterQueue borrows. Any other gang: never."""
    own = queues.get(preemptor.cluster_queue, ClusterQueueState(preemptor.cluster_queue))
    rules = own.preemption
    p, v = preemptor.priority, victim.priority
    if victim.cluster_queue == preemptor.cluster_queue:
        policy = rules.within_cluster_queue
        rule = f"withinClusterQueue: {policy}"
        if policy == "LowerPriority":
            return v < p, f"{rule}, priority {v} {'<' if v < p else '>='} {p}"
        if policy == "LowerOrNewerEqualPriority":
            newer = v == p and victim.created_at > preemptor.created_at
            ok = v < p or newer
            detail = "equal priority, newer" if newer else f"priority {v} {'<' if v < p else '>='} {p}"
            return ok, f"{rule}, {detail}"
        return False, rule
    other = queues.get(victim.cluster_queue)
    if own.cohort is None or other is None or other.cohort != own.cohort:
        return False, f"ClusterQueue {victim.cluster_queue} is not in the cohort of {own.name}"
    if not other.borrowing:
        return False, f"ClusterQueue {victim.cluster_queue} does not borrow from the cohort"
    if own.borrowing:
        policy = rules.borrow_within_cohort
        rule = f"borrowWithinCohort: {policy}"
        if policy != "LowerPriority":
            return False, rule
        limit = rules.max_priority_threshold
        if limit is not None and v > limit:
            return False, f"{rule}, priority {v} above maxPriorityThreshold {limit}"
        return v < p, f"{rule}, priority {v} {'<' if v < p else '>='} {p}"
    policy = rules.reclaim_within_cohort
    rule = f"reclaimWithinCohort: {policy}"
    if policy == "Any":
        return True, f"{rule}, ClusterQueue {victim.cluster_queue} borrows"
    if policy == "LowerPriority":
        return v < p, f"{rule}, priority {v} {'<' if v < p else '>='} {p}"
    return False, rule


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


class _Domain:
    """Fast fit counting inside one domain: per node, free capacity plus what victims free."""

    def __init__(
        self,
        snapshot: Snapshot,
        gang: Gang,
        nodes: list[list[int]],
        usage: Mapping[str, Mapping[int, Mapping[str, int]]],
    ) -> None:
        self.snapshot, self.gang, self.nodes, self.usage = snapshot, gang, nodes, usage
        self.base = [
            sum(pods_that_fit(snapshot.free[n], ps) for n in ns)
            for ps, ns in zip(gang.podsets, nodes, strict=True)
        ]
        self.members = [set(ns) for ns in nodes]

    def fits(self, keys: Sequence[str]) -> bool:
        freed: dict[int, dict[str, int]] = {}
        for k in keys:
            for n, amounts in self.usage[k].items():
                acc = freed.setdefault(n, {})
                for r, q in amounts.items():
                    acc[r] = acc.get(r, 0) + q
        for p, ps in enumerate(self.gang.podsets):
            count = self.base[p]
            for n, extra in freed.items():
                if n not in self.members[p]:
                    continue
                free = self.snapshot.free[n]
                more = dict(free)
                for r, q in extra.items():
                    if r in more or r != PODS:
                        more[r] = more.get(r, 0) + q
                count += pods_that_fit(more, ps) - pods_that_fit(free, ps)
            if count < ps.count:
                return False
        return True


def _search(dom: _Domain, candidates: list[RunningGang], bound: list[int]) -> list[list[RunningGang]]:
    """Minimal sets of `candidates` (sorted cheapest first) that make the gang fit in `dom`,
    pruned by `bound[0]`, the fewest GPUs of a fitting set found so far (in any domain)."""
    found: list[list[RunningGang]] = []
    steps = 0
    chosen: list[RunningGang] = []

    def dfs(start: int, gpus: int) -> None:
        nonlocal steps
        for i in range(start, len(candidates)):
            steps += 1
            if steps > _MAX_NODES_PER_DOMAIN:
                return
            c = candidates[i]
            cost = gpus + c.gpus
            if cost > bound[0]:
                continue
            chosen.append(c)
            if dom.fits([g.key for g in chosen]):
                found.append(list(chosen))
                bound[0] = min(bound[0], cost)
            else:
                dfs(i + 1, cost)
            chosen.pop()

    dfs(0, 0)
    return found


def _usage(snapshot: Snapshot, gang: RunningGang) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for ns, name in gang.pods:
        pod = snapshot.pod(ns, name)
        i = snapshot.node_ids.get(pod.node_name) if pod is not None else None
        if pod is None or i is None:
            continue
        acc = out.setdefault(i, {})
        for r, q in pod.requests.items():
            acc[r] = acc.get(r, 0) + q
        acc[PODS] = acc.get(PODS, 0) + 1
    return out


def _started(at: float) -> str:
    return format_time(datetime.fromtimestamp(at, UTC))


def find_victims(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy,
    preemptor: Contender,
    running: Sequence[RunningGang],
    queues: Mapping[str, ClusterQueueState],
) -> PreemptionPlan:
    """The cheapest set of admitted gangs whose eviction lets `gang` fit, or why there is none
    (see the module docstring). Call it for a gang `place` found no room for."""
    req, _ = gang_levels(snapshot, gang)
    evicting = [g for g in running if g.evicting and g.key != preemptor.key]
    allowed: list[tuple[RunningGang, str]] = []
    refused: dict[str, int] = {}
    for g in running:
        if g.evicting or g.key == preemptor.key:
            continue
        ok, rule = may_preempt(preemptor, g, queues)
        if ok:
            allowed.append((g, rule))
        else:
            refused[rule] = refused.get(rule, 0) + 1
    level = None if req is None else snapshot.levels[req]
    with without(snapshot, evicting):
        placement = place(snapshot, gang, policy)
        if placement.feasible:
            names = sorted(g.key for g in evicting)
            return PreemptionPlan(
                (),
                tuple(names),
                level,
                placement.domains[0] if level and placement.domains else None,
                (),
                f"capacity already being freed by {', '.join(names)} will do; waiting for it",
            )
        sets = _candidate_sets(snapshot, gang, policy, req, [g for g, _ in allowed])
        rules = {g.key: rule for g, rule in allowed}
        for members, domain_id in sets[:_MAX_CHECKS]:
            with without(snapshot, members):
                fit = place(snapshot, gang, policy)
            if fit.feasible:
                return _plan(snapshot, preemptor, members, rules, level, domain_id, fit)
    protected = "; ".join(f"{n} protected by {rule}" for rule, n in sorted(refused.items()))
    where = f"one {level}" if level else "room for it"
    return PreemptionPlan(
        (),
        (),
        level,
        None,
        (),
        f"no preemptible set of gangs frees {where}" + (f" ({protected})" if protected else ""),
    )


def _candidate_sets(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, req: int | None, allowed: list[RunningGang]
) -> list[tuple[list[RunningGang], int]]:
    """Sets that fit by the per-node count, cheapest first, each with its domain."""
    elig = eligible_nodes(snapshot, gang, policy)
    usage = {g.key: _usage(snapshot, g) for g in allowed}
    domains = (
        [0] if req is None else [d for d in snapshot.by_level[req] if snapshot.domains[d].value is not None]
    )
    ordered = sorted(allowed, key=lambda g: (g.gpus, g.priority, -g.started_at, g.key))
    bound = [1 << 62]
    found: list[tuple[tuple[object, ...], list[RunningGang], int]] = []
    for d in domains:
        inside = set(snapshot.subtree_nodes(d)) if d else None
        nodes = [[n for n in ns if inside is None or n in inside] for ns in elig]
        if not all(nodes):
            continue
        here = [g for g in ordered if inside is None or any(n in inside for n in usage[g.key])]
        dom = _Domain(snapshot, gang, nodes, usage)
        if not here or not dom.fits([g.key for g in here]):
            continue
        for members in _search(dom, here, bound):
            found.append((_set_key(members), members, d))
    found.sort(key=lambda t: (t[0], snapshot.domains[t[2]].value or ""))
    return [(members, d) for _, members, d in found]


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
        Victim(
            g.key,
            g.priority,
            g.gpus,
            g.started_at,
            f"{g.key}: {g.gpus} GPUs, priority {g.priority}, "
            f"started {_started(g.started_at)} ({rules[g.key]})",
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


ACCELERATORS = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")


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
