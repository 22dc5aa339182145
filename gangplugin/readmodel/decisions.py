"""What the gate (`core.gate`) decides a waiting gang on, read from the read model: its facts
as plain values (errors included), and the preemption state and reservations of a pass. The
admission pass and `gangctl explain` both read them here, so explain says what the next pass
decides; and what `gangctl explain` and the console say about any gang (`explained`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangplugin.core import gangs
from gangplugin.core.admission import NOT_NOW, promised_pods
from gangplugin.core.dispatch import DispatchRecord
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import Evaluation, Phase
from gangplugin.core.gate import Backoff, GangFacts, GateStep, GateVerdict, PreemptionState, gate
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import ClusterQueueState, Contender, RunningGang, gang_gpus
from gangplugin.core.quota import next_quota_change
from gangplugin.core.reservation import GangEnd, Holder, Reservation, Reservations, occupant
from gangplugin.core.resources import ACCELERATORS
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.readmodel.ends import declared_runtime, gang_end, job_gone, owner_job
from gangplugin.readmodel.model import Queue, ReadModel
from gangplugin.readmodel.records import job_owner
from gangplugin.readmodel.summaries import GangSummary, dispatch_of

#: Steps whose message a person is told as it is (it names what the gang waits for).
_TOLD = (GateStep.WHOLE, GateStep.RESERVATION)


def backoff(wl: JSON) -> Backoff | None:
    """The backoff of a gang requeued after a timeout, from its Workload (unreadable: none,
    rather than a gang held for good)."""
    raw = (wl["metadata"].get("annotations") or {}).get(BACKOFF_UNTIL_ANNOTATION)
    if not raw:
        return None
    try:
        return Backoff(until=rec.epoch(raw, f"metadata.annotations.{BACKOFF_UNTIL_ANNOTATION}"), text=raw)
    except InputError:
        return None


def gang_facts(
    model: ReadModel,
    wl: JSON,
    policy_name: str | None,
    snapshot: Callable[[tuple[str, ...]], Snapshot],
    unready: Mapping[str | None, Sequence[str]],
    now: float,
) -> GangFacts:
    """A waiting gang's facts for the gate: its policy and the snapshot of its levels, its gang,
    backoff, the unready gangs of its policy, what the plans feeding its quota say, and the
    podsets still without pods (errors as values: the gate decides what they mean)."""
    record = model.record(wl)
    policy: GangPolicy | InputError
    snap: Snapshot | None
    try:
        policy = model.policy(policy_name)
        snap = snapshot(model.levels(policy))
    except InputError as err:
        policy, snap = err, None
    gang: Gang | InputError
    try:
        gang = model.gangs.gang(wl)
    except InputError as err:
        gang = err
    drain: DrainDecision | InputError | None
    change = None
    try:
        drain = model.gangs.drain(wl, now)
    except InputError as err:
        drain = err
    if isinstance(drain, DrainDecision) and not drain.admit:
        cluster_queue, _, plans = model.gangs.plans_of(wl)
        at = next_quota_change(plans, cluster_queue, datetime.fromtimestamp(now, UTC))
        change = None if at is None else at.timestamp()
    return GangFacts(
        contender=contender_of(model, wl),
        policy=policy,
        gang=gang,
        snapshot=snap,
        now=now,
        quota_reserved_at=record.quota_reserved_at,
        backoff=backoff(wl),
        unready=tuple(unready.get(policy_name, ())),
        drain=drain,
        next_quota_change=change,
        awaiting_pods=tuple(model.gangs.podsets_without_pods(wl)),
        expected_runtime=declared_runtime(
            model.gangs.with_pod_group_annotations(wl), owner_job(wl, model.jobs)
        ),
    )


def contender_of(model: ReadModel, wl: JSON) -> Contender:
    """The waiting gang as preemption and reservations rank it."""
    record = model.record(wl)
    return Contender(
        key=record.key,
        priority=rec.priority(wl),
        cluster_queue=record.cluster_queue,
        created_at=record.created_at,
    )


def running_gangs(model: ReadModel) -> list[RunningGang]:
    """Every gang holding capacity through our check: admitted (check Ready), or evicted,
    finished or deleted (its Workload or its Job) with pods still on nodes (leaving: its
    capacity is coming free; a finished or deleted Job's pods linger while they terminate, and
    counting them as there for good would make a domain look as if it could never hold a
    waiting gang, or a deleted Job's gang as if it would never end)."""
    ours = model.our_checks()
    out = []
    known: set[tuple[str, str]] = set()
    for wl in model.workloads.items():
        record = model.record(wl)
        known.add((record.namespace, record.gang_id))
        check = model.checks.of(record, ours)
        if check is None or check.entry is None:
            continue
        # on nodes: bound, or pinned there by the ungater (the capacity counts those there too)
        pods = [p for p in model.gang_pods(record.namespace, record.gang_id) if p.node or p.bound is not None]
        leaving = record.evicted or record.finished or record.deleting or _job_gone(model, wl)
        holding = any(p.bound is not None for p in pods)
        if not ((check.entry.state is CheckState.READY and not record.finished) or (leaving and holding)):
            continue
        try:
            gang = model.gangs.gang(wl)
        except InputError:
            continue
        keys = [p.key for p in pods] + [(record.namespace, n) for n in promised_pods(gang)]
        out.append(
            RunningGang(
                key=record.key,
                priority=rec.priority(wl),
                cluster_queue=record.cluster_queue,
                created_at=record.created_at,
                started_at=record.admitted_at,
                gpus=gang_gpus(gang),
                pods=tuple(keys),
                evicting=leaving,
            )
        )
    return out + _terminating(model, known)


def _job_gone(model: ReadModel, wl: Mapping[str, Any]) -> bool:
    meta = wl.get("metadata") or {}
    return job_gone(str(meta.get("namespace", "")), job_owner(meta), model.jobs)


def _terminating(model: ReadModel, known: set[tuple[str, str]]) -> list[RunningGang]:
    """The bound pods of gangs whose Workload is gone (its Job deleted) that still hold their
    nodes, each gang's as one leaving: terminating, or their Job gone before the garbage
    collector marked them. Counted as there for good, they made a reserved domain look as if it
    could never hold its gang, and the reservation moved. A pod gang's pods (no Workload, no
    Job) stay until they are deleted."""
    out = []
    for namespace, gang in model.index.gangs():
        if (namespace, gang) in known:
            continue
        pods = [
            p
            for p in model.gang_pods(namespace, gang)
            if p.bound is not None and (p.deleting or job_gone(namespace, p.job, model.jobs))
        ]
        if pods:
            gpus = sum(p.bound.requests.get(r, 0) for p in pods if p.bound for r in ACCELERATORS)
            out.append(
                RunningGang(
                    key=f"{namespace}/{gang}",
                    priority=0,
                    cluster_queue="",
                    created_at=0.0,
                    started_at=0.0,
                    gpus=gpus,
                    pods=tuple(p.key for p in pods),
                    evicting=True,
                )
            )
    return out


def queue_rules(model: ReadModel) -> dict[str, ClusterQueueState]:
    """Each ClusterQueue's cohort, Kueue preemption rules and whether it borrows now."""
    out = {}
    for cq in model.cluster_queues.items():
        state = rec.cluster_queue_state(cq)
        out[state.name] = state
    return out


def preemption_state(model: ReadModel, queue: Queue, now: float) -> PreemptionState:
    """A pass's (or explain's) preemption state: the live holds of the waiting gangs (each lives
    as long as its policy's readyTimeout: a preemptor that never fits gives its domain back),
    and the running gangs and ClusterQueue rules, read on first use."""
    holds = {}
    for q in queue.order.candidates:
        try:
            ttl = model.policy(q.policy).ready_timeout
        except InputError:
            continue
        entry = queue.entries[q.key]
        hold = rec.hold_from_k8s(entry.wl)
        if hold is not None and hold.live(entry.record.quota_reserved_at, now, ttl):
            holds[q.key] = hold
    return PreemptionState(holds, lambda: running_gangs(model), lambda: queue_rules(model))


def gang_ends(model: ReadModel, keys: Sequence[str]) -> dict[str, GangEnd]:
    """When each admitted gang (by Workload key) is expected to end (`readmodel.ends`)."""
    ours = model.our_checks()
    out = {}
    for key in keys:
        found = model.workload(key)
        check = model.check_of(found[0], ours) if found is not None else None
        if found is None or check is None:
            continue
        wl, record = found
        out[key] = gang_end(
            model.gangs.with_pod_group_annotations(wl), record, check, owner_job(wl, model.jobs)
        )
    return out


def reservations(
    model: ReadModel,
    queue: Queue,
    now: float,
    gov: PreemptionState,
    sent: Mapping[str, Reservation | None] | None = None,
) -> Reservations:
    """A pass's (or explain's) reservations: the live ones recorded on the waiting gangs (each
    for its quota reservation, under a policy that still reserves), ranked by the queue's
    order; the running gangs (`gov`'s) and their ends read on first use. `sent`: the pass's
    own, sent to be recorded (None: given up) but not in the cache yet, in place of the cache's."""
    holders, sent = {}, sent or {}
    for q in queue.order.candidates:
        entry = queue.entries[q.key]
        taken = sent[q.key] if q.key in sent else rec.reservation_from_k8s(entry.wl)
        if taken is None or not taken.live(entry.record.quota_reserved_at):
            continue
        try:
            policy, gang = model.policy(q.policy), model.gangs.gang(entry.wl)
        except InputError:
            continue
        if policy.reservation.on:
            evictions = policy.reservation.max_checkpointable_evictions
            holders[q.key] = Holder(contender_of(model, entry.wl), gang, policy.placement, taken, evictions)
    order = {q.key: i for i, q in enumerate(queue.order.candidates)}
    book = Reservations(
        holders, lambda: gov.running, lambda: gang_ends(model, [g.key for g in gov.running]), now, order
    )
    # admissions written (or being written) that the cache does not show yet: their capacity is
    # charged, and leaves as theirs will
    with model.capacity.locked():
        admitting = list(model.capacity.assumed.items())
    for key, assumed in admitting:
        if (found := model.workload(key)) is not None:
            wl = found[0]
            runtime = declared_runtime(model.gangs.with_pod_group_annotations(wl), owner_job(wl, model.jobs))
            book.admitted(occupant(contender_of(model, wl), assumed.gang, now, runtime))
    return book


def explain(model: ReadModel, wl: JSON, check: str, now: float) -> GateVerdict | None:
    """What the admission pass would decide for this waiting gang now (None: not our check),
    on a fresh snapshot with every admitted gang's promise; nothing is charged or written."""
    ours = model.our_checks()
    if check not in ours:
        return None
    queue = model.queue()
    admitted = queue.admitted()
    snapshots: dict[tuple[str, ...], Snapshot] = {}

    def snapshot(levels: tuple[str, ...]) -> Snapshot:
        if levels not in snapshots:  # one per explain: the victim search reads the same one
            snapshots[levels] = model.promised_snapshot(levels, admitted)
        return snapshots[levels]

    facts = gang_facts(model, wl, ours[check], snapshot, queue.order.unready, now)
    gov = preemption_state(model, queue, now)
    return gate(facts, gov, reservations=reservations(model, queue, now, gov))


def evaluation(model: ReadModel, wl: JSON, check: str, now: float) -> Evaluation | None:
    """`explain` as a person is told it (`gangctl explain`'s "Now:" line, the console's gang
    page): whether the waiting gang fits now, where, or why not (None: not our check)."""
    verdict = explain(model, wl, check, now)
    if verdict is None:
        return None
    if verdict.blocked_by is not None:
        blocker = verdict.blocked_by
        return Evaluation(False, f"waiting for gang {blocker} to be Ready", blocked_by=blocker)
    placement = verdict.decision.placement if verdict.decision is not None else None
    # The message says whom it preempts, that it can never start whole, what it reserved (told
    # in full: with the counts the check's message leaves out)
    if placement is None or verdict.preemption is not None or verdict.step in _TOLD:
        return Evaluation(False, verdict.full)
    # (a gang kept off domains reserved for others: the message names them too)
    reason = placement.reason if placement.feasible else verdict.full.removeprefix(NOT_NOW)
    return Evaluation(placement.feasible, reason, placement.level, tuple(placement.domains))


@dataclass(frozen=True, slots=True)
class Explained:
    """What is said about a gang: `text`, the sentences of `core.gangs.explain`, and what they
    rest on. `evaluation`: for a gang waiting on our check, what the next pass would decide;
    `dispatch`, `worker`: on a MultiKueue manager, a dispatched gang's record and its worker."""

    text: str
    evaluation: Evaluation | None = None
    dispatch: DispatchRecord | None = None
    worker: str = ""


def explained(model: ReadModel, gang: GangSummary, wl: JSON | None, now: float | None) -> Explained:
    """What `gangctl explain` says about a gang (`wl`: its Workload, None for a pod gang). `now`
    None: without the next pass's decision (a list of gangs; each decision is a pass's work)."""
    evaluated = None
    waiting = gang.phase is Phase.PENDING and gang.check_state is CheckState.PENDING
    if wl is not None and now is not None and waiting and not gang.dispatched:
        evaluated = evaluation(model, wl, gang.admission_check, now)
    record, worker = dispatch_of(wl) if gang.dispatched and wl is not None else (None, "")
    text = gangs.explain(
        gang.phase,
        gang.pods,
        queue=gang.cluster_queue,
        domain=gang.domain,
        check_message=gang.message,
        retry_count=gang.retry_count,
        evaluation=evaluated,
        worker=worker,
        dispatch=None if record is None else record.summary,
    )
    return Explained(text, evaluated, record, worker)
