"""The systems the bench runs the same gangs through, each on a local cluster of its own: which
local-cluster components it needs, what it sets up once (queues, priorities, policies), and the
objects one gang is submitted as, configured as each system's docs say:

- `gangplugin`: a Kueue Job through a ClusterQueue with our gang check (GangPolicy `bindMode:
  Ungate`, failed nodes replaced, no spares), `gangplugin.io/required-topology` or the slice
  annotations on the pod template; kube-scheduler binds the pinned pods (no extender call);
- `kueue-tas`: the same Kueue and Job through a ClusterQueue whose flavor names the Topology
  (`kueue-tas` component), `kueue.x-k8s.io/podset-required-topology` or
  `podset-slice-required-topology` with `podset-slice-size`;
- `volcano`: a Volcano Job, `minAvailable` all its pods, `networkTopology` hard at tier 1 (one
  UltraServer's HyperNode), slices as a task's `partitionPolicy`, in the `default` queue;
- `kai`: a Job with `schedulerName: kai-scheduler` in `default-queue`, `kai.scheduler/topology`
  and `-required-placement` and `batch-min-member` (all its pods) on the Job; slices as a
  PodGroup of SubGroups written by hand, one Job per slice (`skip-podgrouper`).

Both Kueue systems get a ClusterQueue quota of twice the GB200 nodes (gangs wait for nodes, not
quota). Every pod asks for 4 GPUs (a whole GB200 node) and carries GANG_LABEL. Priorities, as
each system names them: Kueue's WorkloadPriorityClasses and Volcano's PriorityClasses
`bench-low` (100) and `bench-high` (1000); KAI's own classes `train` (50) and
`build-preemptible` (75), both below 100 so preemptible within its quota-less default queue."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from _peers import noop_check
from _peers.watch import GANG_LABEL
from _peers.workload import Gang
from gangplugin.kube.client import CLUSTER_QUEUES, JOBS, LOCAL_QUEUES, NAMESPACES, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS
from gangplugin.kube.shape import INSTANCE_TYPE, ULTRASERVER
from gangplugin.localcluster.components import kai
from gangplugin.localcluster.components.kueue_tas import flavor_name
from gangplugin.localcluster.components.operators import TOPOLOGY
from gangplugin.localcluster.components.volcano import VOLCANO
from tests.support.objects import (
    WORKLOAD_PRIORITY_CLASSES,
    admission_check,
    cluster_queue,
    gang_policy,
    indexed_job,
    local_queue,
    resource_flavor,
    trainer_container,
    workload_priority_class,
)

NS = "bench"
GPU = "nvidia.com/gpu"
GB200 = "ml.p6e-gb200.36xlarge"
INDEX = "batch.kubernetes.io/job-completion-index"
PRIORITIES = {"bench-low": 100, "bench-high": 1000}
FIELD_MANAGER = "bench-peers"


# Every system's pods leave a NotReady or unreachable node after this long (kube-apiserver's
# default is 300 s): recovery then compares how each system replaces a lost pod, not defaults.
NOT_READY_TOLERATION_SECONDS = 30
TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": NOT_READY_TOLERATION_SECONDS,
    }
    for taint in ("not-ready", "unreachable")
]


def pod_template(gang: Gang, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """The gang's pod: 4 GPUs on a GB200 node, labelled with its gang, leaving a failed node
    after NOT_READY_TOLERATION_SECONDS."""
    return {
        "metadata": {"labels": {GANG_LABEL: gang.name}, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {INSTANCE_TYPE: GB200},
            "terminationGracePeriodSeconds": 0,
            "tolerations": TOLERATIONS,
            "containers": [trainer_container(gang.gpus, cpu="8", memory="64Gi")],
            **spec,
        },
    }


def batch_job(
    gang: Gang, labels: dict[str, str], annotations: dict[str, str], suspend: bool, **spec: Any
) -> dict[str, Any]:
    """An Indexed Job of the gang's pods; a pod lost to a failed node is made again (same index).
    Its retries are counted per index (`backoffLimitPerIndex`): the Job controller makes a lost
    pod again after its 10 s backoff once, where a Job-wide count doubles it with every pod the
    Job lost (3 nodes: 40 s), for every system whose gangs are Jobs alike."""
    template = pod_template(gang, annotations, **spec)
    return indexed_job(
        gang.name, NS, gang.pods, template, labels=labels, suspend=suspend, backoffLimitPerIndex=10_000
    )


def job_index(pod: dict[str, Any]) -> int:
    meta = pod["metadata"]
    return int((meta.get("annotations") or {}).get(INDEX) or (meta.get("labels") or {}).get(INDEX, -1))


def ensure(client: Client, res: Resource, obj: dict[str, Any]) -> None:
    client.apply(res, obj, field_manager=FIELD_MANAGER)


def namespace(client: Client) -> None:
    ensure(client, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})


@dataclass(frozen=True)
class Capacity:
    """What the GB200 nodes hold, for queues and quotas."""

    nodes: int
    gpus: int
    cpu: int
    memory_gi: int


@dataclass(frozen=True)
class System:
    name: str
    components: tuple[str, ...]
    setup: Callable[[Client, Capacity], None]
    # What one gang is submitted as, in creation order.
    objects: Callable[[Gang], list[tuple[Resource, dict[str, Any]]]]
    index_of: Callable[[dict[str, Any]], int] = job_index
    # `gangplugin serve --components`, when gangplugin runs
    gangplugin_components: str = ""
    # Waits until what `setup` made is usable (a queue Active).
    ready: Callable[[Client], None] = field(default=lambda _c: None)
    # Gangs are Kueue Workloads: the bench times their hops (bench/_peers/hops.py).
    kueue: bool = False
    # The parts that say something of this system (None: every part).
    parts: tuple[str, ...] | None = None
    # A process of the bench's own the system needs, running while its cluster runs.
    controller: Callable[[Path], contextlib.AbstractContextManager[None]] | None = None


# -- Kueue (gangplugin and Kueue TAS) ------------------------------------------------------------

QUEUE = "bench"
BASE = ("kube-controller-manager", "kube-scheduler", "kwok")


def kueue_queue(client: Client, cap: Capacity, flavor: str, checks: list[str]) -> None:
    """ClusterQueue and LocalQueue `bench`, quota twice the GB200 nodes' (never the limit: the
    gangs wait for nodes, not quota), preempting lower priorities within it; the bench's
    WorkloadPriorityClasses."""
    namespace(client)
    for name, value in PRIORITIES.items():
        ensure(client, WORKLOAD_PRIORITY_CLASSES, workload_priority_class(name, value))
    cq = cluster_queue(
        QUEUE,
        flavor,
        2 * cap.gpus,
        cpu=str(2 * cap.cpu),
        memory=f"{2 * cap.memory_gi}Gi",
        checks=checks,
        queueingStrategy="BestEffortFIFO",
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    ensure(client, CLUSTER_QUEUES, cq)
    ensure(client, LOCAL_QUEUES, local_queue(QUEUE, NS))


def queue_active(client: Client) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            cq = client.get(CLUSTER_QUEUES, QUEUE)
        except ApiError:
            cq = {}
        if is_true(cq, "Active"):
            return
        time.sleep(0.5)
    raise RuntimeError(f"ClusterQueue {QUEUE} not Active within 120 s: {cq.get('status')}")


def kueue_labels(gang: Gang) -> dict[str, str]:
    labels = {"kueue.x-k8s.io/queue-name": QUEUE}
    if gang.priority:
        labels["kueue.x-k8s.io/priority-class"] = f"bench-{gang.priority}"
    return labels


# A flavor of the GB200 nodes without a Topology (the checks place gangs, not Kueue).
PLAIN_FLAVOR = resource_flavor("bench-gb200", GB200)

# gangplugin

# Ungate, the default, written out; no spares: every system has the same nodes for gangs.
GANG_POLICY = gang_policy("bench", readyTimeout="10m", bindMode="Ungate", nodeFailure="ReplaceFromSpare")


def gangplugin_setup(client: Client, cap: Capacity) -> None:
    ensure(client, GANG_POLICIES, GANG_POLICY)
    ensure(client, ADMISSION_CHECKS, admission_check("bench-gang", policy="bench"))
    ensure(client, RESOURCE_FLAVORS, PLAIN_FLAVOR)
    kueue_queue(client, cap, PLAIN_FLAVOR["metadata"]["name"], ["bench-gang"])


def topology_annotations(gang: Gang, prefix: str) -> dict[str, str]:
    """The gang's topology request in the annotations of gangplugin (`gangplugin.io/`) or Kueue
    TAS (`kueue.x-k8s.io/podset-`): the same words after the prefix."""
    if gang.slice_size:
        return {f"{prefix}slice-size": str(gang.slice_size), f"{prefix}slice-required-topology": ULTRASERVER}
    if gang.required:
        return {f"{prefix}required-topology": ULTRASERVER}
    return {f"{prefix}preferred-topology": ULTRASERVER}


def gangplugin_job(gang: Gang) -> list[tuple[Resource, dict[str, Any]]]:
    annotations = topology_annotations(gang, "gangplugin.io/")
    return [(JOBS, batch_job(gang, kueue_labels(gang), annotations, suspend=True))]


# Kueue TAS


def kueue_tas_setup(client: Client, cap: Capacity) -> None:
    kueue_queue(client, cap, flavor_name(GB200), [])


def kueue_tas_job(gang: Gang) -> list[tuple[Resource, dict[str, Any]]]:
    annotations = topology_annotations(gang, "kueue.x-k8s.io/podset-")
    return [(JOBS, batch_job(gang, kueue_labels(gang), annotations, suspend=True))]


# The floor: Kueue with a check that answers Ready at once (bench/_peers/noop_check.py)

BENCH = Path(__file__).resolve().parents[1]


def noop_check_setup(client: Client, cap: Capacity) -> None:
    ensure(client, ADMISSION_CHECKS, admission_check(noop_check.CHECK, controller=noop_check.CONTROLLER))
    ensure(client, RESOURCE_FLAVORS, PLAIN_FLAVOR)
    kueue_queue(client, cap, PLAIN_FLAVOR["metadata"]["name"], [noop_check.CHECK])


def noop_check_job(gang: Gang) -> list[tuple[Resource, dict[str, Any]]]:
    """A Job of the gang's pods asking for no topology: the check decides nothing."""
    return [(JOBS, batch_job(gang, kueue_labels(gang), {}, suspend=True))]


