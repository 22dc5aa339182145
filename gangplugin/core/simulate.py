"""The capacity simulator: a job trace replayed over virtual time on a cluster shape (pure).

Every decision comes from the code the controllers run, over one `Snapshot` built once and kept
current with `charge`/`release` (bind/unbind), never rebuilt per event:

- Kueue reserves quota in priority order, then arrival order (BestEffortFIFO); without
  TrainingPlans quota is unlimited, with them it is `queue_quota` of the plans at that instant
  (GPUs);
- each admission pass decides the quota-reserved gangs in the order of `admission_queue`, each
  through the admission check's own gate (`core.gate`: Sequential mode, `gang_drain` where
  plans feed the queue, placement `place` with the GangPolicy's spares, off the domains held
  for other gangs' preemptions), and admits with `charge`;
- where the simulated ClusterQueue preempts (`Settings.preemption`, Kueue's `spec.preemption`;
  Kueue's default never does), a gang that does not fit preempts as the check does: victims
  from `find_victims`, evicted whole after the pass (each resumes later with the run time it
  had left) and requeued, their domain held for the preemptor for its readyTimeout;
- pods become Ready `startup_seconds` after admission; a gang slower than the readiness timeout
  (`watch`) is requeued with `requeue_decision`'s backoff or deactivated after its limit;
- a running gang that would outlive its block is evicted at the termination start (`gang_drain`)
  and requeued; it resumes from its checkpoint with the run time it had left.

Policies differ only in where a gang goes: `gangplugin` (ours), `best-fit` (no spares, no
climbing above the preferred level, close to Kueue's TAS BestFit), `first-fit` (topology
blind: the first nodes by name with room) and, on small clusters, `optimal` (each pass admits
the packing optimum of the first `MAX_GANGS` waiting gangs, `core/optimal.py`, with our spares;
it ignores Sequential mode). `gangplugin` and `best-fit` preempt; `first-fit` and `optimal`,
packing baselines, never do. The replay is deterministic: events at one instant are applied in
the order they were scheduled, then one admission pass runs (a pass that preempted is followed
by another at the same instant, once the victims are gone).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from functools import partial

from gangplugin.core.admission import (
    AdmissionDecision,
    QueuedWorkload,
    admission_queue,
    charge,
    decide,
    promised_pods,
    release,
)
from gangplugin.core.drain import DrainDecision, gang_drain
from gangplugin.core.gate import GangFacts, Placer, PreemptionState, gate
from gangplugin.core.optimal import MAX_GANGS, optimal_admissions
from gangplugin.core.placement import Assignment, Gang, Placement, PlacementPolicy, PodSet
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy, requeue_decision
from gangplugin.core.preemption import (
    WITHIN_CLUSTER_QUEUE,
    ClusterQueueState,
    Contender,
    Hold,
    PreemptionPlan,
    QueuePreemption,
    RunningGang,
    gang_gpus,
)
from gangplugin.core.quota import next_quota_change, queue_quota
from gangplugin.core.states import CheckState
from gangplugin.core.topology import HOSTNAME_LABEL, Node, Snapshot, build_snapshot
from gangplugin.core.watchdog import GangObservation, watch

GPU = "nvidia.com/gpu"
POLICIES = ("gangplugin", "best-fit", "first-fit", "optimal")
NAMESPACE = "sim"
#: The simulated ClusterQueue's name when no plan names it.
CLUSTER_QUEUE = "simulated"


@dataclass(frozen=True, slots=True)
class Job:
    """One trace row: `pods` pods of `gpus_per_pod` GPUs, running `runtime` seconds once Ready."""

    key: str
    arrival: float  # seconds from the trace start
    pods: int
    gpus_per_pod: int
    runtime: float
    #: The `gangplugin.io/max-runtime` the job declares (None: none; drains then evict it).
    max_runtime: float | None = None
    required_topology: str | None = None
    preferred_topology: str | None = None
    #: Its Kueue priority (a WorkloadPriorityClass value; Kueue's default 0).
    priority: int = 0
    #: Consecutive pods in slices of this many, each in one domain of `slice_required_topology`.
    slice_size: int | None = None
    slice_required_topology: str | None = None

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    def gang(self) -> Gang:
        podset = PodSet(
            "main",
            self.pods,
            {GPU: self.gpus_per_pod},
            required_topology=self.required_topology,
            preferred_topology=self.preferred_topology,
            slice_size=self.slice_size,
            slice_required_topology=self.slice_required_topology,
        )
        return Gang((podset,), f"job-{self.key}")


@dataclass(frozen=True, slots=True)
class Settings:
    policy: GangPolicy = field(default_factory=GangPolicy)
    plans: tuple[TrainingPlan, ...] = ()
    #: The instant of trace time 0 (plans are dated).
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    #: Seconds from admission until every pod of a gang is Ready.
    startup_seconds: float = 0.0
    levels: tuple[str, ...] = ()
    #: The simulated ClusterQueue's Kueue `spec.preemption` (one queue, no cohort: only
    #: `withinClusterQueue` applies). Kueue's default preempts nothing.
    preemption: QueuePreemption = field(default_factory=QueuePreemption)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one job. `wait`: arrival to first admission (None: never admitted)."""

    key: str
    gpus: int
    wait: float | None
    end: float | None
    drained: int = 0
    requeued: int = 0
    never_ran: str | None = None
    #: Where it was first admitted: the domain values of its placement, as the check pins them.
    domains: tuple[str, ...] = ()
    #: How many times it was preempted (evicted whole for a gang of higher priority).
    preempted: int = 0


