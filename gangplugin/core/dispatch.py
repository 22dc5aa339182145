"""Which worker cluster a gang goes to, and when a nomination is given up: gangplugin's MultiKueue
dispatcher (Kueue's `External` dispatcher mode: the manager's Kueue copies a Workload only to
the workers its `status.nominatedClusterNames` names, and keeps the first copy admitted).

`dispatch` judges every worker as its own Kueue and gang check would judge the gang now, from
plain values the adapter reads through the worker's kubeconfig, in this order:

1. usable: connected, with a LocalQueue of the gang's queue name whose ClusterQueue runs the
   gang check (`Worker.unusable` says why not);
2. not refused lately: a worker that refused this gang (its Kueue or its gang check said no, or
   it did not answer in time) is not asked again for `refusal_ttl` seconds;
3. quota: the first flavor of its ClusterQueue, in Kueue's order, with the gang's requests
   unreserved (`FlavorQuota.free`, nominations in flight already taken off); the gang then
   runs on that flavor's nodes (its nodeLabels join every podset's nodeSelector);
4. the worker's gang check, as it would decide the gang there now (`core.gate.gate`: its
   GangPolicy, its Sequential gate over the worker's admitted gangs not Ready yet, where
   TrainingPlans feed that flavor plan capacity for the gang's max runtime (`core.drain`), then
   placement on the worker's snapshot: its nodes, bound pods, the capacity promised to its
   admitted gangs and to nominations in flight, with the policy's spares). Preemption is not
   modelled: a gang is sent only where it fits without.

Among the workers where the gang fits, the tightest wins: least room left, in pods of the
gang's shapes, in the domain it lands in (`place`'s best fit carried across clusters: a gang
fills a partly used UltraServer before it breaks into a whole free one elsewhere), ties by
name. A gang that fits nowhere is not nominated: it waits on the manager, whose Kueue holds its
quota there, and nothing is reserved in any worker.

`step` says what to do with a gang's nomination: one worker is nominated at a time, and a
worker is given up only once its copy is gone, so no two workers ever hold the gang at once
(see its docstring).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gangplugin.core.admission import charge, with_selector
from gangplugin.core.drain import gang_drain
from gangplugin.core.errors import InputError
from gangplugin.core.gate import GangFacts, gate
from gangplugin.core.placement import Gang, Placement, PlacementPolicy, held_spares
from gangplugin.core.placement.capacity import podset_counts, request_shape
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import Contender
from gangplugin.core.resources import format_quantity
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import format_time, parse_time, to_seconds
from gangplugin.core.topology import Snapshot

#: How long a worker that refused a gang is not asked again (Kueue's Incremental dispatcher
#: gives each round 5 minutes too).
REFUSAL_TTL = 300.0
#: How long a nominated worker may take to admit or refuse a gang before it is given up.
ANSWER_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """What a worker's ClusterQueue would give the gang: a flavor (or, with several resource
    groups, one flavor per group: `name` joins them with "+", `flavors` names each resource's),
    its node labels and, per resource it covers, the quota not reserved (canonical units)."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)
    flavors: Mapping[str, str] = field(default_factory=dict)

    def flavor_of(self, resource: str) -> str:
        return self.flavors.get(resource, self.name)

    def less(self, taken: Mapping[tuple[str, str], int]) -> FlavorQuota:
        """With `taken` ((flavor, resource) -> amount) no longer free."""
        if not taken:
            return self
        free = {r: q - taken.get((self.flavor_of(r), r), 0) for r, q in self.free.items()}
        return dataclasses.replace(self, free=free)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A worker said no to this gang (or did not answer) at `at` (epoch seconds)."""

    worker: str
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class Worker:
    """A worker cluster as the dispatcher sees it for one gang (the adapter reads the worker's
    LocalQueue of the gang's queue name, its ClusterQueue, the gang check's GangPolicy, the
    plans feeding that ClusterQueue and the snapshot in the policy's level order). `unready`:
    the keys of its admitted gangs of that policy not Ready yet (its Sequential gate)."""

    name: str
    snapshot: Snapshot | None = None
    policy: GangPolicy = field(default_factory=GangPolicy)
    cluster_queue: str = ""
    flavors: tuple[FlavorQuota, ...] = ()
    plans: tuple[TrainingPlan, ...] = ()
    #: Why it cannot take the gang at all (unreachable, no such LocalQueue, no gang check...).
    unusable: str | None = None
    unready: tuple[str, ...] = ()

    def less(self, gone: Mapping[tuple[str, str], int]) -> Worker:
        """The worker with quota `gone` ((flavor, resource) -> amount) taken by nominations."""
        if not gone:
            return self
        return dataclasses.replace(self, flavors=tuple(f.less(gone) for f in self.flavors))


@dataclass(frozen=True, slots=True)
class WorkerVerdict:
    """What `dispatch` made of one worker: the reason is a sentence for `gangctl explain`.
    `room`: pods of the gang's shapes still free in its domain there after it (where it fits)."""

    worker: str
    fits: bool
    chosen: bool
    reason: str
    flavor: str | None = None
    level: str | None = None
    domains: tuple[str, ...] = ()
    room: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"worker": self.worker, "fits": self.fits, "chosen": self.chosen}
        out["reason"] = self.reason
        if self.flavor is not None:
            out["flavor"] = self.flavor
        if self.level is not None:
            out["level"] = self.level
        if self.domains:
            out["domains"] = list(self.domains)
        if self.room is not None:
            out["room"] = self.room
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> WorkerVerdict:
        room = raw.get("room")
        return cls(
            worker=str(raw.get("worker", "")),
            fits=raw.get("fits") is True,
            chosen=raw.get("chosen") is True,
            reason=str(raw.get("reason", "")),
            flavor=str(raw["flavor"]) if raw.get("flavor") is not None else None,
            level=str(raw["level"]) if raw.get("level") is not None else None,
            domains=tuple(str(d) for d in raw.get("domains") or ()),
            room=room if isinstance(room, int) and not isinstance(room, bool) else None,
        )


