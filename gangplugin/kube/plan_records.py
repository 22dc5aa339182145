"""TrainingPlan and CapacityInventory manifests (parsed YAML/JSON dicts) -> core values, and a
plan's state back to JSON (`plan_state_doc`).

Structural problems (a missing or mistyped field, a time that does not parse, an end not after
its start, an unknown targetResource) raise `InputError` naming the field path, e.g.
``spec.reservedCapacity[1].endTime``. Plan-rule violations inside a well-formed block (a count of
3, an end not at 11:30 UTC) are not input errors: the core reports such a block as Failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.offerings import CapacityInventory, CapacityPool, CapacityReservation
from gangplugin.core.plans import (
    ULTRA_SERVER_TYPES,
    CapacityBlock,
    PlanState,
    Status,
    TargetResource,
    TrainingPlan,
)
from gangplugin.core.resources import parse_resources
from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.client import JSON

API_VERSION = "gangplugin.io/v1alpha1"


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(path, f"must be a mapping, not {type(value).__name__}")
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(path, f"must be a list, not {type(value).__name__}")
    return value


def _str(m: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = m.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        what = "is required" if value is None else f"must be a non-empty string, not {value!r}"
        raise InputError(f"{path}.{key}", what)
    return value


def _req_str(m: Mapping[str, Any], key: str, path: str) -> str:
    value = _str(m, key, path)
    assert value is not None
    return value


def _int(m: Mapping[str, Any], key: str, path: str, *, minimum: int = 0, default: int | None = None) -> int:
    value = m.get(key, default)
    if value is None:
        raise InputError(f"{path}.{key}", "is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{path}.{key}", f"must be a whole number, not {value!r}")
    if value < minimum:
        raise InputError(f"{path}.{key}", f"{value} is less than {minimum}")
    return value


def _check_kind(doc: object, kind: str) -> Mapping[str, Any]:
    m = _mapping(doc, "(document)")
    if m.get("kind") != kind:
        raise InputError("kind", f"{m.get('kind')!r} is not {kind}")
    if m.get("apiVersion") != API_VERSION:
        raise InputError("apiVersion", f"{m.get('apiVersion')!r} is not {API_VERSION}")
    return _mapping(m.get("spec"), "spec")


def _ultra(m: Mapping[str, Any], path: str) -> tuple[str, int] | None:
    """(ultraServerType, instancesPerUltraServer) when the entry names an UltraServer type."""
    utype = _str(m, "ultraServerType", path, required=False)
    if utype is None:
        return None
    if m.get("instancesPerUltraServer") is not None:
        return utype, _int(m, "instancesPerUltraServer", path, minimum=1)
    if utype not in ULTRA_SERVER_TYPES:
        known = ", ".join(sorted(ULTRA_SERVER_TYPES))
        raise InputError(f"{path}.instancesPerUltraServer", f"is required for {utype} (known types: {known})")
    return utype, ULTRA_SERVER_TYPES[utype][1]


def _instance_type_of(m: Mapping[str, Any], path: str, utype: str) -> str:
    given = _str(m, "instanceType", path, required=False)
    if given is not None:
        return given
    if utype in ULTRA_SERVER_TYPES:
        return ULTRA_SERVER_TYPES[utype][0]
    raise InputError(f"{path}.instanceType", f"is required for {utype}")


def target_resource(value: object, field: str) -> TargetResource:
    """`value` as a TargetResource, or an InputError naming `field`."""
    if isinstance(value, str):
        for t in TargetResource:
            if t.value == value:
                return t
    allowed = ", ".join(t.value for t in TargetResource)
    problem = "is required" if value is None else f"{value!r} is not one of"
    raise InputError(field, f"{problem} {allowed}" if value is not None else f"{problem} ({allowed})")


def training_plan_from_manifest(doc: object) -> TrainingPlan:
    """A TrainingPlan manifest (apiVersion gangplugin.io/v1alpha1) as a core `TrainingPlan`."""
    spec = _check_kind(doc, "TrainingPlan")
    meta = _mapping(_mapping(doc, "(document)").get("metadata") or {}, "metadata")
    target = target_resource(spec.get("targetResource"), "spec.targetResource")
    overrides = _mapping(spec.get("testOverrides") or {}, "spec.testOverrides")
    lead = overrides.get("terminationLead")
    marks = _status_marks(doc)
    raw_blocks = _list(spec.get("reservedCapacity"), "spec.reservedCapacity")
    if not raw_blocks:
        raise InputError("spec.reservedCapacity", "lists no blocks; a plan has at least one")
    blocks = tuple(_block(b, f"spec.reservedCapacity[{i}]", marks.get(i)) for i, b in enumerate(raw_blocks))
    return TrainingPlan(
        name=str(meta.get("name") or ""),
        target_resource=target,
        blocks=blocks,
        cluster_queue=str(spec.get("clusterQueue") or ""),
        flavor=str(spec.get("flavor") or ""),
        resources_per_instance=parse_resources(spec.get("resourcesPerInstance"), "spec.resourcesPerInstance"),
        spare_instances_per_ultra_server=_int(spec, "spareInstancesPerUltraServer", "spec", default=1),
        termination_lead=(
            None
            if lead is None
            else timedelta(seconds=parse_duration(str(lead), "spec.testOverrides.terminationLead"))
        ),
        any_block_times=overrides.get("anyBlockTimes") is True,
    )


def _status_marks(doc: object) -> dict[int, Status]:
    """Block statuses a file's `status.blocks` already carries (a block marked Failed stays so)."""
    status = _mapping(doc, "(document)").get("status")
    if not status:
        return {}
    entries = _list(_mapping(status, "status").get("blocks"), "status.blocks")
    marks: dict[int, Status] = {}
    for i, entry in enumerate(entries):
        text = _mapping(entry, f"status.blocks[{i}]").get("status")
        if text is None:
            continue
        try:
            marks[i] = Status(text)
        except ValueError:
            allowed = ", ".join(s.value for s in Status)
            raise InputError(f"status.blocks[{i}].status", f"{text!r} is not one of {allowed}") from None
    return marks


