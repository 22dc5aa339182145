"""PlanService: SageMaker's training-plan operations over TrainingPlan objects and the cluster's
inventory (Nodes minus the capacity existing plans reserve). Decisions are the core's; this
module translates messages and carries them out."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc
import httpx

from gangplugin.api.proto import plans_pb2, plans_pb2_grpc
from gangplugin.api.replies import or_not_found
from gangplugin.core.errors import InputError
from gangplugin.core.names import API_VERSION
from gangplugin.core.names import PLAN_ACCEPTED_CONDITION as ACCEPTED
from gangplugin.core.offerings import (
    FleetNode,
    OfferingRequest,
    TrainingPlanOffering,
    fleet_inventory,
    search_offerings,
)
from gangplugin.core.plans import CapacityBlock, TrainingPlan, plan_state
from gangplugin.core.resources import parse_resources
from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.client import JSON, ApiError, Client
from gangplugin.kube.informer import Informer
from gangplugin.kube.plan_records import parse_plan, target_resource
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.readmodel.records import NodeRecord

ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ULTRA_SERVER_LABEL = "topology.k8s.aws/ultraserver-id"
#: How long an offering can be created after its search.
OFFERING_TTL = timedelta(minutes=10)
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

Clock = Callable[[], datetime]


def fleet_node(node: NodeRecord) -> FleetNode | None:
    labels = node.labels
    itype, zone = labels.get(INSTANCE_TYPE_LABEL), labels.get(ZONE_LABEL)
    if not itype or not zone:
        return None
    return FleetNode(itype, zone, labels.get(ULTRA_SERVER_LABEL) or None)


def offering_request(req: plans_pb2.SearchTrainingPlanOfferingsRequest, now: datetime) -> OfferingRequest:
    if len(req.target_resources) != 1:
        raise InputError("targetResources", "give exactly one of training-job, hyperpod-cluster")
    ultra = bool(req.ultra_server_type)
    return OfferingRequest(
        target_resource=target_resource(req.target_resources[0], "targetResources"),
        duration_hours=req.duration_hours,
        start_after=parse_time(req.start_time_after, "startTimeAfter"),
        end_before=parse_time(req.end_time_before, "endTimeBefore"),
        now=parse_time(req.search_time, "searchTime") if req.search_time else now,
        instance_type=req.instance_type or None,
        instance_count=None if ultra else req.instance_count,
        ultra_server_type=req.ultra_server_type or None,
        ultra_server_count=req.ultra_server_count if ultra else None,
    )


def _hm(seconds: int) -> tuple[int, int]:
    return seconds // 3600, seconds % 3600 // 60


def _capacity_fields(b: CapacityBlock) -> dict[str, Any]:
    """The fields an offered block and a plan's block share on the wire."""
    hours, minutes = _hm(b.duration_seconds)
    return {
        "instance_type": b.instance_type,
        "instance_count": b.instance_count,
        "availability_zone": b.availability_zone,
        "start_time": format_time(b.start),
        "end_time": format_time(b.end),
        "duration_hours": hours,
        "duration_minutes": minutes,
        "ultra_server_type": b.ultra_server_type or "",
        "ultra_server_count": b.ultra_server_count or 0,
    }


def offering_message(o: TrainingPlanOffering) -> plans_pb2.TrainingPlanOffering:
    hours, minutes = _hm(o.duration_seconds)
    blocks = [plans_pb2.ReservedCapacityOffering(**_capacity_fields(b)) for b in o.blocks]
    return plans_pb2.TrainingPlanOffering(
        training_plan_offering_id=o.offering_id,
        target_resources=[o.target_resource.value],
        duration_hours=hours,
        duration_minutes=minutes,
        reserved_capacity_offerings=blocks,
    )


