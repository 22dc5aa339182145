"""`gangctl plans search` and `gangctl plans status`: offline, over YAML files.

The commands read the clock only for a default "now"; everything else is the pure core.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from gangplugin.cli.main import cli
from gangplugin.core.errors import InputError
from gangplugin.core.offerings import OfferingRequest, TrainingPlanOffering, search_offerings
from gangplugin.core.plans import PlanState, plan_state
from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.plan_records import inventory_from_manifest, training_plan_from_manifest
from gangplugin.kube.plan_records import target_resource as target_resource_of

OUTPUTS = ("table", "json", "yaml")

# The core names request fields as SageMaker does; the user typed flags.
_FLAG_OF = {
    "instanceType": "--instance-type",
    "instanceCount": "--instance-count",
    "ultraServerType": "--ultra-server-type",
    "ultraServerCount": "--ultra-server-count",
    "durationHours": "--duration-hours",
    "startTimeAfter": "--start-after",
    "endTimeBefore": "--end-before",
}

_F = TypeVar("_F", bound=Callable[..., Any])


def _output_option(f: _F) -> _F:
    # Free text, checked by us, so a bad value is one line naming the flag like every other error.
    return click.option("-o", "--output", default="table", help="table (default), json or yaml")(f)


def _check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise InputError("--output", f"{output!r} is not one of {', '.join(OUTPUTS)}")
    return output


def _load_yaml(path: str | None, flag: str) -> object:
    if not path:
        raise InputError(flag, "is required (a YAML file)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(flag, f"cannot read {path}: {err.strerror or err}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError(flag, f"{path} is not YAML: {str(err).splitlines()[0]}") from None
    # `kubectl get ... -o yaml` wraps objects in a List; one object is what we need.
    if isinstance(doc, dict) and doc.get("kind") == "List":
        items = doc.get("items") or []
        if len(items) != 1:
            raise InputError(flag, f"{path} holds a List of {len(items)} objects; give one")
        return items[0]
    return doc


def _int_flag(value: str | None, flag: str, *, required: bool = True) -> int | None:
    if value is None:
        if required:
            raise InputError(flag, "is required")
        return None
    try:
        return int(value)
    except ValueError:
        raise InputError(flag, f"{value!r} is not a whole number") from None


def _time_flag(value: str | None, flag: str) -> datetime:
    if value is None:
        raise InputError(flag, "is required (an RFC 3339 time like 2026-12-01T11:30:00Z)")
    return parse_time(value, flag)


def _emit(doc: dict[str, Any], output: str, table: Callable[[], str]) -> None:
    if output == "json":
        click.echo(json.dumps(doc, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
    else:
        click.echo(table())


def _hm(seconds: int) -> tuple[int, int]:
    return seconds // 3600, seconds % 3600 // 60


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(header), *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


@cli.group("plans")
def plans() -> None:
    """Training plans: search offerings, see a plan's state at an instant."""


# --- search ---


def offering_doc(o: TrainingPlanOffering) -> dict[str, Any]:
    hours, minutes = _hm(o.duration_seconds)
    blocks = []
    for b in o.blocks:
        bh, bm = _hm(b.duration_seconds)
        block: dict[str, Any] = {
            "instanceType": b.instance_type,
            "instanceCount": b.instance_count,
            "availabilityZone": b.availability_zone,
            "startTime": format_time(b.start),
            "endTime": format_time(b.end),
            "durationHours": bh,
            "durationMinutes": bm,
        }
        if b.ultra_server_type is not None:
            block["ultraServerType"] = b.ultra_server_type
            block["ultraServerCount"] = b.ultra_server_count
        blocks.append(block)
    return {
        "trainingPlanOfferingId": o.offering_id,
        "targetResources": [o.target_resource.value],
        "durationHours": hours,
        "durationMinutes": minutes,
        "reservedCapacityOfferings": blocks,
    }


def _search_table(doc: dict[str, Any]) -> str:
    if not doc["offerings"]:
        return "no offerings: no capacity fits the request in the window"
    rows = []
    for o in doc["offerings"]:
        for i, b in enumerate(o["reservedCapacityOfferings"]):
            count = str(b["instanceCount"])
            if "ultraServerType" in b:
                count += f" ({b['ultraServerCount']} x {b['ultraServerType']})"
            rows.append(
                [
                    o["trainingPlanOfferingId"] if i == 0 else "",
                    i,
                    b["instanceType"],
                    count,
                    b["availabilityZone"],
                    b["startTime"],
                    b["endTime"],
                    f"{b['durationHours']}h{b['durationMinutes']:02d}m",
                ]
            )
    header = ["OFFERING", "BLOCK", "INSTANCE TYPE", "INSTANCES", "ZONE", "START", "END", "DURATION"]
    return _table(header, rows)


