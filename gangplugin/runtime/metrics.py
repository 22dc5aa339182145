"""Every Prometheus metric gangplugin exports, in one place (served on /metrics by `serve`).

Components import the objects they observe; names follow Prometheus conventions (base units,
`_seconds`, `_total`). Series that only the leader produces (admission, plans) are absent on
followers, so summing over replicas never counts a gang twice.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from gangplugin.core.gate import WaitingReason
from gangplugin.core.states import CheckState
from gangplugin.core.watchdog import WatchPhase

# Admission and readiness happen on human time scales: seconds to an hour.
_SLOW = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# Extender calls: filter/prioritize in milliseconds, bind waits at the gang barrier (up to ~20 s).
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30)
# One gang's admission decision: finer around its 50 ms objective, so a p99 near it reads as a
# number rather than "somewhere in (25, 50] ms".
_DECISION = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 5)

API_REQUESTS = Counter(
    "gangplugin_api_requests_total",
    "Requests to the Kubernetes API server, by verb (WATCH: a watch opened), resource (with its "
    "subresource) and HTTP code ('error': no answer); client-go's rest_client_requests_total",
    ["verb", "resource", "code"],
)
API_REQUEST_DURATION = Histogram(
    "gangplugin_api_request_duration_seconds",
    "Seconds until the API server answered (a watch: until it began), by verb and resource",
    ["verb", "resource"],
    buckets=_FAST,
)


def observe_api_request(verb: str, resource: str, code: str, seconds: float) -> None:
    """`kube.client.observe_requests` takes this: every request counted and timed."""
    API_REQUESTS.labels(verb, resource, code).inc()
    API_REQUEST_DURATION.labels(verb, resource).observe(seconds)


ADMISSION_LATENCY = Histogram(
    "gangplugin_gang_admission_latency_seconds",
    "From a gang's quota reservation in Kueue to the end of the write that made its "
    "gangplugin.io/gang check Ready (the wait behind earlier passes and writes included).",
    buckets=_SLOW,
)
ADMISSION_DECISION = Histogram(
    "gangplugin_admission_decision_duration_seconds",
    "Time the admission pass spends deciding one waiting gang (placement on the snapshot, the "
    "preemption search when it does not fit); the pass's snapshot refresh and its API writes "
    "are the pass's.",
    buckets=_DECISION,
)
ADMISSION_DECISION_CPU = Histogram(
    "gangplugin_admission_decision_cpu_seconds",
    "CPU time of the thread deciding one waiting gang (as gangplugin_admission_decision_duration_"
    "seconds measures it): where the two part, the process waits for a core or the GIL.",
    buckets=_DECISION,
)
ADMISSION_PASS = Histogram(
    "gangplugin_admission_pass_duration_seconds",
    "One admission pass: every waiting gang decided in queue order and its writes sent (the pass "
    "does not wait for them: gangplugin_gang_admission_latency_seconds includes them).",
    buckets=_FAST,
)
TIME_TO_ALL_READY = Histogram(
    "gangplugin_gang_time_to_all_ready_seconds",
    "From a gang's admission to every one of its pods being Ready (first time per admission).",
    buckets=_SLOW,
)
EVICTIONS = Counter(
    "gangplugin_gang_evictions_total",
    "Gangs the readiness watchdog evicted, by why (the phase they were stuck in) and what followed.",
    ["reason", "action"],
)
DISPATCH_BACKLOG = Gauge(
    "gangplugin_dispatch_backlog",
    "Watch events waiting for a component's handlers (by dispatcher): one that keeps growing "
    "means its handlers are slower than the events they are given.",
    ["dispatcher"],
)
EXTENDER_LATENCY = Histogram(
    "gangplugin_extender_request_duration_seconds",
    "Time to answer a kube-scheduler extender call, by verb (bind includes the gang barrier wait).",
    ["verb"],
    buckets=_FAST,
)
UNGATED_PODS = Counter(
    "gangplugin_ungated_pods_total",
    "Pods of bindMode Ungate and PodGroup gangs pinned to their planned node and released from the "
    "placement gate.",
)
PLAN_QUOTA = Gauge(
    "gangplugin_plan_quota",
    "nominalQuota that TrainingPlans give a ClusterQueue flavor now, per resource.",
    ["cluster_queue", "flavor", "resource"],
)
BARRIER_WAITING = Gauge(
    "gangplugin_extender_barrier_waiting_pods",
    "Members of a gang waiting at the extender's bind barrier for the rest of it; a gang's series "
    "is removed when it leaves the barrier (bound or timed out), so only waiting gangs have one.",
    ["namespace", "gang"],
)
ADMISSION_PASS_SEEN = Gauge(
    "gangplugin_admission_pass_seen_resource_version",
    "The newest Workload resourceVersion in the cache when the last completed admission pass "
    "began: every Workload write up to it has been decided on (and the decisions written).",
)
WAITING_GANGS = Gauge(
    "gangplugin_waiting_gangs",
    "Gangs with quota reserved that the gang check holds Pending after the last admission pass, "
    "by why: NoFit, Sequential, PlanDrain, Backoff, Preempting, PolicyUnusable, UnknownKey, AwaitingPods.",
    ["reason"],
)
WAITING_OLDEST = Gauge(
    "gangplugin_waiting_gang_oldest_seconds",
    "How long the longest-waiting of those gangs has had its quota reserved, by the same reasons.",
    ["reason"],
)
NODE_REPLACEMENTS = Counter(
    "gangplugin_node_replacements_total",
    "Failed nodes under running gangs: replaced (the gang's pods recreated on other nodes of its "
    "domain) or impossible (the gang waits for its recoveryTimeout).",
    ["result"],
)
LEADER = Gauge(
    "gangplugin_leader",
    "1 while this replica holds the leader Lease (and runs the controllers), else 0.",
    ["lease"],
)
# A renewal is due every retry period (2 s); the leader stops at the renew deadline (10 s).
_RENEW = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 15, 20)
RENEW_LATENCY = Histogram(
    "gangplugin_leader_renew_latency_seconds",
    "From when a renewal of the held leader Lease was due (a retry period after the last try) to "
    "the API server's answer to it: what must stay below the renew deadline.",
    buckets=_RENEW,
)
RENEW_WAKEUP = Histogram(
    "gangplugin_leader_renew_wakeup_seconds",
    "Of that, how late the renewing code began: it waited for a core or the GIL (the rest is "
    "the API server's answer).",
    buckets=_RENEW,
)


def barrier_waiting(namespace: str, gang: str, pods: int) -> None:
    """How many members of a gang wait at the bind barrier now; 0 removes the gang's series."""
    if pods:
        BARRIER_WAITING.labels(namespace, gang).set(pods)
    else:
        with contextlib.suppress(KeyError):  # never set: the gang's first bind opened the barrier
            BARRIER_WAITING.remove(namespace, gang)


