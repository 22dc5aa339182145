"""The objects the tests, the benchmarks and the soak submit or feed to caches, as plain JSON: one
builder per kind.

Each builder writes what every caller needs and takes what differs as arguments; a caller that
needs a field no other does adds it to what the builder returns. The unit tests' objects
(`workload`, `pod`, `node` and their parts) carry only what the code under test reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gangplugin.core.names import (
    ADMISSION_CHECK_CONTROLLER,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
)
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL
from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, Resource
from gangplugin.kube.resources import RESOURCE_FLAVORS

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GB200 = "ml.p6e-gb200.36xlarge"
P5 = "ml.p5.48xlarge"
# Kinds gangplugin itself does not read.
WORKLOAD_PRIORITY_CLASSES = Resource(KUEUE, "workloadpriorityclasses", namespaced=False)
JOBSETS = Resource("jobset.x-k8s.io/v1alpha2", "jobsets")


def trainer_container(
    gpus: int | str, *, cpu: str = "1", memory: str | None = "1Gi", limits: bool = True
) -> JSON:
    """One trainer container asking for `gpus` nvidia.com/gpu (and `cpu`, `memory`), limited to
    them unless told."""
    resources: JSON = {"requests": {"cpu": cpu, **({"memory": memory} if memory else {}), GPU: str(gpus)}}
    if limits:
        resources["limits"] = {GPU: str(gpus)}
    return {"name": "trainer", "image": "trainer:latest", "resources": resources}


def trainer_pod_spec(gpus: int) -> JSON:
    """A pod spec with one trainer container asking for `gpus` nvidia.com/gpu."""
    return {"restartPolicy": "Never", "containers": [trainer_container(gpus)]}


def indexed_job(
    name: str,
    namespace: str,
    pods: int,
    template: JSON,
    *,
    labels: Mapping[str, str] | None = None,
    suspend: bool = True,
    **spec: Any,
) -> JSON:
    """A batch/v1 Indexed Job of `pods` pods of `template`, suspended for Kueue unless told."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "suspend": suspend,
            **spec,
            "template": template,
        },
    }


def gpu_job(name: str, namespace: str, queue: str, pods: int, gpus: int, **template_extra: Any) -> JSON:
    """A batch/v1 Job of `pods` pods with `gpus` nvidia.com/gpu each, submitted to `queue`."""
    template = {"metadata": template_extra.get("metadata", {}), "spec": trainer_pod_spec(gpus)}
    return indexed_job(name, namespace, pods, template, labels={QUEUE_LABEL: queue})