@plans.command("search")
@click.option("--inventory", help="CapacityInventory YAML file")
@click.option("--instance-type")
@click.option("--instance-count")
@click.option("--ultra-server-type")
@click.option("--ultra-server-count")
@click.option("--duration-hours", help="total hours wanted (rounded up to whole days)")
@click.option("--start-after", help="RFC 3339; no block starts before this")
@click.option("--end-before", help="RFC 3339; no block ends after this")
@click.option("--target-resource", help="training-job or hyperpod-cluster")
@click.option("--now", help="RFC 3339; default: the current time")
@_output_option
def search(
    inventory: str | None,
    instance_type: str | None,
    instance_count: str | None,
    ultra_server_type: str | None,
    ultra_server_count: str | None,
    duration_hours: str | None,
    start_after: str | None,
    end_before: str | None,
    target_resource: str | None,
    now: str | None,
    output: str,
) -> None:
    """Find up to three offerings (one block, else two) for the capacity asked for."""
    output = _check_output(output)
    if instance_type is not None and ultra_server_type is not None:
        raise InputError(
            "--ultra-server-type", "give either --instance-type or --ultra-server-type, not both"
        )
    if instance_type is None and ultra_server_type is None:
        raise InputError("--instance-type", "is required (or --ultra-server-type with --ultra-server-count)")
    target = target_resource_of(target_resource, "--target-resource")
    ultra = ultra_server_type is not None
    if ultra and instance_count is not None:
        raise InputError("--instance-count", "goes with --instance-type; use --ultra-server-count")
    if not ultra and ultra_server_count is not None:
        raise InputError("--ultra-server-count", "goes with --ultra-server-type; use --instance-count")
    hours = _int_flag(duration_hours, "--duration-hours")
    assert hours is not None
    request = OfferingRequest(
        target_resource=target,
        duration_hours=hours,
        start_after=_time_flag(start_after, "--start-after"),
        end_before=_time_flag(end_before, "--end-before"),
        now=parse_time(now, "--now") if now is not None else datetime.now(UTC),
        instance_type=instance_type,
        instance_count=None if ultra else _int_flag(instance_count, "--instance-count"),
        ultra_server_type=ultra_server_type,
        ultra_server_count=_int_flag(ultra_server_count, "--ultra-server-count") if ultra else None,
    )
    inv = inventory_from_manifest(_load_yaml(inventory, "--inventory"))
    try:
        found = search_offerings(inv, request)
    except InputError as err:
        raise InputError(_FLAG_OF.get(err.field, err.field), err.problem) from None
    doc = {"offerings": [offering_doc(o) for o in found]}
    _emit(doc, output, lambda: _search_table(doc))


# --- status ---


def state_doc(state: PlanState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "blocks": [
            {
                "index": b.index,
                "status": b.status.value,
                "startTime": format_time(b.start),
                "endTime": format_time(b.end),
                "terminationStartsAt": (
                    None if b.termination_starts_at is None else format_time(b.termination_starts_at)
                ),
            }
            for b in state.blocks
        ],
        "currentBlock": state.current_block,
        "activeInstanceCount": state.active_instance_count,
        "nextTransition": None if state.next_transition is None else format_time(state.next_transition),
    }


def _status_table(state: PlanState, doc: dict[str, Any]) -> str:
    head = (
        f"plan {doc['status']} at {format_time(state.at)}: {doc['activeInstanceCount']} instances active"
        f"{' (draining)' if state.draining else ''}, current block "
        f"{'-' if doc['currentBlock'] is None else doc['currentBlock']}, next transition "
        f"{doc['nextTransition'] or '-'}"
    )
    rows = [
        [b["index"], b["status"], b["startTime"], b["endTime"], b["terminationStartsAt"], s.reason]
        for b, s in zip(doc["blocks"], state.blocks, strict=True)
    ]
    return head + "\n" + _table(["BLOCK", "STATUS", "START", "END", "TERMINATION STARTS", "REASON"], rows)


@plans.command("status")
@click.option("--plan", "plan_path", help="TrainingPlan YAML file")
@click.option("--at", help="RFC 3339 instant to evaluate the plan at")
@_output_option
def status(plan_path: str | None, at: str | None, output: str) -> None:
    """Show a plan's status, its blocks, capacity and next transition at an instant."""
    output = _check_output(output)
    instant = _time_flag(at, "--at")
    plan = training_plan_from_manifest(_load_yaml(plan_path, "--plan"))
    state = plan_state(plan, instant)
    doc = state_doc(state)
    _emit(doc, output, lambda: _status_table(state, doc))
