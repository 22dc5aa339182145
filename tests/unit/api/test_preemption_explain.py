"""Explain (the admission pass's own `evaluate`) of a gang that only fits by preempting: the
victims it names, the Kueue rule that allows them, and GangPolicy `preemption: Never`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gangplugin.kube.client import CLUSTER_QUEUES, PODS, WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from tests.support.caches import NOW, Caches, explain, pod, standard, workload
from tests.support.objects import admission_check, gang_policy

US = "topology.k8s.aws/ultraserver-id"


def queue(within: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "training"},
        "spec": {
            "admissionChecksStrategy": {"admissionChecks": [{"name": "gang"}]},
            "preemption": {"withinClusterQueue": within},
        },
    }


def prioritized(wl: dict[str, Any], priority: int) -> dict[str, Any]:
    wl["spec"]["priority"] = priority
    return wl


@pytest.fixture
def caches() -> Caches:
    """us-1 holds low1 (2 pods), us-2 holds low2 (3 pods); "high" needs a whole UltraServer."""
    c = standard()
    c.put(CLUSTER_QUEUES, queue("LowerPriority"))
    for name, us, n in (("low1", "us-1", 2), ("low2", "us-2", 3)):
        wl = workload(name, n, check="Ready", admitted=True, pinned={US: us}, message="gang admitted")
        c.put(WORKLOADS, prioritized(wl, 10))
        for i in range(n):
            c.put(PODS, pod(f"{name}-{i}", name, node=f"us{us[-1]}-{i}", ready=True))
    c.put(WORKLOADS, prioritized(workload("high", 4, message="gang does not fit now"), 1000))
    return c


def test_explain_names_the_victims_of_one_ultraserver_and_why(caches: Caches) -> None:
    e = explain(caches, "high")
    assert e.evaluated and not e.fits_now
    # Freeing us-1 costs 8 GPUs (low1), us-2 12 (low2): the fewest GPUs win.
    assert e.reason.startswith(f"preempting team-a/low1 (8 GPUs) to free {US}=us-1 for team-a/high")
    assert "withinClusterQueue: LowerPriority, priority 10 < 1000" in e.reason
    assert "low2" not in e.reason


def test_equal_priority_is_not_preempted_and_the_reason_says_so(caches: Caches) -> None:
    caches.put(WORKLOADS, prioritized(workload("high", 4), 10))
    e = explain(caches, "high")
    assert not e.fits_now and "preempting" not in e.reason
    assert "protected by withinClusterQueue: LowerPriority, priority 10 >= 10" in e.reason


def test_gang_policy_preemption_never_turns_it_off(caches: Caches) -> None:
    caches.put(GANG_POLICIES, gang_policy("calm", preemption="Never"))
    caches.put(ADMISSION_CHECKS, admission_check("gang", policy="calm"))
    e = explain(caches, "high")
    assert not e.fits_now and e.reason.startswith("needs 4 pods") and "preempt" not in e.reason


def test_a_domain_held_for_another_preemptor_is_not_offered(caches: Caches) -> None:
    """ "other" (2 pods) would fit beside low1 in us-1, but us-1 is held for "high"'s
    preemption: it is offered us-2's last node... which is too small, so it waits."""
    held = workload("high", 4)
    held["metadata"]["annotations"] = {
        "gangplugin.io/preemption": json.dumps(
            {"level": US, "domain": "us-1", "victims": ["team-a/low1"], "quotaReservedAt": NOW, "at": NOW}
        )
    }
    caches.put(WORKLOADS, prioritized(held, 1000))
    caches.put(WORKLOADS, prioritized(workload("other", 2), 0))
    e = explain(caches, "other")
    assert not e.fits_now and "us-1" not in list(e.domains)
    h = explain(caches, "high")
    assert h.reason.startswith("preempting team-a/low1: evicting the rest")