def gpu_pod(
    namespace: str,
    name: str,
    *,
    gang: str | None = None,
    size: int | None = None,
    gpus: int = 4,
    required: str | None = None,
    node_selector: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> JSON:
    """A plain pod of one trainer (no Kueue), a member of `gang` of `size` when given."""
    labels = {GANG_LABEL: gang} if gang else {}
    annotations = {GANG_SIZE_ANNOTATION: str(size)} if size else {}
    if required:
        annotations[REQUIRED_TOPOLOGY_ANNOTATION] = required
    spec: JSON = {"containers": [trainer_container(gpus)], "nodeSelector": node_selector or {}}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def pod_group_member(
    group: str, index: int, namespace: str, queue: str, total: int, gpus: int, **annotations: str
) -> JSON:
    """One pod of a Kueue plain pod group of `total` pods with `gpus` nvidia.com/gpu each."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{group}-{index}",
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue, "kueue.x-k8s.io/pod-group-name": group},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total), **annotations},
        },
        "spec": trainer_pod_spec(gpus),
    }


def gang_policy(name: str, **spec: Any) -> JSON:
    """A GangPolicy of `spec`, as a user writes it (camelCase fields)."""
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "GangPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def admission_check(
    name: str, policy: str | None = None, controller: str = ADMISSION_CHECK_CONTROLLER
) -> JSON:
    """An AdmissionCheck of `controller` (our gang check by default), with GangPolicy `policy`
    as its parameters when given."""
    spec: JSON = {"controllerName": controller}
    if policy is not None:
        spec["parameters"] = {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": policy}
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


def topology(name: str, *levels: str) -> JSON:
    """A Kueue Topology of these node labels, outermost first."""
    spec = {"levels": [{"nodeLabel": label} for label in levels]}
    return {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": name}, "spec": spec}


def resource_flavor(name: str, instance_type: str, **node_labels: str) -> JSON:
    """A ResourceFlavor of the nodes of `instance_type` (and `node_labels`)."""
    labels = {"node.kubernetes.io/instance-type": instance_type, **node_labels}
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def cluster_queue(
    name: str,
    flavor: str,
    gpus: int | str,
    *,
    cpu: str | None = "10000",
    memory: str | None = "100000Gi",
    gpu_limits: Mapping[str, int] | None = None,
    checks: Sequence[str] = (),
    **spec: Any,
) -> JSON:
    """A ClusterQueue for every namespace with `gpus` nominal GPUs (its `borrowingLimit` and
    `lendingLimit` in `gpu_limits`), `cpu` and `memory` (None: not covered) of one flavor,
    requiring `checks`, and the rest of `spec` (stopPolicy, cohortName, preemption, ...)."""
    gpu = {"name": GPU, "nominalQuota": str(gpus), **{k: str(v) for k, v in (gpu_limits or {}).items()}}
    quotas = [{"name": r, "nominalQuota": q} for r, q in (("cpu", cpu), ("memory", memory)) if q is not None]
    resources = [*quotas, gpu]
    body: JSON = {
        "namespaceSelector": {},
        **spec,
        "resourceGroups": [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ],
    }
    if checks:
        body["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def workload_priority_class(name: str, value: int) -> JSON:
    """A Kueue WorkloadPriorityClass (a job picks it with label kueue.x-k8s.io/priority-class)."""
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def local_queue(name: str, namespace: str, cluster_queue: str | None = None) -> JSON:
    """A LocalQueue of the ClusterQueue `cluster_queue` (by default: of its own name)."""
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue or name},
    }


def queue_objects(
    name: str,
    namespace: str,
    gpu_quota: int,
    instance_type: str,
    stop_policy: str = "None",
    checks: Sequence[str] = (),
    node_labels: Mapping[str, str] | None = None,
) -> list[tuple[Resource, JSON]]:
    """A ResourceFlavor (of `instance_type` nodes, with `node_labels` too), a ClusterQueue with
    `gpu_quota` GPUs (requiring `checks`) and a LocalQueue, all named `name`."""
    return [
        (RESOURCE_FLAVORS, resource_flavor(name, instance_type, **(node_labels or {}))),
        (CLUSTER_QUEUES, cluster_queue(name, name, gpu_quota, checks=checks, stopPolicy=stop_policy)),
        (LOCAL_QUEUES, local_queue(name, namespace)),
    ]


def capacity_block(start: datetime, end: datetime, count: int = 2, instance_type: str = P5) -> JSON:
    """One reserved-capacity block of a TrainingPlan, in us-east-1b."""
    return {
        "instanceType": instance_type,
        "instanceCount": count,
        "availabilityZone": "us-east-1b",
        "startTime": format_time(start),
        "endTime": format_time(end),
    }


def training_plan(
    name: str,
    cq: str,
    blocks: Sequence[JSON],
    *,
    lead: str | None = "5s",
    flavor: str | None = None,
    **spec: Any,
) -> JSON:
    """A TrainingPlan of 8-GPU instances for ClusterQueue `cq` and `flavor` (by default the
    flavor named as the queue) reserving `blocks` (`capacity_block`), with the plan's test
    overrides (any block times, termination lead `lead`) unless `lead` is None; `spec` replaces
    or adds fields."""
    body: JSON = {
        "targetResource": "training-job",
        "clusterQueue": cq,
        "flavor": flavor or cq,
        "resourcesPerInstance": {GPU: 8},
        "reservedCapacity": list(blocks),
    }
    if lead is not None:
        body["testOverrides"] = {"anyBlockTimes": True, "terminationLead": lead}
    body.update(spec)
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": body,
    }


# -- what the unit tests feed to caches ---------------------------------------------------------


def condition(kind: str, status: str = "True", **fields: Any) -> JSON:
    """A status condition; `fields` adds reason, message, lastTransitionTime."""
    return {"type": kind, "status": status, **fields}


def node(
    name: str,
    us: str | None = "us-1",
    *,
    gpus: int | str = 4,
    cpu: str = "144",
    memory: str = "800Gi",
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
    conditions: Sequence[JSON] | None = None,
    **spec: Any,
) -> JSON:
    """A node of UltraServer `us` (none: no such label) with `gpus` GPUs, Ready unless told
    (`conditions` replaces that), and `spec` (unschedulable, taints)."""
    ready_condition = condition("Ready", "True" if ready else "False")
    return {
        "metadata": {
            "name": name,
            "labels": {HOSTNAME_LABEL: name, **({ULTRASERVER_LABEL: us} if us else {}), **(labels or {})},
        },
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)},
            "conditions": list(conditions) if conditions is not None else [ready_condition],
        },
    }


def container(requests: Mapping[str, str | int]) -> JSON:
    """The one container of a unit test's pod or podSet template, asking for `requests`."""
    return {"name": "c", "resources": {"requests": {k: str(v) for k, v in requests.items()}}}


def pod(
    name: str,
    namespace: str = "ns",
    *,
    gang: str | None = None,
    size: int | str | None = None,
    node: str | None = None,
    requests: Mapping[str, str | int] | None = None,
    phase: str | None = None,
    conditions: Sequence[JSON] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    **metadata: Any,
) -> JSON:
    """A pod of one container asking for `requests` (4 GPUs by default), a member of `gang` (of
    `size`) when given, bound to `node` when given; Running when bound unless `phase` says
    otherwise. `metadata` adds uid, creationTimestamp, resourceVersion, ..."""
    spec: JSON = {"containers": [container(requests or {GPU: 4})]}
    if node:
        spec["nodeName"] = node
    status: JSON = {"phase": phase or ("Running" if node else "Pending")}
    if conditions is not None:
        status["conditions"] = list(conditions)
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            **metadata,
            "labels": {**({GANG_LABEL: gang} if gang else {}), **(labels or {})},
            "annotations": {
                **({GANG_SIZE_ANNOTATION: str(size)} if size is not None else {}),
                **(annotations or {}),
            },
        },
        "spec": spec,
        "status": status,
    }


