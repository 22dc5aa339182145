"""The gate's order is written once (`core.gate.ORDER`): changed there, the admission pass,
`gangctl explain` (gRPC ExplainGang) and the simulator all follow.

The case: under a Sequential GangPolicy, "first" is admitted and not Ready yet, and "second"
would fit beside it. In the one order the Sequential gate comes before placement, so second
waits; with placement moved before it, a gang that fits goes at once, everywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import gangplugin.core.gate as gate_module
from gangplugin.admission.controller import GangAdmission
from gangplugin.core.gate import ORDER, Stage
from gangplugin.core.policy import GangPolicy
from gangplugin.core.simulate import Job, Settings, replay
from gangplugin.core.topology import ULTRASERVER_LABEL, Node
from gangplugin.kube.client import WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from tests.support.caches import NOW, Caches, explain, standard, workload
from tests.support.fakeapi import FakeApi
from tests.support.objects import admission_check, gang_policy

US = ULTRASERVER_LABEL


@pytest.fixture
def caches() -> Caches:
    c = standard()
    c.put(GANG_POLICIES, gang_policy("one-at-a-time", admission="Sequential"))
    c.put(ADMISSION_CHECKS, admission_check("gang", policy="one-at-a-time"))
    c.put(WORKLOADS, workload("first", 2, check="Ready", admitted=True, pinned={US: "us-1"}))
    c.put(WORKLOADS, workload("second", 2))
    return c


def placement_first() -> tuple[Stage, ...]:
    """The one order with placement moved before the Sequential gate."""
    steps = {s.name: s for s in ORDER}
    names = ["policy", "keys", "backoff", "placement", "sequential", "drain", "preemption"]
    return tuple(steps[n] for n in names)


def pass_writes(caches: Caches) -> dict[str, Any]:
    """One admission pass over the caches: the check entry it writes for "second"."""
    api = FakeApi()
    adm = GangAdmission(api.client(), caches.model(), clock=lambda: NOW)
    caches.replay()
    adm.admission.run()
    assert adm.admission.outbox.wait(30), "the pass's writes did not end"
    applied = [
        json.loads(r.content)
        for r in api.requests
        if r.method == "PATCH" and r.url.path.endswith("/workloads/second/status")
    ]
    assert len(applied) == 1, applied
    entry: dict[str, Any] = applied[0]["status"]["admissionChecks"][0]
    return entry


def simulated_wait() -> float | None:
    """The same case replayed: "b" arrives while "a" is admitted and its pods start (5 s)."""
    nodes = [
        Node(f"us1-n{i}", {US: "us-1", "kubernetes.io/hostname": f"us1-n{i}"}, {"nvidia.com/gpu": 4})
        for i in range(4)
    ]
    jobs = [Job("a", 0, 2, 4, 100, required_topology=US), Job("b", 1, 2, 4, 100, required_topology=US)]
    r = replay(nodes, jobs, "gangplugin", Settings(GangPolicy(admission="Sequential"), startup_seconds=5))
    return {o.key: o.wait for o in r.outcomes}["b"]


def test_in_the_one_order_sequential_holds_the_gang_in_all_three(caches: Caches) -> None:
    entry = pass_writes(caches)
    assert entry["state"] == "Pending"
    assert entry["message"] == "Sequential admission: waiting for gang team-a/first to be Ready"
    e = explain(caches, "second")
    assert e.evaluated and not e.fits_now and e.reason == "waiting for gang team-a/first to be Ready"
    assert simulated_wait() == 4  # admitted once "a" is Ready at 5


def test_the_order_changed_in_one_place_changes_all_three(
    caches: Caches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_module, "ORDER", placement_first())
    entry = pass_writes(caches)
    assert entry["state"] == "Ready" and entry["message"].startswith("gang admitted")
    assert entry["podSetUpdates"][0]["nodeSelector"] == {US: "us-1"}  # beside first (best fit)
    e = explain(caches, "second")
    assert e.evaluated and e.fits_now and list(e.domains) == ["us-1"]
    assert simulated_wait() == 0
