"""What the client tells its request observers: verb, the resource (never an object's name),
the HTTP code or `error`, and how long the answer took."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gangplugin.kube import client as kube_client
from gangplugin.kube.client import PODS, WORKLOADS, ApiError, Client, resource_of


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/team-a/pods/p-0", "pods"),
        ("/api/v1/namespaces/team-a/pods/p-0/binding", "pods/binding"),
        ("/api/v1/pods?watch=1", "pods"),
        ("/api/v1/nodes/n-1", "nodes"),
        ("/api/v1/namespaces/team-a", "namespaces"),
        ("/api/v1/namespaces", "namespaces"),
        ("/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status", "workloads/status"),
        ("/apis/coordination.k8s.io/v1/namespaces/gangplugin-system/leases/gangplugin", "leases"),
        ("/version", "other"),
    ],
)
def test_a_path_names_its_resource_and_subresource_only(path: str, resource: str) -> None:
    assert resource_of(path) == resource


@pytest.fixture
def seen() -> Iterator[list[tuple[str, str, str, float]]]:
    got: list[tuple[str, str, str, float]] = []
    kube_client.observe_requests(lambda *answer: got.append(answer))
    yield got
    kube_client._observers.pop()


def test_every_answer_and_every_failure_is_observed(seen: list[tuple[str, str, str, float]]) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            return httpx.Response(409, json={"kind": "Status", "reason": "Conflict", "message": "x"})
        if request.url.path.endswith("/down"):
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"metadata": {"name": "p-0"}})

    c = Client("https://api.test", False, transport=httpx.MockTransport(answer))
    c.get(PODS, "p-0", "team-a")
    with pytest.raises(ApiError):
        c.patch(WORKLOADS, "w", {"status": {}}, "ns")
    with pytest.raises(httpx.ConnectError):
        c.get(PODS, "down", "team-a")
    assert [s[:3] for s in seen] == [
        ("GET", "pods", "200"),
        ("PATCH", "workloads", "409"),
        ("GET", "pods", "error"),
    ]
    assert all(s[3] >= 0 for s in seen)
