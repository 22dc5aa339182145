"""Quota per ClusterQueue and team, and each TrainingPlan's blocks on a time axis with the
quota they give and when the next change comes (the core's own plan timeline)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gangplugin.console.views import plan_row, queue_box, time_axis
from gangplugin.core.plans import Status
from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES
from gangplugin.kube.resources import TRAINING_PLANS
from tests.support.console_world import World, cluster_queue, local_queue, standard

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


def plan(name: str, *blocks: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": {
            "targetResource": "training-job",
            "clusterQueue": "training",
            "flavor": "gb200",
            "resourcesPerInstance": {"nvidia.com/gpu": 4},
            "reservedCapacity": [
                {
                    "instanceType": "ml.p6e-gb200.36xlarge",
                    "instanceCount": count,
                    "availabilityZone": "us-east-1a",
                    "startTime": start,
                    "endTime": end,
                }
                for start, end, count in blocks
            ],
        },
    }


def test_queue_usage_with_teams_borrowing_and_plan_quota() -> None:
    world = World()
    standard(world)
    world.put(CLUSTER_QUEUES, cluster_queue(gpus="16", used="20", borrowed="4"))
    world.put(LOCAL_QUEUES, local_queue("research", "team-b"))
    world.put(TRAINING_PLANS, plan("p", ("2027-01-14T11:30:00Z", "2027-01-16T11:30:00Z", 4)))
    (q,) = world.source.queues(NOW)
    assert (q.name, q.cohort, q.teams, q.admitted, q.pending) == (
        "training",
        "teams",
        ("team-a/training", "team-b/research"),
        1,
        2,
    )
    gpu = next(r for r in q.resources if r.resource == "nvidia.com/gpu")
    assert (gpu.nominal, gpu.used, gpu.borrowed, gpu.borrowing_limit, gpu.from_plans) == (16, 20, 4, 8, True)
    cpu = next(r for r in q.resources if r.resource == "cpu")
    assert (cpu.nominal, cpu.from_plans) == (1_000_000, False)  # millicores
    assert q.next_change == datetime(2027, 1, 16, 11, 30, tzinfo=UTC)
    box = queue_box(q, NOW)
    assert box.bars[0].resource == "nvidia.com/gpu"  # GPUs first
    assert box.bars[0].text == "20 used of 16 nominal, 4 borrowed (may borrow 8)"
    assert (box.bars[0].used_pct, box.bars[0].borrowed_pct) == (80.0, 20.0)


def test_plan_blocks_on_a_time_axis() -> None:
    world = World()
    world.put(
        TRAINING_PLANS,
        plan(
            "two-blocks",
            ("2027-01-14T11:30:00Z", "2027-01-16T11:30:00Z", 4),
            ("2027-01-20T11:30:00Z", "2027-01-22T11:30:00Z", 8),
        ),
    )
    world.put(TRAINING_PLANS, {**plan("broken"), "spec": {"clusterQueue": "training"}})
    broken, two = world.source.plans(NOW)
    assert broken.name == "broken" and broken.problem and broken.blocks == ()
    assert two.status is Status.ACTIVE
    assert [(b.status, b.instances, b.gives) for b in two.blocks] == [
        (Status.ACTIVE, 4, (("nvidia.com/gpu", 16),)),
        (Status.SCHEDULED, 8, (("nvidia.com/gpu", 32),)),
    ]
    assert two.next_change == datetime(2027, 1, 16, 11, 30, tzinfo=UTC)
    axis = time_axis([broken, two], NOW)
    assert axis.start == datetime(2027, 1, 14, 8, 0, tzinfo=UTC)  # a day before now
    assert axis.end == datetime(2027, 1, 23, 11, 30, tzinfo=UTC)  # a day past the last block
    assert 0 < axis.now_pct < 20 and axis.ticks
    row = plan_row(two, axis, NOW)
    first, second = row.bars
    assert first.left_pct < axis.now_pct < first.left_pct + first.width_pct
    assert second.left_pct > axis.now_pct
    assert "gives 32 nvidia.com/gpu" in second.title
    assert row.next_change == "2027-01-16T11:30:00Z (in 1d 3h)"


def test_the_axis_covers_a_week_ahead_when_there_are_no_plans() -> None:
    axis = time_axis([], NOW)
    assert axis.end - axis.start == timedelta(days=9)
