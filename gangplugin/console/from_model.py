"""`ReadModelSource`: the console's `ConsoleSource` over the read model (`gangplugin.readmodel`),
the one typed view of the gang check's world every component reads.

The gangs are the read model's summaries (`gangctl get gangs`' own), a waiting gang's "now" is
the admission pass's own decision (`readmodel.decisions.evaluation`, what `gangctl explain`
prints), the map's room counts the capacity the check promised to admitted gangs as the check
counts it (`ReadModel.promised_snapshot`). The console keeps nothing of its own: what it
derives (the map, the gang rows) is made again once the model tells it of a change
(`derived.Derived`), and the pages are told which topic changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from gangplugin import readmodel
from gangplugin.console.clustermap import GangName, PodOnNode, cluster_map, gpus
from gangplugin.console.derived import FACTOR, FLOOR, Derived
from gangplugin.console.gangs import gang_pods, job_of, milestones, summary_of
from gangplugin.console.model import (
    ClusterMap,
    GangDetail,
    GangSummary,
    PlanSchedule,
    PolicySettings,
    QueueUsage,
    Topic,
)
from gangplugin.console.policies import policy_settings
from gangplugin.console.quota import plan_schedule, queue_usage
from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube.client import JSON
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.readmodel import decisions
from gangplugin.readmodel.model import Config, Follower
from gangplugin.readmodel.records import NodeRecord, PodRecord, WorkloadRecord
from gangplugin.readmodel.summaries import GangKind, Summaries, owner_of
from gangplugin.runtime.components import Runtime

#: Which topics a change of each configuration object may touch (TrainingPlans: see `plans`).
CONFIG_TOPICS: dict[Config, tuple[Topic, ...]] = {
    Config.ADMISSION_CHECK: (Topic.GANGS, Topic.POLICIES),
    Config.GANG_POLICY: (Topic.MAP, Topic.GANGS, Topic.POLICIES),
    Config.TOPOLOGY: (Topic.MAP, Topic.GANGS),
    Config.RESOURCE_FLAVOR: (Topic.MAP,),
    Config.CLUSTER_QUEUE: (Topic.GANGS, Topic.QUOTA, Topic.POLICIES),
    Config.LOCAL_QUEUE: (Topic.GANGS, Topic.QUOTA),
    Config.TRAINING_PLAN: (),
}


class _Pages(Follower):
    """The read model's hooks, as the topics of the pages they touch (run on its dispatcher:
    they only count and tell, the pages do the work when they ask again)."""

    def __init__(self, changed: Callable[[Topic], None]) -> None:
        self.changed = changed

    def _tell(self, *topics: Topic) -> None:
        for topic in topics:
            self.changed(topic)

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        self._tell(Topic.MAP, Topic.GANGS, Topic.QUOTA)

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        self._tell(Topic.MAP, Topic.GANGS)

    def node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        self._tell(Topic.MAP)  # not a heartbeat: the model tells only changes it reads

    def config(self, kind: Config, name: str, present: bool) -> None:
        self._tell(*CONFIG_TOPICS[kind])


class ReadModelSource:
    """See the module docstring. Made at `setup` (before the caches start). `floor`, `factor`:
    how often a derived value may be made again (`derived.Derived`)."""

    def __init__(self, runtime: Runtime, floor: float = FLOOR, factor: float = FACTOR) -> None:
        self.model = model = readmodel.of(runtime)
        self.summaries = Summaries(model)
        # TrainingPlans as stored (the model keeps only those that parse): one that does not is
        # shown with why. The same cache the gRPC API's PlanService reads.
        self.plan_objects = runtime.informer(TRAINING_PLANS)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Topic], None]] = []
        self._derived: dict[Topic, Derived[Any]] = {
            Topic.MAP: Derived(self._make_map, lambda: self._changed(Topic.MAP), floor, factor),
            Topic.GANGS: Derived(self._make_gangs, lambda: self._changed(Topic.GANGS), floor, factor),
        }
        model.follow(_Pages(self._changed))
        self.plan_objects.add_handler(lambda *_: self._changed(Topic.QUOTA), runtime.dispatcher("console"))

    def _changed(self, topic: Topic) -> None:
        if topic in self._derived:
            self._derived[topic].changed()
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(topic)

    def subscribe(self, listener: Callable[[Topic], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    # -- the map --------------------------------------------------------------------------------

    def cluster_map(self) -> ClusterMap:
        cmap: ClusterMap = self._derived[Topic.MAP].get()
        return cmap

    def _spares(self) -> int:
        """Spares the map shows per UltraServer: the most any GangPolicy keeps."""
        most = 0
        for obj in self.model.policies.items():
            try:
                most = max(
                    most, self.model.policy(str(obj["metadata"]["name"])).placement.spares_per_ultraserver
                )
            except InputError:
                continue
        return most

    def _make_map(self) -> ClusterMap:
        model = self.model
        on_node: dict[str, list[PodOnNode]] = {}
        for pod in model.pods.items():
            if pod.placed_on is not None and pod.bound is not None:
                on_node.setdefault(pod.placed_on, []).append(
                    PodOnNode(pod.namespace, pod.gang or "", gpus(pod.bound.requests))
                )
        names = {
            (str(wl["metadata"].get("namespace", "")), gang_id(wl["metadata"]["name"])): GangName(
                str(wl["metadata"]["name"]), job_of(owner_of(wl))
            )
            for wl in model.workloads.items()
        }
        return cluster_map(model.promised_snapshot(DEFAULT_LEVELS), on_node, names, self._spares())

    # -- gangs ----------------------------------------------------------------------------------

    def gangs(self) -> Sequence[GangSummary]:
        gangs: tuple[GangSummary, ...] = self._derived[Topic.GANGS].get()
        return gangs

    def _make_gangs(self) -> tuple[GangSummary, ...]:
        # a row says what explain says without the next pass's decision (each is a pass's work)
        rows = []
        for g in self.summaries.all():
            wl = self.model.workloads.get(f"{g.namespace}/{g.name}") if g.kind is GangKind.WORKLOAD else None
            rows.append(summary_of(g, decisions.explained(self.model, g, wl, None)))
        return tuple(rows)

    def gang(self, namespace: str, name: str) -> GangDetail | None:
        found = self.summaries.find(namespace, name)
        if found is None:
            return None
        g, wl = found
        summary = summary_of(g, decisions.explained(self.model, g, wl, time.time()))
        pods = self.model.gang_pods(namespace, g.gang_id)
        return GangDetail(
            summary=summary,
            pods=gang_pods(pods),
            milestones=milestones(wl, g.admission_check, summary, pods) if wl is not None else (),
            workload=g.name if wl is not None else "",
        )

    # -- quota, plans, policies -----------------------------------------------------------------

    def queues(self, now: datetime) -> Sequence[QueueUsage]:
        plans = [p for p in self.model.plans.items() if p is not None]
        lqs = self.model.local_queues.items()
        cqs = sorted(self.model.cluster_queues.items(), key=lambda c: str(c["metadata"]["name"]))
        return tuple(queue_usage(cq, lqs, plans, now) for cq in cqs)

    def plans(self, now: datetime) -> Sequence[PlanSchedule]:
        objs = sorted(self.plan_objects.items(), key=lambda p: str(p["metadata"]["name"]))
        return tuple(plan_schedule(obj, now) for obj in objs)

    def policies(self) -> Sequence[PolicySettings]:
        checks, cqs = self.model.admission_checks.items(), self.model.cluster_queues.items()
        objs = sorted(self.model.policies.items(), key=lambda p: str(p["metadata"]["name"]))
        return tuple(policy_settings(obj, checks, cqs) for obj in objs)

    def policy_object(self, name: str) -> JSON | None:
        obj = self.model.policies.get(name)
        return None if obj is None else dict(obj)
