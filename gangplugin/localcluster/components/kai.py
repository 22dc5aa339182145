"""NVIDIA KAI Scheduler, a peer the bench compares with (bench/peers.py; never started by `make up`
or CI): the processes its operator deploys for a cluster (queue controller, pod grouper, pod-group
controller, binder, scheduler) at KAI_SCHEDULER_VERSION, from the binaries and CRDs
`hack/build-upstream.sh peers` builds from its source, with the arguments and defaults its
operator gives them (pkg/operator/operands/): scheduler name `kai-scheduler`, queue label
`kai.scheduler/queue`, the default scheduling shard's actions and plugins (binpack placement),
and the chart's default queues (`default-parent-queue`, `default-queue`) and priority classes.

Not run: its admission webhook, which only mutates GPU-sharing (fractional) pods and whose
certificate directory is controller-runtime's fixed one, shared by every cluster on a machine
(the bench's pods ask for whole GPUs); its queue and pod-group validation webhooks (the operator
registers them; the bench writes valid objects); GPU sharing, node scale adjusting and
Prometheus, which its operator deploys only when enabled.

Topology: a `kai.scheduler/v1alpha1` Topology of our level order down to the hostname. A gang is
a Job whose pods have `schedulerName: kai-scheduler`, its queue label, and on the Job
`kai.scheduler/topology` with `kai.scheduler/topology-required-placement` (or `-preferred-`);
the pod grouper makes its PodGroup. Slices are SubGroups of a PodGroup written by hand, as KAI's
multi-level topology guide does for workload kinds its segment annotations do not cover."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from gangplugin.kube.client import Client, Resource
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import level_topology, peer_version
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

NAMESPACE = "kai-scheduler"
RESERVATION_NAMESPACE = "kai-resource-reservation"
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
PARENT_QUEUE, QUEUE = "default-parent-queue", "default-queue"
# The chart's PriorityClasses (templates/priorityclasses/): below 100 a workload is preemptible.
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
QUEUES = Resource("scheduling.run.ai/v2", "queues", namespaced=False)
TOPOLOGIES = Resource("kai.scheduler/v1alpha1", "topologies", namespaced=False)
PRIORITY_CLASS = Resource("scheduling.k8s.io/v1", "priorityclasses", namespaced=False)

# The default SchedulingShard's actions and plugins, in the order the operator writes them
# (pkg/apis/kai/v1/schedulingshard_types.go: by priority, binpack placement; gpuspread off).
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
PLUGINS = (
    "predicates",
    "proportion",
    "priority",
    "nodeavailability",
    "resourcetype",
    "podaffinity",
    "elastic",
    "kubeflow",
    "ray",
    "subgrouporder",
    "taskorder",
    "nominatednode",
    "dynamicresources",
    "minruntime",
    "topology",
    "snapshot",
    "sg-nodelocalgreedy",
    "sg-multinodegang",
    "gpupack",
    "nodeplacement",
    "gpusharingorder",
)


def version() -> str:
    return peer_version("KAI_SCHEDULER_VERSION")


def manifests_dir(spec: ClusterSpec) -> Path:
    return spec.cache / f"kai-scheduler-{version()}"


def scheduler_config() -> dict[str, Any]:
    plugins: list[dict[str, Any]] = [{"name": p} for p in PLUGINS]
    for p in plugins:
        if p["name"] == "nodeplacement":
            p["arguments"] = {"gpu": "binpack", "cpu": "binpack"}
    return {"actions": ", ".join(ACTIONS), "tiers": [{"plugins": plugins}]}


def topology() -> dict[str, Any]:
    return level_topology("kai.scheduler/v1alpha1")


def queue(name: str, parent: str | None) -> dict[str, Any]:
    """The chart's default queues: no quota, no limit, over-quota weight 1."""
    unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {r: dict(unlimited) for r in ("cpu", "gpu", "memory")}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


@dataclass(frozen=True)
class _Kai(Component):
    """One KAI process, `kai-<binary name>`; ports at `offsets`."""

    optional: ClassVar[bool] = True
    offsets: ClassVar[tuple[int, ...]]

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / f"{self.name}-{version()}",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {f"{self.name} {i}": spec.ports.at(o) for i, o in enumerate(self.offsets)}

    def args(self, spec: ClusterSpec) -> tuple[str, ...]:
        raise NotImplementedError

    def health_port(self, spec: ClusterSpec) -> int:
        return spec.ports.at(self.offsets[-1])

    def health_path(self) -> str:
        return "/healthz"

    def process(self, spec: ClusterSpec) -> Process:
        port = self.health_port(spec)
        path = self.health_path()
        return Process(
            self.name,
            (str(self.binaries(spec)[0]), *self.args(spec)),
            env={"KUBECONFIG": str(spec.kubeconfig)},
            health=lambda: http_ok(f"http://127.0.0.1:{port}{path}"),
            ports=tuple(self.listens(spec).values()),
        )