def newest_resource_version(objs: Iterable[Mapping[str, Any]]) -> int:
    """The highest resourceVersion among API objects (etcd revisions: decimal integers); 0 if none."""
    versions = (str((o.get("metadata") or {}).get("resourceVersion", "")) for o in objs)
    return max((int(v) for v in versions if v.isdigit()), default=0)


def waiting(gangs: Mapping[WaitingReason, list[float]]) -> None:
    """After an admission pass: reason -> how long each gang waiting for it has had its quota
    reserved. Every reason is set, 0 when no gang waits for it, so a series never goes stale."""
    for reason in WaitingReason:
        waits = gangs.get(reason, [])
        WAITING_GANGS.labels(reason).set(len(waits))
        WAITING_OLDEST.labels(reason).set(max(waits, default=0.0))


# The watchdog's phase when a gang ran out of time -> the eviction reason exported.
_EVICTION_REASONS: dict[str, str] = {
    WatchPhase.SCHEDULING: "PodsNotScheduled",
    WatchPhase.STARTING: "PodsNotReady",
    WatchPhase.RECOVERING: "RecoveryTimeout",
}


def eviction(phase: str, state: CheckState) -> None:
    """Count one eviction: `phase` from the watchdog's verdict (or the plans' draining reason),
    `state` the check state written (Retry requeues, anything else deactivates)."""
    action = "Requeued" if state is CheckState.RETRY else "Deactivated"
    EVICTIONS.labels(_EVICTION_REASONS.get(phase, phase), action).inc()


class FirstReady:
    """Observes admission -> all pods Ready once per admission, and only for gangs this process
    saw not yet Ready (a new leader does not count gangs that were Ready before it led)."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._seen: dict[str, tuple[float, bool]] = {}  # key -> (admitted at, all Ready seen)
        self._lock = threading.Lock()

    def update(self, key: str, admitted_at: float, all_ready: bool, now: float) -> float | None:
        """The latency observed now, if this is the gang's first all-Ready since admission."""
        with self._lock:
            prev = self._seen.get(key)
            fresh = prev is None or prev[0] != admitted_at
            self._seen[key] = (admitted_at, all_ready or (not fresh and prev is not None and prev[1]))
            if not all_ready or prev is None or fresh or prev[1]:
                return None
        latency = max(0.0, now - admitted_at)
        self._histogram.observe(latency)
        return latency

    def forget(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)


GANG_READY = FirstReady(TIME_TO_ALL_READY)

_quota_series: dict[str, set[tuple[str, str]]] = {}
_quota_lock = threading.Lock()


def plan_quota(cluster_queue: str, quota: Mapping[tuple[str, str], int]) -> None:
    """Set the quota plans give `cluster_queue` now ((flavor, resource) -> amount); pairs no
    longer fed are removed, not left at their last value."""
    with _quota_lock:
        old = _quota_series.get(cluster_queue, set())
        for flavor, resource in old - set(quota):
            PLAN_QUOTA.remove(cluster_queue, flavor, resource)
        for (flavor, resource), amount in quota.items():
            PLAN_QUOTA.labels(cluster_queue, flavor, resource).set(amount)
        _quota_series[cluster_queue] = set(quota)
