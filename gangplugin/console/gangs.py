"""Gangs as the console shows them: a row per gang (its job, queue, size, phase, domain, and what
`gangctl explain` says about it), and a gang's timeline. Pure: a Workload, its pods and its
Events in, typed values out; the phase, domain and sentences are the core's (`core.gangs`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gangplugin.console.model import GangDetail, GangPod, GangSummary, Milestone, TimelineEntry
from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import Pods, WorkloadState, explain, gang_domain, pod_gang_phase, workload_phase
from gangplugin.core.timeutil import parse_time
from gangplugin.kube import kueue_records as rec

JSON = dict[str, Any]
#: A node's labels by its name (None: no such node).
NodeLabels = Callable[[str], Mapping[str, str] | None]
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
#: A milestone read off the Workload is the same one an Event recorded within this many seconds.
SAME_MOMENT = 2.0


def active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not (
        pod.get("metadata") or {}
    ).get("deletionTimestamp")


def _time(value: object) -> datetime | None:
    try:
        return parse_time(value, "time") if value else None
    except InputError:
        return None


def job_of(wl: Mapping[str, Any]) -> str:
    """ "Kind/name" of the job that owns a Workload (its controller ownerReference), else ""."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return f"{ref.get('kind', '')}/{ref.get('name', '')}"
    return ""


def count_pods(pods: Sequence[Mapping[str, Any]], total: int) -> Pods:
    live = [p for p in pods if active(p)]
    bound = [p for p in live if (p.get("spec") or {}).get("nodeName")]
    return Pods(total, len(bound), sum(1 for p in bound if rec.pod_ready(p)))


def domain_of(
    pinned: Mapping[str, str], pods: Sequence[Mapping[str, Any]], levels: Sequence[str], labels: NodeLabels
) -> tuple[str, str] | None:
    found = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        node_labels = labels(node) if node and active(pod) else None
        if node_labels is not None:
            found.append(node_labels)
    return gang_domain(pinned, found, levels)


def workload_summary(
    wl: Mapping[str, Any],
    check: str,
    pods: Sequence[Mapping[str, Any]],
    *,
    cluster_queue: str,
    levels: Sequence[str],
    labels: NodeLabels,
) -> GangSummary:
    """A gang that passes our check `check`, as the gangs API reads it (`gangctl get gangs`)."""
    meta = wl.get("metadata") or {}
    state = rec.check_state(wl, check) or {}
    total = sum(int(ps.get("count", 1)) for ps in (wl.get("spec") or {}).get("podSets") or [])
    counts = count_pods(pods, total)
    phase = workload_phase(
        WorkloadState(
            active=(wl.get("spec") or {}).get("active") is not False,
            finished=rec.is_true(wl, "Finished"),
            quota_reserved=rec.is_true(wl, "QuotaReserved"),
            admitted=rec.is_true(wl, "Admitted"),
            evicted=rec.is_true(wl, "Evicted"),
            check_state=state.get("state"),
        ),
        counts,
    )
    pinned: dict[str, str] = {}
    for update in state.get("podSetUpdates") or []:
        pinned.update(update.get("nodeSelector") or {})
    domain = domain_of(pinned, pods, levels, labels)
    message = str(state.get("message") or "")
    retries = int(state.get("retryCount") or 0)
    return GangSummary(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        gang_id=gang_id(str(meta.get("name", ""))),
        job=job_of(wl),
        local_queue=str((wl.get("spec") or {}).get("queueName") or ""),
        cluster_queue=cluster_queue,
        pods=counts,
        phase=phase,
        domain=domain,
        check_state=str(state.get("state") or ""),
        message=message,
        retry_count=retries,
        created=_time(meta.get("creationTimestamp")),
        explanation=tuple(
            explain(
                phase,
                counts,
                queue=cluster_queue,
                domain=domain,
                check_message=message,
                retry_count=retries,
            ).splitlines()
        ),
    )