@dataclass(frozen=True, slots=True)
class Fit:
    """Where the gang would run in one worker: the flavor Kueue would give it, the gang on that
    flavor's nodes, and its placement there."""

    flavor: FlavorQuota
    gang: Gang
    placement: Placement
    room: int


@dataclass(frozen=True, slots=True)
class Dispatch:
    """`chosen`: the worker to nominate (None: it fits in none now); `verdicts`: every worker,
    the chosen first, then the others where it fits by rank, then the rest by name."""

    chosen: str | None
    verdicts: tuple[WorkerVerdict, ...]
    summary: str
    fit: Fit | None = None


def requests_of(gang: Gang) -> dict[str, int]:
    """What the whole gang asks its ClusterQueue for: per resource, count times request."""
    total: dict[str, int] = {}
    for ps in gang.podsets:
        for resource, amount in ps.requests.items():
            if amount:
                total[resource] = total.get(resource, 0) + ps.count * amount
    return total


def _quota_flavor(worker: Worker, needs: Mapping[str, int]) -> tuple[FlavorQuota | None, str]:
    """The first flavor (Kueue's order) that covers and has free every resource the gang asks
    for, or why none does."""
    shorts = []
    for flavor in worker.flavors:
        missing = [r for r in sorted(needs) if r not in flavor.free]
        short = [r for r in sorted(needs) if r in flavor.free and flavor.free[r] < needs[r]]
        if not missing and not short:
            return flavor, ""
        if missing:
            shorts.append(f"flavor {flavor.name} does not cover {', '.join(missing)}")
        else:
            shorts.append(
                f"flavor {flavor.name} has "
                + ", ".join(
                    f"{format_quantity(r, max(0, flavor.free[r]))} {r} free of {format_quantity(r, needs[r])}"
                    for r in short
                )
            )
    where = f"ClusterQueue {worker.cluster_queue}" if worker.cluster_queue else "its ClusterQueue"
    if not shorts:
        return None, f"{where} has no flavor for it"
    return None, f"no quota in {where}: {'; '.join(shorts)}"


def _domain_of(snapshot: Snapshot, placement: Placement) -> int:
    """The id of the one domain a placement chose (the root when it was spread)."""
    if placement.level is None or len(placement.domains) != 1:
        return 0
    level = snapshot.level_index(placement.level)
    if level is None:
        return 0
    value = placement.domains[0]
    return next((d for d in snapshot.by_level[level] if snapshot.domains[d].value == value), 0)


def room_left(snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, placement: Placement) -> int:
    """Pods of the gang's shapes that would still fit in the domain its placement chose, beside
    it (what `place` ranks domains by): the fragmentation the gang leaves there."""
    domain = _domain_of(snapshot, placement)
    spares = held_spares(snapshot, policy)
    room = 0
    for ps in gang.podsets:
        counts = podset_counts(snapshot, request_shape(ps), ps, spares)
        room += max(0, counts.per_domain[domain] - ps.count)
    return room