def plan_message(obj: JSON, plan: TrainingPlan, at: datetime) -> plans_pb2.TrainingPlan:
    state = plan_state(plan, at)
    summaries = []
    for block, b in zip(plan.blocks, state.blocks, strict=True):
        summaries.append(
            plans_pb2.ReservedCapacitySummary(
                **_capacity_fields(block),
                status=b.status.value,
                termination_starts_at=""
                if b.termination_starts_at is None
                else format_time(b.termination_starts_at),
            )
        )
    total = sum(int((b.end - b.start).total_seconds()) for b in plan.blocks)
    h, m = _hm(total)
    accepted = next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ACCEPTED), None
    )
    return plans_pb2.TrainingPlan(
        training_plan_name=plan.name,
        status=state.status.value,
        status_message="" if accepted is None or accepted.get("status") == "True" else accepted["message"],
        target_resources=[plan.target_resource.value],
        cluster_queue=plan.cluster_queue,
        flavor=plan.flavor,
        start_time=format_time(min(b.start for b in plan.blocks)),
        end_time=format_time(max(b.end for b in plan.blocks)),
        duration_hours=h,
        duration_minutes=m,
        total_instance_count=max(b.instance_count for b in plan.blocks),
        available_instance_count=state.active_instance_count,
        next_transition="" if state.next_transition is None else format_time(state.next_transition),
        reserved_capacity_summaries=summaries,
    )


_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Self = TypeVar("_Self")


def _rpc(
    method: Callable[[_Self, _Req, grpc.ServicerContext], _Resp],
) -> Callable[[_Self, _Req, grpc.ServicerContext], _Resp]:
    """Bad input becomes INVALID_ARGUMENT with the message naming the field; an API server that
    cannot be reached UNAVAILABLE (the caller may retry), never an unknown error."""

    @functools.wraps(method)
    def wrapper(self: _Self, request: _Req, context: grpc.ServicerContext) -> _Resp:
        try:
            return method(self, request, context)
        except InputError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except httpx.HTTPError as err:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the Kubernetes API server did not answer: {err}")

    return wrapper


