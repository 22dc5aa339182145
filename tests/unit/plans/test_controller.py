"""The TrainingPlan controller's quota write against a ClusterQueue that Kueue keeps writing (its
status): a write refused for a version the cache has not shown yet is decided again on the
object as it is now, in the same reconcile. At a block's end the quota dropped half a second
late, behind the workqueue's retry of the conflict, logged as an error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gangplugin.kube.client import CLUSTER_QUEUES
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.plans.controller import PlanController
from tests.support import objects
from tests.support.fakecluster import FakeCluster

KUEUE = "kueue.x-k8s.io/v1beta2"
NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


def _gpu_quota(cq: dict) -> str:  # type: ignore[type-arg]
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")


def test_a_quota_write_refused_for_a_newer_clusterqueue_is_decided_again_on_it_at_once() -> None:
    fake = FakeCluster()
    try:
        cached = fake.put(KUEUE, "clusterqueues", objects.cluster_queue("cq", "cq", 0))
        # Kueue writes its status: the API server's version moves on, the cache still shows the old
        fake.put(KUEUE, "clusterqueues", {**cached, "status": {"pendingWorkloads": 1}})
        client = fake.client()
        plans: Informer[dict] = Informer(client, TRAINING_PLANS, identity)  # type: ignore[type-arg]
        queues: Informer[dict] = Informer(client, CLUSTER_QUEUES, identity)  # type: ignore[type-arg]
        queues._apply({"type": "ADDED", "object": cached}, None)
        block = objects.capacity_block(NOW - timedelta(hours=1), NOW + timedelta(hours=1), count=2)
        plans._apply({"type": "ADDED", "object": objects.training_plan("p", "cq", [block])}, None)
        ctl = PlanController(client, plans, queues, Dispatcher("plans-test"), clock=lambda: NOW)

        wake = ctl.reconcile_queue("cq")

        stored = fake.get(KUEUE, "clusterqueues", "cq")
        assert stored is not None
        assert _gpu_quota(stored) == "16"  # 2 instances of 8 GPUs, written in this reconcile
        assert stored["status"] == {"pendingWorkloads": 1}  # Kueue's write kept
        versions = [w[2]["metadata"]["resourceVersion"] for w in fake.writes]
        assert versions == [
            cached["metadata"]["resourceVersion"],
            str(int(cached["metadata"]["resourceVersion"]) + 1),
        ]
        assert wake == 3600.0  # the block's end
    finally:
        fake.close()
