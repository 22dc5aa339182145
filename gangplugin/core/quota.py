"""The quota training plans give a ClusterQueue at an instant (pure; time is a parameter).

Each plan names a ClusterQueue, a flavor and ``resourcesPerInstance``. At instant t a plan gives
``usable instances of its Active blocks x resourcesPerInstance`` (UltraServer blocks minus their
spares, `plans.usable_instances`); several plans feeding one ClusterQueue flavor add up. A
(flavor, resource) pair some plan feeds is *managed*: its ``nominalQuota`` is exactly that sum,
0 between blocks. Quota no plan feeds is never touched; when the last plan feeding a pair goes
away, the pair gets back the value it had before plans managed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gangplugin.core.plans import Status, TrainingPlan, plan_state, usable_instances
from gangplugin.core.resources import canonical, format_quantity

#: (flavor, resource name)
QuotaKey = tuple[str, str]


def plan_capacity(plan: TrainingPlan, at: datetime) -> dict[str, int]:
    """What `plan` gives at `at`, per resource, in canonical units (zeros outside its blocks)."""
    state = plan_state(plan, at)
    instances = sum(
        usable_instances(plan, plan.blocks[b.index]) for b in state.blocks if b.status is Status.ACTIVE
    )
    return {name: instances * amount for name, amount in plan.resources_per_instance.items()}


def queue_quota(plans: Iterable[TrainingPlan], cluster_queue: str, at: datetime) -> dict[QuotaKey, int]:
    """The managed quota of `cluster_queue` at `at`: every (flavor, resource) a plan feeds."""
    quota: dict[QuotaKey, int] = {}
    for plan in plans:
        if plan.cluster_queue != cluster_queue:
            continue
        for name, amount in plan_capacity(plan, at).items():
            key = (plan.flavor, name)
            quota[key] = quota.get(key, 0) + amount
    return quota


def next_quota_change(plans: Iterable[TrainingPlan], cluster_queue: str, at: datetime) -> datetime | None:
    """The next instant after `at` when a plan feeding `cluster_queue` changes status (the quota
    can change only then); None when none will."""
    times = [
        t
        for p in plans
        if p.cluster_queue == cluster_queue and (t := plan_state(p, at).next_transition) is not None
    ]
    return min(times, default=None)


@dataclass(frozen=True, slots=True)
class QuotaUpdate:
    #: nominalQuota values to write, as quantity strings.
    values: dict[QuotaKey, str]
    #: The managed pairs after the update, each with the value it had before plans managed it.
    managed: dict[QuotaKey, str]


def quota_update(
    desired: Mapping[QuotaKey, int],
    current: Mapping[QuotaKey, str],
    managed: Mapping[QuotaKey, str],
) -> QuotaUpdate:
    """What to write so the managed pairs hold `desired`.

    `current` is the ClusterQueue's nominalQuota per pair (pairs it lacks cannot be set: the
    caller reports them); `managed` is the bookkeeping from the last update. A pair newly fed
    remembers its current value; a pair no longer fed gets that value back and stops being managed.
    """
    values: dict[QuotaKey, str] = {}
    after: dict[QuotaKey, str] = {}
    for key, amount in desired.items():
        if key not in current:
            continue
        values[key] = format_quantity(key[1], amount)
        after[key] = managed.get(key, current[key])
    for key, before in managed.items():
        if key not in desired and key in current:
            values[key] = before
    return QuotaUpdate({k: v for k, v in values.items() if not _same(k, current[k], v)}, after)


def _same(key: QuotaKey, a: str, b: str) -> bool:
    """Equal quantities written differently ("1Ti" and "1024Gi") need no write."""
    try:
        return canonical(key[1], a, "nominalQuota") == canonical(key[1], b, "nominalQuota")
    except ValueError:
        return a == b
