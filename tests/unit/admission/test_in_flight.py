"""The admission pass tells this process's gang reservations of each admission before it writes
it (`runtime.admissions`), so the extender keeps plain pods off the gang's capacity from the
decision on, not only once the Workload watch shows the write; a write that is refused is
withdrawn."""

from __future__ import annotations

from typing import Any

import httpx

from gangplugin.admission.controller import GangAdmission
from gangplugin.kube.client import JSON, WORKLOADS
from gangplugin.runtime.admissions import AdmissionsInFlight, Subscriber
from tests.support.caches import NOW, standard, workload
from tests.support.fakeapi import FakeApi


def run_pass(write: httpx.Response | None) -> tuple[list[tuple[str, Any, int]], FakeApi]:
    """One pass over a gang that fits; `write`: the API server's answer to its status write."""
    caches = standard()
    caches.put(WORKLOADS, workload("train", 2))
    api = FakeApi()
    if write is not None:
        api.lists = [write]
    seen: list[tuple[str, Any, int]] = []  # (what, Workload, requests the API had by then)

    def told(what: str) -> Any:
        return lambda wl: seen.append((what, wl, len(api.requests)))

    in_flight = AdmissionsInFlight()
    in_flight.subscribe(Subscriber(told("admitting"), told("withdrawn")))
    adm = GangAdmission(api.client(), caches.model(), clock=lambda: NOW, in_flight=in_flight)
    caches.replay()
    adm.admission.run()
    assert adm.admission.outbox.wait(30), "the pass's writes did not end"
    return seen, api


def check(wl: JSON) -> dict[str, Any]:
    (entry,) = wl["status"]["admissionChecks"]
    return dict(entry)


def test_the_admission_is_announced_before_it_is_written_as_it_will_read() -> None:
    seen, api = run_pass(None)
    ((what, announced, before),) = seen
    assert what == "admitting" and before == 0  # nothing sent to the API server before it
    writes = [
        r for r in api.requests if r.method == "PATCH" and r.url.path.endswith("/workloads/train/status")
    ]
    assert len(writes) == 1
    entry = check(announced)
    assert entry["state"] == "Ready" and entry["podSetUpdates"], entry


def test_an_admission_whose_write_is_refused_is_withdrawn() -> None:
    seen, _ = run_pass(httpx.Response(409, json={"kind": "Status", "code": 409, "reason": "Conflict"}))
    assert [what for what, _, _ in seen] == ["admitting", "withdrawn"]
    assert check(seen[1][1])["state"] == "Pending"  # withdrawn with the Workload as it is