@contextlib.contextmanager
def noop_check_process(kubeconfig: Path) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-m", "_peers.noop_check", str(kubeconfig)], cwd=BENCH)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# Volcano

VCJOBS = Resource("batch.volcano.sh/v1alpha1", "jobs")
PRIORITY_CLASSES = Resource("scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
HARD_ULTRASERVER = {"mode": "hard", "highestTierAllowed": 1}  # tier 1: one UltraServer's HyperNode


def volcano_setup(client: Client, cap: Capacity) -> None:
    namespace(client)
    for name, value in PRIORITIES.items():
        pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        ensure(client, PRIORITY_CLASSES, {**pc, "value": value})


def volcano_job(gang: Gang) -> list[tuple[Resource, dict[str, Any]]]:
    priority = {"priorityClassName": f"bench-{gang.priority}"} if gang.priority else {}
    task: dict[str, Any] = {
        "name": "w",
        "replicas": gang.pods,
        "template": pod_template(gang, {}, schedulerName="volcano", **priority),
    }
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": "default",
        "minAvailable": gang.pods,
        "maxRetry": 10_000,
        "tasks": [task],
        **priority,
    }
    if gang.slice_size:
        parts = gang.pods // gang.slice_size
        task["partitionPolicy"] = {
            "totalPartitions": parts,
            "partitionSize": gang.slice_size,
            "minPartitions": parts,
            "networkTopology": HARD_ULTRASERVER,
        }
    elif gang.required:
        spec["networkTopology"] = HARD_ULTRASERVER
    else:
        spec["networkTopology"] = {"mode": "soft"}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": gang.name, "namespace": NS},
    }
    return [(VCJOBS, {**job, "spec": spec})]


