"""May this gang go now: the admission gate that the admission pass, `gangctl explain` and the
capacity simulator all run (pure).

The caller gathers a waiting gang's facts as plain values (`GangFacts`); `gate` takes them
through `ORDER`, the one sequence of named steps, and the first step that holds the gang back
decides, with its reason (`GateVerdict`):

  policy      its GangPolicy is usable, else it waits naming the error
  pods        a pod group whose placement annotations are read from its pods (a
              LeaderWorkerSet's, under Kueue v0.17) waits for a pod of each podset
  keys        no pod template carries an unknown key of ours (a misspelt annotation would
              drop what it asks): it waits naming the key and the closest known one
  backoff     a gang requeued after a timeout that has quota before its backoff ends waits out the rest
  sequential  Sequential mode: it waits for the admitted gang of its policy not Ready yet
  drain       the TrainingPlans feeding its quota let it start before their capacity ends
  placement   the whole gang fits now (`core.admission.decide`), off the domains held for
              other gangs' preemptions and reserved for other gangs it would not end before
              (`core.reservation`): it is admitted
  whole       one that does not fit and never could (`placement.never_whole`: larger than
              every domain of its required level) waits saying so, with the fix
  preemption  one that does not fit resumes its recorded preemption, or finds victims
              (`core.preemption.find_victims`) and holds their domain; not when its policy
              says Never or the caller models no preemption
  reservation one that does not fit and has waited its policy's `reservation.afterWaiting`
              gets a domain reserved (`core.reservation`), or keeps the one it has, and may
              have checkpointable gangs of lower priority cleared from it

Each step judges only what it can: one that needs a usable policy lets the gang through
without one (the policy step holds it, wherever it stands), and a Workload whose gang or
max-runtime cannot be read is rejected by the first step that needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

from gangplugin.core.admission import AdmissionDecision, decide, sequential_blocker
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.names import BLOCK_END_ANNOTATION
from gangplugin.core.placement import Gang, never_whole
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import (
    ClusterQueueState,
    Contender,
    Hold,
    PreemptionPlan,
    RunningGang,
    VictimIndex,
    exclude_nodes,
    find_victims,
    hold_of,
)
from gangplugin.core.reservation import (
    Holder,
    Reservation,
    Reservations,
    describe,
    occupant,
    reservation_level,
)
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import Snapshot


@dataclass(frozen=True, slots=True)
class Backoff:
    """A requeued gang's backoff: its end in the caller's clock, and as the Workload writes it."""

    until: float
    text: str


@dataclass(frozen=True, slots=True)
class GangFacts:
    """A waiting gang as the gate reads it. Times are in the caller's clock (epoch seconds in
    the cluster, seconds from the trace start in the simulator)."""

    contender: Contender  # its key, priority, ClusterQueue and creation time
    policy: GangPolicy | InputError  # or why it cannot be used
    gang: Gang | InputError  # or why the Workload cannot be read
    snapshot: Snapshot | None  # capacity for its policy's levels (None: no usable policy)
    now: float
    quota_reserved_at: float = 0.0
    backoff: Backoff | None = None
    #: The admitted gangs of its policy that are not Ready yet (the Sequential gate).
    unready: Sequence[str] = ()
    #: What the plans feeding its quota say (None: none feeds it; an error: its max-runtime).
    drain: DrainDecision | InputError | None = None
    #: When those plans' quota next changes (needed only when `drain` refuses the gang).
    next_quota_change: float | None = None
    #: The podsets none of whose pods exists yet, for a gang whose placement annotations are
    #: read from its pods (the gang is not read in full until each has one).
    awaiting_pods: Sequence[str] = ()
    #: How long it runs at most once admitted (None: it does not say): a gang that will end
    #: before a reserved domain's expected start may run there meanwhile.
    expected_runtime: float | None = None


class GateStep(StrEnum):
    """The steps of the gate, named as `ORDER` runs them."""

    POLICY = "policy"
    PODS = "pods"
    KEYS = "keys"
    BACKOFF = "backoff"
    SEQUENTIAL = "sequential"
    DRAIN = "drain"
    PLACEMENT = "placement"
    WHOLE = "whole"
    PREEMPTION = "preemption"
    RESERVATION = "reservation"


@dataclass(frozen=True, slots=True, kw_only=True)
class GateVerdict:
    """The gate's answer for one gang: admit (`decision.ready`), wait with `message` (and
    `wake_at`, when the decision may change by then), or reject. `step` names the step that
    decided; `preemption`: whom it preempts or waits for; `hold`: a new hold to record;
    `reservation`: the domain reserved for it (to record when it is not the one recorded).
    `message` is what the check says, the same while the facts that decided stay the same;
    `detail` adds the counts that change meanwhile, for people (empty: `message` says all)."""

    step: GateStep
    message: str
    decision: AdmissionDecision | None = None
    gang: Gang | None = None
    policy: GangPolicy | None = None
    blocked_by: str | None = None
    rejected: bool = False
    wake_at: float | None = None
    preemption: PreemptionPlan | None = None
    hold: Hold | None = None
    reservation: Reservation | None = None
    detail: str = ""

    @property
    def full(self) -> str:
        """The message with its particulars: what `gangctl explain` shows."""
        return self.detail or self.message


#: How a gang is placed: snapshot, gang (off held domains), policy, annotations for its pods.
Placer = Callable[[Snapshot, Gang, GangPolicy, Mapping[str, str]], AdmissionDecision]


def check_placement(
    snapshot: Snapshot, gang: Gang, policy: GangPolicy, annotations: Mapping[str, str]
) -> AdmissionDecision:
    """The gang check's placement: `decide` with the policy's spares and bind mode."""
    return decide(snapshot, gang, gang.name, policy.placement, annotations, bind_mode=policy.bind_mode)


class PreemptionState:
    """What one pass (or one explain, or one simulated pass) knows about preemption: the live
    holds by holder key, and the running gangs and ClusterQueue rules, read on first use (most
    passes never need them)."""

    def __init__(
        self,
        holds: dict[str, Hold],
        running: Callable[[], list[RunningGang]],
        queues: Callable[[], Mapping[str, ClusterQueueState]],
    ) -> None:
        self.holds = holds
        self._read_running, self._read_queues = running, queues
        self._indexes: list[tuple[Snapshot, VictimIndex]] = []  # one per snapshot (level order)

    @cached_property
    def running(self) -> list[RunningGang]:
        return self._read_running()

    @cached_property
    def queues(self) -> Mapping[str, ClusterQueueState]:
        return self._read_queues()

    def index(self, snapshot: Snapshot) -> VictimIndex:
        """The victim searches' shared index for this snapshot, built once per pass: the
        running gangs' pods are read once, not once per waiting gang."""
        for snap, index in self._indexes:
            if snap is snapshot:
                return index
        index = VictimIndex(snapshot, self.running)
        self._indexes.append((snapshot, index))
        return index

    def victims(
        self, snapshot: Snapshot, gang: Gang, policy: GangPolicy, contender: Contender
    ) -> PreemptionPlan:
        """Whom `gang` would preempt (`find_victims` over the running gangs and the rules)."""
        return find_victims(
            snapshot, gang, policy.placement, contender, self.running, self.queues, self.index(snapshot)
        )

    def held_for_others(self, key: str, snapshot: Snapshot) -> frozenset[str]:
        """The nodes held for the preemptions of gangs other than `key`."""
        return frozenset().union(*(h.held_nodes(snapshot) for k, h in self.holds.items() if k != key))

    def started(self, key: str, plan: PreemptionPlan, hold: Hold | None) -> None:
        """A preemption the caller carries out: its hold counts from the next decision on, and
        its victims are being evicted for everyone after it (the same gangs and pods: the
        indexes stay valid)."""
        if hold is not None:
            self.holds[key] = hold
        victims = {v.key for v in plan.victims}
        self.running = [replace(g, evicting=True) if g.key in victims else g for g in self.running]