def podset(
    count: int,
    name: str = "main",
    *,
    requests: Mapping[str, str | int] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JSON:
    """A podSet of `count` pods of one container asking for `requests` (4 GPUs by default)."""
    template: JSON = {"spec": {"containers": [container(requests or {GPU: 4})]}}
    if annotations is not None:
        template["metadata"] = {"annotations": dict(annotations)}
    return {"name": name, "count": count, "template": template}


def check_state(
    name: str = "gang",
    state: str = "Pending",
    *,
    pinned: Mapping[str, str] | None = None,
    podsets: Sequence[str] = ("main",),
    **fields: Any,
) -> JSON:
    """An admission check's entry in a Workload's status; `pinned` is the nodeSelector of its
    podSetUpdate for each of `podsets`."""
    entry: JSON = {"name": name, "state": state, **fields}
    if pinned is not None:
        entry["podSetUpdates"] = [{"name": ps, "nodeSelector": dict(pinned)} for ps in podsets]
    return entry


def workload(
    name: str = "wl",
    namespace: str = "ns",
    *podsets: JSON,
    queue: str | None = None,
    reserved_by: str | None = None,
    conditions: Sequence[JSON] = (),
    checks: Sequence[JSON] = (),
    **metadata: Any,
) -> JSON:
    """A Kueue Workload of `podsets` (none: no spec) in `queue`; with quota reserved by ClusterQueue
    `reserved_by` (its podSetAssignments: every podSet whole), `conditions` and the admission
    `checks`' entries in its status when given. `metadata` adds uid, resourceVersion,
    annotations, ownerReferences, ..."""
    wl: JSON = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, **metadata},
    }
    spec: JSON = {
        **({"queueName": queue} if queue else {}),
        **({"podSets": list(podsets)} if podsets else {}),
    }
    if spec:
        wl["spec"] = spec
    status: JSON = {}
    if reserved_by is not None:
        assignments = [{"name": ps["name"], "count": ps["count"]} for ps in podsets]
        status["admission"] = {"clusterQueue": reserved_by, "podSetAssignments": assignments}
    if checks:
        status["admissionChecks"] = list(checks)
    if conditions:
        status["conditions"] = list(conditions)
    if status:
        wl["status"] = status
    return wl


def admitted_by_check(name: str, namespace: str, podset: JSON, check: JSON, **metadata: Any) -> JSON:
    """A Workload of one podset with quota reserved by ClusterQueue "cq" and the admission
    check's entry `check` (`check_state`): what our check admitted, as the caches hold it."""
    return workload(
        name,
        namespace,
        podset,
        reserved_by="cq",
        conditions=[condition("QuotaReserved")],
        checks=[check],
        **metadata,
    )
