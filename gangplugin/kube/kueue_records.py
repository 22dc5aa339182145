"""Raw Kueue / gangplugin objects to the core's values: GangPolicy, check states, observations.

Plain dict access (watch-event hot path). Anything unusable raises `InputError(field, problem)`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.names import (
    BACKOFF_UNTIL_ANNOTATION,
    MAX_RUNTIME_ANNOTATION,
    PREEMPTION_ANNOTATION,
    RESERVATION_ANNOTATION,
)
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import (
    DEFAULT_READY_TIMEOUT,
    GangPolicy,
    Requeue,
    ReservationPolicy,
    validate_policy,
)
from gangplugin.core.preemption import ClusterQueueState, Hold, QueuePreemption
from gangplugin.core.reservation import Reservation
from gangplugin.core.timeutil import parse_time, to_seconds
from gangplugin.kube.client import JSON
from gangplugin.kube.plan_records import parse_plan
from gangplugin.kube.records import policy_from_k8s

PODSET_LABEL = "kueue.x-k8s.io/podset"


def _duration(spec: Mapping[str, Any], key: str, default: float | None, at: str = "spec") -> float | None:
    value = spec.get(key)
    if value is None:
        return default
    if str(value).strip().startswith("-"):
        raise InputError(f"{at}.{key}", f"{value!r} is negative; write a duration like 90s, 5m or 0s")
    return parse_duration(str(value), f"{at}.{key}")


def _int(value: object, field: str, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"{value!r} is not a whole number")
    return value


def gang_policy_from_k8s(obj: Mapping[str, Any]) -> GangPolicy:
    """A GangPolicy object as the core's value, validated (InputError names the field)."""
    placement, topology = policy_from_k8s(obj)
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InputError("spec", "must be a mapping")
    ready = _duration(spec, "readyTimeout", DEFAULT_READY_TIMEOUT)
    assert ready is not None
    recovery = _duration(spec, "recoveryTimeout", ready)
    assert recovery is not None
    rq = spec.get("requeue") or {}
    if not isinstance(rq, Mapping):
        raise InputError("spec.requeue", "must be a mapping")
    defaults = Requeue()
    requeue = Requeue(
        timestamp=str(rq.get("timestamp", defaults.timestamp)),
        backoff_base_seconds=_int(
            rq.get("backoffBaseSeconds"), "spec.requeue.backoffBaseSeconds", defaults.backoff_base_seconds
        )
        or 0,
        backoff_max_seconds=_int(
            rq.get("backoffMaxSeconds"), "spec.requeue.backoffMaxSeconds", defaults.backoff_max_seconds
        )
        or 0,
        backoff_limit_count=_int(rq.get("backoffLimitCount"), "spec.requeue.backoffLimitCount", None),
    )
    return validate_policy(
        GangPolicy(
            ready_timeout=ready,
            unscheduled_timeout=_duration(spec, "unscheduledTimeout", None),
            recovery_timeout=recovery,
            admission=str(spec.get("admission", "Parallel")),
            requeue=requeue,
            topology_name=topology,
            placement=placement,
            node_failure=str(spec.get("nodeFailure", "Requeue")),
            max_replaced_nodes=_int(spec.get("maxReplacedNodes"), "spec.maxReplacedNodes", None),
            preemption=str(spec.get("preemption", "ClusterQueue")),
            bind_mode=str(spec.get("bindMode", "Ungate")),
            reservation=_reservation(spec),
        )
    )


def _reservation(spec: Mapping[str, Any]) -> ReservationPolicy:
    """`spec.reservation` (absent: off; present, `afterWaiting` is required)."""
    raw = spec.get("reservation")
    if raw is None:
        return ReservationPolicy()
    if not isinstance(raw, Mapping):
        raise InputError("spec.reservation", "must be a mapping, e.g. {afterWaiting: 10m}")
    if raw.get("afterWaiting") is None:
        raise InputError(
            "spec.reservation.afterWaiting",
            "is required: how long a gang waits before a domain is reserved for it, e.g. 10m",
        )
    after = _duration(raw, "afterWaiting", None, "spec.reservation")
    level = raw.get("level")
    if level is not None and (not isinstance(level, str) or not level):
        raise InputError("spec.reservation.level", "names a node label, e.g. topology.k8s.aws/ultraserver-id")
    evictions = _int(raw.get("maxCheckpointableEvictions"), "spec.reservation.maxCheckpointableEvictions", 0)
    return ReservationPolicy(after_waiting=after, level=level, max_checkpointable_evictions=evictions or 0)


