"""Explain (the admission pass's own facts and gate) of big gangs: the domain a long-waiting
gang would reserve and when it should start there, read from what its neighbours declare (a
Job's activeDeadlineSeconds, gangplugin.io/max-runtime); a younger gang kept off that domain
naming the reservation; a gang that can never start whole."""

from __future__ import annotations

import json

import pytest

from gangplugin.core.timeutil import format_time, from_seconds
from gangplugin.kube.client import JOBS, PODS, WORKLOADS
from tests.support.big_gangs import US, big_gang_cluster, job
from tests.support.caches import NOW, Caches, explain, owned, pod, workload


@pytest.fixture
def caches() -> Caches:
    return big_gang_cluster()


def test_the_waiting_big_gang_reserves_where_a_deadline_says_it_starts_soonest(caches: Caches) -> None:
    e = explain(caches, "big")
    assert e.evaluated and not e.fits_now
    start = format_time(from_seconds(int(NOW) + 3600))  # a's Job started at NOW, 1h deadline
    assert f"{US}=us-1 reserved for this gang since" in e.reason
    assert f"expected start {start} when team-a/a end" in e.reason
    assert e.reason.startswith("gang does not fit now: needs 4 pods")


def test_a_younger_gang_is_kept_off_the_reserved_domain_unless_it_ends_before(caches: Caches) -> None:
    reservation = {"level": US, "domain": "us-1", "quotaReservedAt": NOW, "at": NOW}
    big = workload("big", 4, message="reserved")
    big["metadata"]["annotations"] = {"gangplugin.io/reservation": json.dumps(reservation)}
    caches.put(WORKLOADS, big)
    late = owned(workload("late", 1), name="late")
    late["metadata"]["creationTimestamp"] = "2027-01-15T08:00:30Z"
    late["status"]["conditions"][0]["lastTransitionTime"] = "2027-01-15T08:00:30Z"  # quota after big's
    caches.put(JOBS, job("late", 7200))
    caches.put(WORKLOADS, late)
    e = explain(caches, "late")  # us-1's free node is reserved: us-2's it may take
    assert e.fits_now and list(e.domains) == ["us-2"]
    caches.put(PODS, pod("b-3", "b", node="us2-3", ready=True))  # us-2 full now
    e = explain(caches, "late")
    assert not e.fits_now
    assert f"not counting {US}=us-1, reserved for team-a/big" in e.reason
    assert "this gang would end after it" in e.reason
    caches.put(JOBS, job("late", 600))  # it would end before big's start: it backfills us-1
    e = explain(caches, "late")
    assert e.fits_now and list(e.domains) == ["us-1"]


def test_a_gang_that_can_never_start_whole_is_told_so(caches: Caches) -> None:
    caches.put(WORKLOADS, workload("huge", 5, message="gang does not fit now"))
    e = explain(caches, "huge")
    assert not e.fits_now
    assert e.reason.startswith(
        f"can never start whole: it needs 5 pods (20 GPUs) in one {US}; the largest, us-1, has room for 4"
    )
    assert "preferred-topology instead of required-topology" in e.reason
