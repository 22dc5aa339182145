"""`gangplugin serve --components plans`: the TrainingPlan controller."""

from __future__ import annotations

from gangplugin.kube.client import CLUSTER_QUEUES
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.kube.workqueue import start_workers
from gangplugin.plans.controller import PlanController
from gangplugin.runtime.components import LeaderController, Runtime


class Plans(LeaderController[PlanController]):
    """Only the leader writes plan status and ClusterQueue quota."""

    name = "plans"

    def build(self, runtime: Runtime) -> PlanController:
        return PlanController(
            runtime.client,
            runtime.informer(TRAINING_PLANS),
            runtime.informer(CLUSTER_QUEUES),
            runtime.dispatcher("plans"),
        )

    def run(self, runtime: Runtime, controller: PlanController) -> None:
        controller.enqueue_all()
        start_workers(controller.queue, controller.reconcile, "plans", count=1)
