"""The gRPC API on the real cluster: TLS, health and reflection open; every other call needs a
token the API server accepts (TokenReview) for an identity allowed the call (SubjectAccessReview)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc, plans_pb2, plans_pb2_grpc
from tests.support import grpcauth
from tests.support.cluster import E2ECluster

READ_WORKLOADS = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]}
]


def code_of(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()  # type: ignore[operator]
    return err.value.code()  # type: ignore[no-any-return]


def test_health_and_reflection_need_no_token(cluster: E2ECluster) -> None:
    with grpcauth.channel(cluster) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "gangplugin.v1.GangService", "gangplugin.v1.PlanService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        listing = next(
            reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
            )
        )
        names = {s.name for s in listing.list_services_response.service}
        assert {"gangplugin.v1.GangService", "gangplugin.v1.PlanService", "grpc.health.v1.Health"} <= names


def test_plaintext_is_refused(cluster: E2ECluster) -> None:
    with grpc.insecure_channel(grpcauth.address()) as ch:
        stub = gangs_pb2_grpc.GangServiceStub(ch)
        assert code_of(lambda: stub.ListGangs(gangs_pb2.ListGangsRequest(), timeout=10)) == (
            grpc.StatusCode.UNAVAILABLE
        )


def test_calls_with_and_without_credentials(cluster: E2ECluster, namespace: str) -> None:
    client = cluster.client
    create = plans_pb2.CreateTrainingPlanRequest(training_plan_name="p")
    listing = gangs_pb2.ListGangsRequest(namespace=namespace)
    # No token: UNAUTHENTICATED, for reads and for the write (before any input is looked at).
    with grpcauth.channel(cluster) as ch:
        gangs, plans = gangs_pb2_grpc.GangServiceStub(ch), plans_pb2_grpc.PlanServiceStub(ch)
        assert code_of(lambda: gangs.ListGangs(listing, timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
        assert (
            code_of(lambda: plans.CreateTrainingPlan(create, timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
        )
        bogus = grpcauth.bearer("not-a-token")
        assert (
            code_of(lambda: gangs.ListGangs(listing, timeout=10, metadata=bogus))
            == grpc.StatusCode.UNAUTHENTICATED
        )
    # A ServiceAccount with no rights: PERMISSION_DENIED, naming who and what.
    nobody = grpcauth.service_account_token(client, namespace, "nobody")
    with grpcauth.channel(cluster, nobody) as ch:
        gangs, plans = gangs_pb2_grpc.GangServiceStub(ch), plans_pb2_grpc.PlanServiceStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            gangs.ListGangs(listing, timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        detail = err.value.details() or ""
        assert f"system:serviceaccount:{namespace}:nobody cannot list workloads.kueue.x-k8s.io" in detail
        assert f"in namespace {namespace}" in detail
        assert (
            code_of(lambda: plans.CreateTrainingPlan(create, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        )
    # A ServiceAccount allowed to read workloads in its namespace: reads there, nothing more.
    grpcauth.grant(client, namespace, "reader", READ_WORKLOADS)
    reader = grpcauth.service_account_token(client, namespace, "reader")
    with grpcauth.channel(cluster, reader) as ch:
        gangs, plans = gangs_pb2_grpc.GangServiceStub(ch), plans_pb2_grpc.PlanServiceStub(ch)
        assert list(gangs.ListGangs(listing, timeout=10).gangs) == []
        every = gangs_pb2.ListGangsRequest()
        assert code_of(lambda: gangs.ListGangs(every, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        assert (
            code_of(lambda: plans.CreateTrainingPlan(create, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        )
        # Allowed but malformed: INVALID_ARGUMENT naming the field, and the server keeps serving.
        with pytest.raises(grpc.RpcError) as err:
            gangs.GetGang(gangs_pb2.GetGangRequest(namespace=namespace), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "name" in (err.value.details() or "")
        assert (
            code_of(
                lambda: gangs.GetGang(gangs_pb2.GetGangRequest(namespace=namespace, name="none"), timeout=10)
            )
            == grpc.StatusCode.NOT_FOUND
        )
    # cluster-admin may create; the request is then judged on its content.
    with grpcauth.channel(cluster, grpcauth.admin_token(client)) as ch:
        plans = plans_pb2_grpc.PlanServiceStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            plans.CreateTrainingPlan(create, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "clusterQueue" in (
            err.value.details() or ""
        )
