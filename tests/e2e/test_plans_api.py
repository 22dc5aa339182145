"""PlanService over gRPC against the real local cluster: search over the Nodes, create from an
offering, describe, list, and the error codes of bad requests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from gangplugin.api.proto import plans_pb2, plans_pb2_grpc
from gangplugin.core.timeutil import format_time
from gangplugin.kube.resources import TRAINING_PLANS
from tests.support import grpcauth
from tests.support.cluster import E2ECluster
from tests.support.kube import unique


@pytest.fixture
def stub(cluster: E2ECluster) -> Iterator[plans_pb2_grpc.PlanServiceStub]:
    # TLS, and a caller allowed to create plans (the API authorizes every call).
    with grpcauth.channel(cluster, grpcauth.admin_token(cluster.client)) as channel:
        yield plans_pb2_grpc.PlanServiceStub(channel)


def p5_search(count: int) -> plans_pb2.SearchTrainingPlanOfferingsRequest:
    now = datetime.now(UTC)
    return plans_pb2.SearchTrainingPlanOfferingsRequest(
        instance_type="ml.p5.48xlarge",
        instance_count=count,
        duration_hours=48,
        start_time_after=format_time(now),
        end_time_before=format_time(now + timedelta(days=30)),
        target_resources=["training-job"],
    )


def test_create_from_an_offering_reserves_its_capacity(
    cluster: E2ECluster, stub: plans_pb2_grpc.PlanServiceStub
) -> None:
    search = p5_search(32)  # the whole P5 pool of the local cluster
    found = stub.SearchTrainingPlanOfferings(search, timeout=30)
    assert found.training_plan_offerings, "32 P5 instances for 48 hours should be on offer"
    offering = found.training_plan_offerings[0]
    block = offering.reserved_capacity_offerings[0]
    assert block.instance_count == 32 and block.availability_zone == "us-east-1b"
    assert block.end_time.endswith("T11:30:00Z")
    search.search_time = found.search_time
    name = unique("tp")

    def create(plan: str) -> plans_pb2.CreateTrainingPlanResponse:
        request = plans_pb2.CreateTrainingPlanRequest(
            training_plan_name=plan,
            training_plan_offering_id=offering.training_plan_offering_id,
            search=search,
            cluster_queue="training",
            flavor="p5",
            resources_per_instance={"nvidia.com/gpu": "8"},
        )
        return stub.CreateTrainingPlan(request, timeout=30)

    created = create(name)
    try:
        assert created.training_plan_name == name
        obj = cluster.client.get(TRAINING_PLANS, name)
        assert obj["spec"]["reservedCapacity"][0]["startTime"] == block.start_time
        plan = stub.DescribeTrainingPlan(
            plans_pb2.DescribeTrainingPlanRequest(training_plan_name=name), timeout=30
        )
        assert plan.status == "Scheduled" and plan.reserved_capacity_summaries[0].instance_count == 32
        listed = stub.ListTrainingPlans(plans_pb2.ListTrainingPlansRequest(status="Scheduled"), timeout=30)
        assert name in [p.training_plan_name for p in listed.training_plans]
        # The pool is taken for that block: the next offering starts at or after its end.
        again = stub.SearchTrainingPlanOfferings(p5_search(32), timeout=30)
        assert all(
            o.reserved_capacity_offerings[0].start_time >= block.end_time
            for o in again.training_plan_offerings
        )
        # The same offering cannot be bought twice.
        with pytest.raises(grpc.RpcError) as err:
            create(unique("tp"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        cluster.client.delete(TRAINING_PLANS, name)


def test_bad_requests_name_the_field(stub: plans_pb2_grpc.PlanServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.SearchTrainingPlanOfferings(p5_search(3), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "instanceCount" in (err.value.details() or "")
    long = p5_search(4)
    long.duration_hours = 183 * 24
    with pytest.raises(grpc.RpcError) as err:
        stub.SearchTrainingPlanOfferings(long, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "durationHours" in (
        err.value.details() or ""
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateTrainingPlan(
            plans_pb2.CreateTrainingPlanRequest(training_plan_name="Bad_Name"), timeout=30
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "trainingPlanName" in (
        err.value.details() or ""
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.DescribeTrainingPlan(
            plans_pb2.DescribeTrainingPlanRequest(training_plan_name="no-such-plan"), timeout=30
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
