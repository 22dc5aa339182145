"""What a replay keeps of each job while it runs, and how the check's preemption reads the
replay's admitted jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gangplugin.core.admission import AdmissionDecision, promised_pods
from gangplugin.core.gate import PreemptionState
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import (
    ClusterQueueState,
    Contender,
    Hold,
    PreemptionPlan,
    RunningGang,
    gang_gpus,
)
from gangplugin.core.simulate.model import NAMESPACE, Job
from gangplugin.core.topology import Snapshot


@dataclass(slots=True)
class JobState:
    """Mutable bookkeeping of one job during the replay."""

    job: Job
    gang: Gang
    left: float  # run time still to do
    reserved_at: float | None = None  # quota reserved (None: waiting for quota)
    admitted_at: float | None = None
    attempt: int = 0
    first_admitted: float | None = None
    domains: tuple[str, ...] = ()
    end: float | None = None
    retries: int = 0
    drained: int = 0
    preempted: int = 0
    reason: str = ""
    rejected: bool = False
    running_since: float | None = None  # pods Ready

    @property
    def quota_reserved_at(self) -> float:
        assert self.reserved_at is not None
        return self.reserved_at


@dataclass(frozen=True, slots=True)
class Refused:
    """A job placement refused since capacity last came free, and the nodes it was kept off."""

    job: Job
    excluded: frozenset[str]
    decision: AdmissionDecision


def excluded_nodes(gang: Gang) -> frozenset[str]:
    """The nodes a gang was kept off (domains held or reserved for others)."""
    if len(gang.podsets) == 1:
        return gang.podsets[0].excluded_nodes
    return frozenset().union(*(ps.excluded_nodes for ps in gang.podsets))


def dominated(job: Job, excluded: frozenset[str], infeasible: Iterable[Refused]) -> AdmissionDecision | None:
    """The refusal of a job known not to fit since capacity last came free that needs no more
    than `job`, and was kept off no node `job` may use (so `job` cannot fit either: capacity
    only shrinks between releases)."""
    for other in infeasible:
        o = other.job
        if (
            o.pods <= job.pods
            and o.gpus_per_pod <= job.gpus_per_pod
            and o.topology() == job.topology()
            and (other.excluded is excluded or other.excluded <= excluded)
        ):
            return other.decision
    return None


def running_gangs(admitted: Iterable[JobState], cluster_queue: str) -> list[RunningGang]:
    """The admitted jobs as preemption reads them: their pods are the synthetic ones `charge`
    bound."""
    out = []
    for s in admitted:
        assert s.admitted_at is not None
        out.append(
            RunningGang(
                key=s.job.key,
                priority=s.job.priority,
                cluster_queue=cluster_queue,
                created_at=s.job.arrival,
                started_at=s.admitted_at,
                gpus=gang_gpus(s.gang),
                pods=tuple((NAMESPACE, name) for name in promised_pods(s.gang)),
            )
        )
    return out


class SearchedPreemptions(PreemptionState):
    """A simulated pass's preemption state. A victim search is not redone for a gang when
    nothing it reads changed since its last one (`generation`: bumped whenever capacity is
    taken or freed, a gang is marked for eviction or a hold comes or goes): a gang that found
    no victims keeps that answer until then, as the search would give it again."""

    def __init__(
        self,
        holds: dict[str, Hold],
        running: Callable[[], list[RunningGang]],
        queues: Callable[[], Mapping[str, ClusterQueueState]],
        searched: dict[str, tuple[int, PreemptionPlan]],
        generation: Callable[[], int],
    ) -> None:
        super().__init__(holds, running, queues)
        self._searched, self._generation = searched, generation

    def victims(
        self, snapshot: Snapshot, gang: Gang, policy: GangPolicy, contender: Contender
    ) -> PreemptionPlan:
        now = self._generation()
        kept = self._searched.get(contender.key)
        if kept is not None and kept[0] == now:
            return kept[1]
        plan = super().victims(snapshot, gang, policy, contender)
        self._searched[contender.key] = (now, plan)
        return plan
