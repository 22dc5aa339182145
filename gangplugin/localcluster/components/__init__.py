"""The components a local cluster can run, one module each, and the registry that orders them.

Adding one (a training operator, another scheduler) is a module with a `Component` subclass and
its line in `REGISTRY`; `optional = True` starts it only when asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangplugin.localcluster.components.apiserver import KubeApiserver
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.controller_manager import KubeControllerManager
from gangplugin.localcluster.components.etcd import Etcd
from gangplugin.localcluster.components.gangplugin import Gangplugin
from gangplugin.localcluster.components.jobset import JobSet
from gangplugin.localcluster.components.kai import (
    KaiBinder,
    KaiPodGroupController,
    KaiPodGrouper,
    KaiQueueController,
    KaiScheduler,
)
from gangplugin.localcluster.components.kuberay import KubeRay
from gangplugin.localcluster.components.kueue import Kueue
from gangplugin.localcluster.components.kueue_tas import KueueTas
from gangplugin.localcluster.components.kwok import Kwok
from gangplugin.localcluster.components.lws import LeaderWorkerSet
from gangplugin.localcluster.components.real_nodes import RealNodes
from gangplugin.localcluster.components.scheduler import KubeScheduler
from gangplugin.localcluster.components.trainer import Trainer
from gangplugin.localcluster.components.training_operator import TrainingOperator
from gangplugin.localcluster.components.volcano import (
    VolcanoControllerManager,
    VolcanoScheduler,
    VolcanoWebhookManager,
)
from gangplugin.localcluster.errors import ClusterError

# Every cluster has these, first.
CONTROL_PLANE: tuple[Component, ...] = (Etcd(), KubeApiserver())
# The rest, in start order. A controller whose workloads Kueue manages comes before Kueue: its
# CRDs are then there when Kueue starts, which sets the integration up at once.
REGISTRY: tuple[Component, ...] = (
    KubeControllerManager(),
    KubeScheduler(),
    Kwok(),
    JobSet(),
    # The job controllers (optional): GANGPLUGIN_WITH=training-operator,trainer,lws,kuberay.
    TrainingOperator(),
    Trainer(),
    LeaderWorkerSet(),
    KubeRay(),
    Kueue(),
    Gangplugin(),
    # Real kubelets beside the fake nodes (optional): GANGPLUGIN_WITH=real-nodes.
    RealNodes(),
    # The bench's peers (bench/peers.py), optional: never started by `make up` or CI.
    KueueTas(),
    VolcanoWebhookManager(),
    VolcanoControllerManager(),
    VolcanoScheduler(),
    KaiQueueController(),
    KaiPodGrouper(),
    KaiPodGroupController(),
    KaiBinder(),
    KaiScheduler(),
)
DEFAULT = tuple(c.name for c in REGISTRY if not c.optional)


def choose(names: Iterable[str]) -> tuple[Component, ...]:
    """The control plane and the components `names`, in start order; an unknown name, or a
    component without one it requires, is an error that says so."""
    wanted = set(names) - {c.name for c in CONTROL_PLANE}
    known = {c.name for c in REGISTRY}
    if unknown := sorted(wanted - known):
        raise ClusterError(
            f"unknown component {', '.join(unknown)}; the local cluster runs {', '.join(sorted(known))}"
        )
    chosen = tuple(c for c in REGISTRY if c.name in wanted)
    for comp in chosen:
        if missing := [r for r in comp.requires if r not in wanted]:
            raise ClusterError(f"{comp.name} needs {', '.join(missing)}: choose it too")
    return CONTROL_PLANE + chosen


__all__ = ["CONTROL_PLANE", "DEFAULT", "REGISTRY", "Component", "choose"]