def fit_in(
    gang: Gang, worker: Worker, now: float, max_runtime: timedelta | None = None
) -> tuple[Fit | None, str]:
    """Whether the gang fits in the worker now (steps 3 and 4 of the module docstring): its Fit,
    or None and why not."""
    if worker.snapshot is None:
        return None, "its nodes are not known yet"
    flavor, why = _quota_flavor(worker, requests_of(gang))
    if flavor is None:
        return None, why
    on_flavor = with_selector(gang, flavor.node_labels)
    drain = None
    if worker.plans:
        at = datetime.fromtimestamp(now, UTC)
        flavors = set(flavor.flavors.values()) or {flavor.name}
        drain = gang_drain(worker.plans, worker.cluster_queue, flavors, at, max_runtime)
    facts = GangFacts(
        contender=Contender(key=gang.name, priority=0, cluster_queue=worker.cluster_queue, created_at=now),
        policy=worker.policy,
        gang=on_flavor,
        snapshot=worker.snapshot,
        now=now,
        unready=worker.unready,
        drain=drain,
    )
    verdict = gate(facts)
    decision = verdict.decision
    if decision is None or not decision.ready or decision.placement is None:
        return None, verdict.message
    p = decision.placement
    return Fit(flavor, on_flavor, p, room_left(worker.snapshot, on_flavor, worker.policy.placement, p)), ""


def dispatch(
    gang: Gang,
    workers: Sequence[Worker],
    now: float,
    refusals: Collection[Refusal] = (),
    *,
    max_runtime: timedelta | None = None,
    refusal_ttl: float = REFUSAL_TTL,
) -> Dispatch:
    """The worker to nominate for `gang` now, and why each worker was or was not chosen (see the
    module docstring). `refusals`: the gang's past refusals (the latest per worker counts)."""
    latest: dict[str, Refusal] = {}
    for r in refusals:
        if r.worker not in latest or r.at > latest[r.worker].at:
            latest[r.worker] = r
    fits: list[tuple[Worker, Fit]] = []
    others: list[WorkerVerdict] = []
    for worker in sorted(workers, key=lambda w: w.name):
        refused = latest.get(worker.name)
        if worker.unusable is not None:
            others.append(WorkerVerdict(worker=worker.name, fits=False, chosen=False, reason=worker.unusable))
        elif refused is not None and now - refused.at < refusal_ttl:
            # No countdown in it: a verdict that changed every pass would be written every pass.
            at, again = (
                format_time(datetime.fromtimestamp(t, UTC)) for t in (refused.at, refused.at + refusal_ttl)
            )
            why = f"refused it at {at} ({refused.reason}); asked again from {again}"
            others.append(WorkerVerdict(worker=worker.name, fits=False, chosen=False, reason=why))
        else:
            found, why = fit_in(gang, worker, now, max_runtime)
            if found is None:
                others.append(WorkerVerdict(worker=worker.name, fits=False, chosen=False, reason=why))
            else:
                fits.append((worker, found))
    fits.sort(key=lambda wf: (wf[1].room, wf[0].name))
    verdicts = [_fit_verdict(w, f, i, fits) for i, (w, f) in enumerate(fits)]
    if not fits:
        told = "; ".join(f"{v.worker}: {v.reason}" for v in others) or "no worker is configured"
        return Dispatch(None, tuple(others), f"fits in no worker now: {told}")
    winner, fit = fits[0]
    return Dispatch(winner.name, (*verdicts, *others), f"nominated {winner.name}: {verdicts[0].reason}", fit)


def _fit_verdict(worker: Worker, fit: Fit, rank: int, fits: Sequence[tuple[Worker, Fit]]) -> WorkerVerdict:
    p = fit.placement
    if rank == 0:
        tail = f"; the tightest of {len(fits)} workers where it fits" if len(fits) > 1 else ""
        reason = f"chosen: {p.reason}{tail}"
    else:
        best_worker, best = fits[0]
        if best.room == fit.room:
            reason = f"fits ({p.reason}), as tight as {best_worker.name}, which comes first by name"
        else:
            reason = (
                f"fits ({p.reason}), but {best_worker.name} leaves less room "
                f"({best.room} pods against {fit.room})"
            )
    return WorkerVerdict(
        worker=worker.name,
        fits=True,
        chosen=rank == 0,
        reason=reason,
        flavor=fit.flavor.name,
        level=p.level,
        domains=p.domains,
        room=fit.room,
    )


def taken(fit: Fit) -> dict[tuple[str, str], int]:
    """The quota a nominated gang takes: (flavor, resource) -> amount."""
    return {(fit.flavor.flavor_of(r), r): q for r, q in requests_of(fit.gang).items()}


