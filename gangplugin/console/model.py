"""What the console's pages show, as typed values: exactly what a page needs, nothing more.

A `ConsoleSource` (`source.py`) gives these; the pages (`views.py`, the templates) only read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gangplugin.core.gangs import Phase, Pods
from gangplugin.core.plans import Status, TargetResource


class Topic(StrEnum):
    """What changed, as the pages follow it: each live region of a page listens to one."""

    MAP = "map"
    GANGS = "gangs"
    QUOTA = "quota"
    POLICIES = "policies"


# -- the cluster map ------------------------------------------------------------------------------


class NodeState(StrEnum):
    """How a node is drawn; the first that holds wins, in this order."""

    NOT_READY = "not-ready"
    CORDONED = "cordoned"
    IN_USE = "in-use"  # pods of a gang, or other pods, run there
    SPARE = "spare"  # idle and held back to replace a failed node of a gang in its UltraServer
    FREE = "free"


@dataclass(frozen=True, slots=True)
class GangRef:
    """A gang with pods on a node."""

    namespace: str
    name: str  # the gang (its Workload's name, or a pod gang's label)
    job: str  # "Kind/name" of the job that owns it ("" for a pod gang)
    pods: int  # its pods on this node


@dataclass(frozen=True, slots=True)
class MapNode:
    name: str
    state: NodeState
    gangs: tuple[GangRef, ...] = ()
    other_pods: int = 0  # active pods of no gang
    gpus: int = 0
    gpus_used: int = 0


@dataclass(frozen=True, slots=True)
class MapDomain:
    """One domain of a topology level (an UltraServer, a network layer, a zone) with the
    domains under it, or, at the narrowest level, its nodes."""

    level: str  # the node label
    value: str
    children: tuple[MapDomain, ...] = ()
    nodes: tuple[MapNode, ...] = ()
    #: An UltraServer's room: how many whole nodes one gang can still get in it (spares kept).
    largest_gang: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterMap:
    domains: tuple[MapDomain, ...]
    spares_per_ultraserver: int
    node_count: int


# -- gangs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangSummary:
    namespace: str
    name: str
    gang_id: str
    job: str  # "Kind/name" of the owning job ("" for a pod gang)
    local_queue: str
    cluster_queue: str
    pods: Pods
    phase: Phase
    domain: tuple[str, str] | None  # (level label, value)
    check_state: str  # the gang check's state ("" when it has none)
    message: str  # the gang check's own message
    retry_count: int
    created: datetime | None
    #: What `gangctl explain` says about it, sentence by sentence.
    explanation: tuple[str, ...]


class Milestone(StrEnum):
    SUBMITTED = "Submitted"
    QUOTA_RESERVED = "Quota reserved"
    PINNED = "Pinned"  # the gang check admitted it into its domain
    ADMITTED = "Admitted"  # Kueue admitted it (the job unsuspended)
    BOUND = "Bound"  # every pod has its node
    READY = "Ready"  # every pod Ready
    REQUEUED = "Requeued"
    NODE_REPLACED = "Node replaced"
    EVENT = "Event"  # any other Event on the gang's Workload


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    at: datetime
    milestone: Milestone
    text: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class GangPod:
    name: str
    podset: str
    node: str  # "" while unbound
    ready: bool


@dataclass(frozen=True, slots=True)
class GangDetail:
    summary: GangSummary
    pods: tuple[GangPod, ...]
    #: What the Workload and its pods record (the latest of each); a page adds the Events.
    milestones: tuple[TimelineEntry, ...]
    workload: str  # the Workload's name ("" for a pod gang): its Events tell the history


# -- quota and plans ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """One resource of one flavor of a ClusterQueue, in canonical units (cpu millicores)."""

    flavor: str
    resource: str
    nominal: int
    used: int
    borrowed: int
    borrowing_limit: int | None
    lending_limit: int | None
    from_plans: bool  # TrainingPlans set its nominalQuota


@dataclass(frozen=True, slots=True)
class QueueUsage:
    name: str
    cohort: str
    teams: tuple[str, ...]  # "namespace/LocalQueue" pointing at it
    resources: tuple[ResourceQuota, ...]
    admitted: int
    pending: int
    next_change: datetime | None  # when a plan feeding it next changes its quota


@dataclass(frozen=True, slots=True)
class PlanBlock:
    index: int
    instance_type: str
    instances: int
    usable: int  # instances that become quota (an UltraServer block keeps its spares)
    zone: str
    start: datetime
    end: datetime
    status: Status
    gives: tuple[tuple[str, int], ...]  # (resource, canonical amount) while Active


@dataclass(frozen=True, slots=True)
class PlanSchedule:
    name: str
    cluster_queue: str
    flavor: str
    target: TargetResource | None
    status: Status | None
    blocks: tuple[PlanBlock, ...]
    next_change: datetime | None
    problem: str = ""  # why the plan cannot be read (it feeds nothing then)


# -- gang policies --------------------------------------------------------------------------------


class PolicyField(StrEnum):
    """The GangPolicy fields the form edits, by their path in the object."""

    READY_TIMEOUT = "spec.readyTimeout"
    UNSCHEDULED_TIMEOUT = "spec.unscheduledTimeout"
    RECOVERY_TIMEOUT = "spec.recoveryTimeout"
    ADMISSION = "spec.admission"
    NODE_FAILURE = "spec.nodeFailure"
    SPARES = "spec.sparesPerUltraServer"
    MAX_REPLACED = "spec.maxReplacedNodes"
    REQUEUE_TIMESTAMP = "spec.requeue.timestamp"
    BACKOFF_BASE = "spec.requeue.backoffBaseSeconds"
    BACKOFF_MAX = "spec.requeue.backoffMaxSeconds"
    BACKOFF_LIMIT = "spec.requeue.backoffLimitCount"
    PREEMPTION = "spec.preemption"
    BIND_MODE = "spec.bindMode"
    TOPOLOGY = "spec.topologyName"


@dataclass(frozen=True, slots=True)
class PolicySettings:
    name: str
    resource_version: str
    values: tuple[tuple[PolicyField, str], ...]  # as written in the object ("" when unset)
    sentences: tuple[str, ...]  # the settings in plain words
    problem: str  # why the controllers cannot use it ("" when they can)
    used_by: tuple[str, ...]  # the ClusterQueues whose check names it

    def value(self, field: PolicyField) -> str:
        return dict(self.values).get(field, "")
