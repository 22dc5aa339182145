"""The readiness watchdog: given what is observed of an admitted gang and `now`, is it in time,
and when must it be looked at again?

Three clocks, each from something the API server keeps, so a restarted controller reaches the
same verdict: `unscheduledTimeout` and `readyTimeout` run from admission until the gang is fully
Ready once; `recoveryTimeout` runs from the moment a gang that was running lost a Ready pod or
a node went NotReady under it.

With `nodeFailure: ReplaceFromSpare` the failed nodes are replaced (`placement.recover`) while
there are at most `maxReplacedNodes` of them at once (`too_many_failed`); more is an outage
replacement should not paper over, so the gang is requeued whole at once. Nodes of one
UltraServer or rack going down together are seen seconds apart, so a running gang's failed
nodes are replaced only `FAILURE_WINDOW` after the first went NotReady: the ones failing
together are counted, and replaced, together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gangplugin.core.durations import format_duration
from gangplugin.core.policy import GangPolicy


@dataclass(frozen=True, slots=True)
class GangObservation:
    """`size` pods expected, `bound` with a node, `ready` Ready; times in epoch seconds.

    `ever_ready`: the gang was fully Ready at some point since this admission.
    `degraded_since`: when a running gang last stopped being whole (a pod not Ready, or a node
    under it NotReady); None while it is whole or before it ever ran."""

    size: int
    bound: int
    ready: int
    admitted_at: float
    ever_ready: bool = False
    degraded_since: float | None = None
    failed_nodes: tuple[str, ...] = ()


class WatchPhase(StrEnum):
    """Where an admitted gang stands for the watchdog (the label of its eviction metrics)."""

    SCHEDULING = "Scheduling"  # not every pod bound to a node yet
    STARTING = "Starting"  # every pod bound, not every one Ready yet
    RUNNING = "Running"  # every pod Ready
    RECOVERING = "Recovering"  # it ran whole, and lost a pod or a node since


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchVerdict:
    """`expired`: the gang is out of time (`reason` says which clock); otherwise `recheck_at`
    is the next deadline (None: nothing can expire while nothing changes)."""

    phase: WatchPhase
    reason: str
    expired: bool = False
    recheck_at: float | None = None
    replace: bool = False  # nodeFailure ReplaceFromSpare: replace the failed nodes now


#: Seconds after a running gang's first node went NotReady before its failed nodes are replaced.
FAILURE_WINDOW = 3.0


def _ago(seconds: float) -> str:
    return format_duration(max(0.0, seconds))


def too_many_failed(policy: GangPolicy, failed_nodes: Sequence[str]) -> str | None:
    """Why a gang with `failed_nodes` NotReady under it is requeued rather than its nodes
    replaced, or None when they may be replaced. The count is of the nodes failed now (one
    failure window: those still NotReady under the gang), not of earlier, finished replacements."""
    limit = policy.max_replaced_nodes
    if policy.node_failure != "ReplaceFromSpare" or limit is None or len(failed_nodes) <= limit:
        return None
    return (
        f"{len(failed_nodes)} nodes NotReady under the gang at once ({', '.join(failed_nodes)}), "
        f"more than maxReplacedNodes {limit}: requeued whole instead of replaced"
    )


def watch(policy: GangPolicy, obs: GangObservation, now: float) -> WatchVerdict:
    phase = WatchPhase.SCHEDULING if obs.bound < obs.size else WatchPhase.STARTING
    requeue = too_many_failed(policy, obs.failed_nodes)
    if requeue is not None:
        return WatchVerdict(
            phase=WatchPhase.RECOVERING if obs.ever_ready else phase, reason=requeue, expired=True
        )
    replacing = policy.node_failure == "ReplaceFromSpare" and bool(obs.failed_nodes)
    if not obs.ever_ready:
        deadlines: list[tuple[float, str]] = []
        if policy.unscheduled_timeout is not None and obs.bound < obs.size:
            deadlines.append(
                (
                    obs.admitted_at + policy.unscheduled_timeout,
                    f"only {obs.bound}/{obs.size} pods bound to nodes "
                    f"{_ago(now - obs.admitted_at)} after admission "
                    f"(unscheduledTimeout {format_duration(policy.unscheduled_timeout)})",
                )
            )
        deadlines.append(
            (
                obs.admitted_at + policy.ready_timeout,
                f"only {obs.ready}/{obs.size} pods Ready {_ago(now - obs.admitted_at)} after admission "
                f"(readyTimeout {format_duration(policy.ready_timeout)})",
            )
        )
        at, reason = min(deadlines)
        if now >= at:
            return WatchVerdict(phase=phase, reason=reason, expired=True)
        waiting = f"{obs.ready}/{obs.size} pods Ready; waiting until the deadline"
        return WatchVerdict(phase=phase, reason=waiting, recheck_at=at, replace=replacing)
    if obs.degraded_since is None:
        return WatchVerdict(phase=WatchPhase.RUNNING, reason=f"all {obs.size} pods Ready")
    lost = (
        f"node(s) {', '.join(obs.failed_nodes)} NotReady"
        if obs.failed_nodes
        else f"{obs.size - obs.ready}/{obs.size} pods not Ready"
    )
    settle = obs.degraded_since + FAILURE_WINDOW
    if replacing and now < settle:  # nodes failing together are replaced together
        lost += f"; replaced once {format_duration(FAILURE_WINDOW)} have passed since the first failure"
        replacing = False
    else:
        settle = math.inf
    if policy.recovery_timeout <= 0:
        wake = None if settle == math.inf else settle
        off = f"{lost}; recoveryTimeout is off (0s)"
        return WatchVerdict(phase=WatchPhase.RECOVERING, reason=off, recheck_at=wake, replace=replacing)
    at = obs.degraded_since + policy.recovery_timeout
    if now >= at:
        return WatchVerdict(
            phase=WatchPhase.RECOVERING,
            reason=f"{lost}; not recovered {_ago(now - obs.degraded_since)} after the loss "
            f"(recoveryTimeout {format_duration(policy.recovery_timeout)})",
            expired=True,
        )
    return WatchVerdict(
        phase=WatchPhase.RECOVERING,
        reason=f"{lost}; recovering",
        recheck_at=min(at, settle),
        replace=replacing,
    )