def policy_name_of_check(ac: Mapping[str, Any]) -> str | None:
    """The GangPolicy an AdmissionCheck names in `spec.parameters` (None: the defaults)."""
    params = (ac.get("spec") or {}).get("parameters") or {}
    if not params:
        return None
    if params.get("apiGroup") != "gangplugin.io" or params.get("kind") != "GangPolicy":
        raise InputError(
            "spec.parameters", "must reference {apiGroup: gangplugin.io, kind: GangPolicy, name: <policy>}"
        )
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("spec.parameters.name", "name the GangPolicy")
    return name


def conditions(obj: Mapping[str, Any]) -> dict[str, JSON]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = conditions(obj).get(kind)
    return c is not None and c.get("status") == "True"


def epoch(value: object, field: str) -> float:
    return float(to_seconds(parse_time(value, field)))


def requeue_at(wl: Mapping[str, Any]) -> float | None:
    """Kueue's `status.requeueState.requeueAt`: until when Kueue keeps the Workload out of its
    queue (None: not set, or unreadable, which Kueue's API validation does not let through)."""
    raw = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    try:
        return epoch(raw, "status.requeueState.requeueAt") if raw else None
    except InputError:
        return None


def check_state(wl: Mapping[str, Any], name: str) -> JSON | None:
    for c in (wl.get("status") or {}).get("admissionChecks") or []:
        if c.get("name") == name:
            return dict(c)
    return None


# API groups of the job kinds whose Kueue integration sets a Workload's PodsReady from the job's
# Running condition rather than from its pods' readiness (Kueue v0.17-v0.19, `PodsReady()` of the
# Kubeflow jobs and MPIJob).
PODS_READY_MEANS_RUNNING = ("kubeflow.org",)


def pods_ready_means_running(wl: Mapping[str, Any]) -> bool:
    owners = (wl.get("metadata") or {}).get("ownerReferences") or []
    return any(str(o.get("apiVersion", "")).split("/")[0] in PODS_READY_MEANS_RUNNING for o in owners)