def resume(hold: Hold, running: Sequence[RunningGang]) -> PreemptionPlan:
    """A recorded preemption: victims still admitted since before the hold are evicted (a
    restart cut the preemption short), the others are waited for."""
    by_key = {g.key: g for g in running}
    left = [g for v in hold.victims if (g := by_key.get(v)) is not None and g.started_at <= hold.at]
    todo = tuple(
        g.victim(f"{g.key}: named by the preemption recorded earlier") for g in left if not g.evicting
    )
    gone = tuple(g.key for g in left if g.evicting)
    where = f"{hold.level}={hold.domain}" if hold.level else f"{len(hold.nodes)} held node(s)"
    names = ", ".join(hold.victims)
    reason = (
        f"preempting {names}: "
        + ("evicting the rest" if todo else "waiting for them to leave")
        + f" {where} (held for this gang)"
    )
    return PreemptionPlan(todo, gone, hold.level, hold.domain, hold.nodes, reason)


@dataclass(frozen=True, slots=True)
class _Run:
    facts: GangFacts
    preemption: PreemptionState | None
    placer: Placer
    reservations: Reservations | None = None


@dataclass(frozen=True, slots=True)
class _Passage:
    """What the steps a gang passed hand on: annotations for its pods, and placement's answer
    for a gang that does not fit (with the gang as placed, off the held domains); the victim
    search that found none, and when the gang should be decided again."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    unfit: AdmissionDecision | None = None
    gang: Gang | None = None
    searched: PreemptionPlan | None = None
    wake_at: float | None = None


class Stage(NamedTuple):
    """One step of the gate's order: its name and what it runs."""

    name: GateStep
    run: Callable[[_Run, _Passage], GateVerdict | _Passage]