@dataclass(frozen=True, slots=True)
class Sample:
    """The state from `t` until the next sample: GPUs allocated, jobs waiting, GPUs stranded."""

    t: float
    busy_gpus: int
    queued: int
    stranded_gpus: int


@dataclass(frozen=True, slots=True)
class Replay:
    policy: str
    total_gpus: int
    outcomes: tuple[Outcome, ...]
    samples: tuple[Sample, ...]
    #: From the first arrival to the last moment a job stopped running (finished, timed out,
    #: drained, preempted): what the cluster was busy for, not the plans' last block end.
    makespan: float
    busy_gpu_seconds: float
    stranded_gpu_seconds: float
    plan_unused_gpu_seconds: float

    @property
    def gpu_utilization(self) -> float:
        """Busy GPU-seconds over the cluster's GPU-seconds during the makespan."""
        cap = self.total_gpus * self.makespan
        return self.busy_gpu_seconds / cap if cap > 0 else 0.0


class _Ev(IntEnum):
    ARRIVE = 0
    READY = 1
    FINISH = 2
    TIMEOUT = 3
    DRAIN = 4
    REQUEUE = 5
    WAKE = 6


@dataclass(slots=True)
class _State:
    """Mutable bookkeeping of one job during the replay."""

    job: Job
    gang: Gang
    left: float  # run time still to do
    reserved_at: float | None = None  # quota reserved (None: waiting for quota)
    admitted_at: float | None = None
    attempt: int = 0
    first_admitted: float | None = None
    domains: tuple[str, ...] = ()
    end: float | None = None
    retries: int = 0
    drained: int = 0
    preempted: int = 0
    reason: str = ""
    rejected: bool = False
    running_since: float | None = None  # pods Ready


