"""Preemption as the e2e tests set it up: WorkloadPriorityClasses, and one test's GangPolicy,
gang check, GB200 ResourceFlavor and ClusterQueues with Kueue's `spec.preemption` (`Governance`);
which gangs the check preempted."""

from __future__ import annotations

import contextlib
from typing import Any

from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS
from tests.support.gangs import events_of
from tests.support.kube import GB200, unique, wait_for, workload_of

PRIORITY_CLASSES = Resource("kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", namespaced=False)
LOWER = {"withinClusterQueue": "LowerPriority"}


class Governance:
    """The Kueue and gangplugin objects of one test; `close` deletes them."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.made: list[tuple[Resource, str]] = []
        self.check = unique("gp")
        self.flavor = self.check
        self._create(
            GANG_POLICIES,
            {"apiVersion": "gangplugin.io/v1alpha1", "kind": "GangPolicy", "metadata": {"name": self.check}},
        )
        self._create(
            ADMISSION_CHECKS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": self.check},
                "spec": {
                    "controllerName": "gangplugin.io/gang",
                    "parameters": {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": self.check},
                },
            },
        )
        self._create(
            RESOURCE_FLAVORS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": self.flavor},
                "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": GB200}},
            },
        )

    def _create(self, res: Resource, obj: dict[str, Any]) -> None:
        self.client.create(res, obj)
        self.made.append((res, obj["metadata"]["name"]))

    def priority(self, value: int) -> str:
        name = unique(f"p{value}")
        self._create(
            PRIORITY_CLASSES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
        return name

    def queue(self, gpus: int, preemption: dict[str, Any], cohort: str | None = None, **limits: int) -> str:
        """A ClusterQueue with `gpus` nominal GPUs (and `borrowingLimit`/`lendingLimit`) and its
        LocalQueue, both named as returned."""
        name = unique("cq")
        gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}
        gpu.update({k: str(v) for k, v in limits.items()})
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "admissionChecksStrategy": {"admissionChecks": [{"name": self.check}]},
            "preemption": preemption,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": self.flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "10000"},
                                {"name": "memory", "nominalQuota": "100000Gi"},
                                gpu,
                            ],
                        }
                    ],
                }
            ],
        }
        if cohort:
            spec["cohortName"] = cohort
        self._create(
            CLUSTER_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        self.client.create(
            LOCAL_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"clusterQueue": name},
            },
        )
        wait_for(
            lambda: is_true(self.client.get(CLUSTER_QUEUES, name), "Active"),
            60,
            f"ClusterQueue {name} Active",
        )
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