class PlanService(plans_pb2_grpc.PlanServiceServicer):
    def __init__(
        self,
        client: Client,
        nodes: Informer[NodeRecord],
        plans: Informer[JSON],
        clock: Clock = lambda: datetime.now(UTC),
    ) -> None:
        self.client, self.nodes, self.plans, self.clock = client, nodes, plans, clock

    def _plans(self) -> list[tuple[JSON, TrainingPlan]]:
        out = []
        for obj in sorted(self.plans.items(), key=lambda o: str(o["metadata"]["name"])):
            try:
                out.append((obj, parse_plan(obj)))
            except InputError:
                continue  # the controller reports it on the object
        return out

    def _search(self, req: OfferingRequest) -> tuple[TrainingPlanOffering, ...]:
        nodes = [n for record in self.nodes.items() if (n := fleet_node(record)) is not None]
        inventory = fleet_inventory(nodes, [p for _, p in self._plans()], self.clock())
        return search_offerings(inventory, req)

    @_rpc
    def SearchTrainingPlanOfferings(
        self, request: plans_pb2.SearchTrainingPlanOfferingsRequest, context: grpc.ServicerContext
    ) -> plans_pb2.SearchTrainingPlanOfferingsResponse:
        req = offering_request(request, self.clock())
        found = self._search(req)
        return plans_pb2.SearchTrainingPlanOfferingsResponse(
            training_plan_offerings=[offering_message(o) for o in found], search_time=format_time(req.now)
        )

    @_rpc
    def CreateTrainingPlan(
        self, request: plans_pb2.CreateTrainingPlanRequest, context: grpc.ServicerContext
    ) -> plans_pb2.CreateTrainingPlanResponse:
        name = request.training_plan_name
        if not _NAME.fullmatch(name) or len(name) > 253:
            raise InputError("trainingPlanName", f"{name!r} is not a DNS subdomain name (a-z, 0-9, '-', '.')")
        for field, value in (("clusterQueue", request.cluster_queue), ("flavor", request.flavor)):
            if not value:
                raise InputError(field, "is required")
        if not request.resources_per_instance:
            raise InputError("resourcesPerInstance", "is required, e.g. {nvidia.com/gpu: 8}")
        parse_resources(dict(request.resources_per_instance), "resourcesPerInstance")
        if not request.HasField("search") or not request.search.search_time:
            raise InputError("search.searchTime", "give the search and the searchTime its response returned")
        now = self.clock()
        try:
            req = offering_request(request.search, now)
        except InputError as err:
            raise InputError(f"search.{err.field}", err.problem) from None
        if not now - OFFERING_TTL <= req.now <= now + timedelta(seconds=5):
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"search.searchTime {format_time(req.now)}: offerings expire "
                f"{int(OFFERING_TTL.total_seconds() // 60)} minutes after their search; search again",
            )
        offering = or_not_found(
            next((o for o in self._search(req) if o.offering_id == request.training_plan_offering_id), None),
            context,
            f"trainingPlanOfferingId {request.training_plan_offering_id!r}: not offered by that search "
            "over the capacity free now; search again",
        )
        spec: dict[str, Any] = {
            "targetResource": offering.target_resource.value,
            "clusterQueue": request.cluster_queue,
            "flavor": request.flavor,
            "resourcesPerInstance": dict(request.resources_per_instance),
            "reservedCapacity": [_block_spec(b) for b in offering.blocks],
        }
        if request.HasField("spare_instances_per_ultra_server"):
            if request.spare_instances_per_ultra_server < 0:
                raise InputError("spareInstancesPerUltraServer", "must not be negative")
            spec["spareInstancesPerUltraServer"] = request.spare_instances_per_ultra_server
        body = {
            "apiVersion": API_VERSION,
            "kind": "TrainingPlan",
            "metadata": {"name": name, "annotations": {"gangplugin.io/offering-id": offering.offering_id}},
            "spec": spec,
        }
        try:
            self.client.create(TRAINING_PLANS, body)
        except ApiError as err:
            if err.status == 409:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"trainingPlanName {name!r} exists already")
            if err.status == 422:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise
        return plans_pb2.CreateTrainingPlanResponse(training_plan_name=name)

    @_rpc
    def DescribeTrainingPlan(
        self, request: plans_pb2.DescribeTrainingPlanRequest, context: grpc.ServicerContext
    ) -> plans_pb2.TrainingPlan:
        if not request.training_plan_name:
            raise InputError("trainingPlanName", "is required")
        if not _NAME.fullmatch(request.training_plan_name) or len(request.training_plan_name) > 253:
            raise InputError(
                "trainingPlanName", f"{request.training_plan_name!r} is not a plan name (a-z, 0-9, '-', '.')"
            )
        obj = or_not_found(
            self.client.get_or_none(TRAINING_PLANS, request.training_plan_name),
            context,
            f"trainingPlanName {request.training_plan_name!r}: no such plan",
        )
        try:
            plan = parse_plan(obj)
        except InputError as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the plan's spec is unusable: {err}")
        return plan_message(obj, plan, self.clock())

    @_rpc
    def ListTrainingPlans(
        self, request: plans_pb2.ListTrainingPlansRequest, context: grpc.ServicerContext
    ) -> plans_pb2.ListTrainingPlansResponse:
        statuses = ("Pending", "Scheduled", "Active", "Expired", "Failed")
        if request.status and request.status not in statuses:
            raise InputError("status", f"{request.status!r} is not one of {', '.join(statuses)}")
        now = self.clock()
        found = [plan_message(obj, plan, now) for obj, plan in self._plans()]
        return plans_pb2.ListTrainingPlansResponse(
            training_plans=[p for p in found if not request.status or p.status == request.status]
        )


def _block_spec(b: CapacityBlock) -> JSON:
    out: JSON = {
        "availabilityZone": b.availability_zone,
        "startTime": format_time(b.start),
        "endTime": format_time(b.end),
        "instanceType": b.instance_type,
    }
    if b.ultra_server_type is not None:
        count = b.ultra_server_count or 1
        out.update(
            ultraServerType=b.ultra_server_type,
            ultraServerCount=count,
            instancesPerUltraServer=b.instance_count // count,
        )
    else:
        out["instanceCount"] = b.instance_count
    return out
