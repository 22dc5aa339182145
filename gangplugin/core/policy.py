"""GangPolicy values: readiness timeouts, requeue backoff, admission mode, node-failure handling.

The AdmissionCheck's `spec.parameters` points at a GangPolicy; the adapter turns its spec into
a `GangPolicy` (gangplugin/kube/kueue_records.py) and everything that depends on it is decided
here and in `watchdog.py`, from plain values and a `now` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangplugin.core.durations import format_duration
from gangplugin.core.errors import InputError
from gangplugin.core.placement import PlacementPolicy
from gangplugin.core.states import CheckState

ADMISSION_MODES = ("Parallel", "Sequential")
NODE_FAILURE_MODES = ("Requeue", "ReplaceFromSpare")
TIMESTAMPS = ("Eviction", "Creation")
# ClusterQueue: preempt as the ClusterQueue's Kueue `spec.preemption` allows; Never: not at all.
PREEMPTION_MODES = ("ClusterQueue", "Never")
# Ungate: pods are created scheduling-gated and pinned to their planned node by gangplugin, then
# kube-scheduler binds them alone. Extender: the extender's filter and bind barrier (strict).
# PodGroup: Ungate's pins, and a native Kubernetes PodGroup (GenericWorkload) whose gang minCount
# makes kube-scheduler's GangScheduling plugin bind the gang all or nothing.
BIND_MODES = ("Ungate", "Extender", "PodGroup")
# The modes whose pods the webhook creates behind the placement gate and the ungater pins.
PINNED_BIND_MODES = frozenset({"Ungate", "PodGroup"})
POD_GROUP_BIND_MODE = "PodGroup"
DEFAULT_READY_TIMEOUT = 300.0  # HyperPod's `timeout`: 5m


@dataclass(frozen=True, slots=True)
class Requeue:
    """When a timed-out gang may try again: base * 2^(n-1) seconds, capped, counted from
    the eviction or from the Workload's creation; after `backoff_limit_count` retries, never."""

    timestamp: str = "Eviction"
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600
    backoff_limit_count: int | None = None  # None: retry forever


@dataclass(frozen=True, slots=True)
class ReservationPolicy:
    """GangPolicy `spec.reservation`: a gang that has waited `after_waiting` seconds since its
    quota was reserved gets a domain reserved (None: never; off unless the policy says so).
    `level`: the widest level reserved (None: any); `max_checkpointable_evictions`: how many
    checkpointable gangs of lower priority may be evicted to clear a reserved domain early,
    where Kueue's ClusterQueue rules allow preempting them (0: none)."""

    after_waiting: float | None = None
    level: str | None = None
    max_checkpointable_evictions: int = 0

    @property
    def on(self) -> bool:
        return self.after_waiting is not None


@dataclass(frozen=True, slots=True)
class GangPolicy:
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    unscheduled_timeout: float | None = None
    recovery_timeout: float = DEFAULT_READY_TIMEOUT  # 0: a running gang is never evicted for a loss
    admission: str = "Parallel"
    requeue: Requeue = field(default_factory=Requeue)
    topology_name: str | None = None
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    node_failure: str = "Requeue"
    # ReplaceFromSpare: at most this many nodes NotReady under a gang at once are replaced;
    # more and the gang is requeued whole at once. None: no limit.
    max_replaced_nodes: int | None = None
    preemption: str = "ClusterQueue"
    bind_mode: str = "Ungate"
    reservation: ReservationPolicy = field(default_factory=ReservationPolicy)

    @property
    def sequential(self) -> bool:
        return self.admission == "Sequential"


