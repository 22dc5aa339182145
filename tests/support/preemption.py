"""Preemption as the e2e tests set it up: WorkloadPriorityClasses, and one test's GangPolicy,
gang check, GB200 ResourceFlavor and ClusterQueues with Kueue's `spec.preemption` (`Governance`);
which gangs the check preempted."""

from __future__ import annotations

import contextlib
from typing import Any

from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, ApiError, Client, Resource
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS
from tests.support.gangs import events_of
from tests.support.kube import unique, wait_active, workload_of
from tests.support.objects import (
    GB200,
    WORKLOAD_PRIORITY_CLASSES,
    admission_check,
    cluster_queue,
    gang_policy,
    local_queue,
    resource_flavor,
    workload_priority_class,
)

LOWER = {"withinClusterQueue": "LowerPriority"}


class Governance:
    """The Kueue and gangplugin objects of one test; `close` deletes them."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.made: list[tuple[Resource, str]] = []
        self.check = unique("gp")
        self.flavor = self.check
        self._create(GANG_POLICIES, gang_policy(self.check))
        self._create(ADMISSION_CHECKS, admission_check(self.check, policy=self.check))
        self._create(RESOURCE_FLAVORS, resource_flavor(self.flavor, GB200))

    def _create(self, res: Resource, obj: dict[str, Any]) -> None:
        self.client.create(res, obj)
        self.made.append((res, obj["metadata"]["name"]))

    def priority(self, value: int) -> str:
        name = unique(f"p{value}")
        self._create(WORKLOAD_PRIORITY_CLASSES, workload_priority_class(name, value))
        return name

    def queue(self, gpus: int, preemption: dict[str, Any], cohort: str | None = None, **limits: int) -> str:
        """A ClusterQueue with `gpus` nominal GPUs (and `borrowingLimit`/`lendingLimit`) and its
        LocalQueue, both named as returned."""
        name = unique("cq")
        spec: dict[str, Any] = {"preemption": preemption, **({"cohortName": cohort} if cohort else {})}
        cq = cluster_queue(name, self.flavor, gpus, gpu_limits=limits, checks=[self.check], **spec)
        self._create(CLUSTER_QUEUES, cq)
        self.client.create(LOCAL_QUEUES, local_queue(name, self.namespace))
        wait_active(self.client, name)
        return name

    def close(self) -> None:
        for res, name in reversed(self.made):
            with contextlib.suppress(ApiError):
                self.client.delete(res, name)


def preempted(client: Client, namespace: str, jobs: list[str]) -> set[str]:
    """The jobs whose Workload got a Preempted event from the gang check."""
    out = set()
    for job in jobs:
        wl = workload_of(client, namespace, job)
        if wl and any(
            e["reason"] == "Preempted" for e in events_of(client, namespace, wl["metadata"]["name"])
        ):
            out.add(job)
    return out
