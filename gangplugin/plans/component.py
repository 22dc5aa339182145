"""`gangplugin serve --components plans`: the TrainingPlan controller."""

from __future__ import annotations

from gangplugin.kube.client import CLUSTER_QUEUES
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.kube.workqueue import start_workers
from gangplugin.plans.controller import PlanController
from gangplugin.runtime.components import Runtime

# Only the leader writes plan status and ClusterQueue quota.
needs_leader = True

# setup() builds the controller (its handlers must exist before the caches start); start() runs it.
_controllers: dict[int, PlanController] = {}


def setup(runtime: Runtime) -> None:
    controller = PlanController(
        runtime.client,
        runtime.informer(TRAINING_PLANS),
        runtime.informer(CLUSTER_QUEUES),
        runtime.dispatcher("plans"),
    )
    _controllers[id(runtime)] = controller


def start(runtime: Runtime) -> None:
    controller = _controllers.pop(id(runtime))
    controller.enqueue_all()
    start_workers(controller.queue, controller.reconcile, "plans", count=1)
