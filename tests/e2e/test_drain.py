"""Draining before plan capacity ends, on the real local cluster: the gang admission check requeues
a running gang at its plan's termination start (Kueue evicts it), stamps the block end on its
pods, and does not admit a gang that would still run at the block end.

Blocks last seconds through the plan's documented test-only overrides
(spec.testOverrides.anyBlockTimes / terminationLead).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangplugin.core.names import BLOCK_END_ANNOTATION, MAX_RUNTIME_ANNOTATION, PLAN_DRAINING_REASON
from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.client import EVENTS, JOBS, ApiError, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import ADMISSION_CHECKS, TRAINING_PLANS
from tests.support.cluster import E2ECluster
from tests.support.kube import flavor_quota, job_pods, unique, wait_for, workload_of
from tests.support.objects import P5, admission_check, capacity_block, gpu_job, queue_objects, training_plan


@pytest.fixture
def plan_queue(cluster: E2ECluster, namespace: str) -> Iterator[Callable[..., str]]:
    """`make(end, lead, count)` -> a LocalQueue whose ClusterQueue uses the gang check and gets its
    GPU quota only from a plan with one block from now until `end` (termination lead `lead`)."""
    client = cluster.client
    made: list[tuple[Any, str]] = []

    def make(end: datetime, lead: str, count: int) -> str:
        name = unique("dq")
        for res, obj in [
            (ADMISSION_CHECKS, admission_check(name)),
            *queue_objects(name, namespace, 0, P5, checks=[name]),
        ]:
            client.create(res, obj)
            if not res.namespaced:
                made.append((res, name))
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
        client.create(
            TRAINING_PLANS, training_plan(name, name, [capacity_block(start, end, count)], lead=lead)
        )
        made.append((TRAINING_PLANS, name))
        wait_for(lambda: flavor_quota(client, name)["nvidia.com/gpu"] == 8 * count, 60, "the plan's quota")
        return name

    yield make
    for res, name in reversed(made):
        with contextlib.suppress(ApiError):
            client.delete(res, name)


def check_of(client: Client, namespace: str, job: str) -> dict[str, Any]:
    wl = workload_of(client, namespace, job) or {}
    return next(iter(wl.get("status", {}).get("admissionChecks") or []), {})


def running_pods(client: Client, namespace: str, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = job_pods(client, namespace, job)
    running = len(pods) == count and all(p.get("status", {}).get("phase") == "Running" for p in pods)
    return pods if running else None


def evicted(client: Client, namespace: str, job: str) -> dict[str, Any] | None:
    """The Workload once it is no longer admitted and its pods are gone (or going)."""
    wl = workload_of(client, namespace, job)
    if wl is None or is_true(wl, "Admitted"):
        return None
    live = [p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")]
    return None if live else wl


def check_when(
    client: Client, namespace: str, job: str, test: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    check = check_of(client, namespace, job)
    return check if check and test(check) else None


def events(client: Client, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.list(EVENTS, namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


@pytest.mark.compat
def test_running_gang_is_requeued_at_the_termination_start(
    cluster: E2ECluster, namespace: str, plan_queue: Callable[..., str]
) -> None:
    client = cluster.client
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=60)
    term = end - timedelta(seconds=30)
    queue = plan_queue(end, "30s", 2)
    client.create(JOBS, gpu_job("gang", namespace, queue, pods=2, gpus=8))

    pods = wait_for(lambda: running_pods(client, namespace, "gang", 2), 60, "the gang's pods to run")
    assert datetime.now(UTC) < term, "the gang started too late to observe its draining"
    for pod in pods:
        assert pod["metadata"]["annotations"][BLOCK_END_ANNOTATION] == format_time(end)

    wl = wait_for(
        lambda: evicted(client, namespace, "gang"), 90, "the gang to be evicted and its pods deleted"
    )
    assert datetime.now(UTC) >= term
    drained = wait_for(lambda: events(client, namespace, PLAN_DRAINING_REASON), 30, "a PlanDraining event")
    assert f"block ends at {format_time(end)}, draining" in drained[0]["message"]
    first = drained[0].get("firstTimestamp") or drained[0].get("eventTime")
    assert parse_time(first, "event time") >= term - timedelta(seconds=1)  # whole-second event times
    assert client.get(JOBS, "gang", namespace)["spec"]["suspend"], "Kueue suspends the evicted Job"
    # Requeued, not deactivated: Kueue reserves the quota again, and the check holds the gang
    # back until the next block, saying why.
    assert wl["spec"].get("active", True)
    held = wait_for(
        lambda: check_when(
            client, namespace, "gang", lambda c: "waiting for the next block" in c.get("message", "")
        ),
        60,
        "the requeued gang to wait for the next block",
    )
    assert held["state"] == "Pending"
    assert format_time(end) in held["message"]
    # After the block: Kueue keeps the reservation, but there is no plan capacity to admit it into.
    gap = wait_for(
        lambda: check_when(client, namespace, "gang", lambda c: "no plan capacity" in c.get("message", "")),
        60,
        "the gang to wait for the next block after the block ended",
    )
    assert gap["state"] == "Pending" and datetime.now(UTC) >= end
    # The plan controller's own write at the block's end; the check may decide on the end first.
    wait_for(lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 0, 60, "the quota to end with the plan")
    assert not job_pods(client, namespace, "gang")


def test_gang_that_would_outlive_the_block_is_not_admitted(
    cluster: E2ECluster, namespace: str, plan_queue: Callable[..., str]
) -> None:
    client = cluster.client
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    queue = plan_queue(end, "10m", 4)  # the termination start is already past

    def job(name: str, max_runtime: str) -> None:
        meta = {"annotations": {MAX_RUNTIME_ANNOTATION: max_runtime}}
        client.create(JOBS, gpu_job(name, namespace, queue, pods=1, gpus=8, metadata=meta))

    job("long", "1h")
    job("short", "1m")
    job("bad", "soon")

    held = wait_for(
        lambda: check_when(client, namespace, "long", lambda c: "next block" in c.get("message", "")),
        60,
        "the long gang's check to say why it waits",
    )
    assert held["state"] == "Pending"
    assert "waiting for the next block" in held["message"]
    assert f"plan capacity ends at {format_time(end)}" in held["message"]
    assert "max runtime" in held["message"]

    short = wait_for(
        lambda: running_pods(client, namespace, "short", 1),
        60,
        "the short gang, which ends before the block does, to run",
    )
    assert short[0]["metadata"]["annotations"][BLOCK_END_ANNOTATION] == format_time(end)

    # Rejected deactivates the Workload (Kueue then resets the check); the Event keeps the why.
    bad = wait_for(
        lambda: [
            e
            for e in events(client, namespace, "GangRejected")
            if e["involvedObject"]["name"].startswith("job-bad-")
        ],
        60,
        "the gang with an unusable max-runtime to be rejected",
    )
    assert "gangplugin.io/max-runtime" in bad[0]["message"] and "soon" in bad[0]["message"]
    # Kueue deactivates the Workload when it sees the check Rejected, after our Event: wait for it.
    wait_for(
        lambda: (w := workload_of(client, namespace, "bad")) and w["spec"].get("active") is False,
        60,
        "Kueue to deactivate the rejected gang's Workload",
    )

    # Still held: the long gang never got pods.
    assert check_of(client, namespace, "long")["state"] == "Pending"
    assert job_pods(client, namespace, "long") == []
