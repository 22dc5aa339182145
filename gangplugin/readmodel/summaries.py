"""Every gang as a person is told about it (`gangctl get`, the gRPC API, the console): its job,
queue, size, phase, pods, the domain it holds and what its check says, as typed values read
from the read model. A gang is a Workload that passes our check (or, on a MultiKueue manager,
Kueue's MultiKueue check), or the pods that share a gangplugin.io/gang label outside Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gangplugin.core.dispatch import DispatchRecord
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import Phase, Pods, WorkloadState, gang_domain, pod_gang_phase, workload_phase
from gangplugin.core.names import BIND_MODE_LABEL, DISPATCH_ANNOTATION
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import parse_time, to_seconds
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube.client import JSON
from gangplugin.readmodel.model import ReadModel
from gangplugin.readmodel.records import PodRecord


class GangKind(StrEnum):
    WORKLOAD = "Workload"
    POD_GANG = "PodGang"  # pods sharing a gang label outside Kueue


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """A job by its API group (empty: the core group), kind and name, as in an ownerReference."""

    group: str
    kind: str
    name: str

    def owns(self, other: Owner) -> bool:
        """Whether `other` (kind in any case, group only when given) names this job."""
        return (
            self.name == other.name
            and self.kind.lower() == other.kind.lower()
            and (not other.group or self.group == other.group)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSummary:
    namespace: str
    name: str  # the Workload's name, or the gang label of a pod gang
    kind: GangKind
    gang_id: str
    phase: Phase
    pods: Pods
    domain: tuple[str, str] | None  # (level label, value)
    created: str  # RFC 3339, as the object has it
    created_at: float | None
    local_queue: str = ""
    cluster_queue: str = ""
    admission_check: str = ""
    check_state: CheckState | None = None
    message: str = ""
    retry_count: int = 0
    owner: Owner | None = None
    bind_mode: str = ""  # Ungate, Extender or PodGroup ("" on a MultiKueue manager)
    dispatched: bool = False  # on a MultiKueue manager: its pods run in a worker cluster


def owner_of(wl: Mapping[str, Any]) -> Owner | None:
    """The job that owns a Workload: its controller ownerReference (Kueue sets the job as one)."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            group = str(ref.get("apiVersion") or "").rpartition("/")[0]
            return Owner(group=group, kind=str(ref.get("kind") or ""), name=str(ref.get("name") or ""))
    return None


def dispatch_of(wl: Mapping[str, Any]) -> tuple[DispatchRecord, str]:
    """A manager Workload's dispatch record (gangplugin.io/dispatch; empty when it has none or
    it cannot be read) and the worker it runs in (status.clusterName) or is nominated to."""
    raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(DISPATCH_ANNOTATION)
    try:
        record = DispatchRecord.from_dict(orjson.loads(raw)) if raw else DispatchRecord()
    except orjson.JSONDecodeError:
        record = DispatchRecord()
    status = wl.get("status") or {}
    nominated = status.get("nominatedClusterNames") or []
    return record, str(status.get("clusterName") or (nominated[0] if len(nominated) == 1 else ""))


def _created_at(text: str) -> float | None:
    try:
        return float(to_seconds(parse_time(text, "creationTimestamp")))
    except InputError:
        return None


def count(pods: Sequence[PodRecord], total: int) -> Pods:
    bound = [p for p in pods if p.placed_on is not None]
    return Pods(total, len(bound), sum(1 for p in bound if p.ready))


