"""The simulator's values: a trace's jobs, the replay's settings, and what a replay reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gangplugin.core.placement import Gang, PodSet
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import QueuePreemption

GPU = "nvidia.com/gpu"
#: The namespace of the synthetic pods a replay binds for its gangs.
NAMESPACE = "sim"
#: The simulated ClusterQueue's name when no plan names it.
CLUSTER_QUEUE = "simulated"


@dataclass(frozen=True, slots=True)
class Job:
    """One trace row: `pods` pods of `gpus_per_pod` GPUs, running `runtime` seconds once Ready."""

    key: str
    arrival: float  # seconds from the trace start
    pods: int
    gpus_per_pod: int
    runtime: float
    #: The `gangplugin.io/max-runtime` the job declares (None: none; drains then evict it).
    max_runtime: float | None = None
    required_topology: str | None = None
    preferred_topology: str | None = None
    #: Its Kueue priority (a WorkloadPriorityClass value; Kueue's default 0).
    priority: int = 0
    #: Consecutive pods in slices of this many, each in one domain of `slice_required_topology`.
    slice_size: int | None = None
    slice_required_topology: str | None = None
    #: It checkpoints (`gangplugin.io/checkpointable`): a reserved domain may be cleared of it.
    checkpointable: bool = False

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    def gang(self) -> Gang:
        podset = PodSet(
            "main",
            self.pods,
            {GPU: self.gpus_per_pod},
            required_topology=self.required_topology,
            preferred_topology=self.preferred_topology,
            slice_size=self.slice_size,
            slice_required_topology=self.slice_required_topology,
        )
        return Gang((podset,), f"job-{self.key}")

    def topology(self) -> tuple[str | int | None, ...]:
        """What it asks of the topology: jobs that ask the same compare by size."""
        return (
            self.required_topology,
            self.preferred_topology,
            self.slice_size,
            self.slice_required_topology,
        )


@dataclass(frozen=True, slots=True)
class Settings:
    policy: GangPolicy = field(default_factory=GangPolicy)
    plans: tuple[TrainingPlan, ...] = ()
    #: The instant of trace time 0 (plans are dated).
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    #: Seconds from admission until every pod of a gang is Ready.
    startup_seconds: float = 0.0
    levels: tuple[str, ...] = ()
    #: The simulated ClusterQueue's Kueue `spec.preemption` (one queue, no cohort: only
    #: `withinClusterQueue` applies). Kueue's default preempts nothing.
    preemption: QueuePreemption = field(default_factory=QueuePreemption)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one job. `wait`: arrival to first admission (None: never admitted)."""

    key: str
    gpus: int
    wait: float | None
    end: float | None
    drained: int = 0
    requeued: int = 0
    never_ran: str | None = None
    #: Where it was first admitted: the domain values of its placement, as the check pins them.
    domains: tuple[str, ...] = ()
    #: How many times it was preempted (evicted whole for a gang of higher priority).
    preempted: int = 0


@dataclass(frozen=True, slots=True)
class Sample:
    """The state from `t` until the next sample: GPUs allocated, jobs waiting, GPUs stranded."""

    t: float
    busy_gpus: int
    queued: int
    stranded_gpus: int


@dataclass(frozen=True, slots=True)
class Replay:
    policy: str
    total_gpus: int
    outcomes: tuple[Outcome, ...]
    samples: tuple[Sample, ...]
    #: From the first arrival to the last moment a job stopped running (finished, timed out,
    #: drained, preempted): what the cluster was busy for, not the plans' last block end.
    makespan: float
    busy_gpu_seconds: float
    stranded_gpu_seconds: float
    plan_unused_gpu_seconds: float

    @property
    def gpu_utilization(self) -> float:
        """Busy GPU-seconds over the cluster's GPU-seconds during the makespan."""
        cap = self.total_gpus * self.makespan
        return self.busy_gpu_seconds / cap if cap > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank method; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def scaled(jobs: Sequence[Job], max_gpus_per_pod: int) -> list[Job]:
    """The jobs re-expressed for nodes of `max_gpus_per_pod` GPUs: a pod asking for more is split
    into pods of that size (total GPUs kept), e.g. 8-GPU workers as two 4-GPU pods on GB200."""
    out = []
    for j in jobs:
        if j.gpus_per_pod > max_gpus_per_pod:
            per = j.gpus_per_pod // max_gpus_per_pod if j.gpus_per_pod % max_gpus_per_pod == 0 else None
            if per is not None:
                j = replace(j, pods=j.pods * per, gpus_per_pod=max_gpus_per_pod)
        out.append(j)
    return out
