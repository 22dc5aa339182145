"""`gangctl plans`: `search` and `status` offline over YAML files (they read the clock only for a
default "now"; everything else is the pure core), and `search`, `create`, `describe`, `list`
online over a running gangplugin's PlanService."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from gangplugin.cli.connection import Connection, connection_options
from gangplugin.cli.files import one_object, read
from gangplugin.cli.main import cli
from gangplugin.cli.output import JSON, NAME, TABLE, YAML, emit, message_doc, output_option
from gangplugin.core.errors import InputError
from gangplugin.core.offerings import OfferingRequest, TrainingPlanOffering, search_offerings
from gangplugin.core.plans import PlanState, plan_state
from gangplugin.core.table import table
from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.plan_records import inventory_from_manifest, plan_state_doc, training_plan_from_manifest
from gangplugin.kube.plan_records import target_resource as target_resource_of

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

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


def _read_one(path: str | None, flag: str, parse: Callable[[Any], _T]) -> _T:
    """One object of the file `flag` names (a List of one is unwrapped), parsed."""
    return read(path, flag, lambda doc: parse(one_object(doc)))


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


def _hm(seconds: int) -> tuple[int, int]:
    return seconds // 3600, seconds % 3600 // 60


@dataclass(frozen=True, slots=True)
class SearchFlags:
    """The capacity a search asks for, as typed (checked where it is used)."""

    instance_type: str | None
    instance_count: str | None
    ultra_server_type: str | None
    ultra_server_count: str | None
    duration_hours: str | None
    start_after: str | None
    end_before: str | None
    target_resource: str | None


_SEARCH_FLAGS: tuple[tuple[str, str | None], ...] = (
    ("--instance-type", None),
    ("--instance-count", None),
    ("--ultra-server-type", None),
    ("--ultra-server-count", None),
    ("--duration-hours", "total hours wanted (rounded up to whole days)"),
    ("--start-after", "RFC 3339; no block starts before this"),
    ("--end-before", "RFC 3339; no block ends after this"),
    ("--target-resource", "training-job or hyperpod-cluster"),
)


def search_options(f: _F) -> _F:
    """The search flags `search` and `create` share, passed to the command as `asked`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        names = [flag[2:].replace("-", "_") for flag, _ in _SEARCH_FLAGS]
        asked = SearchFlags(**{n: kwargs.pop(n) for n in names})
        return f(*args, asked=asked, **kwargs)

    out: Any = wrapper
    for flag, help_text in reversed(_SEARCH_FLAGS):
        out = click.option(flag, help=help_text)(out)
    return out  # type: ignore[no-any-return]


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
    return table(header, rows)


@plans.command("search")
@click.option("--inventory", help="CapacityInventory YAML file")
@search_options
@click.option("--now", help="RFC 3339; default: the current time")
@connection_options
@output_option(TABLE, JSON, YAML)
def search(inventory: str | None, asked: SearchFlags, now: str | None, conn: Connection, output: str) -> None:
    """Find up to three offerings (one block, else two) for the capacity asked for: over an
    --inventory file (offline), or over a cluster's capacity through --server without one."""
    if inventory is None and conn.server:
        request = _search_message(asked, now, "--now")
        reply = _call(conn, "SearchTrainingPlanOfferings", request)
        online = {
            "offerings": [_offering_from_message(o) for o in reply.training_plan_offerings],
            "searchTime": reply.search_time,
        }
        emit(online, output, lambda: _search_table(online) + f"\nsearchTime {reply.search_time}")
        return
    if asked.instance_type is not None and asked.ultra_server_type is not None:
        raise InputError(
            "--ultra-server-type", "give either --instance-type or --ultra-server-type, not both"
        )
    if asked.instance_type is None and asked.ultra_server_type is None:
        raise InputError("--instance-type", "is required (or --ultra-server-type with --ultra-server-count)")
    target = target_resource_of(asked.target_resource, "--target-resource")
    ultra = asked.ultra_server_type is not None
    if ultra and asked.instance_count is not None:
        raise InputError("--instance-count", "goes with --instance-type; use --ultra-server-count")
    if not ultra and asked.ultra_server_count is not None:
        raise InputError("--ultra-server-count", "goes with --ultra-server-type; use --instance-count")
    hours = _int_flag(asked.duration_hours, "--duration-hours")
    assert hours is not None
    request = OfferingRequest(
        target_resource=target,
        duration_hours=hours,
        start_after=_time_flag(asked.start_after, "--start-after"),
        end_before=_time_flag(asked.end_before, "--end-before"),
        now=parse_time(now, "--now") if now is not None else datetime.now(UTC),
        instance_type=asked.instance_type,
        instance_count=None if ultra else _int_flag(asked.instance_count, "--instance-count"),
        ultra_server_type=asked.ultra_server_type,
        ultra_server_count=_int_flag(asked.ultra_server_count, "--ultra-server-count") if ultra else None,
    )
    inv = _read_one(inventory, "--inventory", inventory_from_manifest)
    try:
        found = search_offerings(inv, request)
    except InputError as err:
        raise InputError(_FLAG_OF.get(err.field, err.field), err.problem) from None
    doc = {"offerings": [offering_doc(o) for o in found]}
    emit(doc, output, lambda: _search_table(doc))


