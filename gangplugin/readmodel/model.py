"""The read model: the one typed view of what the gang check sees, over one set of watch caches
(this cluster's informers, or a MultiKueue worker's connection).

Its handlers run on one dispatcher: they keep its indexes (the pods of each gang and pod group,
the live capacity, each Workload's record) and then call its followers' typed hooks, so a
follower acting on a change reads a model that already holds it. Every question a component
asks about gangs is answered here, as core values: which check of ours a Workload carries and
under which GangPolicy, the queue and admitted order, the admitted gangs not Ready yet (one
Sequential rule), the capacity promised to admitted gangs, the gangs that could never start
whole (`gangs.refuse_late_members`), a gang's pods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from gangplugin.core.admission import AdmissionQueue, QueuedWorkload, admission_queue, gang_id, promise
from gangplugin.core.errors import InputError
from gangplugin.core.placement import Gang
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Snapshot
from gangplugin.core.watchdog import GangObservation
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import CLUSTER_QUEUES, JOBS, JSON, LOCAL_QUEUES, NODES, PODS, WORKLOADS
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, object_key
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)
from gangplugin.readmodel.capacity import LiveCapacity, Promise
from gangplugin.readmodel.checks import Checks, OurCheck
from gangplugin.readmodel.ends import JobDeadline, job_deadline
from gangplugin.readmodel.gangs import Gangs
from gangplugin.readmodel.pods import PodIndex
from gangplugin.readmodel.records import (
    NodeRecord,
    PodRecord,
    WorkloadRecord,
    node_record,
    pod_record,
    workload_record,
)

log = logging.getLogger(__name__)

#: How the model asks for a watch cache: (resource, transform) -> a cache it adds handlers to.
InformerFactory = Callable[..., Informer[Any]]


class Config(StrEnum):
    """The configuration objects whose changes followers hear of by name."""

    ADMISSION_CHECK = "AdmissionCheck"
    GANG_POLICY = "GangPolicy"
    TOPOLOGY = "Topology"
    RESOURCE_FLAVOR = "ResourceFlavor"
    CLUSTER_QUEUE = "ClusterQueue"
    LOCAL_QUEUE = "LocalQueue"
    TRAINING_PLAN = "TrainingPlan"


class Follower:
    """Typed hooks a component adds to the read model (`ReadModel.follow`): each runs on the
    model's dispatcher, after the model holds the change, in the order followers were added.
    A follower overrides the hooks it needs and does little in them (it queues work)."""

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        """A Workload changed (new None: deleted)."""

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        """A pod changed in what the model reads of it (new None: deleted)."""

    def node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        """A node changed in what the model reads of it (not a heartbeat; new None: deleted)."""

    def config(self, kind: Config, name: str, present: bool) -> None:
        """A configuration object changed (present False: deleted)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """A Workload carrying our check: the object (for writes), its record and our check."""

    wl: JSON
    record: WorkloadRecord
    check: OurCheck


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """The Workloads carrying our check in the core's order (`order`), and each one's entry."""

    order: AdmissionQueue
    entries: Mapping[str, Entry]

    def admitted(self) -> list[Entry]:
        """The gangs holding capacity, in admission order."""
        return [self.entries[q.key] for q in self.order.admitted]