def _policy_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    policy = run.facts.policy
    if isinstance(policy, InputError):
        return GateVerdict(step=GateStep.POLICY, message=f"waiting: {policy}")
    return passage


def _pods_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    waiting = run.facts.awaiting_pods
    if not waiting:
        return passage
    return GateVerdict(
        step=GateStep.PODS,
        message=f"waiting for a pod of podset {', '.join(waiting)}: "
        "this group's placement annotations are read from its pods",
    )


def _keys_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    """A gang whose pod templates carry a misspelt key of ours waits, rather than run without
    what the key was meant to ask (a requirement dropped without a word)."""
    gang = run.facts.gang
    if isinstance(gang, InputError) or not (found := gang.unknown_keys()):
        return passage
    names = [ps.name for ps in gang.podsets]
    what = "; ".join(f"podset {names[i]}: {key}" for i, key in found)
    return GateVerdict(
        step=GateStep.KEYS,
        message=f"waiting: {what}; fix the job's pod template (a Workload's podsets cannot change: "
        "delete the job and submit it again)",
    )


def _backoff_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    b = run.facts.backoff
    if b is None or b.until <= run.facts.now:
        return passage
    # No countdown in it: a message that changed every pass would be written every pass.
    message = f"requeued whole after a timeout: backoff until {b.text}"
    return GateVerdict(step=GateStep.BACKOFF, message=message, wake_at=b.until)


def _sequential_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    f = run.facts
    if not isinstance(f.policy, GangPolicy) or not f.policy.sequential:
        return passage
    blocker = sequential_blocker(f.contender.key, f.unready)
    if blocker is None:
        return passage
    message = f"Sequential admission: waiting for gang {blocker} to be Ready"
    return GateVerdict(step=GateStep.SEQUENTIAL, message=message, policy=f.policy, blocked_by=blocker)


def _drain_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    d = run.facts.drain
    if d is None:
        return passage
    if isinstance(d, InputError):
        return _rejected(GateStep.DRAIN, d)
    if not d.admit:
        return GateVerdict(
            step=GateStep.DRAIN,
            message=f"waiting for the next block: {d.reason}",
            wake_at=run.facts.next_quota_change,
        )
    if d.block_end is None:
        return passage
    return replace(
        passage, annotations={**passage.annotations, BLOCK_END_ANNOTATION: format_time(d.block_end)}
    )


def _placement_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    f = run.facts
    if not isinstance(f.policy, GangPolicy) or f.snapshot is None:
        return passage
    if isinstance(f.gang, InputError):
        return _rejected(GateStep.PLACEMENT, f.gang)
    held: frozenset[str] = frozenset()
    if run.preemption is not None and run.preemption.holds:
        held = run.preemption.held_for_others(f.contender.key, f.snapshot)
    notes: tuple[str, ...] = ()
    if run.reservations is not None and run.reservations.holders:
        reserved, notes = run.reservations.exclusions(f.contender, f.gang, f.expected_runtime, f.snapshot)
        held |= reserved
    gang = exclude_nodes(f.gang, held)
    decision = run.placer(f.snapshot, gang, f.policy, passage.annotations)
    if decision.ready:
        if run.reservations is not None:  # admitted: an occupant of its domain from now on
            run.reservations.admitted(occupant(f.contender, gang, f.now, f.expected_runtime))
        return GateVerdict(
            step=GateStep.PLACEMENT, message=decision.message, decision=decision, gang=gang, policy=f.policy
        )
    if notes:
        counting = f"; not counting {'; '.join(notes)}"
        decision = replace(
            decision,
            message=decision.message + counting,
            detail=decision.detail and decision.detail + counting,
        )
    return replace(passage, unfit=decision, gang=gang)