def first_fit(snapshot: Snapshot, gang: Gang, order: Sequence[int]) -> Placement:
    """Topology blind: each pod on the first node (in `order`) with room, all or nothing."""
    taken: dict[int, dict[str, int]] = {}
    out: list[Assignment] = []
    for ps in gang.podsets:
        req = [(r, q) for r, q in ps.requests.items() if q > 0]
        index = 0
        for n in order:
            if index == ps.count:
                break
            if not snapshot.usable[n]:
                continue
            free = taken.get(n) or snapshot.free[n]
            fits = min((free.get(r, 0) // q for r, q in req), default=ps.count)
            k = min(fits, ps.count - index, free.get("pods", ps.count))
            if k <= 0:
                continue
            taken[n] = {**free, **{r: free.get(r, 0) - k * q for r, q in req}}
            if "pods" in free:
                taken[n]["pods"] = free["pods"] - k
            node = snapshot.nodes[n]
            assert node is not None
            out += [Assignment(ps.name, index + i, node.name) for i in range(k)]
            index += k
        if index < ps.count:
            return Placement(False, None, (), (), f"only {index} of {ps.count} pods fit (first fit)")
    return Placement(True, None, (), tuple(out), "first fit")


@dataclass(frozen=True, slots=True)
class _Way:
    """How one compared policy decides a gang: the GangPolicy its gate reads, how it places a
    gang, and whether it preempts."""

    policy: GangPolicy
    place: Placer
    preempts: bool


def _way(name: str, policy: GangPolicy, snapshot: Snapshot, explain: bool) -> _Way:
    """The policy's way; `explain` says why a gang does not fit (costly)."""
    if name in ("gangplugin", "best-fit"):

        def placed(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            return decide(snap, gang, gang.name, gp.placement, annotations, explain=explain)

        if name == "best-fit":
            policy = replace(policy, placement=PlacementPolicy(0, climb_levels=False))
        return _Way(policy, placed, True)
    if name == "first-fit":
        order = snapshot.live_node_ids()

        def first(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            p = first_fit(snap, gang, order)
            return AdmissionDecision(p.feasible, p.reason, placement=p)

        return _Way(policy, first, False)
    if name == "optimal":

        def optimum(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            spares = snap.spare_nodes(gp.placement.spares_per_ultraserver)
            (p,) = optimal_admissions(snap, [gang], spares)
            return AdmissionDecision(p.feasible, p.reason, placement=p)

        return _Way(replace(policy, admission="Parallel"), optimum, False)  # it ignores Sequential mode
    raise ValueError(f"unknown policy {name!r}; the policies are {', '.join(POLICIES)}")


def _topology(job: Job) -> tuple[str | int | None, ...]:
    """What a job asks of the topology: jobs that ask the same compare by size."""
    return (job.required_topology, job.preferred_topology, job.slice_size, job.slice_required_topology)


def _dominated(job: Job, infeasible: Iterable[tuple[Job, AdmissionDecision]]) -> AdmissionDecision | None:
    """The refusal of a job known not to fit since capacity last came free that needs no more
    than `job` (so `job` cannot fit either: capacity only shrinks between releases)."""
    for other, refusal in infeasible:
        if (
            other.pods <= job.pods
            and other.gpus_per_pod <= job.gpus_per_pod
            and _topology(other) == _topology(job)
        ):
            return refusal
    return None


class _Preemptions(PreemptionState):
    """A simulated pass's preemption state. A victim search is not redone for a gang when
    nothing it reads changed since its last one (`generation`: bumped whenever capacity is
    taken or freed, a gang is marked for eviction or a hold comes or goes): a gang that found
    no victims keeps that answer until then, as the search would give it again."""

    def __init__(
        self,
        holds: dict[str, Hold],
        running: Callable[[], list[RunningGang]],
        queues: Callable[[], Mapping[str, ClusterQueueState]],
        searched: dict[str, tuple[int, PreemptionPlan]],
        generation: Callable[[], int],
    ) -> None:
        super().__init__(holds, running, queues)
        self._searched, self._generation = searched, generation

    def victims(
        self, snapshot: Snapshot, gang: Gang, policy: GangPolicy, contender: Contender
    ) -> PreemptionPlan:
        now = self._generation()
        kept = self._searched.get(contender.key)
        if kept is not None and kept[0] == now:
            return kept[1]
        plan = super().victims(snapshot, gang, policy, contender)
        self._searched[contender.key] = (now, plan)
        return plan


def _running(admitted: Iterable[_State], cluster_queue: str) -> list[RunningGang]:
    """The admitted jobs as preemption reads them: their pods are the synthetic ones `charge`
    bound."""
    out = []
    for s in admitted:
        assert s.admitted_at is not None
        pods = tuple((NAMESPACE, name) for name in promised_pods(s.gang))
        out.append(
            RunningGang(
                s.job.key,
                s.job.priority,
                cluster_queue,
                s.job.arrival,
                s.admitted_at,
                gang_gpus(s.gang),
                pods,
            )
        )
    return out


def replay(
    nodes: Iterable[Node],
    jobs: Sequence[Job],
    policy_name: str,
    settings: Settings,
    progress: Callable[[int], None] | None = None,
) -> Replay:
    """Replay `jobs` under one placement policy; `progress(n)` is told of n more events done."""
    snap = build_snapshot(nodes, levels=settings.levels) if settings.levels else build_snapshot(nodes)
    gp = settings.policy
    way = _way(policy_name, gp, snap, explain=False)
    total_gpus = sum(n.allocatable.get(GPU, 0) for n in snap.nodes if n is not None)
    spares_held = _spares_held(policy_name, gp)
    level_capacity = _domain_capacity(snap, spares_held)
    plans = settings.plans
    queue_name = plans[0].cluster_queue if plans else CLUSTER_QUEUE
    flavors = {p.flavor for p in plans}
    # One ClusterQueue and no cohort: only its withinClusterQueue rule can allow a preemption.
    within = settings.preemption.within_cluster_queue
    if within not in WITHIN_CLUSTER_QUEUE:
        raise ValueError(f"withinClusterQueue {within!r} is not one of {', '.join(WITHIN_CLUSTER_QUEUE)}")
    preempting = way.preempts and within != "Never"
    queues = {queue_name: ClusterQueueState(queue_name, preemption=settings.preemption)}
    prioritized = any(j.priority for j in jobs)
    states = {j.key: _State(j, j.gang(), j.runtime) for j in jobs}
    if len(states) != len(jobs):
        raise ValueError("job keys must be unique")

    events: list[tuple[float, int, _Ev, str, int]] = []
    seq = 0

    def push(t: float, ev: _Ev, key: str = "", attempt: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, ev, key, attempt))
        seq += 1

    def at(t: float) -> datetime:
        return settings.start + timedelta(seconds=t)

    # A job that does not fit even the empty cluster never will: it is reported, not queued.
    explained = _way(policy_name, gp, snap, explain=True)
    never_fits: dict[tuple[object, ...], str | None] = {}
    for j in sorted(jobs, key=lambda j: (j.arrival, j.key)):
        sig = (j.pods, j.gpus_per_pod, *_topology(j))
        if sig not in never_fits:
            empty = explained.place(snap, states[j.key].gang, explained.policy, {})
            why = empty.placement.reason if empty.placement is not None else empty.message
            never_fits[sig] = None if empty.ready else f"never fits this cluster: {why}"
        refusal = never_fits[sig]
        if refusal is None:
            push(j.arrival, _Ev.ARRIVE, j.key)
        else:
            states[j.key].reason = refusal
    if plans:
        for p in plans:
            for b in p.blocks:
                for instant in (b.start, b.end):
                    push(max(0.0, (instant - settings.start).total_seconds()), _Ev.WAKE)

    for_quota: list[str] = []  # arrived, waiting for Kueue's quota reservation, arrival order
    reserved: dict[str, _State] = {}  # quota reserved, not admitted
    admitted: dict[str, _State] = {}
    unready: list[str] = []  # admitted, pods not all Ready yet (Sequential mode's gate)
    infeasible: list[tuple[Job, AdmissionDecision]] = []  # refused since capacity last came free
    holds: dict[str, Hold] = {}  # domains held for preempting gangs, by holder
    searched: dict[str, tuple[int, PreemptionPlan]] = {}  # victim searches, by gang
    generation = 0  # bumped whenever what a victim search reads changes
    reserved_gpus = busy = stranded = queued = 0
    quota = 0
    now = 0.0
    busy_s = stranded_s = unused_s = 0.0
    last_stop: float | None = None  # the last instant a job stopped running
    samples: list[Sample] = []
    first_arrival = min((j.arrival for j in jobs), default=0.0)

    def quota_now(t: float) -> int:
        if not plans:
            return 1 << 62
        q = queue_quota(plans, queue_name, at(t))
        return sum(v for (_, r), v in q.items() if r == GPU)

    def stop(s: _State, t: float) -> None:
        nonlocal busy, reserved_gpus, infeasible, generation, last_stop
        release(snap, s.gang, NAMESPACE)
        generation += 1
        last_stop = t
        admitted.pop(s.job.key, None)
        if s.job.key in unready:
            unready.remove(s.job.key)
        busy -= s.job.gpus
        reserved_gpus -= s.job.gpus
        s.admitted_at = None
        s.attempt += 1
        infeasible = []

    def interrupt(s: _State, t: float) -> None:
        """Evict a running job whole (it resumes later with the run time it had left)."""
        if s.running_since is not None:
            s.left = max(0.0, s.left - (t - s.running_since))
        s.running_since = None
        stop(s, t)

    def drain_of(s: _State, t: float) -> tuple[DrainDecision | None, float | None]:
        """What the plans say about a waiting gang now, and when their quota next changes."""
        d = gang_drain(plans, queue_name, flavors, at(t), _td(s.job.max_runtime))
        if d is None or d.admit:
            return d, None
        change = next_quota_change(plans, queue_name, at(t))
        return d, None if change is None else (change - settings.start).total_seconds()

    def requeue(s: _State) -> None:
        s.reserved_at = None
        for_quota.append(s.job.key)

    def current() -> int:
        return generation

    by_gang = {s.gang.name: s for s in states.values()}
    optimum: dict[str, Placement] = {}  # the optimal policy's admissions of this pass, by gang

    def place_one(
        snap: Snapshot, gang: Gang, policy: GangPolicy, annotations: Mapping[str, str]
    ) -> AdmissionDecision:
        """The way's placement, skipping what is known not to fit."""
        s = by_gang[gang.name]
        if policy_name == "optimal":
            chosen = optimum.get(gang.name)
            why = "not in the packing optimum now"
            return AdmissionDecision(
                chosen is not None, why, placement=chosen or Placement(False, None, (), (), why)
            )
        # a holder has more room than the gangs kept off its domain
        known = None if s.job.key in holds else _dominated(s.job, infeasible)
        if known is not None:
            return known
        decision = way.place(snap, gang, policy, annotations)
        if not decision.ready:
            infeasible.append((s.job, decision))
        return decision

    while events:
        t = events[0][0]
        busy_s += busy * (t - now)
        stranded_s += stranded * (t - now)
        if plans and quota > 0:
            unused_s += max(quota - reserved_gpus, 0) * (t - now)
        now = t
        n_events = 0
        while events and events[0][0] == t:
            _, _, ev, key, attempt = heapq.heappop(events)
            n_events += 1
            s = states[key] if key else None
            if ev is _Ev.ARRIVE:
                assert s is not None
                for_quota.append(key)
            elif s is None or s.attempt != attempt or s.admitted_at is None:
                pass  # a plan wake-up, or an event of an attempt that already ended
            elif ev is _Ev.READY:
                if key in unready:
                    unready.remove(key)
                s.running_since = t
                push(t + s.left, _Ev.FINISH, key, attempt)
            elif ev is _Ev.FINISH:
                stop(s, t)
                s.end = t
                s.left = 0.0
            elif ev is _Ev.TIMEOUT:
                obs = GangObservation(s.job.pods, s.job.pods, 0, s.admitted_at)
                verdict = watch(gp, obs, t)
                rq = requeue_decision(gp, s.retries, verdict.reason, t, s.job.arrival)
                stop(s, t)
                s.reason = rq.message
                if rq.state == "Retry":
                    s.retries += 1
                    push(t + (rq.requeue_after_seconds or 0), _Ev.REQUEUE, key, s.attempt)
                else:
                    s.rejected = True
            elif ev is _Ev.DRAIN:
                dr = gang_drain(plans, queue_name, flavors, at(t), _td(s.job.max_runtime), at(s.admitted_at))
                if dr is not None and dr.evict:
                    interrupt(s, t)
                    s.drained += 1
                    s.reason = dr.reason
                    requeue(s)
            if ev is _Ev.REQUEUE and s is not None and s.attempt == attempt:
                requeue(s)
        quota = quota_now(t)
        if prioritized:  # Kueue's queue order: priority first, then the order they came in
            for_quota.sort(key=lambda k: -states[k].job.priority)
        # Kueue: quota reservation in that order, skipping what does not fit (BestEffortFIFO).
        still: list[str] = []
        for key in for_quota:
            s = states[key]
            if reserved_gpus + s.job.gpus <= quota:
                s.reserved_at = t
                reserved[key] = s
                reserved_gpus += s.job.gpus
            else:
                s.reason = (
                    f"waiting for quota; it needs {s.job.gpus} GPUs, {max(quota - reserved_gpus, 0)} free"
                )
                still.append(key)
        for_quota = still
        # The admission pass: every quota-reserved gang through the check's gate, in its order.
        head: _State | None = None
        waiting = [
            QueuedWorkload(
                k, None, CheckState.PENDING, True, quota_reserved_at=_reserved_at(r), created_at=r.job.arrival
            )
            for k, r in reserved.items()
        ]
        ordered = [reserved[q.key] for q in admission_queue(waiting).candidates]
        drains = {s.job.key: drain_of(s, t) for s in ordered} if plans else {}
        state: PreemptionState | None = None
        if preempting:
            # The holds of the waiting gangs, each for its preemptor's readyTimeout and its
            # quota reservation; one given back makes room for the gangs known not to fit.
            live = {
                k: h
                for k, h in holds.items()
                if k in reserved and h.live(_reserved_at(reserved[k]), t, gp.ready_timeout)
            }
            if len(live) < len(holds):
                infeasible = []
                generation += 1
            started = list(admitted.values())
            running = partial(_running, started, queue_name)
            state = _Preemptions(live, running, partial(dict, queues), searched, current)
            holds = live
        if policy_name == "optimal" and ordered:
            pick = [s for s in ordered if (d := drains.get(s.job.key, (None, None))[0]) is None or d.admit]
            pick = pick[:MAX_GANGS]
            # the optimum keeps the same spares free as our placement would
            spares = snap.spare_nodes(gp.placement.spares_per_ultraserver)
            found = optimal_admissions(snap, [s.gang for s in pick], spares)
            optimum = {s.gang.name: p for s, p in zip(pick, found, strict=True) if p.feasible}
        victims: list[tuple[str, str]] = []  # (victim, preemptor) of this pass
        for s in ordered:
            key = s.job.key
            drain, change = drains.get(key, (None, None))
            facts = GangFacts(
                Contender(key, s.job.priority, queue_name, s.job.arrival),
                way.policy,
                s.gang,
                snap,
                t,
                _reserved_at(s),
                None,  # a requeued gang waits out its backoff before Kueue reserves its quota
                tuple(unready),
                drain,
                change,
            )
            out = gate(facts, state, place_one)
            if out.wake_at is not None:
                push(out.wake_at, _Ev.WAKE)
            plan = out.preemption
            if plan is not None and plan.preempts and state is not None:
                state.started(key, plan, out.hold)
                generation += 1
                if out.hold is not None:  # given back after the preemptor's readyTimeout
                    push(t + gp.ready_timeout, _Ev.WAKE)
                victims += [(v.key, key) for v in plan.victims]
            decision = out.decision
            if decision is None or not decision.ready:
                s.reason = out.message
                if out.step in ("placement", "preemption"):
                    head = head or s
                continue
            assert decision.placement is not None
            charge(snap, s.gang, decision.placement, NAMESPACE)
            generation += 1
            del reserved[key]
            admitted[key] = s
            busy += s.job.gpus
            s.admitted_at = t
            if s.first_admitted is None:
                s.first_admitted = t
                s.domains = decision.placement.domains
            startup = settings.startup_seconds
            deadline = watch(gp, GangObservation(s.job.pods, s.job.pods, 0, t), t).recheck_at
            if deadline is not None and t + startup >= deadline:
                push(deadline, _Ev.TIMEOUT, key, s.attempt)
            else:
                unready.append(key)
                push(t + startup, _Ev.READY, key, s.attempt)
            if plans:
                end = gang_drain(plans, queue_name, flavors, at(t), _td(s.job.max_runtime), at(t))
                if end is not None and end.evict_at is not None:
                    push(max(t, (end.evict_at - settings.start).total_seconds()), _Ev.DRAIN, key, s.attempt)
        # Kueue evicts the victims whole and requeues them; the preemptors are decided again
        # in a pass at this instant, on the capacity they left.
        for victim, preemptor in victims:
            v = states[victim]
            interrupt(v, t)
            v.preempted += 1
            v.reason = f"preempted by {preemptor}"
            requeue(v)
        if victims:
            push(t, _Ev.WAKE)
        stranded = _stranded(snap, head.job, level_capacity, spares_held) if head is not None else 0
        queued = len(for_quota) + len(reserved)
        if not samples or (samples[-1].busy_gpus, samples[-1].queued, samples[-1].stranded_gpus) != (
            busy,
            queued,
            stranded,
        ):
            samples.append(Sample(t, busy, queued, stranded))
        if progress is not None:
            progress(n_events)

    outcomes = []
    for j in jobs:
        s = states[j.key]
        never = None
        if s.first_admitted is None or s.end is None:
            never = s.reason or "never admitted"
            if s.rejected:
                never = f"deactivated: {s.reason}"
        outcomes.append(
            Outcome(
                j.key,
                j.gpus,
                None if s.first_admitted is None else s.first_admitted - j.arrival,
                s.end,
                s.drained,
                s.retries,
                never,
                s.domains,
                s.preempted,
            )
        )
    return Replay(
        policy_name,
        total_gpus,
        tuple(outcomes),
        tuple(samples),
        0.0 if last_stop is None else max(last_stop - first_arrival, 0.0),
        busy_s,
        stranded_s,
        unused_s,
    )


def _td(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _reserved_at(s: _State) -> float:
    assert s.reserved_at is not None
    return s.reserved_at


#: One GPU: the kept counts of this pod shape are the free GPUs per node and per domain.
_ONE_GPU = ((GPU, 1),)


def _spares_held(policy_name: str, policy: GangPolicy) -> int:
    """Spare nodes per UltraServer the policy keeps out of every gang's reach: ours and the
    optimum's are the GangPolicy's; best-fit and first-fit hold none."""
    return policy.placement.spares_per_ultraserver if policy_name in ("gangplugin", "optimal") else 0


def _free_gpus(snap: Snapshot, spares: int) -> tuple[Sequence[int], list[int]]:
    """Free GPUs per domain id (usable nodes without a blocking taint), kept current by the
    snapshot at each bind and unbind; and, per domain id, those of them on held spare nodes
    (no gang but one already running there may take them)."""
    per_node, per_domain = snap.fit_counts(_ONE_GPU)
    held = [0] * len(per_domain)
    for i in snap.spare_nodes(spares):
        gpus = per_node.get(i, 0)
        held[0] += gpus
        for d in snap.path[i]:
            held[d] += gpus
    return per_domain, held


def _domain_capacity(snap: Snapshot, spares: int) -> list[int]:
    """Per level, the GPUs of its largest domain a gang could take (what one domain could ever
    hold, its held spares not counted)."""
    free, held = _free_gpus(snap, spares)
    return [
        max((free[d] - held[d] for d in snap.by_level[level]), default=0) for level in range(len(snap.levels))
    ]


def _stranded(snap: Snapshot, head: Job, level_capacity: Sequence[int], spares: int) -> int:
    """Free GPUs in domains too small for the job at the head of the queue: domains of its
    topology level when one such domain could hold it, else nodes too small for one of its pods.
    Held spares are free GPUs the head may not take: a domain too small without them strands
    them too, and a spare node strands its GPUs at the node level."""
    label = head.required_topology or head.preferred_topology
    level = snap.level_index(label) if label else None
    need = head.gpus
    if level is None or level_capacity[level] < need:
        level = snap.level_index(HOSTNAME_LABEL)
        need = head.gpus_per_pod
        if level is None:
            return 0
    if snap.levels[level] == HOSTNAME_LABEL:  # the nodes with a free GPU, not every node
        held_nodes = snap.spare_nodes(spares)
        return sum(f for i, f in snap.fit_counts(_ONE_GPU)[0].items() if f < need or i in held_nodes)
    free, held = _free_gpus(snap, spares)
    return sum(free[d] for d in snap.by_level[level] if free[d] - held[d] < need)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank method; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def scaled(jobs: Sequence[Job], max_gpus_per_pod: int) -> list[Job]:
    """The jobs re-expressed for nodes of `max_gpus_per_pod` GPUs: a pod asking for more is split
    into pods of that size (total GPUs kept), e.g. 8-GPU workers as two 4-GPU pods on GB200."""
    out = []
    for j in jobs:
        if j.gpus_per_pod > max_gpus_per_pod:
            per = j.gpus_per_pod // max_gpus_per_pod if j.gpus_per_pod % max_gpus_per_pod == 0 else None
            if per is not None:
                j = replace(j, pods=j.pods * per, gpus_per_pod=max_gpus_per_pod)
        out.append(j)
    return out