def commit(worker: Worker, fit: Fit, namespace: str) -> None:
    """Charge a gang nominated to the worker to its snapshot (in place): the next gang decided
    on it sees those nodes taken. Its quota is `taken(fit)`, off with `Worker.less`."""
    assert worker.snapshot is not None
    charge(worker.snapshot, fit.gang, fit.placement, namespace)


def hold(
    gang: Gang,
    worker: Worker,
    namespace: str,
    now: float,
    max_runtime: timedelta | None = None,
    *,
    quota: bool = True,
) -> Fit | None:
    """A nomination in flight (its copy not admitted there yet) charged to its worker where it
    fits (its Fit; the caller takes its quota off); where it no longer does, nothing is charged
    and None is returned (its worker will refuse it). `quota`: False once the copy's own Kueue
    has reserved quota for it (the worker counts that itself: only its nodes are asked about)."""
    if worker.unusable is not None:
        return None
    if not quota:
        worker = dataclasses.replace(worker, flavors=tuple(_unbounded(f, gang) for f in worker.flavors))
    found, _ = fit_in(gang, worker, now, max_runtime)
    if found is not None:
        commit(worker, found, namespace)
    return found


def _unbounded(flavor: FlavorQuota, gang: Gang) -> FlavorQuota:
    """The flavor with room for the gang's requests (its quota is already counted)."""
    needs = requests_of(gang)
    return dataclasses.replace(flavor, free={r: max(q, needs.get(r, 0)) for r, q in flavor.free.items()})


# -- a nomination's life -----------------------------------------------------------------------------


class CopyState(enum.Enum):
    """A worker's copy of the gang's Workload, as the manager sees it."""

    ABSENT = "Absent"
    WAITING = "Waiting"  # created, its Kueue or gang check has not decided yet
    REFUSED = "Refused"  # its Kueue or gang check said no (reason)
    ADMITTED = "Admitted"  # quota reserved and the gang check Ready (or Kueue's Admitted)


@dataclass(frozen=True, slots=True)
class Copy:
    state: CopyState
    reason: str = ""


def copy_state(
    *,
    quota_reserved: bool,
    quota_message: str = "",
    admitted: bool = False,
    finished: bool = False,
    evicted: bool = False,
    evicted_message: str = "",
    check: CheckState | None = None,
    check_message: str = "",
    preempting: bool = False,
) -> Copy:
    """What a worker's copy says (its conditions; `check`: its gang check's state and message;
    `preempting`: the gang check is freeing a domain for it). A Pending check with a message is
    the gang check's refusal: it decides every gang whose quota is reserved on its next pass and
    writes a message only when it does not admit it."""
    if admitted or finished or (quota_reserved and check is CheckState.READY):
        return Copy(CopyState.ADMITTED)
    if evicted:
        return Copy(CopyState.REFUSED, f"evicted there: {evicted_message or 'no reason given'}")
    if check in (CheckState.REJECTED, CheckState.RETRY):
        return Copy(CopyState.REFUSED, f"its gang check said {check}: {check_message or 'no reason given'}")
    if quota_reserved:
        if check is CheckState.PENDING and check_message and not preempting:
            return Copy(CopyState.REFUSED, f"its gang check: {check_message}")
        return Copy(CopyState.WAITING)
    if quota_message:
        return Copy(CopyState.REFUSED, f"its Kueue: {quota_message}")
    return Copy(CopyState.WAITING)


class NominationAction(enum.Enum):
    """What `step` says to do with a gang's nomination."""

    CHOOSE = "Choose"  # nominated nowhere and no copy left: `dispatch` picks a worker
    KEEP = "Keep"  # the nominated worker has it or is deciding: wait (until `wake_at`)
    WITHDRAW = "Withdraw"  # give the nominated worker up (`reason` is its refusal): nominate none
    ADOPT = "Adopt"  # a worker admitted it though not nominated: nominate it, so Kueue keeps it
    WAIT = "Wait"  # nominated nowhere, but a copy is still there: wait until it is deleted


@dataclass(frozen=True, slots=True)
class NominationStep:
    """`step`'s answer: the action, the worker it is about, why, and when to look again."""

    action: NominationAction
    worker: str | None = None
    reason: str = ""
    wake_at: float | None = None