def validate_policy(policy: GangPolicy, field_prefix: str = "spec") -> GangPolicy:
    """The policy itself, or InputError naming the first field that breaks a rule.

    The CRD's schema and CEL rules refuse the same things at the API server; this guards
    objects written before the rules existed, or to a cluster without them."""
    p = field_prefix
    if policy.ready_timeout <= 0:
        raise InputError(f"{p}.readyTimeout", "must be longer than 0s, e.g. 5m")
    if policy.unscheduled_timeout is not None and policy.unscheduled_timeout <= 0:
        raise InputError(f"{p}.unscheduledTimeout", "must be longer than 0s; leave it out to disable")
    if policy.recovery_timeout < 0:
        raise InputError(f"{p}.recoveryTimeout", "must not be negative; 0s disables it")
    if policy.admission not in ADMISSION_MODES:
        raise InputError(f"{p}.admission", f"{policy.admission!r} is not one of {', '.join(ADMISSION_MODES)}")
    if policy.node_failure not in NODE_FAILURE_MODES:
        raise InputError(
            f"{p}.nodeFailure", f"{policy.node_failure!r} is not one of {', '.join(NODE_FAILURE_MODES)}"
        )
    if policy.preemption not in PREEMPTION_MODES:
        modes = ", ".join(PREEMPTION_MODES)
        raise InputError(f"{p}.preemption", f"{policy.preemption!r} is not one of {modes}")
    if policy.bind_mode not in BIND_MODES:
        raise InputError(f"{p}.bindMode", f"{policy.bind_mode!r} is not one of {', '.join(BIND_MODES)}")
    rq = policy.requeue
    if rq.timestamp not in TIMESTAMPS:
        raise InputError(f"{p}.requeue.timestamp", f"{rq.timestamp!r} is not one of {', '.join(TIMESTAMPS)}")
    if rq.backoff_base_seconds < 1:
        raise InputError(f"{p}.requeue.backoffBaseSeconds", "must be at least 1")
    if rq.backoff_max_seconds < rq.backoff_base_seconds:
        raise InputError(
            f"{p}.requeue.backoffMaxSeconds",
            f"{rq.backoff_max_seconds} is below backoffBaseSeconds {rq.backoff_base_seconds}; raise it",
        )
    if rq.backoff_limit_count is not None and rq.backoff_limit_count < 0:
        raise InputError(
            f"{p}.requeue.backoffLimitCount", "must not be negative; leave it out to retry forever"
        )
    if policy.max_replaced_nodes is not None and policy.max_replaced_nodes < 0:
        raise InputError(f"{p}.maxReplacedNodes", "must not be negative; leave it out for no limit")
    if policy.placement.spares_per_ultraserver < 0:
        raise InputError(f"{p}.sparesPerUltraServer", "must not be negative")
    rs = policy.reservation
    if rs.after_waiting is not None and rs.after_waiting < 0:
        raise InputError(f"{p}.reservation.afterWaiting", "must not be negative, e.g. 10m (0s: at once)")
    if rs.level is not None and not rs.level:
        raise InputError(f"{p}.reservation.level", "names a node label; leave it out for any level")
    if rs.max_checkpointable_evictions < 0:
        raise InputError(f"{p}.reservation.maxCheckpointableEvictions", "must not be negative (0: none)")
    return policy


def backoff_seconds(requeue: Requeue, attempt: int) -> int:
    """The wait before the `attempt`-th retry (1-based): base * 2^(attempt-1), at most max."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    # Cap the exponent first: 2**attempt for a huge attempt count is a huge integer for nothing.
    doublings = min(attempt - 1, 62)
    return int(min(requeue.backoff_base_seconds * (1 << doublings), requeue.backoff_max_seconds))


@dataclass(frozen=True, slots=True)
class RequeueDecision:
    """What the check becomes when a gang times out: `Retry` (the gang is evicted whole at once
    and waits `requeue_after_seconds` out of the queue, holding neither nodes nor quota) or
    `Rejected` (Kueue deactivates the Workload)."""

    state: CheckState
    requeue_after_seconds: int | None
    attempt: int
    message: str


def requeue_decision(
    policy: GangPolicy, retry_count: int, reason: str, now: float, created_at: float
) -> RequeueDecision:
    """`retry_count` is how often the check was already set to Retry (Kueue keeps it in the
    check's `retryCount`), so this is retry number `retry_count + 1`."""
    rq = policy.requeue
    attempt = retry_count + 1
    limit = rq.backoff_limit_count
    if limit is not None and attempt > limit:
        return RequeueDecision(
            CheckState.REJECTED,
            None,
            attempt,
            f"{reason}; backoffLimitCount {limit} reached after {retry_count} retries, deactivating",
        )
    wait = backoff_seconds(rq, attempt)
    start = now if rq.timestamp == "Eviction" else created_at
    after = max(0, int(start + wait - now))
    of = f"/{limit}" if limit is not None else ""
    return RequeueDecision(
        CheckState.RETRY,
        after,
        attempt,
        f"{reason}; retry {attempt}{of} after backoff {format_duration(wait)} "
        f"(from {rq.timestamp.lower()}), requeued in {format_duration(after)}",
    )
