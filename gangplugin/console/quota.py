"""Quota and plans as the console shows them: per ClusterQueue (and the teams whose LocalQueues
point at it) each flavor's quota used, nominal and borrowed; each TrainingPlan's blocks on a
time axis with the quota they give. Pure: objects and an instant in, typed values out; a
plan's timeline and quota are the core's (`core.plans`, `core.quota`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gangplugin.console.model import PlanBlock, PlanSchedule, QueueUsage, ResourceQuota
from gangplugin.core.errors import InputError
from gangplugin.core.plans import TrainingPlan, plan_state, usable_instances
from gangplugin.core.quota import next_quota_change
from gangplugin.core.resources import canonical
from gangplugin.kube.plan_records import parse_plan

JSON = dict[str, Any]


def _amount(resource: str, value: object) -> int:
    try:
        return canonical(resource, value, resource) if value is not None else 0
    except InputError:
        return 0


def _limit(resource: str, value: object) -> int | None:
    return None if value is None else _amount(resource, value)


def _usage(status: Mapping[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    """(flavor, resource) -> (used, borrowed) from a ClusterQueue's status.flavorsUsage."""
    out = {}
    for flavor in status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            name = str(res.get("name", ""))
            out[(str(flavor.get("name", "")), name)] = (
                _amount(name, res.get("total")),
                _amount(name, res.get("borrowed")),
            )
    return out


def queue_usage(
    cq: Mapping[str, Any],
    local_queues: Sequence[Mapping[str, Any]],
    plans: Sequence[TrainingPlan],
    now: datetime,
) -> QueueUsage:
    """One ClusterQueue: its quota per flavor and resource, who submits to it, what plans do."""
    name = str((cq.get("metadata") or {}).get("name", ""))
    spec, status = cq.get("spec") or {}, cq.get("status") or {}
    used = _usage(status)
    fed = {(p.flavor, r) for p in plans if p.cluster_queue == name for r in p.resources_per_instance}
    resources = []
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            fname = str(flavor.get("name", ""))
            for res in flavor.get("resources") or []:
                rname = str(res.get("name", ""))
                total, borrowed = used.get((fname, rname), (0, 0))
                resources.append(
                    ResourceQuota(
                        flavor=fname,
                        resource=rname,
                        nominal=_amount(rname, res.get("nominalQuota")),
                        used=total,
                        borrowed=borrowed,
                        borrowing_limit=_limit(rname, res.get("borrowingLimit")),
                        lending_limit=_limit(rname, res.get("lendingLimit")),
                        from_plans=(fname, rname) in fed,
                    )
                )
    teams = sorted(
        f"{(lq.get('metadata') or {}).get('namespace', '')}/{(lq.get('metadata') or {}).get('name', '')}"
        for lq in local_queues
        if (lq.get("spec") or {}).get("clusterQueue") == name
    )
    return QueueUsage(
        name=name,
        cohort=str(spec.get("cohortName") or spec.get("cohort") or ""),
        teams=tuple(teams),
        resources=tuple(resources),
        admitted=int(status.get("admittedWorkloads") or 0),
        pending=int(status.get("pendingWorkloads") or 0),
        next_change=next_quota_change(plans, name, now),
    )


def plan_schedule(obj: Mapping[str, Any], now: datetime) -> PlanSchedule:
    """A TrainingPlan's blocks at `now`, each with the quota it gives while Active; a plan that
    does not parse is shown with the reason (the plans controller reports it on the plan too)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    try:
        plan = parse_plan(dict(obj))
    except InputError as err:
        return PlanSchedule(
            name=name,
            cluster_queue=str(spec.get("clusterQueue") or ""),
            flavor=str(spec.get("flavor") or ""),
            target=None,
            status=None,
            blocks=(),
            next_change=None,
            problem=str(err),
        )
    state = plan_state(plan, now)
    blocks = []
    for b in state.blocks:
        block = plan.blocks[b.index]
        usable = usable_instances(plan, block)
        blocks.append(
            PlanBlock(
                index=b.index,
                instance_type=block.instance_type,
                instances=block.instance_count,
                usable=usable,
                zone=block.availability_zone,
                start=block.start,
                end=block.end,
                status=b.status,
                gives=tuple(sorted((r, usable * q) for r, q in plan.resources_per_instance.items())),
            )
        )
    return PlanSchedule(
        name=plan.name,
        cluster_queue=plan.cluster_queue,
        flavor=plan.flavor,
        target=plan.target_resource,
        status=state.status,
        blocks=tuple(blocks),
        next_change=state.next_transition,
    )


def parsed_plans(objs: Sequence[Mapping[str, Any]]) -> list[TrainingPlan]:
    """The plans that parse (the ones that feed quota)."""
    out = []
    for obj in objs:
        try:
            out.append(parse_plan(dict(obj)))
        except InputError:
            continue
    return out
