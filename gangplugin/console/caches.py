"""`CacheSource`: the console's `ConsoleSource` over the process's shared watch caches.

It asks the runtime for the caches the gang check already keeps (the same resources and
transforms, so nothing is listed or held twice), turns them into the console's values with the
pure builders beside it and the core's own rules, and tells the pages which topic a watch event
touches. What it derives (the map, the gang rows) is kept until an event touches its topic, so
a page asked for again costs nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from gangplugin.console.clustermap import GangName, PodOnNode, cluster_map, gpus
from gangplugin.console.derived import FACTOR, FLOOR, Derived
from gangplugin.console.gangs import (
    gang_pods,
    job_of,
    milestones,
    pod_gang_summary,
    workload_summary,
)
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
from gangplugin.console.quota import parsed_plans, plan_schedule, queue_usage
from gangplugin.core.admission import gang_id, promise, remaining
from gangplugin.core.errors import InputError
from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.core.topology import DEFAULT_LEVELS, BoundPod, Node, Snapshot, build_snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.admitted import holds_capacity, in_domain, workload_gang
from gangplugin.kube.client import CLUSTER_QUEUES, JSON, LOCAL_QUEUES, NODES, PODS, WORKLOADS
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.kube.informer import Informer
from gangplugin.kube.records import bound_pod_from_k8s, node_from_k8s
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)
from gangplugin.runtime.components import Runtime

log = logging.getLogger(__name__)

T = TypeVar("T")
GangKey = tuple[str, str]  # (namespace, gang label)

#: Which topics an event of each resource may change.
TOPICS = {
    NODES: (Topic.MAP,),
    PODS: (Topic.MAP, Topic.GANGS),
    WORKLOADS: (Topic.MAP, Topic.GANGS, Topic.QUOTA),
    CLUSTER_QUEUES: (Topic.GANGS, Topic.QUOTA, Topic.POLICIES),
    LOCAL_QUEUES: (Topic.GANGS, Topic.QUOTA),
    GANG_POLICIES: (Topic.MAP, Topic.GANGS, Topic.POLICIES),
    ADMISSION_CHECKS: (Topic.GANGS, Topic.POLICIES),
    TRAINING_PLANS: (Topic.QUOTA,),
    RESOURCE_FLAVORS: (Topic.MAP,),
    TOPOLOGIES: (Topic.MAP, Topic.GANGS),
}


def _node_view(obj: JSON | None) -> tuple[Any, ...] | None:
    """What of a Node the map draws: a heartbeat that changes none of it is no change."""
    if obj is None:
        return None
    ready = rec.conditions(obj).get("Ready") or {}
    return (
        (obj.get("metadata") or {}).get("labels"),
        (obj.get("spec") or {}).get("unschedulable"),
        (obj.get("status") or {}).get("allocatable"),
        ready.get("status"),
    )


def _node_or_none(obj: JSON) -> Node | None:
    try:
        return node_from_k8s(obj)
    except InputError as err:
        log.warning("console: node not shown: %s", err)
        return None


def _bound_or_none(obj: JSON) -> BoundPod | None:
    try:
        return bound_pod_from_k8s(obj)
    except InputError:
        return None


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _forget_gone(cache: dict[str, tuple[str, Any]], objs: Sequence[JSON]) -> None:
    present = {_key(o) for o in objs}
    for key in [k for k in cache if k not in present]:
        del cache[key]


def _pods_by_gang(pods: Sequence[JSON]) -> dict[GangKey, list[JSON]]:
    out: dict[GangKey, list[JSON]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang:
            out.setdefault((str(meta.get("namespace", "")), str(gang)), []).append(pod)
    return out


def _pod_gang_size(pods: Sequence[JSON]) -> int:
    sizes = [
        int(v)
        for p in pods
        if str(
            v := ((p.get("metadata") or {}).get("annotations") or {}).get(GANG_SIZE_ANNOTATION, "")
        ).isdigit()
    ]
    return max(sizes, default=len(pods))


class CacheSource:
    """See the module docstring. `setup` time: it registers its caches and handlers on the
    runtime (before the caches start). `floor` and `factor`: how often a derived value may be
    made again (`derived.Derived`)."""

    def __init__(self, runtime: Runtime, floor: float = FLOOR, factor: float = FACTOR) -> None:
        informer: Callable[..., Informer[Any]] = runtime.informer
        self.nodes = informer(NODES)
        self.pods = informer(PODS)
        self.workloads = informer(WORKLOADS)
        self.cluster_queues = informer(CLUSTER_QUEUES)
        self.local_queues = informer(LOCAL_QUEUES)
        self.policies_cache = informer(GANG_POLICIES)
        self.checks = informer(ADMISSION_CHECKS)
        self.plans_cache = informer(TRAINING_PLANS)
        self.flavors = informer(RESOURCE_FLAVORS)
        self.topologies = informer(TOPOLOGIES)
        self.lookup = GangPolicies(self.workloads, self.checks, self.policies_cache, self.topologies)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Topic], None]] = []
        self._derived: dict[Topic, Derived[Any]] = {
            Topic.MAP: Derived(self._make_map, lambda: self._changed(Topic.MAP), floor, factor),
            Topic.GANGS: Derived(self._make_gangs, lambda: self._changed(Topic.GANGS), floor, factor),
        }
        # What parsing a Node or a Pod made, by name, kept while its resourceVersion stays.
        self._nodes_parsed: dict[str, tuple[str, Node | None]] = {}
        self._pods_parsed: dict[str, tuple[str, BoundPod | None]] = {}
        dispatcher = runtime.dispatcher("console")
        for resource, cache in (
            (NODES, self.nodes),
            (PODS, self.pods),
            (WORKLOADS, self.workloads),
            (CLUSTER_QUEUES, self.cluster_queues),
            (LOCAL_QUEUES, self.local_queues),
            (GANG_POLICIES, self.policies_cache),
            (ADMISSION_CHECKS, self.checks),
            (TRAINING_PLANS, self.plans_cache),
            (RESOURCE_FLAVORS, self.flavors),
            (TOPOLOGIES, self.topologies),
        ):
            cache.add_handler(self._handler(TOPICS[resource], resource is NODES), dispatcher)

    # -- following the caches -----------------------------------------------------------------

    def _handler(self, topics: Sequence[Topic], nodes: bool) -> Callable[[str, Any, Any], None]:
        def handle(_kind: str, old: JSON | None, new: JSON | None) -> None:
            if nodes and old is not None and _node_view(old) == _node_view(new):
                return
            for topic in topics:
                self._changed(topic)

        return handle

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

    # -- reading ------------------------------------------------------------------------------

    def _cluster_queue_of(self, wl: JSON) -> str:
        admitted = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if admitted:
            return str(admitted)
        lq = (wl.get("spec") or {}).get("queueName")
        ns = (wl.get("metadata") or {}).get("namespace", "")
        found = self.local_queues.get(f"{ns}/{lq}") if lq else None
        return str(((found or {}).get("spec") or {}).get("clusterQueue") or "")

    def _check_of(self, wl: JSON, ours: Mapping[str, str | None]) -> str | None:
        """Our check on this Workload: from its status, else from its ClusterQueue's checks."""
        found = self.lookup.check_of(wl, ours)
        if found is not None:
            return found[0]
        cq = self.cluster_queues.get(self._cluster_queue_of(wl)) or {}
        spec = cq.get("spec") or {}
        listed = [
            str(r.get("name"))
            for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        ]
        listed += [str(c) for c in spec.get("admissionChecks") or []]
        return next((c for c in listed if c in ours), None)

    def _levels(self, policy: str | None) -> tuple[str, ...]:
        try:
            return self.lookup.levels(self.lookup.policy(policy))
        except InputError:
            return DEFAULT_LEVELS

    def _labels(self, node: str) -> Mapping[str, str] | None:
        obj = self.nodes.get(node)
        return None if obj is None else (obj.get("metadata") or {}).get("labels") or {}

    def _summaries(
        self,
    ) -> tuple[dict[tuple[str, str], tuple[GangSummary, JSON | None, str]], dict[GangKey, list[JSON]]]:
        """(namespace, name) -> (summary, its Workload or None, our check); and the gang pods."""
        ours = self.lookup.our_checks()
        by_gang = _pods_by_gang(self.pods.items())
        out: dict[tuple[str, str], tuple[GangSummary, JSON | None, str]] = {}
        owned: set[GangKey] = set()
        for wl in self.workloads.items():
            meta = wl["metadata"]
            ns, name = str(meta.get("namespace", "")), str(meta["name"])
            owned.add((ns, gang_id(name)))
            check = self._check_of(wl, ours)
            if check is None:
                continue
            summary = workload_summary(
                wl,
                check,
                by_gang.get((ns, gang_id(name)), []),
                cluster_queue=self._cluster_queue_of(wl),
                levels=self._levels(ours[check]),
                labels=self._labels,
            )
            out[(ns, name)] = (summary, wl, check)
        for key, pods in by_gang.items():
            if key not in owned:
                size = _pod_gang_size(pods)
                out[key] = (pod_gang_summary(*key, pods, size, DEFAULT_LEVELS, self._labels), None, "")
        return out, by_gang

    def gangs(self) -> Sequence[GangSummary]:
        gangs: tuple[GangSummary, ...] = self._derived[Topic.GANGS].get()
        return gangs

    def _make_gangs(self) -> tuple[GangSummary, ...]:
        found, _ = self._summaries()
        return tuple(s for s, _, _ in sorted(found.values(), key=lambda f: (f[0].namespace, f[0].name)))

    def gang(self, namespace: str, name: str) -> GangDetail | None:
        found, by_gang = self._summaries()
        hit = found.get((namespace, name))
        if hit is None:
            return None
        summary, wl, check = hit
        pods = by_gang.get((namespace, summary.gang_id), [])
        return GangDetail(
            summary=summary,
            pods=gang_pods(pods),
            milestones=milestones(wl, check, summary, pods) if wl is not None else (),
            workload=name if wl is not None else "",
        )

    def _spares(self) -> int:
        """Spares the map shows per UltraServer: the most any GangPolicy keeps."""
        most = 0
        for obj in self.policies_cache.items():
            try:
                most = max(most, rec.gang_policy_from_k8s(obj).placement.spares_per_ultraserver)
            except InputError:
                continue
        return most

    def _promised(self, snap: Snapshot, by_gang: Mapping[GangKey, list[JSON]]) -> None:
        """Charge to `snap` the pods admitted gangs were promised and do not hold yet, as the
        gang check counts them, so an UltraServer's room is what the next gang can get."""
        ours = self.lookup.our_checks()
        flavors = {f["metadata"]["name"]: f for f in self.flavors.items()}
        for wl in self.workloads.items():
            found = self.lookup.check_of(wl, ours)
            if found is None or not holds_capacity(wl, found[1]):
                continue
            ns = str(wl["metadata"].get("namespace", ""))
            pods = by_gang.get((ns, gang_id(wl["metadata"]["name"])), [])
            bound = [p for p in pods if (b := bound_pod_from_k8s(p)) is not None and b.node_name]
            placed = Counter(
                str((p["metadata"].get("labels") or {}).get(rec.PODSET_LABEL, "main")) for p in bound
            )
            try:
                policy = self.lookup.policy(ours[found[0]])
                gang = in_domain(workload_gang(wl, flavors), found[1].get("podSetUpdates") or [])
                occupied = tuple(sorted({str(p["spec"]["nodeName"]) for p in bound}))
                promise(snap, remaining(gang, placed), ns, policy.placement, occupied, keep_what_fits=True)
            except InputError as err:
                log.debug("console: promise of %s/%s not counted: %s", ns, wl["metadata"]["name"], err)

    def cluster_map(self) -> ClusterMap:
        cmap: ClusterMap = self._derived[Topic.MAP].get()
        return cmap

    def _parsed(self, cache: dict[str, tuple[str, T]], obj: JSON, parse: Callable[[JSON], T]) -> T:
        """`parse(obj)`, made again only when the object's resourceVersion changed."""
        key, rv = _key(obj), str((obj.get("metadata") or {}).get("resourceVersion", ""))
        hit = cache.get(key)
        if hit is not None and hit[0] == rv and rv:
            return hit[1]
        value = parse(obj)
        cache[key] = (rv, value)
        return value

    def _make_map(self) -> ClusterMap:
        nodes: list[Node] = []
        objs = self.nodes.items()
        for obj in objs:
            node = self._parsed(self._nodes_parsed, obj, _node_or_none)
            if node is not None:
                nodes.append(node)
        bound: list[BoundPod] = []
        on_node: dict[str, list[PodOnNode]] = {}
        raw = self.pods.items()
        for pod in raw:
            b = self._parsed(self._pods_parsed, pod, _bound_or_none)
            if b is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            bound.append(b)
            gang = ((pod.get("metadata") or {}).get("labels") or {}).get(GANG_LABEL, "")
            on_node.setdefault(b.node_name, []).append(PodOnNode(b.namespace, str(gang), gpus(b.requests)))
        _forget_gone(self._nodes_parsed, objs)
        _forget_gone(self._pods_parsed, raw)
        snap = build_snapshot(nodes, bound, DEFAULT_LEVELS)
        self._promised(snap, _pods_by_gang(raw))
        names = {
            (str(wl["metadata"].get("namespace", "")), gang_id(wl["metadata"]["name"])): GangName(
                str(wl["metadata"]["name"]), job_of(wl)
            )
            for wl in self.workloads.items()
        }
        return cluster_map(snap, on_node, names, self._spares())

    def queues(self, now: datetime) -> Sequence[QueueUsage]:
        plans = parsed_plans(self.plans_cache.items())
        lqs = self.local_queues.items()
        return tuple(
            queue_usage(cq, lqs, plans, now)
            for cq in sorted(self.cluster_queues.items(), key=lambda c: str(c["metadata"]["name"]))
        )

    def plans(self, now: datetime) -> Sequence[PlanSchedule]:
        objs = sorted(self.plans_cache.items(), key=lambda p: str(p["metadata"]["name"]))
        return tuple(plan_schedule(obj, now) for obj in objs)

    def policies(self) -> Sequence[PolicySettings]:
        checks, cqs = self.checks.items(), self.cluster_queues.items()
        objs = sorted(self.policies_cache.items(), key=lambda p: str(p["metadata"]["name"]))
        return tuple(policy_settings(obj, checks, cqs) for obj in objs)

    def policy_object(self, name: str) -> dict[str, Any] | None:
        obj = self.policies_cache.get(name)
        return None if obj is None else dict(obj)
