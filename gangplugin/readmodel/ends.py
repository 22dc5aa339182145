"""How long a gang runs at most, and when an admitted one will have ended, read from what it
already declares (a reservation's backfill and expected start, `core.reservation`):

- its Job's `spec.activeDeadlineSeconds` (the Job controller ends it then, counted from the
  Job's `status.startTime`, which Kubernetes resets when Kueue resumes the Job);
- the pod template annotation `gangplugin.io/max-runtime` (the one draining reads);
- the pods' own `spec.activeDeadlineSeconds` (the kubelet ends each pod then);
- Kueue's `spec.maximumExecutionTimeSeconds` on the Workload (Kueue evicts it then);
- for an admitted gang, the end of the plan block it runs on (the block-end annotation the
  check stamped on its pods: it is drained before then).

The soonest of them counts; a gang that declares none has no end (no gang backfills a reserved
domain without one, and a domain it runs in has no expected start). Unreadable values are
left out here: the gang's own check reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.core.names import BLOCK_END_ANNOTATION, CHECKPOINTABLE_ANNOTATION
from gangplugin.core.reservation import GangEnd
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.readmodel.checks import Cache, OurCheck
from gangplugin.readmodel.records import JobRef, WorkloadRecord, job_owner


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDeadline:
    """What a reservation reads of a batch Job (the Jobs cache keeps nothing else)."""

    uid: str
    active_deadline: float | None  # spec.activeDeadlineSeconds
    started_at: float | None  # status.startTime


def job_deadline(obj: JSON) -> JobDeadline:
    """The Jobs watch cache's transform (it never raises: what cannot be read is None)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    deadline = spec.get("activeDeadlineSeconds")
    try:
        started = rec.epoch(status["startTime"], "status.startTime") if status.get("startTime") else None
    except InputError:
        started = None
    return JobDeadline(
        uid=str((obj.get("metadata") or {}).get("uid", "")),
        active_deadline=float(deadline) if isinstance(deadline, int) and deadline > 0 else None,
        started_at=started,
    )


def _templates(wl: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [ps.get("template") or {} for ps in (wl.get("spec") or {}).get("podSets") or []]


def declared_runtime(wl: Mapping[str, Any], job: JobDeadline | None) -> float | None:
    """How long the Workload's gang runs at most once admitted (None: it does not say)."""
    found: list[float] = []
    if job is not None and job.active_deadline is not None:
        found.append(job.active_deadline)
    try:
        if (runtime := rec.max_runtime(wl)) is not None:
            found.append(runtime.total_seconds())
    except InputError:
        pass
    pods = [t.get("spec", {}).get("activeDeadlineSeconds") for t in _templates(wl)]
    found += [float(p) for p in pods if isinstance(p, int) and p > 0]
    limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
    if isinstance(limit, int) and limit > 0:
        found.append(float(limit))
    return min(found, default=None)


def checkpointable(wl: Mapping[str, Any]) -> bool:
    """Whether every pod template of the gang says `gangplugin.io/checkpointable: "true"`."""
    templates = _templates(wl)
    return bool(templates) and all(
        str(((t.get("metadata") or {}).get("annotations") or {}).get(CHECKPOINTABLE_ANNOTATION, "")).lower()
        == "true"
        for t in templates
    )


def _block_end(updates: Sequence[Mapping[str, Any]]) -> float | None:
    ends = []
    for u in updates:
        raw = (u.get("annotations") or {}).get(BLOCK_END_ANNOTATION)
        if raw:
            try:
                ends.append(rec.epoch(raw, BLOCK_END_ANNOTATION))
            except InputError:
                continue
    return min(ends, default=None)


def gang_end(
    wl: Mapping[str, Any], record: WorkloadRecord, check: OurCheck, job: JobDeadline | None
) -> GangEnd:
    """When an admitted gang will have ended (see the module docstring), and whether it may be
    evicted early to clear a reserved domain."""
    found = []
    runtime = declared_runtime(wl, None)
    if runtime is not None:
        found.append(record.admitted_at + runtime)
    if job is not None and job.active_deadline is not None:
        found.append((job.started_at or record.admitted_at) + job.active_deadline)
    block = _block_end(check.entry.pod_set_updates) if check.entry is not None else None
    if block is not None:
        found.append(block)
    return GangEnd(ends_at=min(found, default=None), checkpointable=checkpointable(wl))


def owner_job(wl: Mapping[str, Any], jobs: Cache[JobDeadline] | None) -> JobDeadline | None:
    """The batch Job that owns the Workload, as the Jobs cache has it (None: no such owner)."""
    meta = wl.get("metadata") or {}
    ref = job_owner(meta)
    return None if ref is None or jobs is None else _job(str(meta.get("namespace", "")), ref, jobs)


def job_gone(namespace: str, ref: JobRef | None, jobs: Cache[JobDeadline] | None) -> bool:
    """Whether the batch Job `ref` (a Workload's or a pod's owner) was deleted: the garbage
    collector takes its Workload and pods next, so what they hold is leaving. False without a
    Jobs cache (this model does not watch Jobs) or an owner."""
    return ref is not None and jobs is not None and _job(namespace, ref, jobs) is None


def _job(namespace: str, ref: JobRef, jobs: Cache[JobDeadline]) -> JobDeadline | None:
    job = jobs.get(f"{namespace}/{ref.name}")
    return job if job is not None and job.uid == ref.uid else None