def step(
    nominated: Sequence[str],
    copies: Mapping[str, Copy],
    connected: Collection[str],
    nominated_at: float,
    now: float,
    answer_timeout: float = ANSWER_TIMEOUT,
) -> NominationStep:
    """What to do with one waiting gang's nomination (its manager Workload's check Pending, no
    clusterName yet). `copies`: the copy in each connected worker; `nominated_at`: when the
    current worker was nominated.

    One worker at a time: a worker is given up (nominated none) when its copy is refused, when
    it is disconnected, or when it has not answered within `answer_timeout`; the next worker is
    chosen only once no connected worker holds a copy any more (Kueue deletes the copies of
    workers no longer nominated). A copy admitted anywhere is adopted: Kueue can record a worker
    as the gang's cluster only while it is nominated. So two workers never hold the gang at
    once, not even while a slow or restarted gang check admits it late."""
    admitted = sorted(w for w, c in copies.items() if c.state is CopyState.ADMITTED)
    if admitted:
        if list(nominated) == admitted[:1]:
            return NominationStep(action=NominationAction.KEEP, worker=admitted[0], reason="admitted there")
        return NominationStep(action=NominationAction.ADOPT, worker=admitted[0], reason="admitted there")
    if len(nominated) > 1:  # not ours (another dispatcher, or by hand): down to one at a time
        return NominationStep(
            action=NominationAction.WITHDRAW,
            worker=None,
            reason=f"{len(nominated)} workers nominated at once",
        )
    if nominated:
        worker = nominated[0]
        if worker not in connected:
            return NominationStep(action=NominationAction.WITHDRAW, worker=worker, reason="not connected")
        copy = copies.get(worker, Copy(CopyState.ABSENT))
        if copy.state is CopyState.REFUSED:
            return NominationStep(action=NominationAction.WITHDRAW, worker=worker, reason=copy.reason)
        if now - nominated_at >= answer_timeout:
            return NominationStep(
                action=NominationAction.WITHDRAW,
                worker=worker,
                reason=f"no answer within {answer_timeout:.0f}s",
            )
        return NominationStep(
            action=NominationAction.KEEP,
            worker=worker,
            reason="deciding",
            wake_at=nominated_at + answer_timeout,
        )
    held = sorted(w for w, c in copies.items() if c.state is not CopyState.ABSENT)
    if held:
        return NominationStep(action=NominationAction.WAIT, worker=held[0], reason="its copy is still there")
    return NominationStep(action=NominationAction.CHOOSE)


# -- what the dispatcher records on the manager's Workload -------------------------------------------


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """The `gangplugin.io/dispatch` annotation of a manager Workload: the worker nominated and
    since when, the refusals that still count, and the last verdict on every worker (what
    `gangctl explain` shows on the manager). State for a restarted dispatcher, so it is JSON
    in the Workload, not memory."""

    nominated: str | None = None
    nominated_at: float | None = None
    refusals: tuple[Refusal, ...] = ()
    verdicts: tuple[WorkerVerdict, ...] = ()
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.nominated is not None and self.nominated_at is not None:
            out["nominated"] = self.nominated
            out["nominatedAt"] = format_time(datetime.fromtimestamp(self.nominated_at, UTC))
        if self.refusals:
            out["refusals"] = [
                {"worker": r.worker, "at": format_time(datetime.fromtimestamp(r.at, UTC)), "reason": r.reason}
                for r in self.refusals
            ]
        out["summary"] = self.summary
        out["workers"] = [v.to_dict() for v in self.verdicts]
        return out

    @classmethod
    def from_dict(cls, raw: object) -> DispatchRecord:
        """The record of an annotation's JSON; anything unreadable in it is left out (the
        dispatcher decides again from what the clusters say)."""
        if not isinstance(raw, Mapping):
            return cls()

        def when(value: object) -> float | None:
            try:
                return float(to_seconds(parse_time(value, "at")))
            except InputError:
                return None

        refusals = []
        for r in raw.get("refusals") or ():
            at = when(r.get("at")) if isinstance(r, Mapping) else None
            if isinstance(r, Mapping) and at is not None and isinstance(r.get("worker"), str):
                refusals.append(Refusal(r["worker"], at, str(r.get("reason", ""))))
        verdicts = tuple(
            WorkerVerdict.from_dict(v) for v in raw.get("workers") or () if isinstance(v, Mapping)
        )
        nominated = raw.get("nominated")
        return cls(
            nominated if isinstance(nominated, str) else None,
            when(raw.get("nominatedAt")),
            tuple(refusals),
            verdicts,
            str(raw.get("summary", "")),
        )

    def counting(self, now: float, refusal_ttl: float = REFUSAL_TTL) -> tuple[Refusal, ...]:
        """The refusals that still keep their worker out (older ones are dropped from the record)."""
        return tuple(r for r in self.refusals if now - r.at < refusal_ttl)