# --- status ---


def _status_table(state: PlanState, doc: dict[str, Any]) -> str:
    head = (
        f"plan {doc['status']} at {format_time(state.at)}: {doc['activeInstanceCount']} instances active"
        f"{' (draining)' if state.draining else ''}, current block "
        f"{'-' if doc['currentBlock'] is None else doc['currentBlock']}, next transition "
        f"{doc['nextTransition'] or '-'}"
    )
    rows = [
        [b["index"], b["status"], b["startTime"], b["endTime"], b["terminationStartsAt"], b.get("reason")]
        for b in doc["blocks"]
    ]
    return head + "\n" + table(["BLOCK", "STATUS", "START", "END", "TERMINATION STARTS", "REASON"], rows)


@plans.command("status")
@click.option("--plan", "plan_path", help="TrainingPlan YAML file")
@click.option("--at", help="RFC 3339 instant to evaluate the plan at")
@output_option(TABLE, JSON, YAML)
def status(plan_path: str | None, at: str | None, output: str) -> None:
    """Show a plan's status, its blocks, capacity and next transition at an instant."""
    instant = _time_flag(at, "--at")
    plan = _read_one(plan_path, "--plan", training_plan_from_manifest)
    state = plan_state(plan, instant)
    doc = plan_state_doc(state)
    emit(doc, output, lambda: _status_table(state, doc))


# --- online: the PlanService of a running gangplugin ---


def _call(conn: Connection, method: str, request: Any) -> Any:
    """One PlanService call; bad input exits 2 naming the flag, other failures exit 1."""
    from gangplugin.api.proto import plans_pb2_grpc

    try:
        return conn.call(plans_pb2_grpc.PlanServiceStub, method, request)
    except InputError as err:  # the server names request fields as SageMaker does
        raise InputError(_FLAG_OF.get(err.field, err.field), err.problem) from None


def _search_message(asked: SearchFlags, search_time: str | None, time_flag: str) -> Any:
    from gangplugin.api.proto import plans_pb2

    return plans_pb2.SearchTrainingPlanOfferingsRequest(
        instance_type=asked.instance_type or "",
        instance_count=_int_flag(asked.instance_count, "--instance-count", required=False) or 0,
        ultra_server_type=asked.ultra_server_type or "",
        ultra_server_count=_int_flag(asked.ultra_server_count, "--ultra-server-count", required=False) or 0,
        duration_hours=_int_flag(asked.duration_hours, "--duration-hours") or 0,
        start_time_after=format_time(_time_flag(asked.start_after, "--start-after")),
        end_time_before=format_time(_time_flag(asked.end_before, "--end-before")),
        target_resources=[target_resource_of(asked.target_resource, "--target-resource").value],
        search_time=format_time(parse_time(search_time, time_flag)) if search_time else "",
    )


def _offering_from_message(message: Any) -> dict[str, Any]:
    """The offline JSON shape of an offering (UltraServer fields only on UltraServer blocks)."""
    doc = message_doc(message)
    for block in doc["reservedCapacityOfferings"]:
        if not block.get("ultraServerType"):
            block.pop("ultraServerType", None)
            block.pop("ultraServerCount", None)
    return doc


def _plan_rows(plans_: list[dict[str, Any]]) -> str:
    rows = [
        [
            p["trainingPlanName"],
            p["status"],
            p["clusterQueue"],
            p["flavor"],
            p["availableInstanceCount"],
            p["startTime"],
            p["endTime"],
            p["nextTransition"] or None,
        ]
        for p in plans_
    ]
    header = ["NAME", "STATUS", "CLUSTER QUEUE", "FLAVOR", "ACTIVE", "START", "END", "NEXT"]
    return table(header, rows)


