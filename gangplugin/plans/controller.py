"""The TrainingPlan controller: keeps each plan's status current and each ClusterQueue's managed
quota equal to what its plans give now, waking at the next block boundary instead of polling.

Keys: "plan/<name>" (status and conditions) and "cq/<name>" (quota). Everything is rebuilt from
the watch caches on every reconcile, so a restart loses nothing: the ClusterQueue annotation
`PLAN_QUOTA_ANNOTATION` is the only bookkeeping, and it lives in the API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gangplugin.core import names
from gangplugin.core.errors import InputError
from gangplugin.core.plans import TrainingPlan, plan_state
from gangplugin.core.quota import next_quota_change, queue_quota, quota_update
from gangplugin.core.timeutil import format_time
from gangplugin.kube.client import CLUSTER_QUEUES, JSON, ApiError, Client
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.events import record_event
from gangplugin.kube.informer import Informer
from gangplugin.kube.plan_records import parse_plan, plan_state_doc
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.plans.clusterqueue import flavors, managed_quotas, nominal_quotas, quota_patch
from gangplugin.runtime import metrics

log = logging.getLogger(__name__)

COMPONENT = "gangplugin-plans"
CONFLICT_ATTEMPTS = 3  # quota writes per reconcile that a 409 sends back to a fresh read
ACCEPTED = names.PLAN_ACCEPTED_CONDITION

Clock = Callable[[], datetime]


def _seconds_until(t: datetime | None, now: datetime) -> float | None:
    return None if t is None else max((t - now).total_seconds(), 0.0)


def _condition(status: str, reason: str, message: str, generation: int, previous: JSON | None) -> JSON:
    now = format_time(datetime.now(UTC).replace(microsecond=0))
    same = previous is not None and previous.get("status") == status
    return {
        "type": ACCEPTED,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": previous["lastTransitionTime"] if same and previous else now,
    }


class PlanController:
    def __init__(
        self,
        client: Client,
        plans: Informer[JSON],
        queues: Informer[JSON],
        dispatcher: Dispatcher,
        clock: Clock = lambda: datetime.now(UTC),
    ) -> None:
        self.client, self.plans, self.queues, self.clock = client, plans, queues, clock
        self.queue = WorkQueue()
        plans.add_handler(self._on_plan, dispatcher)
        queues.add_handler(self._on_queue, dispatcher)

    # --- events -> keys ---

    def _on_plan(self, _kind: str, old: JSON | None, new: JSON | None) -> None:
        for obj in (old, new):
            if obj is not None:
                self.queue.add(f"plan/{obj['metadata']['name']}")
                cq = (obj.get("spec") or {}).get("clusterQueue")
                if isinstance(cq, str) and cq:
                    self.queue.add(f"cq/{cq}")

    def _on_queue(self, _kind: str, old: JSON | None, new: JSON | None) -> None:
        name = (new or old or {})["metadata"]["name"]
        self.queue.add(f"cq/{name}")
        if (old is None) != (new is None) or _flavors_changed(old, new):
            for plan in self.plans.items():
                if (plan.get("spec") or {}).get("clusterQueue") == name:
                    self.queue.add(f"plan/{plan['metadata']['name']}")

    def enqueue_all(self) -> None:
        for plan in self.plans.items():
            self._on_plan("ADDED", None, plan)

    def reconcile(self, key: str) -> float | None:
        kind, _, name = key.partition("/")
        return self.reconcile_plan(name) if kind == "plan" else self.reconcile_queue(name)

    # --- a plan's status ---

    def reconcile_plan(self, name: str) -> float | None:
        obj = self.plans.get(name)
        if obj is None:
            return None
        now = self.clock()
        generation = int(obj["metadata"].get("generation", 0))
        old_status: JSON = obj.get("status") or {}
        previous = next((c for c in old_status.get("conditions") or [] if c.get("type") == ACCEPTED), None)
        try:
            plan = parse_plan(obj)
        except InputError as err:
            status: JSON = {"status": "Failed", "blocks": [], "currentBlock": None}
            status |= {"activeInstanceCount": 0, "nextTransition": None}
            cond = _condition("False", "InvalidSpec", str(err), generation, previous)
            self._write_status(obj, status, cond, previous)
            return None
        state = plan_state(plan, now)
        reason, message = self._acceptance(plan)
        cond = _condition("True" if reason == ACCEPTED else "False", reason, message, generation, previous)
        self._write_status(obj, plan_state_doc(state), cond, previous)
        return _seconds_until(state.next_transition, now)

    def _acceptance(self, plan: TrainingPlan) -> tuple[str, str]:
        cq = self.queues.get(plan.cluster_queue)
        if cq is None:
            return "ClusterQueueNotFound", (
                f"spec.clusterQueue: ClusterQueue {plan.cluster_queue!r} does not exist; "
                "create it or name an existing one (the plan gives no quota until then)"
            )
        if plan.flavor not in flavors(cq):
            return "FlavorNotFound", (
                f"spec.flavor: ClusterQueue {plan.cluster_queue!r} has no flavor {plan.flavor!r} "
                f"(it has {', '.join(sorted(flavors(cq))) or 'none'}); add it there or fix the name"
            )
        covered = {r for f, r in nominal_quotas(cq) if f == plan.flavor}
        missing = sorted(set(plan.resources_per_instance) - covered)
        if missing:
            return "ResourceNotCovered", (
                f"spec.resourcesPerInstance: {', '.join(missing)} not covered by flavor {plan.flavor!r} "
                f"of ClusterQueue {plan.cluster_queue!r}; that quota is not set"
            )
        return ACCEPTED, f"capacity feeds flavor {plan.flavor!r} of ClusterQueue {plan.cluster_queue!r}"

    def _write_status(self, obj: JSON, status: JSON, cond: JSON, previous: JSON | None) -> None:
        status = {**status, "observedGeneration": cond["observedGeneration"], "conditions": [cond]}
        if _without_times(obj.get("status") or {}) == _without_times(status):
            return
        self.client.patch(TRAINING_PLANS, obj["metadata"]["name"], {"status": status}, subresource="status")
        if cond["status"] == "False" and (previous is None or previous.get("reason") != cond["reason"]):
            record_event(self.client, obj, "Warning", cond["reason"], cond["message"], COMPONENT)

    # --- a ClusterQueue's quota ---

    def _plans_of(self, cluster_queue: str) -> list[TrainingPlan]:
        out = []
        for obj in self.plans.items():
            if (obj.get("spec") or {}).get("clusterQueue") != cluster_queue:
                continue
            try:
                out.append(parse_plan(obj))
            except InputError:
                continue  # reported on the plan by reconcile_plan
        return out

    def reconcile_queue(self, name: str) -> float | None:
        cq = self.queues.get(name)
        if cq is None:
            return None  # its plans are told by the ClusterQueue's DELETED event
        now = self.clock()
        plans = self._plans_of(name)
        desired = queue_quota(plans, name, now)
        metrics.plan_quota(name, desired)
        for attempt in range(CONFLICT_ATTEMPTS):
            managed = managed_quotas(cq)
            update = quota_update(desired, nominal_quotas(cq), managed)
            if not update.values and update.managed == managed:
                break
            try:
                self.client.patch(CLUSTER_QUEUES, name, quota_patch(cq, update.values, update.managed))
            except ApiError as err:
                if err.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                    raise
                # Kueue writes the ClusterQueue's status all along, and the cache may not show
                # that version yet: decide again on the object as it is now, at once (a block's
                # end is when the quota must change).
                log.info("ClusterQueue %s changed under the quota write; writing again", name)
                fresh = self.client.get_or_none(CLUSTER_QUEUES, name)
                if fresh is None:
                    return None
                cq = fresh
                continue
            log.info("ClusterQueue %s: nominalQuota %s at %s", name, update.values, format_time(now))
            break
        return _seconds_until(next_quota_change(plans, name, now), now)


def _flavors_changed(old: JSON | None, new: JSON | None) -> bool:
    return old is None or new is None or nominal_quotas(old).keys() != nominal_quotas(new).keys()


def _without_times(status: JSON) -> Any:
    """The status as compared for a write: no transition times, no nulls (a merge patch's null
    removes the field, so it reads back absent)."""
    conds = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
    ]
    blocks = [{k: v for k, v in b.items() if v is not None} for b in status.get("blocks") or []]
    out = {k: v for k, v in status.items() if v is not None}
    return {**out, "conditions": conds, "blocks": blocks}