def pod_gang_summary(
    namespace: str,
    gang: str,
    pods: Sequence[Mapping[str, Any]],
    size: int,
    levels: Sequence[str],
    labels: NodeLabels,
) -> GangSummary:
    """A gang of plain pods (the gangplugin.io/gang label, no Workload): the extender binds it."""
    counts = count_pods(pods, size)
    phase = pod_gang_phase(counts)
    domain = domain_of({}, pods, levels, labels)
    created = [t for p in pods if (t := _time((p.get("metadata") or {}).get("creationTimestamp")))]
    return GangSummary(
        namespace=namespace,
        name=gang,
        gang_id=gang,
        job="",
        local_queue="",
        cluster_queue="",
        pods=counts,
        phase=phase,
        domain=domain,
        check_state="",
        message="",
        retry_count=0,
        created=min(created, default=None),
        explanation=tuple(explain(phase, counts, domain=domain).splitlines()),
    )


def gang_pods(pods: Sequence[Mapping[str, Any]]) -> tuple[GangPod, ...]:
    out = []
    for pod in pods:
        if not active(pod):
            continue
        meta = pod.get("metadata") or {}
        out.append(
            GangPod(
                name=str(meta.get("name", "")),
                podset=str((meta.get("labels") or {}).get(rec.PODSET_LABEL, "")),
                node=str((pod.get("spec") or {}).get("nodeName") or ""),
                ready=rec.pod_ready(pod),
            )
        )
    return tuple(sorted(out, key=lambda p: p.name))


def _condition_time(obj: Mapping[str, Any], kind: str) -> datetime | None:
    c = rec.conditions(obj).get(kind)
    return _time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def _latest_pod_condition(pods: Sequence[Mapping[str, Any]], kind: str) -> datetime | None:
    """When the last of `pods` got condition `kind` (None unless every one has it)."""
    times = [_condition_time(p, kind) for p in pods]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def milestones(
    wl: Mapping[str, Any], check: str, summary: GangSummary, pods: Sequence[Mapping[str, Any]]
) -> tuple[TimelineEntry, ...]:
    """What the Workload and its pods record of the current admission: each milestone's latest
    instant (the history of earlier admissions and requeues is in the Events)."""
    out: list[TimelineEntry] = []

    def add(at: datetime | None, milestone: Milestone, text: str, warning: bool = False) -> None:
        if at is not None:
            out.append(TimelineEntry(at, milestone, text, warning))

    add(summary.created, Milestone.SUBMITTED, f"Workload created for {summary.job or 'its pods'}")
    cq = summary.cluster_queue
    add(
        _condition_time(wl, "QuotaReserved"), Milestone.QUOTA_RESERVED, f"quota reserved in ClusterQueue {cq}"
    )
    state = rec.check_state(wl, check) or {}
    if state.get("state") == "Ready":
        add(_time(state.get("lastTransitionTime")), Milestone.PINNED, str(state.get("message") or "admitted"))
    add(_condition_time(wl, "Admitted"), Milestone.ADMITTED, "Kueue admitted it; the job's pods are created")
    live = [p for p in pods if active(p)]
    if len(live) >= summary.pods.total > 0:
        add(
            _latest_pod_condition(live, "PodScheduled"),
            Milestone.BOUND,
            f"all {summary.pods.total} pods have a node",
        )
    ready = _condition_time(wl, "PodsReady")
    if ready is None and len(live) >= summary.pods.total > 0:
        ready = _latest_pod_condition(live, "Ready")
    add(ready, Milestone.READY, f"all {summary.pods.total} pods Ready")
    evicted = rec.conditions(wl).get("Evicted") or {}
    if evicted.get("status") == "True":
        requeue = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
        until = f"; back in the queue at {requeue}" if requeue else ""
        add(
            _time(evicted.get("lastTransitionTime")),
            Milestone.REQUEUED,
            f"evicted: {evicted.get('message', '')}{until}",
            True,
        )
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
    (the same kind within `SAME_MOMENT`) is shown once, as the Event says it."""
    told = event_entries(events)
    kept = [
        m
        for m in detail.milestones
        if not any(
            e.milestone is m.milestone and abs((e.at - m.at).total_seconds()) <= SAME_MOMENT for e in told
        )
    ]
    return tuple(sorted((*kept, *told), key=lambda e: e.at))
