"""The backoff's writes to a Workload, as they reach the API server (a scripted transport: the
e2e tests run them against Kueue): each is conditional on the copy the decision was made on."""

from __future__ import annotations

from functools import partial

import httpx
import orjson
import pytest

from gangplugin.admission.writes import BACKOFF_FIELD_MANAGER, CheckWriter
from gangplugin.kube.client import ApiError, Client
from gangplugin.kube.resources import ADMISSION_CHECKS
from tests.support import objects

UNTIL = "2026-12-01T10:01:00Z"
NOW = 1796119200.0  # 2026-12-01T10:00:00Z


workload = partial(objects.workload, resourceVersion="41", generation=3)


class Api:
    """Answers every request with `status` and records it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = {"metadata": {"resourceVersion": "42"}} if self.status == 200 else {"reason": "Conflict"}
        return httpx.Response(self.status, content=orjson.dumps(body))

    def writer(self) -> CheckWriter:
        return CheckWriter(
            Client("https://api.test", False, transport=httpx.MockTransport(self.handle)), lambda: NOW
        )


def test_a_backoff_eviction_is_one_apply_of_evicted_the_counted_retry_and_requeue_at() -> None:
    api = Api()
    assert api.writer().evict_for_backoff(
        workload(), "gang", 2, "readyTimeout 3s: backoff until x", UNTIL, NOW
    )
    (req,) = api.requests
    assert (req.method, req.url.path) == (
        "PATCH",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/wl/status",
    )
    assert req.headers["content-type"] == "application/apply-patch+yaml"
    assert dict(req.url.params) == {"fieldManager": BACKOFF_FIELD_MANAGER, "force": "true"}
    body = orjson.loads(req.content)
    assert body["metadata"]["resourceVersion"] == "41"
    (evicted,) = body["status"]["conditions"]
    assert (evicted["type"], evicted["status"], evicted["reason"]) == ("Evicted", "True", "AdmissionCheck")
    assert evicted["lastTransitionTime"] == "2026-12-01T10:00:00Z" and evicted["observedGeneration"] == 3
    (check,) = body["status"]["admissionChecks"]
    assert (check["name"], check["state"], check["retryCount"]) == ("gang", "Pending", 3)
    assert "requeueAfterSeconds" not in check  # Kueue would wait that long before evicting
    assert body["status"]["requeueState"] == {"requeueAt": UNTIL}


@pytest.mark.parametrize("status", [404, 409])
def test_a_backoff_eviction_on_a_stale_or_deleted_workload_is_not_written(status: int) -> None:
    assert not Api(status).writer().evict_for_backoff(workload(), "gang", 0, "m", UNTIL, NOW)


def test_the_end_of_a_backoff_drops_requeue_at_with_a_conditional_merge_patch() -> None:
    api = Api()
    assert api.writer().end_backoff(workload())
    (req,) = api.requests
    assert req.url.path.endswith("/workloads/wl/status")
    assert req.headers["content-type"] == "application/merge-patch+json"
    assert orjson.loads(req.content) == {
        "metadata": {"resourceVersion": "41"},
        "status": {"requeueState": {"requeueAt": None}},
    }
    assert not Api(409).writer().end_backoff(workload())


def test_the_backoff_annotation_is_conditional_and_returns_the_written_workload() -> None:
    api = Api()
    written = api.writer().annotate(workload(), {"gangplugin.io/backoff-until": UNTIL})
    assert written == {"metadata": {"resourceVersion": "42"}}
    assert orjson.loads(api.requests[0].content) == {
        "metadata": {"annotations": {"gangplugin.io/backoff-until": UNTIL}, "resourceVersion": "41"}
    }
    assert Api(409).writer().annotate(workload(), {"gangplugin.io/backoff-until": UNTIL}) is None


def test_the_admission_latency_runs_from_quota_reserved_to_the_end_of_the_check_s_write() -> None:
    from prometheus_client import REGISTRY

    from gangplugin.core.admission import AdmissionDecision

    def observed() -> tuple[float, float]:
        name = "gangplugin_gang_admission_latency_seconds"
        return (
            REGISTRY.get_sample_value(f"{name}_count") or 0.0,
            REGISTRY.get_sample_value(f"{name}_sum") or 0.0,
        )

    api = Api()
    clock = iter([NOW + 7.0])  # the clock once the write is answered; the pass began at NOW
    writer = CheckWriter(
        Client("https://api.test", False, transport=httpx.MockTransport(api.handle)), lambda: next(clock)
    )
    count, total = observed()
    # quota reserved 2 s before the pass began
    assert writer.admit(workload(), "gang", AdmissionDecision(True, "gang admitted"), NOW, NOW - 2.0)
    assert observed() == (count + 1, pytest.approx(total + 9.0))


def test_a_condition_on_an_object_deleted_since_the_cache_showed_it_is_not_an_error() -> None:
    ac = objects.admission_check("gang")
    assert Api(404).writer().set_condition(ADMISSION_CHECKS, ac, "Active", "True", "Active", "ready") is False
    assert Api(200).writer().set_condition(ADMISSION_CHECKS, ac, "Active", "True", "Active", "ready") is True
    with pytest.raises(ApiError):
        Api(500).writer().set_condition(ADMISSION_CHECKS, ac, "Active", "True", "Active", "ready")
