"""What the soak runs on: one GangPolicy and AdmissionCheck per bind mode, two teams' ClusterQueues
(one per bind mode each) sharing the GB200 fleet in a cohort with Kueue preemption on, and a P5
ClusterQueue whose quota comes only from a TrainingPlan whose blocks last seconds (the plan's
documented test overrides) so that block boundaries and drains pass during the soak.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, ApiError, Client
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, TRAINING_PLANS
from tests.support.objects import (
    admission_check,
    capacity_block,
    cluster_queue,
    gang_policy,
    local_queue,
    training_plan,
)

TEAMS = ("team-a", "team-b")  # namespaces the local cluster creates (deploy/local/queues.yaml)
MODES = ("Ungate", "Extender", "PodGroup")
COHORT = "soak"
PLAN = "soak-plan"
BAD = "soak-bad"
PLAN_FLAVOR = "p5"  # the local cluster's P5 ResourceFlavor
GB200_FLAVOR = "gb200"
PRIORITIES = ("experimentation-priority", "training-priority", "inference-priority")
TERMINATION_LEAD = "15s"


def check_name(mode: str) -> str:
    return f"soak-{mode.lower()}"


def queue_name(mode: str) -> str:
    """The LocalQueue (in each team's namespace) of a bind mode, of the plan ("Plan"), or of the
    bad input ("Bad": quota of its own, so the gang check always gets to see it)."""
    return {"Plan": PLAN, "Bad": BAD}.get(mode) or check_name(mode)


def cluster_queue_name(team: str, mode: str) -> str:
    return f"soak-{team.removeprefix('team-')}-{mode.lower()}"


@dataclass(frozen=True, slots=True)
class Policy:
    """A GangPolicy's spec, and what the stream must know of it to draw gangs that fit."""

    spec: dict[str, Any]

    @property
    def spares(self) -> int:
        return int(self.spec.get("sparesPerUltraServer", 0))


# Short timeouts, all well inside the observer's 2 minutes (observer.STUCK_LIMIT): an admitted
# gang that does not run is requeued long before it would count as stuck.
_TIMEOUTS = {
    "readyTimeout": "60s",
    "unscheduledTimeout": "30s",
    "recoveryTimeout": "45s",
    "requeue": {"backoffBaseSeconds": 5, "backoffMaxSeconds": 30},
}
POLICIES = {
    "Ungate": Policy(
        {
            **_TIMEOUTS,
            "bindMode": "Ungate",
            "nodeFailure": "ReplaceFromSpare",
            "sparesPerUltraServer": 1,
            "maxReplacedNodes": 2,
        }
    ),
    "Extender": Policy({**_TIMEOUTS, "bindMode": "Extender", "nodeFailure": "Requeue"}),
    "PodGroup": Policy(
        {**_TIMEOUTS, "bindMode": "PodGroup", "nodeFailure": "ReplaceFromSpare", "maxReplacedNodes": 1}
    ),
    "Plan": Policy({**_TIMEOUTS, "bindMode": "Ungate", "admission": "Sequential", "nodeFailure": "Requeue"}),
}


def _queue(name: str, flavor: str, gpus: int, check: str, cohort: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"queueingStrategy": "BestEffortFIFO"}
    if cohort:
        spec["cohortName"] = cohort
        spec["preemption"] = {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
        }
    return cluster_queue(name, flavor, gpus, cpu="2000", memory="20000Gi", checks=[check], **spec)


def plan_blocks(start: datetime, seconds: float) -> list[dict[str, Any]]:
    """Blocks of P5 capacity from `start` for `seconds` and on, a boundary every few tens of
    seconds (instance counts and gaps varying; at most 15 blocks, the CRD's limit is 16), the
    last one lasting long after, so the drain has capacity."""
    count = max(3, min(14, int(seconds // 40)))
    length = seconds / count
    sizes = (4, 8, 2, 16)
    blocks, t = [], start
    for i in range(count):
        end = t + timedelta(seconds=length * (0.8 if i % 3 == 2 else 1.0))
        blocks.append(
            capacity_block(t.replace(microsecond=0), end.replace(microsecond=0), sizes[i % len(sizes)])
        )
        t = end + timedelta(seconds=length * 0.2 if i % 3 == 2 else 0)
    blocks.append(capacity_block(t.replace(microsecond=0), (t + timedelta(days=1)).replace(microsecond=0), 8))
    return blocks


def install(client: Client, seconds: float) -> None:
    """Create everything the soak runs on (the plan's blocks cover `seconds` and the drain)."""
    objects: list[tuple[Any, dict[str, Any]]] = []
    for mode, policy in POLICIES.items():
        name = queue_name(mode)
        objects += [
            (GANG_POLICIES, gang_policy(name, **policy.spec)),
            (ADMISSION_CHECKS, admission_check(name, name)),
        ]
    # 6 ClusterQueues of 48 GPUs: the 288 GPUs of the four GB200 UltraServers, lent and borrowed
    for team in TEAMS:
        for mode in MODES:
            objects.append(
                (
                    CLUSTER_QUEUES,
                    _queue(cluster_queue_name(team, mode), GB200_FLAVOR, 48, check_name(mode), COHORT),
                )
            )
    objects.append((CLUSTER_QUEUES, _queue(PLAN, PLAN_FLAVOR, 0, PLAN, None)))
    objects.append((CLUSTER_QUEUES, _queue(BAD, GB200_FLAVOR, 16, check_name("Ungate"), None)))
    for team in TEAMS:
        for mode in (*MODES, "Plan", "Bad"):
            target = {"Plan": PLAN, "Bad": BAD}.get(mode) or cluster_queue_name(team, mode)
            objects.append((LOCAL_QUEUES, local_queue(queue_name(mode), team, target)))
    start = datetime.now(UTC) - timedelta(seconds=5)
    plan = training_plan(PLAN, PLAN, plan_blocks(start, seconds), flavor=PLAN_FLAVOR, lead=TERMINATION_LEAD)
    objects.append((TRAINING_PLANS, plan))
    for res, obj in objects:
        client.apply(res, obj, field_manager="gangplugin-soak")


def remove_plan(client: Client) -> None:
    with contextlib.suppress(ApiError):
        client.delete(TRAINING_PLANS, PLAN)
