"""`gangplugin serve --components plans`: the TrainingPlan controller."""

from __future__ import annotations

from gangplugin.kube.client import CLUSTER_QUEUES
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.kube.workqueue import start_workers
from gangplugin.plans.controller import PlanController
from gangplugin.runtime.components import Runtime


class Plans:
    # Only the leader writes plan status and ClusterQueue quota.
    needs_leader: bool = True

    def __init__(self) -> None:
        self._controller: PlanController | None = None

    def setup(self, runtime: Runtime) -> None:
        """The controller, whose handlers must exist before the caches start."""
        self._controller = PlanController(
            runtime.client,
            runtime.informer(TRAINING_PLANS),
            runtime.informer(CLUSTER_QUEUES),
            runtime.dispatcher("plans"),
        )

    def start(self, runtime: Runtime) -> None:
        controller = self._controller
        if controller is None:
            raise RuntimeError("plans: start() before setup()")
        controller.enqueue_all()
        start_workers(controller.queue, controller.reconcile, "plans", count=1)
