"""The replay's event loop: `Replayer` applies the events of one instant, then Kueue's quota
reservation, then one admission pass, and samples what the cluster looks like."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from gangplugin.core.admission import (
    AdmissionDecision,
    QueuedWorkload,
    admission_queue,
    charge,
    release,
)
from gangplugin.core.drain import DrainDecision, gang_drain
from gangplugin.core.gate import GangFacts, GateStep, GateVerdict, PreemptionState, gate
from gangplugin.core.optimal import MAX_GANGS, optimal_admissions
from gangplugin.core.placement import Gang, Placement
from gangplugin.core.policy import GangPolicy, requeue_decision
from gangplugin.core.preemption import (
    WITHIN_CLUSTER_QUEUE,
    ClusterQueueState,
    Contender,
    Hold,
    PreemptionPlan,
)
from gangplugin.core.quota import next_quota_change, queue_quota
from gangplugin.core.reservation import GangEnd, Holder, Reservations
from gangplugin.core.simulate.events import Event, EventKind, Events
from gangplugin.core.simulate.model import (
    CLUSTER_QUEUE,
    GPU,
    NAMESPACE,
    Job,
    Outcome,
    Replay,
    Sample,
    Settings,
)
from gangplugin.core.simulate.state import (
    JobState,
    Refused,
    SearchedPreemptions,
    dominated,
    excluded_nodes,
    running_gangs,
)
from gangplugin.core.simulate.stranded import domain_capacity, stranded
from gangplugin.core.simulate.ways import spares_held, way
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Node, Snapshot, build_snapshot
from gangplugin.core.watchdog import GangObservation, watch

#: The quota of a queue no plan feeds: unlimited.
_UNLIMITED = 1 << 62


@dataclass(slots=True)
class _Tally:
    """What the cluster looks like now, and its integrals over the replay so far."""

    busy: int = 0  # GPUs of admitted gangs
    reserved_gpus: int = 0  # GPUs of quota reserved (admitted or not)
    stranded: int = 0
    quota: int = 0
    now: float = 0.0
    busy_s: float = 0.0
    stranded_s: float = 0.0
    unused_s: float = 0.0
    last_stop: float | None = None  # the last instant a job stopped running
    samples: list[Sample] = field(default_factory=list)

    def advance(self, t: float, planned: bool) -> None:
        """The state so far held from `now` until `t`."""
        self.busy_s += self.busy * (t - self.now)
        self.stranded_s += self.stranded * (t - self.now)
        if planned and self.quota > 0:
            self.unused_s += max(self.quota - self.reserved_gpus, 0) * (t - self.now)
        self.now = t

    def sample(self, t: float, queued: int) -> None:
        last = self.samples[-1] if self.samples else None
        if last is None or (last.busy_gpus, last.queued, last.stranded_gpus) != (
            self.busy,
            queued,
            self.stranded,
        ):
            self.samples.append(Sample(t=t, busy_gpus=self.busy, queued=queued, stranded_gpus=self.stranded))


class Replayer:
    """One replay of a trace under one placement policy (see the package docstring)."""

    def __init__(
        self, nodes: Iterable[Node], jobs: Sequence[Job], policy_name: str, settings: Settings
    ) -> None:
        self.settings, self.policy_name, self.jobs = settings, policy_name, jobs
        self.snap = (
            build_snapshot(nodes, levels=settings.levels) if settings.levels else build_snapshot(nodes)
        )
        self.gp = settings.policy
        self.way = way(policy_name, self.gp, self.snap, explain=False)
        self.total_gpus = sum(n.allocatable.get(GPU, 0) for n in self.snap.nodes if n is not None)
        self.spares_held = spares_held(policy_name, self.gp)
        self.level_capacity = domain_capacity(self.snap, self.spares_held)
        self.plans = settings.plans
        self.queue_name = self.plans[0].cluster_queue if self.plans else CLUSTER_QUEUE
        self.flavors = {p.flavor for p in self.plans}
        # One ClusterQueue and no cohort: only its withinClusterQueue rule can allow a preemption.
        within = settings.preemption.within_cluster_queue
        if within not in WITHIN_CLUSTER_QUEUE:
            raise ValueError(f"withinClusterQueue {within!r} is not one of {', '.join(WITHIN_CLUSTER_QUEUE)}")
        self.preempting = self.way.preempts and within != "Never"
        self.queues = {self.queue_name: ClusterQueueState(self.queue_name, preemption=settings.preemption)}
        self.prioritized = any(j.priority for j in jobs)
        self.states = {j.key: JobState(j, j.gang(), j.runtime) for j in jobs}
        if len(self.states) != len(jobs):
            raise ValueError("job keys must be unique")
        self.by_gang = {s.gang.name: s for s in self.states.values()}
        self.events = Events()
        self.for_quota: list[str] = []  # arrived, waiting for Kueue's quota reservation, arrival order
        self.reserved: dict[str, JobState] = {}  # quota reserved, not admitted
        self.admitted: dict[str, JobState] = {}
        self.unready: list[str] = []  # admitted, pods not all Ready yet (Sequential mode's gate)
        self.infeasible: list[Refused] = []  # refused since capacity last came free
        self.holds: dict[str, Hold] = {}  # domains held for preempting gangs, by holder
        self.reserving = self.way.policy.reservation.on
        self.reservations: dict[str, Holder] = {}  # domains reserved for waiting gangs, by holder
        self._wakes: set[float] = set()  # instants a wake-up is already scheduled for
        self.searched: dict[str, tuple[int, PreemptionPlan]] = {}  # victim searches, by gang
        self.generation = 0  # bumped whenever what a victim search reads changes
        self.optimum: dict[str, Placement] = {}  # the optimal policy's admissions of this pass, by gang
        self.tally = _Tally()
        self._schedule_arrivals()
        for p in self.plans:  # the pass decides again at every block boundary
            for b in p.blocks:
                for instant in (b.start, b.end):
                    self.events.push(max(0.0, (instant - settings.start).total_seconds()), EventKind.WAKE)

    def _schedule_arrivals(self) -> None:
        """Every job's arrival, but a job that does not fit even the empty cluster never will:
        it is reported, not queued."""
        explained = way(self.policy_name, self.gp, self.snap, explain=True)
        never_fits: dict[tuple[object, ...], str | None] = {}
        for j in sorted(self.jobs, key=lambda j: (j.arrival, j.key)):
            sig = (j.pods, j.gpus_per_pod, *j.topology())
            if sig not in never_fits:
                empty = explained.place(self.snap, self.states[j.key].gang, explained.policy, {})
                why = empty.placement.reason if empty.placement is not None else empty.message
                never_fits[sig] = None if empty.ready else f"never fits this cluster: {why}"
            refusal = never_fits[sig]
            if refusal is None:
                self.events.push(j.arrival, EventKind.ARRIVE, j.key)
            else:
                self.states[j.key].reason = refusal

    # -- the loop --------------------------------------------------------------------------

    def run(self, progress: Callable[[int], None] | None = None) -> Replay:
        """Every instant with events, in time order; `progress(n)` is told of n more events done."""
        while self.events:
            t = self.events.next_time()
            self.tally.advance(t, bool(self.plans))
            done = 0
            for event in self.events.due(t):
                done += 1
                self._apply(event)
            self._wakes.discard(t)
            self.tally.quota = self._quota_now(t)
            self._reserve_quota(t)
            self._admission_pass(t)
            if progress is not None:
                progress(done)
        return self._result()

    def _apply(self, event: Event) -> None:
        if event.kind is EventKind.ARRIVE:
            self.for_quota.append(event.key)
            return
        s = self.states[event.key] if event.key else None
        if s is None or s.attempt != event.attempt:
            return  # a wake-up, or an event of an attempt that already ended
        if event.kind is EventKind.REQUEUE:
            self._requeue(s)
        elif s.admitted_at is not None:
            self._handlers[event.kind](self, s, event.at)

    def _ready(self, s: JobState, t: float) -> None:
        if s.job.key in self.unready:
            self.unready.remove(s.job.key)
        s.running_since = t
        self.events.push(t + s.left, EventKind.FINISH, s.job.key, s.attempt)

    def _finish(self, s: JobState, t: float) -> None:
        self._stop(s, t)
        s.end = t
        s.left = 0.0

    def _timeout(self, s: JobState, t: float) -> None:
        assert s.admitted_at is not None
        obs = GangObservation(size=s.job.pods, bound=s.job.pods, ready=0, admitted_at=s.admitted_at)
        verdict = watch(self.gp, obs, t)
        rq = requeue_decision(self.gp, s.retries, verdict.reason, t, s.job.arrival)
        self._stop(s, t)
        s.reason = rq.message
        if rq.state is CheckState.RETRY:
            s.retries += 1
            self.events.push(t + (rq.requeue_after_seconds or 0), EventKind.REQUEUE, s.job.key, s.attempt)
        else:
            s.rejected = True

    def _drain(self, s: JobState, t: float) -> None:
        assert s.admitted_at is not None
        dr = gang_drain(
            self.plans,
            self.queue_name,
            self.flavors,
            self._at(t),
            _td(s.job.max_runtime),
            self._at(s.admitted_at),
        )
        if dr is not None and dr.evict:
            self._interrupt(s, t)
            s.drained += 1
            s.reason = dr.reason
            self._requeue(s)

    _handlers: Mapping[EventKind, Callable[[Replayer, JobState, float], None]] = {
        EventKind.READY: _ready,
        EventKind.FINISH: _finish,
        EventKind.TIMEOUT: _timeout,
        EventKind.DRAIN: _drain,
    }

    # -- what happens to a job -------------------------------------------------------------

    def _stop(self, s: JobState, t: float) -> None:
        """The job's gang leaves the cluster (finished, timed out, evicted)."""
        release(self.snap, s.gang, NAMESPACE)
        self.generation += 1
        self.tally.last_stop = t
        self.admitted.pop(s.job.key, None)
        if s.job.key in self.unready:
            self.unready.remove(s.job.key)
        self.tally.busy -= s.job.gpus
        self.tally.reserved_gpus -= s.job.gpus
        s.admitted_at = None
        s.attempt += 1
        self.infeasible = []

    def _interrupt(self, s: JobState, t: float) -> None:
        """Evict a running job whole (it resumes later with the run time it had left)."""
        if s.running_since is not None:
            s.left = max(0.0, s.left - (t - s.running_since))
        s.running_since = None
        self._stop(s, t)

    def _requeue(self, s: JobState) -> None:
        s.reserved_at = None
        self.for_quota.append(s.job.key)

    def _admit(self, s: JobState, placement: Placement, t: float) -> None:
        """The gang is admitted: charged, and its readiness (or timeout) and drain scheduled."""
        key = s.job.key
        charge(self.snap, s.gang, placement, NAMESPACE)
        self.generation += 1
        del self.reserved[key]
        self.admitted[key] = s
        self.tally.busy += s.job.gpus
        s.admitted_at = t
        if s.first_admitted is None:
            s.first_admitted = t
            s.domains = placement.domains
        startup = self.settings.startup_seconds
        obs = GangObservation(size=s.job.pods, bound=s.job.pods, ready=0, admitted_at=t)
        deadline = watch(self.gp, obs, t).recheck_at
        if deadline is not None and t + startup >= deadline:
            self.events.push(deadline, EventKind.TIMEOUT, key, s.attempt)
        else:
            self.unready.append(key)
            self.events.push(t + startup, EventKind.READY, key, s.attempt)
        if self.plans:
            end = gang_drain(
                self.plans, self.queue_name, self.flavors, self._at(t), _td(s.job.max_runtime), self._at(t)
            )
            if end is not None and end.evict_at is not None:
                at = max(t, (end.evict_at - self.settings.start).total_seconds())
                self.events.push(at, EventKind.DRAIN, key, s.attempt)

    # -- Kueue's quota, then the check's pass ----------------------------------------------

    def _at(self, t: float) -> datetime:
        return self.settings.start + timedelta(seconds=t)

    def _quota_now(self, t: float) -> int:
        if not self.plans:
            return _UNLIMITED
        q = queue_quota(self.plans, self.queue_name, self._at(t))
        return sum(v for (_, r), v in q.items() if r == GPU)

    def _reserve_quota(self, t: float) -> None:
        """Kueue: quota reservation in its queue order (priority first, then the order they
        came in), skipping what does not fit (BestEffortFIFO)."""
        if self.prioritized:
            self.for_quota.sort(key=lambda k: -self.states[k].job.priority)
        quota, tally = self.tally.quota, self.tally
        still: list[str] = []
        for key in self.for_quota:
            s = self.states[key]
            if tally.reserved_gpus + s.job.gpus <= quota:
                s.reserved_at = t
                self.reserved[key] = s
                tally.reserved_gpus += s.job.gpus
            else:
                free = max(quota - tally.reserved_gpus, 0)
                s.reason = f"waiting for quota; it needs {s.job.gpus} GPUs, {free} free"
                still.append(key)
        self.for_quota = still

    def _drain_of(self, s: JobState, t: float) -> tuple[DrainDecision | None, float | None]:
        """What the plans say about a waiting gang now, and when their quota next changes."""
        d = gang_drain(self.plans, self.queue_name, self.flavors, self._at(t), _td(s.job.max_runtime))
        if d is None or d.admit:
            return d, None
        change = next_quota_change(self.plans, self.queue_name, self._at(t))
        return d, None if change is None else (change - self.settings.start).total_seconds()

    def _admission_pass(self, t: float) -> None:
        """Every quota-reserved gang through the check's gate, in its order; then the victims of
        its preemptions evicted, and the cluster sampled."""
        waiting = [
            QueuedWorkload(
                key=k,
                policy=None,
                state=CheckState.PENDING,
                quota_reserved=True,
                quota_reserved_at=r.quota_reserved_at,
                created_at=r.job.arrival,
            )
            for k, r in self.reserved.items()
        ]
        ordered = [self.reserved[q.key] for q in admission_queue(waiting).candidates]
        drains = {s.job.key: self._drain_of(s, t) for s in ordered} if self.plans else {}
        state = self._preemption_state(t) if self.preempting else None
        book = self._reservation_book(t, ordered) if self.reserving else None
        if self.policy_name == "optimal" and ordered:
            self._solve_optimum(ordered, drains)
        victims: list[tuple[str, str]] = []  # (victim, preemptor) of this pass
        head: JobState | None = None
        for s in ordered:
            out = self._decide(s, t, drains.get(s.job.key, (None, None)), state, book)
            if out.preemption is not None and out.preemption.preempts:
                victims += [(v.key, s.job.key) for v in out.preemption.victims]
            if out.decision is not None and out.decision.ready:
                assert out.decision.placement is not None
                self._admit(s, out.decision.placement, t)
                continue
            s.reason = out.message
            if out.step in (GateStep.PLACEMENT, GateStep.PREEMPTION, GateStep.RESERVATION):
                head = head or s
        self._evict(victims, t)
        tally = self.tally
        tally.stranded = (
            stranded(self.snap, head.job, self.level_capacity, self.spares_held) if head is not None else 0
        )
        tally.sample(t, len(self.for_quota) + len(self.reserved))

    def _preemption_state(self, t: float) -> PreemptionState:
        """The holds of the waiting gangs, each for its preemptor's readyTimeout and its quota
        reservation; one given back makes room for the gangs known not to fit."""
        live = {
            k: h
            for k, h in self.holds.items()
            if k in self.reserved and h.live(self.reserved[k].quota_reserved_at, t, self.gp.ready_timeout)
        }
        if len(live) < len(self.holds):
            self.infeasible = []
            self.generation += 1
        running = partial(running_gangs, list(self.admitted.values()), self.queue_name)
        self.holds = live
        return SearchedPreemptions(live, running, partial(dict, self.queues), self.searched, self._generation)

    def _reservation_book(self, t: float, ordered: list[JobState]) -> Reservations:
        """The reservations of the waiting gangs, each for as long as its quota reservation."""
        live = {
            k: h
            for k, h in self.reservations.items()
            if k in self.reserved and h.reservation.live(self.reserved[k].quota_reserved_at)
        }
        self.reservations = live
        running = partial(running_gangs, list(self.admitted.values()), self.queue_name)
        ends = partial(self._ends, list(self.admitted.values()))
        return Reservations(live, running, ends, t, {s.job.key: i for i, s in enumerate(ordered)})

    def _ends(self, admitted: list[JobState]) -> dict[str, GangEnd]:
        """When each admitted job is expected to end: Ready, plus the run time it declares."""
        out = {}
        for s in admitted:
            assert s.admitted_at is not None
            ready = (
                s.running_since
                if s.running_since is not None
                else s.admitted_at + self.settings.startup_seconds
            )
            runtime = s.job.max_runtime
            out[s.job.key] = GangEnd(None if runtime is None else ready + runtime, s.job.checkpointable)
        return out

    def _generation(self) -> int:
        return self.generation

    def _solve_optimum(
        self, ordered: list[JobState], drains: Mapping[str, tuple[DrainDecision | None, float | None]]
    ) -> None:
        """The optimal policy's admissions of this pass: the packing optimum of the first
        waiting gangs the plans let start, with the same spares free as our placement keeps."""
        pick = [s for s in ordered if (d := drains.get(s.job.key, (None, None))[0]) is None or d.admit]
        pick = pick[:MAX_GANGS]
        spares = self.snap.spare_nodes(self.gp.placement.spares_per_ultraserver)
        found = optimal_admissions(self.snap, [s.gang for s in pick], spares)
        self.optimum = {s.gang.name: p for s, p in zip(pick, found, strict=True) if p.feasible}

    def _decide(
        self,
        s: JobState,
        t: float,
        drain: tuple[DrainDecision | None, float | None],
        state: PreemptionState | None,
        book: Reservations | None,
    ) -> GateVerdict:
        """The check's gate for one waiting gang; a preemption it starts, or a reservation it
        takes, is recorded."""
        key = s.job.key
        runtime = s.job.max_runtime
        facts = GangFacts(
            contender=Contender(key, s.job.priority, self.queue_name, s.job.arrival),
            policy=self.way.policy,
            gang=s.gang,
            snapshot=self.snap,
            now=t,
            quota_reserved_at=s.quota_reserved_at,
            backoff=None,  # a requeued gang waits out its backoff before Kueue reserves its quota
            unready=tuple(self.unready),
            drain=drain[0],
            next_quota_change=drain[1],
            expected_runtime=None if runtime is None else self.settings.startup_seconds + runtime,
        )
        out = gate(facts, state, self._place, book)
        if out.wake_at is not None:
            self._wake(out.wake_at)
        plan = out.preemption
        if plan is not None and plan.preempts and state is not None:
            state.started(key, plan, out.hold)
            self.generation += 1
            if out.hold is not None:  # given back after the preemptor's readyTimeout
                self._wake(t + self.gp.ready_timeout)
        if book is not None:  # taken, kept, moved or given up: as the book has it now
            if key in book.holders:
                self.reservations[key] = book.holders[key]
            else:
                self.reservations.pop(key, None)
        return out

    def _wake(self, at: float) -> None:
        """A pass at `at` (once, however many gangs ask for it)."""
        if at not in self._wakes:
            self._wakes.add(at)
            self.events.push(at, EventKind.WAKE)

    def _place(
        self, snap: Snapshot, gang: Gang, policy: GangPolicy, annotations: Mapping[str, str]
    ) -> AdmissionDecision:
        """The way's placement, skipping what is known not to fit."""
        s = self.by_gang[gang.name]
        if self.policy_name == "optimal":
            chosen = self.optimum.get(gang.name)
            why = "not in the packing optimum now"
            return AdmissionDecision(
                chosen is not None, why, placement=chosen or Placement(False, None, (), (), why)
            )
        # a holder has more room than the gangs kept off its domain
        excluded = excluded_nodes(gang)
        known = None if s.job.key in self.holds else dominated(s.job, excluded, self.infeasible)
        if known is not None:
            return known
        decision = self.way.place(snap, gang, policy, annotations)
        if not decision.ready:
            self.infeasible.append(Refused(s.job, excluded, decision))
        return decision

    def _evict(self, victims: list[tuple[str, str]], t: float) -> None:
        """Kueue evicts the victims whole and requeues them; the preemptors are decided again
        in a pass at this instant, on the capacity they left."""
        for victim, preemptor in victims:
            v = self.states[victim]
            self._interrupt(v, t)
            v.preempted += 1
            v.reason = f"preempted by {preemptor}"
            self._requeue(v)
        if victims:
            self._wake(t)

    # -- the result ------------------------------------------------------------------------

    def _result(self) -> Replay:
        outcomes = []
        for j in self.jobs:
            s = self.states[j.key]
            never = None
            if s.first_admitted is None or s.end is None:
                never = s.reason or "never admitted"
                if s.rejected:
                    never = f"deactivated: {s.reason}"
            outcomes.append(
                Outcome(
                    key=j.key,
                    gpus=j.gpus,
                    wait=None if s.first_admitted is None else s.first_admitted - j.arrival,
                    end=s.end,
                    drained=s.drained,
                    requeued=s.retries,
                    never_ran=never,
                    domains=s.domains,
                    preempted=s.preempted,
                )
            )
        tally = self.tally
        first_arrival = min((j.arrival for j in self.jobs), default=0.0)
        return Replay(
            policy=self.policy_name,
            total_gpus=self.total_gpus,
            outcomes=tuple(outcomes),
            samples=tuple(tally.samples),
            makespan=0.0 if tally.last_stop is None else max(tally.last_stop - first_arrival, 0.0),
            busy_gpu_seconds=tally.busy_s,
            stranded_gpu_seconds=tally.stranded_s,
            plan_unused_gpu_seconds=tally.unused_s,
        )


def _td(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def replay(
    nodes: Iterable[Node],
    jobs: Sequence[Job],
    policy_name: str,
    settings: Settings,
    progress: Callable[[int], None] | None = None,
) -> Replay:
    """Replay `jobs` under one placement policy; `progress(n)` is told of n more events done."""
    return Replayer(nodes, jobs, policy_name, settings).run(progress)