def _check_order(start: datetime, end: datetime, m: Mapping[str, Any], path: str) -> None:
    if end <= start:
        raise InputError(f"{path}.endTime", f"{m.get('endTime')} is not after startTime {m.get('startTime')}")


def _block(raw: object, path: str, mark: Status | None) -> CapacityBlock:
    m = _mapping(raw, path)
    ultra = _ultra(m, path)
    zone = _req_str(m, "availabilityZone", path)
    start = parse_time(m.get("startTime"), f"{path}.startTime")
    end = parse_time(m.get("endTime"), f"{path}.endTime")
    _check_order(start, end, m, path)
    if ultra is None:
        return CapacityBlock(
            instance_type=_req_str(m, "instanceType", path),
            instance_count=_int(m, "instanceCount", path, minimum=1),
            availability_zone=zone,
            start=start,
            end=end,
            marked=mark,
        )
    utype, per = ultra
    # Zero or fewer UltraServers is allowed through so the core marks the block Failed (whole units).
    count = _int(m, "ultraServerCount", path, minimum=-(2**31))
    return CapacityBlock(
        instance_type=_instance_type_of(m, path, utype),
        instance_count=max(count, 0) * per,
        availability_zone=zone,
        start=start,
        end=end,
        ultra_server_type=utype,
        ultra_server_count=count,
        marked=mark,
    )


def inventory_from_manifest(doc: object) -> CapacityInventory:
    """A CapacityInventory manifest as a core `CapacityInventory`; every reservation must name a
    pool that exists (same instance type, or UltraServer type, and zone)."""
    spec = _check_kind(doc, "CapacityInventory")
    pools: list[CapacityPool] = []
    for i, raw in enumerate(_list(spec.get("pools"), "spec.pools")):
        path = f"spec.pools[{i}]"
        m = _mapping(raw, path)
        zone = _req_str(m, "availabilityZone", path)
        ultra = _ultra(m, path)
        if ultra is None:
            pools.append(
                CapacityPool(_req_str(m, "instanceType", path), zone, _int(m, "instanceCount", path))
            )
        else:
            utype, per = ultra
            itype = _instance_type_of(m, path, utype)
            pools.append(CapacityPool(itype, zone, _int(m, "ultraServerCount", path), utype, per))
    instance_keys = {(p.instance_type, p.availability_zone) for p in pools if p.ultra_server_type is None}
    ultra_keys = {(p.ultra_server_type, p.availability_zone) for p in pools if p.ultra_server_type}
    reservations: list[CapacityReservation] = []
    for i, raw in enumerate(_list(spec.get("reservations"), "spec.reservations")):
        path = f"spec.reservations[{i}]"
        m = _mapping(raw, path)
        zone = _req_str(m, "availabilityZone", path)
        start = parse_time(m.get("startTime"), f"{path}.startTime")
        end = parse_time(m.get("endTime"), f"{path}.endTime")
        _check_order(start, end, m, path)
        rutype = _str(m, "ultraServerType", path, required=False)
        if rutype is not None:
            if (rutype, zone) not in ultra_keys:
                raise InputError(f"{path}.ultraServerType", f"no pool of {rutype} in {zone}")
            count = _int(m, "ultraServerCount", path, minimum=1)
            reservations.append(CapacityReservation(zone, count, start, end, ultra_server_type=rutype))
        else:
            rtype = _req_str(m, "instanceType", path)
            if (rtype, zone) not in instance_keys:
                raise InputError(f"{path}.instanceType", f"no pool of {rtype} instances in {zone}")
            count = _int(m, "instanceCount", path, minimum=1)
            reservations.append(CapacityReservation(zone, count, start, end, instance_type=rtype))
    return CapacityInventory(tuple(pools), tuple(reservations))


def parse_plan(obj: JSON) -> TrainingPlan:
    """The core plan from the object's spec. The status is the controller's own output, so it
    is not read back (offline files may mark blocks Pending/Failed there; in a cluster the
    capacity is confirmed when the plan is created)."""
    return training_plan_from_manifest({k: v for k, v in obj.items() if k != "status"})


def plan_state_doc(state: PlanState) -> JSON:
    """A plan's state at an instant, the one JSON form of it: what `gangctl plans status -o json`
    prints (its documented contract) and what the plans controller writes as the TrainingPlan's
    `status` (with observedGeneration and conditions beside it). A block's `reason` says why it is
    Failed, when it is."""

    def time_or_none(t: datetime | None) -> str | None:
        return None if t is None else format_time(t)

    return {
        "status": state.status.value,
        "blocks": [
            {
                "index": b.index,
                "status": b.status.value,
                "startTime": format_time(b.start),
                "endTime": format_time(b.end),
                "terminationStartsAt": time_or_none(b.termination_starts_at),
                **({"reason": b.reason} if b.reason else {}),
            }
            for b in state.blocks
        ],
        "currentBlock": state.current_block,
        "activeInstanceCount": state.active_instance_count,
        "nextTransition": time_or_none(state.next_transition),
    }