def ready_changed(pod: Mapping[str, Any]) -> float | None:
    """When the pod's Ready condition last changed (None: not said)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("lastTransitionTime"):
            try:
                return epoch(c["lastTransitionTime"], "status.conditions[Ready].lastTransitionTime")
            except InputError:
                return None
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def node_ready_since(node: Mapping[str, Any]) -> tuple[bool, float | None]:
    """(Ready, when its Ready condition last changed)."""
    c = conditions(node).get("Ready")
    if c is None:
        return False, None
    at = c.get("lastTransitionTime")
    return c.get("status") == "True", epoch(at, "status.conditions[Ready].lastTransitionTime") if at else None


def flavor_selector(
    wl: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    """Per podset, the node labels of the ResourceFlavors Kueue assigned it (Kueue adds them to
    the pods' nodeSelector itself; placement must see them too)."""
    out: dict[str, dict[str, str]] = {}
    admission = (wl.get("status") or {}).get("admission") or {}
    for psa in admission.get("podSetAssignments") or []:
        labels: dict[str, str] = {}
        for flavor in (psa.get("flavors") or {}).values():
            rf = flavors.get(str(flavor))
            if rf is not None:
                labels.update(
                    {str(k): str(v) for k, v in ((rf.get("spec") or {}).get("nodeLabels") or {}).items()}
                )
        out[str(psa.get("name", ""))] = labels
    return out


def plan_or_none(obj: JSON) -> TrainingPlan | None:
    """TrainingPlan watch-cache transform: the core plan, None for one that does not parse
    (the plans controller reports that on the plan; it feeds no quota, so it drains nothing)."""
    try:
        return parse_plan(obj)
    except InputError:
        return None


def max_runtime(wl: Mapping[str, Any]) -> timedelta | None:
    """The longest `gangplugin.io/max-runtime` of the Workload's pod templates (None: none gives
    one); a value that is not a positive duration raises InputError naming the annotation."""
    longest: float | None = None
    for i, ps in enumerate((wl.get("spec") or {}).get("podSets") or []):
        value = (((ps.get("template") or {}).get("metadata") or {}).get("annotations") or {}).get(
            MAX_RUNTIME_ANNOTATION
        )
        if value is None:
            continue
        field = f"spec.podSets[{i}].template.metadata.annotations[{MAX_RUNTIME_ANNOTATION}]"
        seconds = parse_duration(str(value), field)
        if seconds <= 0:
            raise InputError(
                field, f"{value!r} is not positive; write how long the job runs at most, like 6h"
            )
        longest = seconds if longest is None else max(longest, seconds)
    return None if longest is None else timedelta(seconds=longest)


def quota_of(wl: Mapping[str, Any]) -> tuple[str, set[str]]:
    """(ClusterQueue, ResourceFlavors) Kueue reserved the Workload's quota in ("" and none
    before quota is reserved)."""
    admission = (wl.get("status") or {}).get("admission") or {}
    flavors = {
        str(f)
        for psa in admission.get("podSetAssignments") or []
        for f in (psa.get("flavors") or {}).values()
    }
    return str(admission.get("clusterQueue") or ""), flavors


def priority(wl: Mapping[str, Any]) -> int:
    """The Workload's priority as Kueue resolved it (its WorkloadPriorityClass; 0 without)."""
    value = (wl.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def cluster_queue_state(cq: Mapping[str, Any]) -> ClusterQueueState:
    """A ClusterQueue's cohort, Kueue `spec.preemption` and whether it borrows now."""
    spec = cq.get("spec") or {}
    pre = spec.get("preemption") or {}
    borrow = pre.get("borrowWithinCohort") or {}
    threshold = borrow.get("maxPriorityThreshold")
    borrowing = any(
        _quantity_positive(r.get("borrowed"))
        for f in (cq.get("status") or {}).get("flavorsReservation") or []
        for r in f.get("resources") or []
    )
    return ClusterQueueState(
        str(cq.get("metadata", {}).get("name", "")),
        spec.get("cohortName") or spec.get("cohort") or None,
        QueuePreemption(
            str(pre.get("withinClusterQueue", "Never")),
            str(pre.get("reclaimWithinCohort", "Never")),
            str(borrow.get("policy", "Never")),
            threshold if isinstance(threshold, int) else None,
        ),
        borrowing,
    )


def _quantity_positive(value: object) -> bool:
    return value is not None and str(value).strip() not in ("", "0", "0m")


def hold_from_k8s(wl: Mapping[str, Any]) -> Hold | None:
    """The preemption hold recorded on a Workload (None: none, or unreadable: then nothing is
    held, the safe side)."""
    raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(PREEMPTION_ANNOTATION)
    if not raw:
        return None
    try:
        d = json.loads(raw)
        return Hold(
            d.get("level"),
            d.get("domain"),
            tuple(str(n) for n in d.get("nodes") or ()),
            tuple(str(v) for v in d.get("victims") or ()),
            float(d["quotaReservedAt"]),
            float(d["at"]),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def spent_holds(wl: Mapping[str, Any]) -> tuple[str, ...]:
    """The annotations holding an admitted Workload back whose purpose ended with its admission:
    its preemption hold and its reservation (both end when the gang is admitted), and a backoff that ended
    before the admission began (one the watchdog writes for the timeout it is acting on ends
    after it, so it stays)."""
    annotations = (wl.get("metadata") or {}).get("annotations") or {}
    spent = [a for a in (PREEMPTION_ANNOTATION, RESERVATION_ANNOTATION) if a in annotations]
    raw = annotations.get(BACKOFF_UNTIL_ANNOTATION)
    if raw is not None:
        admitted = (conditions(wl).get("Admitted") or {}).get("lastTransitionTime")
        try:
            if epoch(raw, BACKOFF_UNTIL_ANNOTATION) <= epoch(admitted, "Admitted.lastTransitionTime"):
                spent.append(BACKOFF_UNTIL_ANNOTATION)
        except InputError:
            if admitted:  # an unreadable backoff holds nothing (the pass ignores it too)
                spent.append(BACKOFF_UNTIL_ANNOTATION)
    return tuple(spent)


def hold_annotation(hold: Hold) -> str:
    return json.dumps(
        {
            "level": hold.level,
            "domain": hold.domain,
            "nodes": list(hold.nodes),
            "victims": list(hold.victims),
            "quotaReservedAt": hold.quota_reserved_at,
            "at": hold.at,
        },
        separators=(",", ":"),
    )


def reservation_from_k8s(wl: Mapping[str, Any]) -> Reservation | None:
    """The domain reserved for a waiting Workload (None: none, or unreadable: then nothing is
    reserved, the safe side; the next pass reserves again and writes it anew)."""
    raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(RESERVATION_ANNOTATION)
    if not raw:
        return None
    try:
        d = json.loads(raw)
        return Reservation(
            level=str(d["level"]),
            domain=str(d["domain"]),
            quota_reserved_at=float(d["quotaReservedAt"]),
            at=float(d["at"]),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def reservation_annotation(reservation: Reservation) -> str:
    return json.dumps(
        {
            "level": reservation.level,
            "domain": reservation.domain,
            "quotaReservedAt": reservation.quota_reserved_at,
            "at": reservation.at,
        },
        separators=(",", ":"),
    )
