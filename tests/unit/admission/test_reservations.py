"""The admission pass records the domain it reserves for a big gang on the gang's Workload
(`gangplugin.io/reservation`, conditional on its resourceVersion) before the check message that
names it, and then on the Workload that write left; a pass that finds it recorded writes it no
more; the watchdog removes it once the gang is admitted."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest

from gangplugin.admission.controller import GangAdmission
from gangplugin.core.names import RESERVATION_ANNOTATION
from gangplugin.kube.client import WORKLOADS, Client
from gangplugin.kube.kueue_records import reservation_from_k8s, spent_holds
from tests.support.big_gangs import US, big_gang_cluster
from tests.support.caches import NOW, Caches, workload


@pytest.fixture
def caches() -> Caches:
    return big_gang_cluster()


class Api:
    """Answers a Workload patch with the Workload as patched (resourceVersion + 1), any other
    write with an empty object; records each."""

    def __init__(self, workloads: dict[str, dict[str, Any]]) -> None:
        self.workloads = workloads
        self.writes: list[tuple[str, dict[str, Any]]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content) if request.content else {}
        self.writes.append((request.url.path, body))
        name = request.url.path.rsplit("/", 1)[-1]
        if request.method == "PATCH" and name in self.workloads:
            wl = copy.deepcopy(self.workloads[name])
            annotations = {**(wl["metadata"].get("annotations") or {}), **body["metadata"]["annotations"]}
            wl["metadata"]["annotations"] = {k: v for k, v in annotations.items() if v is not None}
            wl["metadata"]["resourceVersion"] = str(int(wl["metadata"]["resourceVersion"]) + 1)
            return httpx.Response(200, json=wl)
        return httpx.Response(200, json={})


def run_pass(c: Caches, big: dict[str, Any]) -> Api:
    api = Api({"big": big})
    c.client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    adm = GangAdmission(c.client, c.model(), clock=lambda: NOW + 90)
    c.replay()
    adm.admission.run()
    assert adm.admission.outbox.wait(30), "the pass's writes did not end"  # they run beside it
    return api


def test_the_pass_records_the_reservation_then_names_it_on_the_written_workload(caches: Caches) -> None:
    big = workload("big", 4, message="gang does not fit now")
    api = run_pass(caches, big)
    paths = [path for path, _ in api.writes if "/workloads/big" in path]
    assert paths == [
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/big",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/big/status",
    ]
    (_, annotate), (_, status) = [w for w in api.writes if "/workloads/big" in w[0]]
    assert annotate["metadata"]["resourceVersion"] == "1"
    recorded = reservation_from_k8s({"metadata": {"annotations": annotate["metadata"]["annotations"]}})
    assert recorded is not None and (recorded.level, recorded.domain, recorded.at) == (US, "us-1", NOW + 90)
    assert status["metadata"]["resourceVersion"] == "2"  # on the Workload the annotation left
    (entry,) = status["status"]["admissionChecks"]
    assert entry["state"] == "Pending" and f"{US}=us-1 reserved for this gang since" in entry["message"]


def test_a_recorded_reservation_is_kept_and_not_written_again(caches: Caches) -> None:
    first = run_pass(caches, workload("big", 4, message="gang does not fit now"))
    (_, annotate), (_, status) = [w for w in first.writes if "/workloads/big" in w[0]]
    big = workload("big", 4, message=status["status"]["admissionChecks"][0]["message"])
    big["metadata"]["annotations"] = annotate["metadata"]["annotations"]
    caches.put(WORKLOADS, big)
    again = run_pass(caches, big)
    assert [w for w in again.writes if "/workloads/big" in w[0]] == []


def test_a_reservation_is_spent_once_its_gang_is_admitted() -> None:
    wl = workload("big", 4, check="Ready", admitted=True, pinned={US: "us-1"})
    wl["metadata"]["annotations"] = {
        RESERVATION_ANNOTATION: '{"level":"x","domain":"y","quotaReservedAt":1,"at":2}'
    }
    assert spent_holds(wl) == (RESERVATION_ANNOTATION,)
    assert reservation_from_k8s({"metadata": {"annotations": {RESERVATION_ANNOTATION: "{broken"}}}) is None


def test_a_gang_ranked_before_admitted_into_the_reserved_domain_leaves_the_reservation_be() -> None:
    """us-2 is full ("b" on all 4 nodes, no end); "big" holds us-1, where "a" runs 3 nodes for
    an hour. "aa" (1 pod, ranked before big) takes us-1's free node: admitted, not running yet,
    it is an occupant that will leave as a running gang does, so us-1 can still hold big later;
    its reservation stays where it is, in this pass and in the next (the admission not seen)."""
    c = big_gang_cluster(b_nodes=4)
    first = run_pass(c, workload("big", 4, message="gang does not fit now"))
    (_, annotate), (_, status) = [w for w in first.writes if "/workloads/big" in w[0]]
    big = workload("big", 4, message=status["status"]["admissionChecks"][0]["message"])
    big["metadata"]["annotations"] = annotate["metadata"]["annotations"]
    assert json_of(big)["domain"] == "us-1"
    c.put(WORKLOADS, big)
    c.put(WORKLOADS, workload("aa", 1))
    api = Api({"big": big})
    c.client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    adm = GangAdmission(c.client, c.model(), clock=lambda: NOW + 90)
    c.replay()
    for _ in range(2):  # the second pass: aa's admission written, not in the cache yet
        adm.admission.run()
        assert adm.admission.outbox.wait(30)
        assert "team-a/aa" in adm.model.capacity.assumed
        assert [p for p, _ in api.writes if p.endswith("/workloads/big")] == [], "big's reservation moved"


def json_of(wl: dict[str, Any]) -> dict[str, Any]:
    return dict(orjson.loads(wl["metadata"]["annotations"][RESERVATION_ANNOTATION]))
