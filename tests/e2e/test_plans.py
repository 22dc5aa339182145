"""TrainingPlans on the real local cluster: quota follows a block, bad plans are refused or
reported, quota the plans do not feed is left alone.

Blocks here last seconds through the plan's documented test-only overrides
(spec.testOverrides.anyBlockTimes / terminationLead); production plans keep the strict rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangplugin.core.timeutil import format_time, parse_time
from gangplugin.kube.client import EVENTS, JOBS, ApiError
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import TRAINING_PLANS
from tests.support.cluster import E2ECluster
from tests.support.kube import condition, flavor_quota, unique, wait_for, workload_of
from tests.support.objects import capacity_block, gpu_job, queue_objects, training_plan


@pytest.fixture
def queue(cluster: E2ECluster, namespace: str) -> Iterator[str]:
    """A p5 flavor, ClusterQueue and LocalQueue with no GPU quota of their own."""
    name = unique("plan")
    objects = queue_objects(name, namespace, gpu_quota=0, instance_type="ml.p5.48xlarge")
    for res, obj in objects:
        cluster.client.create(res, obj)
    yield name
    for res, obj in reversed(objects):
        cluster.client.delete(res, obj["metadata"]["name"], obj["metadata"].get("namespace"))


@pytest.mark.compat
def test_quota_follows_a_block_and_admits_a_waiting_gang(
    cluster: E2ECluster, namespace: str, queue: str
) -> None:
    client = cluster.client
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=20)
    end = start + timedelta(seconds=40)
    plan = unique("tp")
    client.create(TRAINING_PLANS, training_plan(plan, queue, [capacity_block(start, end)]))
    try:
        status = wait_for(lambda: client.get(TRAINING_PLANS, plan).get("status"), 30, "the plan's status")
        assert status["status"] == "Scheduled"
        assert status["nextTransition"] == format_time(start)
        assert status["blocks"][0]["terminationStartsAt"] == format_time(end - timedelta(seconds=5))
        assert is_true({"status": status}, "Accepted")
        # Before the block: the managed GPU quota is 0, the others are untouched.
        assert flavor_quota(client, queue) == {
            "cpu": 10_000_000,
            "memory": 100_000 << 30,
            "nvidia.com/gpu": 0,
        }

        client.create(JOBS, gpu_job("gang", namespace, queue, pods=2, gpus=8))
        raised = wait_for(
            lambda: datetime.now(UTC) if flavor_quota(client, queue)["nvidia.com/gpu"] == 16 else None,
            60,
            "the quota to rise to 2 instances x 8 GPUs",
        )
        assert raised >= start, "the quota rose before the block started"
        admitted = wait_for(
            lambda: (w := workload_of(client, namespace, "gang")) is not None and is_true(w, "QuotaReserved"),
            60,
            "the waiting gang to be admitted once the block is Active",
        )
        assert admitted
        # Not before: however long Kueue took to look, it reserved no quota ahead of the block.
        reserved = condition(workload_of(client, namespace, "gang") or {}, "QuotaReserved") or {}
        assert parse_time(reserved["lastTransitionTime"], "QuotaReserved") >= start, reserved
        assert client.get(TRAINING_PLANS, plan)["status"]["status"] == "Active"

        wait_for(
            lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 0,
            90,
            "the quota to drop at the block's end",
        )
        assert datetime.now(UTC) >= end
        done = wait_for(
            lambda: (
                (s := client.get(TRAINING_PLANS, plan).get("status", {})).get("status") == "Expired" and s
            ),
            30,
            "the plan to expire",
        )
        assert done.get("nextTransition") is None
        assert flavor_quota(client, queue)["cpu"] == 10_000_000
    finally:
        client.delete(TRAINING_PLANS, plan)
    # No plan feeds the queue any more: the value from before plans comes back (it was 0).
    wait_for(
        lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 0, 30, "the quota after the plan is gone"
    )


def test_two_plans_add_up_and_a_deleted_plan_gives_its_share_back(cluster: E2ECluster, queue: str) -> None:
    client = cluster.client
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    end = start + timedelta(minutes=10)
    a, b = unique("tp"), unique("tp")
    client.create(TRAINING_PLANS, training_plan(a, queue, [capacity_block(start, end)]))
    client.create(
        TRAINING_PLANS,
        training_plan(b, queue, [capacity_block(start, end)], resourcesPerInstance={"nvidia.com/gpu": 4}),
    )
    try:
        wait_for(lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 24, 30, "16 + 8 GPUs of two plans")
        client.delete(TRAINING_PLANS, a)
        wait_for(
            lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 8, 30, "the remaining plan's 8 GPUs"
        )
    finally:
        client.delete(TRAINING_PLANS, a)
        client.delete(TRAINING_PLANS, b)
    wait_for(lambda: flavor_quota(client, queue)["nvidia.com/gpu"] == 0, 30, "the value from before plans")


def test_missing_queue_is_a_condition_and_an_event(cluster: E2ECluster) -> None:
    client = cluster.client
    name = unique("tp")
    start = datetime.now(UTC) + timedelta(hours=1)
    client.create(
        TRAINING_PLANS,
        training_plan(name, "no-such-queue", [capacity_block(start, start + timedelta(hours=1))]),
    )
    try:
        cond = wait_for(
            lambda: next(
                (
                    c
                    for c in client.get(TRAINING_PLANS, name).get("status", {}).get("conditions", [])
                    if c["type"] == "Accepted" and c["status"] == "False"
                ),
                None,
            ),
            30,
            "Accepted=False on a plan whose ClusterQueue does not exist",
        )
        assert cond["reason"] == "ClusterQueueNotFound"
        assert "spec.clusterQueue" in cond["message"]
        events = wait_for(
            lambda: [
                e
                for e in client.list(EVENTS, "default", field_selector=f"involvedObject.name={name}")["items"]
                if e["reason"] == "ClusterQueueNotFound"
            ],
            30,
            "a Warning event on the plan",
        )
        assert events[0]["type"] == "Warning"
    finally:
        client.delete(TRAINING_PLANS, name)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"instanceCount": 3}, "spec.reservedCapacity[0].instanceCount", "Unsupported value"),
        ({"endTime": "2026-12-03T12:00:00Z"}, "spec.reservedCapacity", "11:30:00 UTC"),
        ({"startTime": "2026-12-04T11:30:00Z"}, "spec.reservedCapacity[0].endTime", "after startTime"),
        (
            {"endTime": "2026-12-01T18:30:00Z", "startTime": "2026-11-30T20:00:00Z"},
            "spec.reservedCapacity",
            "1 to 182",
        ),
    ],
)
def test_api_server_refuses_rule_breaking_plans(
    cluster: E2ECluster, change: dict[str, Any], field: str, words: str
) -> None:
    doc = training_plan(
        unique("tp"),
        "training",
        [capacity_block(parse_time("2026-12-01T11:30:00Z", "t"), parse_time("2026-12-03T11:30:00Z", "t"))],
        lead=None,
    )
    doc["spec"]["reservedCapacity"][0].update(change)
    with pytest.raises(ApiError) as err:
        cluster.client.create(TRAINING_PLANS, doc)
    assert err.value.status == 422
    assert field in str(err.value) and words in str(err.value)


def test_overlapping_blocks_are_refused(cluster: E2ECluster) -> None:
    s, e = parse_time("2026-12-01T11:30:00Z", "t"), parse_time("2026-12-03T11:30:00Z", "t")
    doc = training_plan(unique("tp"), "training", [capacity_block(s, e)], lead=None)
    block = dict(doc["spec"]["reservedCapacity"][0])
    doc["spec"]["reservedCapacity"].append(
        {**block, "startTime": "2026-12-02T11:30:00Z", "endTime": "2026-12-04T11:30:00Z"}
    )
    with pytest.raises(ApiError) as err:
        cluster.client.create(TRAINING_PLANS, doc)
    assert "must not overlap" in str(err.value)
