"""The access rules of the gRPC API: every method has one, reads and writes map to the verbs
kubectl would need, and the bearer metadata is parsed strictly. (TokenReview and
SubjectAccessReview themselves run against the real API server in tests/e2e/test_grpc_auth.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gangplugin.api.auth import (
    OPEN_PREFIXES,
    RULES,
    Authorizer,
    Denied,
    Identity,
    bearer_token,
    certificate_identity,
)
from gangplugin.api.component import SERVICE_NAMES
from gangplugin.api.proto import gangs_pb2, plans_pb2
from gangplugin.kube.client import Client
from gangplugin.localcluster.pki import CertificateAuthority


def all_methods() -> list[str]:
    out = []
    for module in (gangs_pb2, plans_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            assert service.full_name in SERVICE_NAMES
            out += [f"/{service.full_name}/{m.name}" for m in service.methods]
    return out


def test_every_method_has_a_rule_and_only_create_writes() -> None:
    methods = all_methods()
    assert sorted(RULES) == sorted(methods)
    writes = {m for m, r in RULES.items() if r.verb not in ("get", "list", "watch")}
    assert writes == {"/gangplugin.v1.PlanService/CreateTrainingPlan"}


def test_attributes_carry_namespace_and_name() -> None:
    get = RULES["/gangplugin.v1.GangService/GetGang"]
    assert get.attributes(gangs_pb2.GetGangRequest(namespace="team-a", name="g")) == {
        "verb": "get",
        "group": "kueue.x-k8s.io",
        "resource": "workloads",
        "namespace": "team-a",
        "name": "g",
    }
    every = RULES["/gangplugin.v1.GangService/ListGangs"].attributes(gangs_pb2.ListGangsRequest())
    assert "namespace" not in every  # cluster-wide list
    create = RULES["/gangplugin.v1.PlanService/CreateTrainingPlan"]
    attrs = create.attributes(plans_pb2.CreateTrainingPlanRequest(training_plan_name="p"))
    assert (attrs["verb"], attrs["group"], attrs["resource"], attrs["name"]) == (
        "create",
        "gangplugin.io",
        "trainingplans",
        "p",
    )


def test_bearer_metadata() -> None:
    assert bearer_token([("x", "y"), ("authorization", "Bearer abc ")]) == "abc"
    assert bearer_token([("Authorization", "bearer abc")]) == "abc"
    assert bearer_token([]) is None
    for bad in ("Basic dXNlcg==", "Bearer", "abc"):
        with pytest.raises(Denied) as err:
            bearer_token([("authorization", bad)])
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_checks_before_any_review() -> None:
    # These are refused before the API server (unreachable here) would be asked.
    auth = Authorizer(Client("https://127.0.0.1:9", False))
    request = gangs_pb2.ListGangsRequest()
    with pytest.raises(Denied) as err:
        auth.check("/gangplugin.v1.GangService/ListGangs", [], request)
    assert err.value.code == grpc.StatusCode.UNAUTHENTICATED and "authorization: Bearer" in str(err.value)
    with pytest.raises(Denied) as err:
        auth.check("/gangplugin.v1.GangService/Unknown", [("authorization", "Bearer t")], request)
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    auth.check("/grpc.health.v1.Health/Check", [], request)  # open
    assert all(p.startswith("/grpc.") for p in OPEN_PREFIXES)
    with pytest.raises(Denied) as err:  # the API server cannot be reached: retryable
        auth.check("/gangplugin.v1.GangService/ListGangs", [("authorization", "Bearer t")], request)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE


def test_a_client_certificate_names_the_caller_as_the_api_server_reads_it(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, _ = ca.issue("alice", common_name="alice", organization="team-a", client=True)
    who = certificate_identity({"x509_pem_cert": [cert.read_bytes()], "x509_common_name": [b"alice"]})
    assert who == Identity("alice", groups=("team-a", "system:authenticated"))
    assert certificate_identity({"transport_security_type": [b"ssl"]}) is None  # the token port

    reviews: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        reviews.append(orjson.loads(request.content))
        return httpx.Response(201, content=b'{"status": {"allowed": true}}')

    auth = Authorizer(Client("https://api.test", False, transport=httpx.MockTransport(handle)))
    auth.check("/gangplugin.v1.GangService/ListGangs", [], gangs_pb2.ListGangsRequest(namespace="ns"), who)
    assert [r["kind"] for r in reviews] == ["SubjectAccessReview"]  # no TokenReview: no token
    spec = reviews[0]["spec"]
    assert (spec["user"], spec["groups"], spec["resourceAttributes"]["namespace"]) == (
        "alice",
        ["team-a", "system:authenticated"],
        "ns",
    )