def _whole_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    f = run.facts
    if passage.unfit is None or f.snapshot is None or not isinstance(f.policy, GangPolicy):
        return passage
    assert not isinstance(f.gang, InputError)  # placement rejects an unreadable gang
    never = never_whole(f.snapshot, f.gang, f.policy.placement)
    if never is None:
        return passage
    return GateVerdict(
        step=GateStep.WHOLE, message=never.message, decision=passage.unfit, gang=passage.gang, policy=f.policy
    )


def _preemption_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    f, state, unfit, gang = run.facts, run.preemption, passage.unfit, passage.gang
    if (
        state is None
        or unfit is None
        or unfit.placement is None
        or gang is None
        or f.snapshot is None
        or not isinstance(f.policy, GangPolicy)
        or f.policy.preemption == "Never"
    ):
        return passage
    own = state.holds.get(f.contender.key)
    if own is not None:
        plan, hold = resume(own, state.running), None
    else:
        plan = state.victims(f.snapshot, gang, f.policy, f.contender)
        hold = hold_of(plan, f.quota_reserved_at, f.now) if plan.preempts else None
    if not (plan.preempts or plan.waiting_for):
        return replace(passage, searched=plan)  # no victims: a reservation may still help
    return GateVerdict(
        step=GateStep.PREEMPTION,
        message=plan.reason,
        decision=unfit,
        gang=gang,
        policy=f.policy,
        preemption=plan,
        hold=hold,
    )


def _reservation_step(run: _Run, passage: _Passage) -> GateVerdict | _Passage:
    f, book, unfit, gang = run.facts, run.reservations, passage.unfit, passage.gang
    if (
        book is None
        or unfit is None
        or gang is None
        or f.snapshot is None
        or not isinstance(f.policy, GangPolicy)
        or not isinstance(f.gang, Gang)
        or f.policy.reservation.after_waiting is None
    ):
        return passage
    rp, key = f.policy.reservation, f.contender.key
    due = f.quota_reserved_at + (rp.after_waiting or 0.0)
    if book.recorded(key) is None and f.now < due:
        return replace(passage, wake_at=due)  # decided again once it is due

    def waits(
        message: str,
        reservation: Reservation | None = None,
        preemption: PreemptionPlan | None = None,
        hold: Hold | None = None,
        detail: str = "",
    ) -> GateVerdict:
        return GateVerdict(
            step=GateStep.RESERVATION,
            message=message,
            decision=unfit,
            gang=gang,
            policy=f.policy if isinstance(f.policy, GangPolicy) else None,
            preemption=preemption,
            hold=hold,
            reservation=reservation,
            detail=detail,
        )

    why, why_detail = _unfit_messages(passage)

    def told(then: str, reservation: Reservation | None = None) -> GateVerdict:
        """Waits with why it does not fit, then `then` (the same in the message and its detail)."""
        return waits(f"{why}; {then}", reservation, detail=why_detail and f"{why_detail}; {then}")

    try:
        level = reservation_level(f.snapshot, f.gang, f.policy.placement, rp.level)
    except InputError as err:
        book.release(key)
        return told(f"no domain reserved: {err.field}: {err.problem}")
    if level is None:  # it needs no whole domain (or a wider one than the policy reserves)
        book.release(key)
        return passage
    asked = Reservation(f.snapshot.levels[level], "", f.quota_reserved_at, f.now)
    holder = Holder(f.contender, f.gang, f.policy.placement, asked, rp.max_checkpointable_evictions)
    reserved = book.reserve(holder, level, f.snapshot)
    if reserved is None:
        return told(
            f"no {f.snapshot.levels[level]} to reserve for it yet: each overlaps the "
            "reservation of a gang before it"
        )
    taken, start = reserved
    state = run.preemption
    plan = book.clearing(key, f.snapshot, state.queues) if state is not None else None
    if plan is not None:
        return waits(
            plan.reason, preemption=plan, hold=hold_of(plan, f.quota_reserved_at, f.now), reservation=taken
        )
    return told(describe(taken, start), taken)


