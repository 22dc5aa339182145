"""Gangs as the console shows them: a row per gang (its job, queue, size, phase, domain, and what
`gangctl explain` says about it), and a gang's timeline. Pure: the read model's summary of a
gang, what is said about it (`readmodel.decisions.explained`, as `gangctl explain` says it), its
Workload, its pods and its Events in, typed values out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gangplugin.console.model import GangDetail, GangPod, GangSummary, Milestone, TimelineEntry
from gangplugin.core.errors import InputError
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import parse_time
from gangplugin.kube import kueue_records as rec
from gangplugin.readmodel import summaries as rm
from gangplugin.readmodel.decisions import Explained
from gangplugin.readmodel.records import PodRecord
from gangplugin.readmodel.summaries import Owner

#: Events whose reason says the gang was requeued or evicted (ours, then Kueue's).
REQUEUE_REASONS = frozenset(
    {"GangRequeued", "GangDeactivated", "Preempted", "EvictedDueToPodsReadyTimeout", "Evicted"}
)
EVENT_MILESTONES = {
    "GangAdmitted": Milestone.PINNED,
    "NodeReplaced": Milestone.NODE_REPLACED,
    "QuotaReserved": Milestone.QUOTA_RESERVED,
    "Admitted": Milestone.ADMITTED,
    **dict.fromkeys(REQUEUE_REASONS, Milestone.REQUEUED),
}
#: A milestone read off the Workload is the same one an Event of its kind recorded from this many
#: seconds before it on: the milestone is the latest of its kind, so no later Event tells another
#: one, and a recorder on a busy machine sends its Event seconds after the status it follows.
SAME_MOMENT = 2.0


def _time(value: object) -> datetime | None:
    try:
        return parse_time(value, "time") if value else None
    except InputError:
        return None


def job_of(owner: Owner | None) -> str:
    """ "Kind/name" of the job that owns a gang's Workload, else ""."""
    return f"{owner.kind}/{owner.name}" if owner is not None else ""


def summary_of(g: rm.GangSummary, said: Explained) -> GangSummary:
    """A gang as the read model summarizes it, with what `gangctl explain` says about it."""
    return GangSummary(
        namespace=g.namespace,
        name=g.name,
        gang_id=g.gang_id,
        job=job_of(g.owner),
        local_queue=g.local_queue,
        cluster_queue=g.cluster_queue,
        pods=g.pods,
        phase=g.phase,
        domain=g.domain,
        check_state=g.check_state.value if g.check_state is not None else "",
        message=g.message,
        retry_count=g.retry_count,
        created=_time(g.created),
        explanation=tuple(said.text.splitlines()),
    )


def gang_pods(pods: Sequence[PodRecord]) -> tuple[GangPod, ...]:
    out = [
        GangPod(name=p.name, podset=p.podset or "", node=p.placed_on or "", ready=p.ready)
        for p in pods
        if p.active
    ]
    return tuple(sorted(out, key=lambda p: p.name))


def _condition_time(obj: Mapping[str, Any], kind: str) -> datetime | None:
    c = rec.conditions(obj).get(kind)
    return _time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def milestones(
    wl: Mapping[str, Any], check: str, summary: GangSummary, pods: Sequence[PodRecord]
) -> tuple[TimelineEntry, ...]:
    """What the Workload and its pods record of the current admission: each milestone's latest
    instant (the history of earlier admissions and requeues is in the Events)."""
    out: list[TimelineEntry] = []

    def add(at: datetime | None, milestone: Milestone, text: str, warning: bool = False) -> None:
        if at is not None:
            out.append(TimelineEntry(at, milestone, text, warning))

    add(summary.created, Milestone.SUBMITTED, f"Workload created for {summary.job or 'its pods'}")
    reserved = f"quota reserved in ClusterQueue {summary.cluster_queue}"
    add(_condition_time(wl, "QuotaReserved"), Milestone.QUOTA_RESERVED, reserved)
    state = rec.check_state(wl, check) or {}
    if CheckState.of(state.get("state")) is CheckState.READY:
        add(_time(state.get("lastTransitionTime")), Milestone.PINNED, str(state.get("message") or "admitted"))
    add(_condition_time(wl, "Admitted"), Milestone.ADMITTED, "Kueue admitted it; the job's pods are created")
    live = [p for p in pods if p.active]
    total = summary.pods.total
    scheduled = [p.scheduled_at for p in live if p.placed_on is not None]
    if total and len(scheduled) >= total and all(t is not None for t in scheduled):
        at = max(t for t in scheduled if t is not None)
        add(datetime.fromtimestamp(at, UTC), Milestone.BOUND, f"all {total} pods have a node")
    add(_condition_time(wl, "PodsReady"), Milestone.READY, f"all {total} pods Ready")
    evicted = rec.conditions(wl).get("Evicted") or {}
    if evicted.get("status") == "True":
        requeue = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
        until = f"; back in the queue at {requeue}" if requeue else ""
        text = f"evicted: {evicted.get('message', '')}{until}"
        add(_time(evicted.get("lastTransitionTime")), Milestone.REQUEUED, text, True)
    return tuple(out)


def event_entries(events: Sequence[Mapping[str, Any]]) -> tuple[TimelineEntry, ...]:
    """Each Event on the gang's Workload as a timeline entry (a repeated one once, counted)."""
    out = []
    for ev in events:
        meta = ev.get("metadata") or {}
        at = _time(ev.get("eventTime") or ev.get("lastTimestamp") or ev.get("firstTimestamp")) or _time(
            meta.get("creationTimestamp")
        )
        if at is None:
            continue
        reason = str(ev.get("reason") or "")
        count = int(ev.get("count") or 1)
        text = f"{reason}: {ev.get('message', '')}" + (f" (x{count})" if count > 1 else "")
        milestone = EVENT_MILESTONES.get(reason, Milestone.EVENT)
        out.append(TimelineEntry(at, milestone, text, ev.get("type") == "Warning"))
    return tuple(out)


def timeline(detail: GangDetail, events: Sequence[Mapping[str, Any]]) -> tuple[TimelineEntry, ...]:
    """The gang's milestones and its Events in time order; a milestone an Event already tells
    (the same kind, from `SAME_MOMENT` before it on) is shown once, as the Event says it."""
    told = event_entries(events)
    kept = [
        m
        for m in detail.milestones
        if not any(e.milestone is m.milestone and (e.at - m.at).total_seconds() >= -SAME_MOMENT for e in told)
    ]
    return tuple(sorted((*kept, *told), key=lambda e: e.at))