@plans.command("create")
@click.argument("name")
@click.option("--offering-id", help="trainingPlanOfferingId from `gangctl plans search --server`")
@click.option("--cluster-queue", help="ClusterQueue whose quota the plan feeds")
@click.option("--flavor", help="its ResourceFlavor that gets the quota")
@click.option("--resources-per-instance", help="e.g. nvidia.com/gpu=8,cpu=192,memory=1900Gi")
@click.option("--spare-instances-per-ultra-server", help="instances kept free per UltraServer (default 1)")
@search_options
@click.option("--search-time", help="the searchTime the search printed")
@connection_options
def create(
    name: str,
    offering_id: str | None,
    cluster_queue: str | None,
    flavor: str | None,
    resources_per_instance: str | None,
    spare_instances_per_ultra_server: str | None,
    asked: SearchFlags,
    search_time: str | None,
    conn: Connection,
) -> None:
    """Reserve an offering as a TrainingPlan. Give the same search flags as the search that
    found it and its --search-time: the server runs that search again to find the offering."""
    from gangplugin.api.proto import plans_pb2

    if not offering_id:
        raise InputError("--offering-id", "is required")
    if not search_time:
        raise InputError("--search-time", "is required (the searchTime `plans search --server` printed)")
    if not resources_per_instance:
        raise InputError(
            "--resources-per-instance", "is required, e.g. nvidia.com/gpu=8,cpu=192,memory=1900Gi"
        )
    resources: dict[str, str] = {}
    for part in resources_per_instance.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(
                "--resources-per-instance", f"{part!r} is not name=quantity, e.g. nvidia.com/gpu=8"
            )
        resources[key.strip()] = value.strip()
    spares = _int_flag(spare_instances_per_ultra_server, "--spare-instances-per-ultra-server", required=False)
    if spares is not None and spares < 0:
        raise InputError("--spare-instances-per-ultra-server", f"{spares} is not a count >= 0")
    request = plans_pb2.CreateTrainingPlanRequest(
        training_plan_name=name,
        training_plan_offering_id=offering_id,
        search=_search_message(asked, search_time, "--search-time"),
        cluster_queue=cluster_queue or "",
        flavor=flavor or "",
        resources_per_instance=resources,
        spare_instances_per_ultra_server=spares,
    )
    reply = _call(conn, "CreateTrainingPlan", request)
    click.echo(f"trainingplan {reply.training_plan_name} created")


@plans.command("describe")
@click.argument("name")
@connection_options
@output_option(TABLE, JSON, YAML)
def describe(name: str, conn: Connection, output: str) -> None:
    """A plan as the server sees it now: status, blocks, active instances, next transition."""
    from gangplugin.api.proto import plans_pb2

    reply = _call(
        conn, "DescribeTrainingPlan", plans_pb2.DescribeTrainingPlanRequest(training_plan_name=name)
    )
    doc = message_doc(reply)

    def text() -> str:
        blocks = [
            [
                i,
                b["status"],
                b["instanceType"],
                b["instanceCount"],
                b["availabilityZone"],
                b["startTime"],
                b["endTime"],
                b["terminationStartsAt"] or None,
            ]
            for i, b in enumerate(doc["reservedCapacitySummaries"])
        ]
        head = _plan_rows([doc])
        note = f"\n{doc['statusMessage']}" if doc["statusMessage"] else ""
        header = [
            "BLOCK",
            "STATUS",
            "INSTANCE TYPE",
            "INSTANCES",
            "ZONE",
            "START",
            "END",
            "TERMINATION STARTS",
        ]
        return head + note + "\n\n" + table(header, blocks)

    emit(doc, output, text)


@plans.command("list")
@click.option("--status", "status_", help="only plans in this status (Pending, Scheduled, Active, ...)")
@connection_options
@output_option(TABLE, JSON, YAML, NAME)
def list_plans(status_: str | None, conn: Connection, output: str) -> None:
    """Every TrainingPlan with its status now (`-o name`: trainingplan/<name>, one a line)."""
    from gangplugin.api.proto import plans_pb2

    reply = _call(conn, "ListTrainingPlans", plans_pb2.ListTrainingPlansRequest(status=status_ or ""))
    doc = message_doc(reply)
    doc.setdefault("trainingPlans", [])

    def text() -> str:
        if output == NAME:
            return "\n".join(f"trainingplan/{p['trainingPlanName']}" for p in doc["trainingPlans"])
        return _plan_rows(doc["trainingPlans"]) if doc["trainingPlans"] else "no training plans"

    emit(doc, output, text)
