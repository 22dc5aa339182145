"""An admitted gang keeps no hold whose purpose its admission ended: the watchdog removes a
preemption hold (it ends when the preemptor is admitted) and a backoff that ended before the
admission, conditional on the Workload's resourceVersion; a backoff it is writing for the
timeout it acts on stays. (The soak found admitted preemptors still carrying their hold after
the stream drained.)"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gangplugin.admission.controller import GangAdmission
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION, PREEMPTION_ANNOTATION
from gangplugin.kube.client import PODS, WORKLOADS, Client
from gangplugin.kube.kueue_records import spent_holds
from tests.support.caches import NOW, Caches, pod, standard, workload

HOLD = orjson.dumps(
    {"level": "topology.k8s.aws/ultraserver-id", "domain": "us-1", "nodes": [], "victims": ["team-a/v"]}
    | {"quotaReservedAt": 1.0, "at": 2.0}
).decode()
BEFORE, AFTER = "2027-01-15T07:59:00Z", "2027-01-15T08:10:00Z"  # around CREATED, the admission


def admitted(annotations: dict[str, str]) -> dict[str, Any]:
    wl = workload("wl", 2, check="Ready", admitted=True, pinned={"topology.k8s.aws/ultraserver-id": "us-1"})
    wl["metadata"]["annotations"] = annotations
    return wl


def test_a_hold_and_a_passed_backoff_are_spent_once_admitted() -> None:
    assert spent_holds(admitted({PREEMPTION_ANNOTATION: HOLD})) == (PREEMPTION_ANNOTATION,)
    assert spent_holds(admitted({BACKOFF_UNTIL_ANNOTATION: BEFORE})) == (BACKOFF_UNTIL_ANNOTATION,)
    assert spent_holds(admitted({BACKOFF_UNTIL_ANNOTATION: "soon"})) == (BACKOFF_UNTIL_ANNOTATION,)
    # written for the timeout the watchdog acts on: it ends after this admission began
    assert spent_holds(admitted({BACKOFF_UNTIL_ANNOTATION: AFTER})) == ()
    assert spent_holds(admitted({})) == ()


class Api:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            self.patches.append((request.url.path, orjson.loads(request.content)))
        return httpx.Response(200, json={})


def watch_once(annotations: dict[str, str]) -> Api:
    api = Api()
    caches = Caches()
    caches.client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    standard(caches)
    caches.put(WORKLOADS, admitted(annotations))
    for i in range(2):
        caches.put(PODS, pod(f"p{i}", "wl", node=f"us1-{i}", ready=True, size=2))
    controller = GangAdmission(caches.client, caches.model(), clock=lambda: NOW)
    caches.replay()
    controller.watchdog.run("team-a/wl")
    return api


def test_the_watchdog_removes_spent_holds_conditionally() -> None:
    api = watch_once({PREEMPTION_ANNOTATION: HOLD, BACKOFF_UNTIL_ANNOTATION: BEFORE, "keep": "me"})
    cleared = [body for path, body in api.patches if path.endswith("/workloads/wl")]
    assert cleared == [
        {
            "metadata": {
                "resourceVersion": "1",
                "annotations": {PREEMPTION_ANNOTATION: None, BACKOFF_UNTIL_ANNOTATION: None},
            }
        }
    ], api.patches


def test_a_running_gang_without_spent_holds_is_not_written() -> None:
    assert watch_once({BACKOFF_UNTIL_ANNOTATION: AFTER}).patches == []