def _unfit_messages(passage: _Passage) -> tuple[str, str]:
    """Why a gang that does not fit waits: placement's reason and its victim search's, as a
    message and its detail (see `GateVerdict`)."""
    unfit, plan = passage.unfit, passage.searched
    assert unfit is not None
    if plan is None:
        return unfit.message, unfit.detail
    return (
        f"{unfit.message}; preemption: {plan.summary or plan.reason}",
        f"{unfit.detail or unfit.message}; preemption: {plan.reason}",
    )


#: The one order of the gate.
ORDER: tuple[Stage, ...] = (
    Stage(GateStep.POLICY, _policy_step),
    Stage(GateStep.PODS, _pods_step),
    Stage(GateStep.KEYS, _keys_step),
    Stage(GateStep.BACKOFF, _backoff_step),
    Stage(GateStep.SEQUENTIAL, _sequential_step),
    Stage(GateStep.DRAIN, _drain_step),
    Stage(GateStep.PLACEMENT, _placement_step),
    Stage(GateStep.WHOLE, _whole_step),
    Stage(GateStep.PREEMPTION, _preemption_step),
    Stage(GateStep.RESERVATION, _reservation_step),
)


def gate(
    facts: GangFacts,
    preemption: PreemptionState | None = None,
    placer: Placer = check_placement,
    reservations: Reservations | None = None,
) -> GateVerdict:
    """The decision for one waiting gang, in `ORDER` (see the module docstring). `preemption`:
    the pass's preemption state (None: no preemption is modelled); `placer`: how the gang is
    placed (the check's placement unless the simulator compares another); `reservations`: the
    pass's reservations (None: none is modelled)."""
    run, passage = _Run(facts, preemption, placer, reservations), _Passage()
    for step in ORDER:
        try:
            out = step.run(run, passage)
        except InputError as err:  # the Workload asks for something placement cannot read
            return _rejected(step.name, err)
        if isinstance(out, GateVerdict):
            return out
        passage = out
    unfit = passage.unfit
    if unfit is None:
        raise ValueError("the gate's order has no placement step")
    policy = facts.policy if isinstance(facts.policy, GangPolicy) else None
    message, detail = _unfit_messages(passage)
    return GateVerdict(
        step=GateStep.PLACEMENT if passage.searched is None else GateStep.PREEMPTION,
        message=message,
        decision=unfit,
        gang=passage.gang,
        policy=policy,
        wake_at=passage.wake_at,
        preemption=passage.searched,
        detail=detail,
    )


class WaitingReason(StrEnum):
    """Why a gang the gate holds back waits (the label of gangplugin_waiting_gangs)."""

    NO_FIT = "NoFit"
    SEQUENTIAL = "Sequential"
    PLAN_DRAIN = "PlanDrain"
    BACKOFF = "Backoff"
    PREEMPTING = "Preempting"
    POLICY_UNUSABLE = "PolicyUnusable"
    AWAITING_PODS = "AwaitingPods"
    UNKNOWN_KEY = "UnknownKey"
    NEVER_WHOLE = "NeverWhole"
    RESERVED = "Reserved"


_STEP_REASONS = {
    GateStep.POLICY: WaitingReason.POLICY_UNUSABLE,
    GateStep.PODS: WaitingReason.AWAITING_PODS,
    GateStep.KEYS: WaitingReason.UNKNOWN_KEY,
    GateStep.BACKOFF: WaitingReason.BACKOFF,
    GateStep.SEQUENTIAL: WaitingReason.SEQUENTIAL,
    GateStep.DRAIN: WaitingReason.PLAN_DRAIN,
    GateStep.WHOLE: WaitingReason.NEVER_WHOLE,
    GateStep.RESERVATION: WaitingReason.RESERVED,
}


def waiting_reason(verdict: GateVerdict) -> WaitingReason:
    """Why a gang the gate holds back waits: the step that held it, a gang that does not fit
    being `Preempting` while it preempts or waits for its victims."""
    plan = verdict.preemption
    if verdict.step is GateStep.PREEMPTION and plan is not None and (plan.preempts or plan.waiting_for):
        return WaitingReason.PREEMPTING
    return _STEP_REASONS.get(verdict.step, WaitingReason.NO_FIT)


def _rejected(step: GateStep, err: InputError) -> GateVerdict:
    return GateVerdict(step=step, message=f"the Workload cannot be used: {err}", rejected=True)
