"""Draining before reserved capacity ends (pure; time is a parameter).

A gang cannot be tied to one block (Kueue counts quota per ClusterQueue flavor, not per block),
so the unit is the capacity the plans give one ClusterQueue flavor: the *block end* for a gang
is the next instant that capacity drops (a block ending with no other block taking over; two
back-to-back blocks are one stretch of capacity). Its termination start is that instant minus
the longest termination lead among the plans whose blocks end there.

- From the termination start on, a new gang is admitted only when its max runtime
  (``gangplugin.io/max-runtime``) says it finishes by the block end; a gang without one is not.
- A running gang that would still run at the block end (or gives no max runtime) must be evicted
  from the termination start on, so it checkpoints and Kueue requeues it for the next block.
- The block end is what the pods carry as an annotation, so the job can checkpoint before it.

When the capacity drops only in part, every gang that outlives the drop drains: which gangs the
remaining capacity could keep is not known here (conservative by design).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gangplugin.core.plans import Status, TrainingPlan, plan_state, plan_termination_lead
from gangplugin.core.quota import queue_quota
from gangplugin.core.timeutil import format_time


@dataclass(frozen=True, slots=True)
class DrainDecision:
    #: May a new gang be admitted now?
    admit: bool
    #: Must a running gang be evicted now?
    evict: bool
    #: From when a running gang must be evicted (None: the plans never require it).
    evict_at: datetime | None
    #: When the capacity the gang runs on ends (None: no plan capacity is active now).
    block_end: datetime | None
    #: Why the gang may not be admitted or must be evicted ("" when neither).
    reason: str = ""


def capacity_drop(plans: Iterable[TrainingPlan], cluster_queue: str, at: datetime) -> datetime | None:
    """The next instant after `at` when the capacity the plans give drops, while some is active
    at `at`; None when none is active or it never drops."""
    feeding = [p for p in plans if p.cluster_queue == cluster_queue]
    current = queue_quota(feeding, cluster_queue, at)
    if not any(current.values()):
        return None
    instants = sorted({t for p in feeding for b in p.blocks for t in (b.start, b.end) if t > at})
    for t in instants:
        later = queue_quota(feeding, cluster_queue, t)
        if any(later.get(k, 0) < v for k, v in current.items()):
            return t
        current = later
    return None


def termination_start(plans: Iterable[TrainingPlan], cluster_queue: str, block_end: datetime) -> datetime:
    """`block_end` minus the longest lead of the plans whose Active blocks end then."""
    just_before = block_end - timedelta(microseconds=1)
    leads = [
        plan_termination_lead(p)
        for p in plans
        if p.cluster_queue == cluster_queue
        and any(
            b.end == block_end and s.status is Status.ACTIVE
            for b, s in zip(p.blocks, plan_state(p, just_before).blocks, strict=True)
        )
    ]
    return block_end - max(leads, default=timedelta(0))


def drain_decision(
    plans: Iterable[TrainingPlan],
    cluster_queue: str,
    flavor: str | None,
    at: datetime,
    max_runtime: timedelta | None,
    admitted_at: datetime | None = None,
) -> DrainDecision:
    """What the plans feeding `cluster_queue` (only those of `flavor` when given) say about a gang
    at `at`: one waiting for admission (`admitted_at` None), or one running since `admitted_at`.
    `max_runtime` is the gang's ``gangplugin.io/max-runtime`` (None when it gives none)."""
    feeding = [p for p in plans if p.cluster_queue == cluster_queue and flavor in (None, p.flavor)]
    end = capacity_drop(feeding, cluster_queue, at)
    if end is None:
        return DrainDecision(admit=True, evict=False, evict_at=None, block_end=None)
    start = termination_start(feeding, cluster_queue, end)
    finish = None if max_runtime is None else (admitted_at or at) + max_runtime
    outlives = finish is None or finish > end
    why = "it gives no max runtime" if finish is None else f"its max runtime ends at {format_time(finish)}"
    reason = f"plan capacity ends at {format_time(end)}, draining from {format_time(start)}; {why},"
    if admitted_at is None:
        admit = at < start or not outlives
        return DrainDecision(
            admit=admit,
            evict=False,
            evict_at=start if outlives else None,
            block_end=end,
            reason="" if admit else f"{reason} so it would run past the end",
        )
    evict_at = start if outlives else None
    evict = evict_at is not None and at >= evict_at
    return DrainDecision(
        admit=True,
        evict=evict,
        evict_at=evict_at,
        block_end=end,
        reason=f"{reason} and it is still running" if evict else "",
    )


def gang_drain(
    plans: Iterable[TrainingPlan],
    cluster_queue: str,
    flavors: Iterable[str],
    at: datetime,
    max_runtime: timedelta | None,
    admitted_at: datetime | None = None,
) -> DrainDecision | None:
    """`drain_decision` for a gang given quota in `flavors` of `cluster_queue`, the strictest
    flavor winning (a gang holds all of its flavors until it ends); None when no plan feeds any
    of them (the plans have no say).

    A waiting gang is also held while a flavor it got gives no plan capacity at all: the quota
    is 0 then, so its reservation is left over from before the capacity ended (Kueue does not
    take reserved quota back when nominalQuota drops), and the instances are gone."""
    fed = [p for p in plans if p.cluster_queue == cluster_queue]
    decisions = []
    for f in sorted(set(flavors)):
        mine = [p for p in fed if p.flavor == f]
        if not mine:
            continue
        d = drain_decision(mine, cluster_queue, f, at, max_runtime, admitted_at)
        if admitted_at is None and not any(queue_quota(mine, cluster_queue, at).values()):
            d = DrainDecision(False, False, None, None, f"no plan capacity of flavor {f} is active now")
        decisions.append(d)
    if not decisions:
        return None
    refusal = next((d for d in decisions if not d.admit or d.evict), None)
    evict_ats = [d.evict_at for d in decisions if d.evict_at is not None]
    ends = [d.block_end for d in decisions if d.block_end is not None]
    return DrainDecision(
        admit=all(d.admit for d in decisions),
        evict=any(d.evict for d in decisions),
        evict_at=min(evict_ats, default=None),
        block_end=min(ends, default=None),
        reason="" if refusal is None else refusal.reason,
    )