class Summaries:
    """The gangs of one read model, summarized."""

    def __init__(self, model: ReadModel) -> None:
        self.model = model

    def domain(
        self, pinned: Mapping[str, str], pods: Sequence[PodRecord], levels: tuple[str, ...]
    ) -> tuple[str, str] | None:
        labels = []
        for p in pods:
            node = self.model.nodes.get(p.placed_on) if p.placed_on else None
            if node is not None:
                labels.append(node.labels)
        return gang_domain(pinned, labels, levels)

    def workload(self, wl: JSON) -> GangSummary | None:
        """The gang of a Workload that passes our check, or (on a MultiKueue manager) Kueue's
        MultiKueue check; None for other Workloads."""
        model = self.model
        ours = model.our_checks()
        check = model.expected_check(wl, ours)
        dispatched = check is None
        if check is None:
            check = model.expected_check(wl, dict.fromkeys(model.checks.multikueue()))
            if check is None:
                return None
        record = model.record(wl)
        pods = [p for p in model.gang_pods(record.namespace, record.gang_id) if p.active]
        counts = count(pods, record.size)
        entry = check.entry
        phase = workload_phase(
            WorkloadState(
                active=record.active,
                finished=record.finished,
                quota_reserved=record.quota_reserved,
                admitted=record.admitted,
                evicted=record.evicted,
                check_state=entry.state if entry is not None else None,
            ),
            counts,
        )
        pinned: dict[str, str] = {}
        bind_mode = ""
        for upd in entry.pod_set_updates if entry is not None else ():
            pinned.update(upd.get("nodeSelector") or {})
            bind_mode = bind_mode or str((upd.get("labels") or {}).get(BIND_MODE_LABEL) or "")
        levels = DEFAULT_LEVELS
        try:  # what cannot be used, the check's message says
            policy = model.policy(check.policy)
            bind_mode = bind_mode or policy.bind_mode
            levels = model.levels(policy)
        except InputError:
            pass
        created = str((wl.get("metadata") or {}).get("creationTimestamp") or "")
        return GangSummary(
            namespace=record.namespace,
            name=record.name,
            kind=GangKind.WORKLOAD,
            gang_id=record.gang_id,
            phase=phase,
            pods=counts,
            domain=self.domain(pinned, pods, levels),
            created=created,
            created_at=_created_at(created),
            local_queue=record.queue_name,
            cluster_queue=model.cluster_queue_of(wl),
            admission_check=check.name,
            check_state=entry.state if entry is not None else None,
            message=entry.message if entry is not None else "",
            retry_count=entry.retry_count if entry is not None else 0,
            owner=owner_of(wl),
            # a dispatched gang's bindMode is its worker's (the manager has no nodes)
            bind_mode="" if dispatched else bind_mode,
            dispatched=dispatched,
        )

    def pod_gang(self, namespace: str, gang: str) -> GangSummary | None:
        """The pods sharing a gang label outside Kueue (None: no active pod has it)."""
        active = [p for p in self.model.gang_pods(namespace, gang) if p.active]
        if not active:
            return None
        sizes = [p.gang_size for p in active if p.gang_size is not None]
        counts = count(active, max(sizes) if sizes else len(active))
        oldest = min(active, key=lambda p: p.created)
        return GangSummary(
            namespace=namespace,
            name=gang,
            kind=GangKind.POD_GANG,
            gang_id=gang,
            phase=pod_gang_phase(counts),
            pods=counts,
            domain=self.domain({}, active, DEFAULT_LEVELS),
            created=oldest.created,
            created_at=_created_at(oldest.created),
            bind_mode="Extender",  # pod gangs outside Kueue always go through the extender
        )

    def find(self, namespace: str, name: str) -> tuple[GangSummary, JSON | None] | None:
        """A gang by name: the Workload of that name when it is a gang, else the pod gang."""
        wl = self.model.workloads.get(f"{namespace}/{name}")
        if wl is not None and (found := self.workload(wl)) is not None:
            return found, wl
        if self.model.workload_of_gang(namespace, name) is not None:
            return None  # the pods of a Workload's gang are not a pod gang of their own
        pods = self.pod_gang(namespace, name)
        return None if pods is None else (pods, None)

    def owned(self, namespace: str, owner: Owner) -> list[tuple[GangSummary, JSON]]:
        """The gangs of the Workloads `owner` owns in the namespace, by Workload name."""
        out = []
        for wl in self.model.workloads.items():
            job = owner_of(wl) if wl["metadata"].get("namespace") == namespace else None
            if job is not None and job.owns(owner) and (g := self.workload(wl)) is not None:
                out.append((g, wl))
        return sorted(out, key=lambda found: found[0].name)

    def all(self, namespace: str = "") -> list[GangSummary]:
        """Every gang (of one namespace, when given), by namespace and name."""
        out = []
        for wl in self.model.workloads.items():
            if namespace and wl["metadata"].get("namespace") != namespace:
                continue
            if (g := self.workload(wl)) is not None:
                out.append(g)
        for ns, gang in self.model.index.gangs():
            if (namespace and ns != namespace) or self.model.workload_of_gang(ns, gang) is not None:
                continue
            if (g := self.pod_gang(ns, gang)) is not None:
                out.append(g)
        return sorted(out, key=lambda g: (g.namespace, g.name))