class ReadModel:
    def __init__(self, informer: InformerFactory, dispatcher: Dispatcher, *, jobs: bool = False) -> None:
        """`jobs`: keep a cache of batch Jobs' deadlines too (what a reservation reads of how
        long a Job runs; this cluster's model only, not a MultiKueue worker's)."""
        self.dispatcher = dispatcher
        self.workloads: Informer[JSON] = informer(WORKLOADS)
        self.admission_checks: Informer[JSON] = informer(ADMISSION_CHECKS)
        self.policies: Informer[JSON] = informer(GANG_POLICIES)
        self.topologies: Informer[JSON] = informer(TOPOLOGIES)
        self.flavors: Informer[JSON] = informer(RESOURCE_FLAVORS)
        self.cluster_queues: Informer[JSON] = informer(CLUSTER_QUEUES)
        self.local_queues: Informer[JSON] = informer(LOCAL_QUEUES)
        self.plans: Informer[TrainingPlan | None] = informer(TRAINING_PLANS, rec.plan_or_none)
        self.nodes: Informer[NodeRecord] = informer(NODES, node_record)
        self.pods: Informer[PodRecord] = informer(PODS, pod_record)
        self.jobs: Informer[JobDeadline] | None = informer(JOBS, job_deadline) if jobs else None
        self.checks = Checks(self.admission_checks, self.policies, self.topologies)
        self.index = PodIndex()
        self.gangs = Gangs(self.pods, self.index, self.flavors, self.plans)
        self.capacity = LiveCapacity()
        # key -> the Workload object last handled (the cache's own) and its record
        self._records: dict[str, tuple[JSON, WorkloadRecord]] = {}
        self._by_gang: dict[tuple[str, str], str] = {}  # (namespace, gang id) -> Workload key
        self._followers: list[Follower] = []
        self.workloads.add_handler(self._on_workload, dispatcher)
        self.pods.add_handler(self._on_pod, dispatcher)
        self.nodes.add_handler(self._on_node, dispatcher)
        for kind, cache in (
            (Config.ADMISSION_CHECK, self.admission_checks),
            (Config.GANG_POLICY, self.policies),
            (Config.TOPOLOGY, self.topologies),
            (Config.RESOURCE_FLAVOR, self.flavors),
            (Config.CLUSTER_QUEUE, self.cluster_queues),
            (Config.LOCAL_QUEUE, self.local_queues),
        ):
            cache.add_handler(partial(self._on_config, kind), dispatcher)
        self.plans.add_handler(self._on_plan, dispatcher)

    def follow(self, follower: Follower) -> None:
        """Add a component's hooks (before the caches start: a later one misses their first list)."""
        self._followers.append(follower)

    # -- handlers (the model's dispatcher) ---------------------------------------------------------

    def _on_workload(self, _kind: str, old: JSON | None, new: JSON | None) -> None:
        some = new or old
        assert some is not None
        key = object_key(some)
        before = self.record(old) if old is not None else None
        after = workload_record(new) if new is not None else None
        if after is None:
            assert before is not None
            self._records.pop(key, None)
            self._by_gang.pop((before.namespace, before.gang_id), None)
        else:
            assert new is not None
            self._records[key] = (new, after)
            self._by_gang[(after.namespace, after.gang_id)] = key
        for f in self._followers:
            f.workload(before, after)

    def _on_pod(self, _kind: str, old: PodRecord | None, new: PodRecord | None) -> None:
        if old == new:
            return  # nothing the model reads changed (a status field it does not keep)
        with self.capacity.locked():  # a reader under the lock sees both at the same pod
            self.capacity.on_pod(old, new)
            self.index.on_pod(old, new)
        for f in self._followers:
            f.pod(old, new)

    def _on_node(self, _kind: str, old: NodeRecord | None, new: NodeRecord | None) -> None:
        if old == new:
            return  # a heartbeat
        self.capacity.on_node(old, new)
        for f in self._followers:
            f.node(old, new)

    def _on_config(self, kind: Config, _event: str, old: JSON | None, new: JSON | None) -> None:
        some = new or old
        assert some is not None
        for f in self._followers:
            f.config(kind, object_key(some), new is not None)

    def _on_plan(self, _event: str, old: TrainingPlan | None, new: TrainingPlan | None) -> None:
        some = new or old
        for f in self._followers:
            f.config(Config.TRAINING_PLAN, some.name if some is not None else "", new is not None)

    # -- Workloads -----------------------------------------------------------------------------------

    def record(self, wl: Mapping[str, Any]) -> WorkloadRecord:
        """The Workload's record: the one its handler parsed when the cache's object is asked
        about (once per version); parsed again for any other copy (one as a write will make it)."""
        meta = wl.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        found = self._records.get(f"{ns}/{name}" if ns else str(name))
        if found is not None and found[0] is wl:
            return found[1]
        return workload_record(wl)

    def workload(self, key: str) -> tuple[JSON, WorkloadRecord] | None:
        wl = self.workloads.get(key)
        return None if wl is None else (wl, self.record(wl))

    def workload_of_gang(self, namespace: str, gang: str) -> str | None:
        """The key ("ns/name") of the Workload whose gang id is `gang`, as the handlers have seen it."""
        return self._by_gang.get((namespace, gang))

    def _workload_of_gang_now(self, namespace: str, gang: str) -> str | None:
        """`workload_of_gang` read from the cache, which may be ahead of the model's handlers
        (for a reader on another dispatcher, asking about a Workload its handlers have seen)."""
        if self.workloads.get(f"{namespace}/{gang}") is not None:
            return f"{namespace}/{gang}"
        if (key := self._by_gang.get((namespace, gang))) is not None:
            return key
        for wl in self.workloads.items():  # a hashed gang id (long name) the handlers lag behind
            meta = wl["metadata"]
            if meta.get("namespace") == namespace and gang_id(meta["name"]) == gang:
                return object_key(wl)
        return None

    # -- our checks ----------------------------------------------------------------------------------

    def our_checks(self) -> dict[str, str | None]:
        """AdmissionCheck name -> GangPolicy name (None: defaults) for checks routed to us."""
        return self.checks.ours()

    def check_of(
        self, wl: Mapping[str, Any], ours: Mapping[str, str | None] | None = None
    ) -> OurCheck | None:
        """Our check on the Workload (`ours`: `our_checks()`, when the caller read it already)."""
        return self.checks.of(self.record(wl), self.our_checks() if ours is None else ours)

    def expected_check(self, wl: Mapping[str, Any], ours: Mapping[str, str | None]) -> OurCheck | None:
        """Our check on the Workload, else the one its ClusterQueue lists (Kueue has not listed
        it on the Workload yet: a gang still waiting for quota)."""
        found = self.checks.of(self.record(wl), ours)
        if found is not None:
            return found
        cq = self.cluster_queue_of(wl)
        return self.checks.of_queue(self.cluster_queues.get(cq) if cq else None, ours)

    def cluster_queue_of(self, wl: Mapping[str, Any]) -> str:
        """The ClusterQueue holding the Workload's quota, else the one its LocalQueue points at."""
        record = self.record(wl)
        if record.cluster_queue:
            return record.cluster_queue
        lq = self.local_queues.get(f"{record.namespace}/{record.queue_name}") if record.queue_name else None
        return str(((lq or {}).get("spec") or {}).get("clusterQueue") or "")

    def policy(self, name: str | None) -> GangPolicy:
        """The GangPolicy by name (defaults for None); InputError when missing or invalid."""
        return self.checks.policy(name)

    def levels(self, policy: GangPolicy) -> tuple[str, ...]:
        return self.checks.levels(policy)

    def policy_of_gang(self, namespace: str, gang: str) -> tuple[GangPolicy, tuple[str, ...]] | None:
        """The policy and topology levels of a gang whose Workload carries our check; None for a
        gang that did not come through it (plain pods). InputError when they cannot be used."""
        key = self._workload_of_gang_now(namespace, gang)
        wl = self.workloads.get(key) if key is not None else None
        found = self.check_of(wl) if wl is not None else None
        return None if found is None else self.checks.settings(found.policy)

    # -- the queue and the admitted ------------------------------------------------------------------

    def queue(self, assumed: Callable[[str, JSON], bool] | None = None) -> Queue:
        """Every Workload carrying our check, in the core's admission order. `assumed`: whether
        the caller has admitted a Workload by a write the cache does not show yet (the pass)."""
        ours = self.our_checks()
        queued: list[QueuedWorkload] = []
        entries: dict[str, Entry] = {}
        for wl in self.workloads.items():
            record = self.record(wl)
            check = self.checks.of(record, ours)
            if check is None or check.entry is None:
                continue
            entries[record.key] = Entry(wl=wl, record=record, check=check)
            queued.append(
                record.queued(
                    check.entry.state, check.policy, assumed=assumed is not None and assumed(record.key, wl)
                )
            )
        return Queue(order=admission_queue(queued), entries=entries)

    def unready(self, policy: str | None) -> tuple[str, ...]:
        """The admitted gangs of that GangPolicy not Ready yet (the Sequential gate)."""
        return self.queue().order.unready.get(policy, ())

    # -- pods ----------------------------------------------------------------------------------------

    def gang_pods(self, namespace: str, gang: str) -> list[PodRecord]:
        return self.index.of_gang(namespace, gang)

    def observe(self, record: WorkloadRecord, pods: Sequence[PodRecord]) -> GangObservation:
        """What the watchdog reads of an admitted gang: its pods bound and Ready, whether it ran
        whole since its admission, since when it is degraded, which of its nodes failed."""
        bound = [p for p in pods if p.placed_on is not None]
        ready = sum(1 for p in bound if p.ready)
        pr = record.pods_ready
        ever = record.ever_ready or (pr is None and ready >= record.size)
        failed: list[str] = []
        since: list[float] = []
        for name in sorted({p.node for p in bound if p.node is not None}):
            node = self.nodes.get(name)
            if node is None or not node.ready:
                failed.append(name)
                if node is not None and node.ready_since is not None:
                    since.append(node.ready_since)
        if ever and pr is not None and not pr.status:
            since.append(pr.at)
        if ever and record.pods_ready_means_running:  # Kueue's PodsReady stays True: the pods say
            since += [t for p in bound if not p.ready and (t := p.ready_changed) is not None]
        return GangObservation(
            size=record.size,
            bound=len(bound),
            ready=ready,
            admitted_at=record.admitted_at,
            ever_ready=ever,
            degraded_since=min(since) if ever and since else None,
            failed_nodes=tuple(failed),
        )

    # -- capacity promised to admitted gangs ---------------------------------------------------------

    def promises(self, admitted: Sequence[Entry]) -> list[Promise]:
        """What every admitted gang still needs (its unbound pods in its chosen domain), in
        admission order; each gang is parsed only when its promise has to be redone."""
        out = []
        for a in admitted:
            try:
                policy = self.policy(a.check.policy)
            except InputError:
                continue
            updates = a.check.entry.pod_set_updates if a.check.entry is not None else ()
            placed = self.index.placed(a.record.namespace, a.record.gang_id)
            out.append(
                Promise(
                    key=a.record.key,
                    fingerprint=fingerprint(updates, placed),
                    namespace=a.record.namespace,
                    gang=partial(self.gangs.unbound, a.wl, updates, placed),
                    policy=policy.placement,
                    occupied=tuple(sorted({n for on in placed.values() for n in on})),
                )
            )
        return out

    def promised_snapshot(self, levels: tuple[str, ...], admitted: Sequence[Entry] | None = None) -> Snapshot:
        """A fresh snapshot with every admitted gang's promise (`admitted`: those of the queue
        read now, unless given), for readers off the admission pass: `gangctl explain`, the
        MultiKueue dispatcher; the pass itself keeps `capacity`'s snapshots current."""
        admitted = self.queue().admitted() if admitted is None else admitted
        # The bound pods and each gang's placed pods of one moment: read apart, the handlers
        # (another thread) could bind a gang's pods in between, its promise would drop them
        # while the snapshot did not count them yet, and its nodes would look free.
        with self.capacity.locked():
            snap = self.capacity.build(levels)
            promises = self.promises(admitted)
        for p in promises:
            try:
                promise(snap, p.gang(snap), p.namespace, p.policy, p.occupied, keep_what_fits=True)
            except InputError as err:
                log.warning("admitted workload %s: promised capacity not counted: %s", p.key, err)
        return snap

    def promised_gang(self, wl: Mapping[str, Any]) -> tuple[Gang, GangPolicy] | None:
        """What our check promised the Workload's gang while it holds capacity (check Ready with
        quota reserved): every pod in the domain of its podSetUpdates, placed by its policy;
        None when it holds none. InputError when its gang or policy cannot be used."""
        record = self.record(wl)
        check = self.check_of(wl)
        if check is None or check.entry is None or not holds_capacity(record, check.entry.state):
            return None
        policy = self.policy(check.policy)
        return self.gangs.promised(wl, check.entry.pod_set_updates), policy


def holds_capacity(record: WorkloadRecord, state: CheckState | None) -> bool:
    """Whether a Workload holds the capacity the check promised it, as `admission_queue` counts it."""
    return bool(admission_queue([record.queued(state)]).admitted)


def fingerprint(updates: Sequence[Mapping[str, Any]], placed: Mapping[str, Sequence[str]]) -> tuple[Any, ...]:
    """What an admitted gang's promise depends on: its domain per podset, and the nodes of its
    pods that hold one (per podset)."""
    domains = tuple(
        sorted((str(u.get("name")), tuple(sorted((u.get("nodeSelector") or {}).items()))) for u in updates)
    )
    return domains, tuple(sorted((podset, tuple(on)) for podset, on in placed.items()))