@dataclass(frozen=True)
class KaiQueueController(_Kai):
    """First of KAI's components: it installs the CRDs, namespaces and priority classes."""

    name = "kai-queuecontroller"
    offsets = (720,)

    def install(self, spec: ClusterSpec, client: Client) -> None:
        crds = manifests.read_crds(manifests_dir(spec), "*.yaml", "KAI Scheduler")
        manifests.apply_crds(client, spec, crds, "KAI Scheduler")
        for ns in (NAMESPACE, RESERVATION_NAMESPACE):
            manifests.ensure_namespace(client, ns)
        for name, value in PRIORITY_CLASSES.items():
            pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            client.apply(PRIORITY_CLASS, {**pc, "value": value}, field_manager=manifests.FIELD_MANAGER)

    def args(self, spec: ClusterSpec) -> tuple[str, ...]:
        # its Queue validation webhook is one the operator registers: off here
        return (
            f"--kubeconfig={spec.kubeconfig}",
            f"--metrics-listen-address=127.0.0.1:{spec.ports.at(720)}",
            "--enable-webhook=false",
        )

    def health_path(self) -> str:
        return "/metrics"  # it serves no probe

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        for q in (queue(PARENT_QUEUE, None), queue(QUEUE, PARENT_QUEUE)):
            client.apply(QUEUES, q, field_manager=manifests.FIELD_MANAGER)
        client.apply(TOPOLOGIES, topology(), field_manager=manifests.FIELD_MANAGER)


@dataclass(frozen=True)
class _KaiController(_Kai):
    """A KAI controller on controller-runtime, after the queue controller (it installs the
    CRDs): the kubeconfig (controller-runtime's flag; the environment's KUBECONFIG is read too,
    by those that load it before parsing their flags), metrics then probe address, the
    scheduler name, then its own flags (`own_flags`)."""

    requires = ("kai-queuecontroller",)
    own_flags: ClassVar[tuple[str, ...]]

    def args(self, spec: ClusterSpec) -> tuple[str, ...]:
        return (
            f"--kubeconfig={spec.kubeconfig}",
            f"--metrics-bind-address=127.0.0.1:{spec.ports.at(self.offsets[0])}",
            f"--health-probe-bind-address=127.0.0.1:{spec.ports.at(self.offsets[1])}",
            f"--scheduler-name={SCHEDULER_NAME}",
            *self.own_flags,
        )


@dataclass(frozen=True)
class KaiPodGrouper(_KaiController):
    name = "kai-podgrouper"
    offsets = (721, 722)
    own_flags = (f"--queue-label-key={QUEUE_LABEL}",)


@dataclass(frozen=True)
class KaiPodGroupController(_KaiController):
    name = "kai-podgroupcontroller"
    offsets = (723, 724)
    # its PodGroup validation webhook is one the operator registers: off here
    own_flags = ("--enable-podgroup-webhook=false",)


@dataclass(frozen=True)
class KaiBinder(_KaiController):
    name = "kai-binder"
    offsets = (725, 726)
    own_flags = (f"--resource-reservation-namespace={RESERVATION_NAMESPACE}",)

    def health_port(self, spec: ClusterSpec) -> int:
        return spec.ports.at(self.offsets[0])

    def health_path(self) -> str:
        return "/metrics"  # it registers no health check


@dataclass(frozen=True)
class KaiScheduler(_Kai):
    name = "kai-scheduler"
    offsets = (727, 728)
    requires = ("kai-queuecontroller", "kai-podgrouper", "kai-podgroupcontroller", "kai-binder")

    def args(self, spec: ClusterSpec) -> tuple[str, ...]:
        conf = spec.state_dir / "kai-scheduler.yaml"
        conf.write_text(yaml.safe_dump(scheduler_config(), sort_keys=False))
        return (
            f"--scheduler-conf={conf}",
            f"--scheduler-name={SCHEDULER_NAME}",
            f"--namespace={NAMESPACE}",
            f"--queue-label-key={QUEUE_LABEL}",
            f"--listen-address=127.0.0.1:{spec.ports.at(727)}",
            f"--plugin-server-port={spec.ports.at(728)}",
            "--leader-elect=false",
        )

    def health_port(self, spec: ClusterSpec) -> int:
        return spec.ports.at(727)

    def health_path(self) -> str:
        return "/metrics"  # its listener serves only metrics


KAI = ("kai-queuecontroller", "kai-podgrouper", "kai-podgroupcontroller", "kai-binder", "kai-scheduler")
