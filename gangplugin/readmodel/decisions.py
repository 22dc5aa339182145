"""What the gate (`core.gate`) decides a waiting gang on, read from the read model: its facts
as plain values (errors included) and the preemption state of a pass. The admission pass and
`gangctl explain` both read them here, so explain says what the next pass decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from gangplugin.core.admission import promised_pods
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.gate import Backoff, GangFacts, GateVerdict, PreemptionState, gate
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import ClusterQueueState, Contender, RunningGang, gang_gpus
from gangplugin.core.quota import next_quota_change
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.readmodel.model import Queue, ReadModel


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
        contender=Contender(
            key=record.key,
            priority=rec.priority(wl),
            cluster_queue=record.cluster_queue,
            created_at=record.created_at,
        ),
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
    )


def running_gangs(model: ReadModel) -> list[RunningGang]:
    """Every gang holding capacity through our check: admitted (check Ready), or evicted with
    pods still on nodes (being evicted: its capacity is coming free)."""
    ours = model.our_checks()
    out = []
    for wl in model.workloads.items():
        record = model.record(wl)
        check = model.checks.of(record, ours)
        if check is None or check.entry is None or record.finished:
            continue
        pods = [p for p in model.gang_pods(record.namespace, record.gang_id) if p.node]
        if not (check.entry.state is CheckState.READY or (record.evicted and pods)):
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
                evicting=record.evicted,
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
    return gate(facts, preemption_state(model, queue, now))