def volcano_index(pod: dict[str, Any]) -> int:
    return int((pod["metadata"].get("annotations") or {}).get("volcano.sh/task-index", -1))


# KAI Scheduler

KAI_PODGROUPS = Resource("scheduling.run.ai/v2alpha2", "podgroups")
KAI_PRIORITY = {"low": "train", "high": "build-preemptible"}  # the chart's classes, both preemptible
OFFSET_LABEL = "bench.gangplugin.io/first-index"


def kai_setup(client: Client, cap: Capacity) -> None:
    namespace(client)


def kai_objects(gang: Gang) -> list[tuple[Resource, dict[str, Any]]]:
    priority = {"priorityClassName": KAI_PRIORITY[gang.priority]} if gang.priority else {}
    if not gang.slice_size:
        placement = "required" if gang.required else "preferred"
        annotations = {
            "kai.scheduler/topology": TOPOLOGY,
            f"kai.scheduler/topology-{placement}-placement": ULTRASERVER,
            # a batch Job's PodGroup waits for one pod unless told otherwise: the whole gang
            "kai.scheduler/batch-min-member": str(gang.pods),
        }
        job = batch_job(
            gang,
            {kai.QUEUE_LABEL: kai.QUEUE},
            {},
            suspend=False,
            schedulerName=kai.SCHEDULER_NAME,
            **priority,
        )
        job["metadata"]["annotations"] = annotations
        return [(JOBS, job)]
    # slices: SubGroups of a PodGroup written by hand, each slice's pods from a Job of its own
    slices = gang.pods // gang.slice_size
    constraint = {"topology": TOPOLOGY, "requiredTopologyLevel": ULTRASERVER}
    pg_spec: dict[str, Any] = {
        "queue": kai.QUEUE,
        "minSubGroup": slices,
        "subGroups": [
            {"name": f"slice-{i}", "minMember": gang.slice_size, "topologyConstraint": constraint}
            for i in range(slices)
        ],
        **priority,
    }
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": NS},
    }
    out: list[tuple[Resource, dict[str, Any]]] = [(KAI_PODGROUPS, {**pg, "spec": pg_spec})]
    for i in range(slices):
        part = replace(gang, name=gang.name, pods=gang.slice_size)
        job = batch_job(
            part,
            {kai.QUEUE_LABEL: kai.QUEUE},
            {"pod-group-name": gang.name},
            suspend=False,
            schedulerName=kai.SCHEDULER_NAME,
            **priority,
        )
        job["metadata"]["name"] = f"{gang.name}-{i}"
        job["metadata"]["annotations"] = {"kai.scheduler/skip-podgrouper": "true"}
        labels = job["spec"]["template"]["metadata"]["labels"]
        labels.update({"kai.scheduler/subgroup-name": f"slice-{i}", OFFSET_LABEL: str(i * gang.slice_size)})
        out.append((JOBS, job))
    return out


def kai_index(pod: dict[str, Any]) -> int:
    return int((pod["metadata"].get("labels") or {}).get(OFFSET_LABEL, 0)) + job_index(pod)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System(
            "gangplugin",
            (*BASE, "kueue", "gangplugin"),
            gangplugin_setup,
            gangplugin_job,
            gangplugin_components="admission,ungater,webhook",
            ready=queue_active,
            kueue=True,
        ),
        System(
            "kueue-tas",
            (*BASE, "kueue", "kueue-tas"),
            kueue_tas_setup,
            kueue_tas_job,
            ready=queue_active,
            kueue=True,
        ),
        System(
            "noop-check",
            (*BASE, "kueue"),
            noop_check_setup,
            noop_check_job,
            ready=queue_active,
            kueue=True,
            # its pods go anywhere: only the times say something, of the burst, stream and big gang
            parts=("burst", "stream", "big"),
            controller=noop_check_process,
        ),
        System(
            "volcano",
            ("kube-controller-manager", "kwok", *VOLCANO),
            volcano_setup,
            volcano_job,
            index_of=volcano_index,
        ),
        System(
            "kai", ("kube-controller-manager", "kwok", *kai.KAI), kai_setup, kai_objects, index_of=kai_index
        ),
    )
}
