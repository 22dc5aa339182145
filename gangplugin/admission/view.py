"""What the gang check reads: the watch caches it needs and their parsed forms.

One `AdmissionView` is shared by the admission pass, the watchdog, the status of the check's
objects and the gangs API, so each reads a Workload, its policy, its gang and its pods the same
way: parsed once per resourceVersion, indexed once per pod event.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from gangplugin.admission.capacity import CapacityView, Promise
from gangplugin.core.admission import (
    gang_id,
    promise,
    remaining,
)
from gangplugin.core.drain import DrainDecision, gang_drain
from gangplugin.core.errors import InputError
from gangplugin.core.names import (
    GANG_LABEL,
    MAX_RUNTIME_ANNOTATION,
    TOPOLOGY_ANNOTATIONS,
)
from gangplugin.core.placement import Gang
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.topology import Snapshot
from gangplugin.core.watchdog import GangObservation
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.admitted import in_domain, workload_gang
from gangplugin.kube.client import CLUSTER_QUEUES, JSON, NODES, PODS, WORKLOADS
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.kube.informer import Informer, object_key
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdmittedGang:
    """An admitted (check Ready) gang as the pass sees it."""

    key: str
    wl: JSON
    check: str
    policy: str | None
    ever_ready: bool


def workload_key(wl: Mapping[str, Any]) -> str:
    return object_key(dict(wl))


def timestamp(wl: Mapping[str, Any], field: str) -> float:
    try:
        return rec.epoch(wl.get("metadata", {}).get(field), f"metadata.{field}")
    except InputError:
        return 0.0


def condition_time(obj: Mapping[str, Any], kind: str) -> float:
    c = rec.conditions(obj).get(kind) or {}
    try:
        return rec.epoch(c.get("lastTransitionTime"), f"status.conditions[{kind}].lastTransitionTime")
    except InputError:
        return 0.0


def pod_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not pod.get(
        "metadata", {}
    ).get("deletionTimestamp")


def fingerprint(updates: list[JSON], bound: Counter[str]) -> tuple[Any, ...]:
    """What an admitted gang's promise depends on: its domain per podset and its bound pods."""
    domains = tuple(
        sorted((str(u.get("name")), tuple(sorted((u.get("nodeSelector") or {}).items()))) for u in updates)
    )
    return domains, tuple(sorted(bound.items()))


class AdmissionView:
    def __init__(self, informer: Callable[..., Informer[Any]], dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher  # where its handlers run, and those of whoever reads its index
        self.workloads = informer(WORKLOADS)
        self.checks = informer(ADMISSION_CHECKS)
        self.policies = informer(GANG_POLICIES)
        self.nodes = informer(NODES)
        self.pods = informer(PODS)
        self.flavors = informer(RESOURCE_FLAVORS)
        self.topologies = informer(TOPOLOGIES)
        self.plans = informer(TRAINING_PLANS, rec.plan_or_none)
        self.cluster_queues = informer(CLUSTER_QUEUES)  # preemption rules, borrowing
        self.capacity = CapacityView()
        self._parsed: dict[str | None, tuple[str | None, GangPolicy]] = {}
        self.lookup = GangPolicies(self.workloads, self.checks, self.policies, self.topologies)
        # (namespace, gang label) -> pods by name: an index over the pod cache, rebuilt by its relist.
        self._gang_pods: dict[tuple[str, str], dict[str, JSON]] = {}
        self._lock = threading.Lock()
        self.pods.add_handler(self.capacity.on_pod, dispatcher)
        self.pods.add_handler(self._index_pod, dispatcher)
        self.nodes.add_handler(self.capacity.on_node, dispatcher)

    def _index_pod(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj.get("metadata", {})
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if not gang:
            return
        idx = (meta.get("namespace", ""), gang)
        with self._lock:
            pods = self._gang_pods.setdefault(idx, {})
            if new is None:
                pods.pop(meta.get("name", ""), None)
                if not pods:
                    del self._gang_pods[idx]
            else:
                pods[meta.get("name", "")] = new

    def our_checks(self) -> dict[str, str | None]:
        """AdmissionCheck name -> GangPolicy name (None: defaults) for checks routed to us."""
        return self.lookup.our_checks()

    def policy(self, name: str | None) -> GangPolicy:
        """The GangPolicy by name (defaults for None); InputError when missing or invalid.
        Parsed once per resourceVersion, not once per gang and pass."""
        obj = self.policies.get(name) if name is not None else None
        rv = obj["metadata"].get("resourceVersion") if obj is not None else None
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == rv and obj is not None:
            return cached[1]
        policy = self.lookup.policy(name)
        self._parsed[name] = (rv, policy)
        return policy

    def levels(self, policy: GangPolicy) -> tuple[str, ...]:
        return self.lookup.levels(policy)

    def gang(self, wl: Mapping[str, Any]) -> Gang:
        """The Workload's gang, with the node labels of its assigned flavors and of the domain our
        check already chose (podSetUpdates) in each podset's nodeSelector."""
        flavors = {f["metadata"]["name"]: f for f in self.flavors.items()}
        return workload_gang(self.with_pod_group_annotations(wl), flavors)

    def with_pod_group_annotations(self, wl: Mapping[str, Any]) -> Mapping[str, Any]:
        """Kueue builds a plain pod group's podset templates without the pods' annotations; the
        topology annotations a user put on the pods are read from the pods (its owners)."""
        owners = wl.get("metadata", {}).get("ownerReferences") or []
        if not owners or any(o.get("kind") != "Pod" for o in owners):
            return wl
        ns = wl["metadata"].get("namespace", "")
        podsets = []
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            extra: dict[str, str] = {}
            for o in owners:
                pod = self.pods.get(f"{ns}/{o.get('name')}")
                ann = (pod or {}).get("metadata", {}).get("annotations") or {}
                extra = {
                    k: v for k, v in ann.items() if k in TOPOLOGY_ANNOTATIONS or k == MAX_RUNTIME_ANNOTATION
                }
                if extra:
                    break
            template = dict(ps.get("template") or {})
            meta = dict(template.get("metadata") or {})
            meta["annotations"] = {**extra, **(meta.get("annotations") or {})}
            template["metadata"] = meta
            podsets.append({**ps, "template": template})
        return {**wl, "spec": {**(wl.get("spec") or {}), "podSets": podsets}}

    def plans_of(self, wl: Mapping[str, Any]) -> tuple[str, set[str], list[TrainingPlan]]:
        cluster_queue, flavors = rec.quota_of(wl)
        plans = [p for p in self.plans.items() if p is not None and p.cluster_queue == cluster_queue]
        return cluster_queue, flavors, plans

    def drain(
        self, wl: Mapping[str, Any], now: float, admitted_at: float | None = None
    ) -> DrainDecision | None:
        """What the TrainingPlans feeding the Workload's quota say about it (None: no plan feeds
        it); InputError when its max-runtime annotation is unusable, whether or not a plan reads
        it (bad input is refused where it is written, not once a plan comes to read it)."""
        runtime = rec.max_runtime(self.with_pod_group_annotations(wl))
        cluster_queue, flavors, plans = self.plans_of(wl)
        if not plans:
            return None
        return gang_drain(
            plans,
            cluster_queue,
            flavors,
            datetime.fromtimestamp(now, UTC),
            runtime,
            None if admitted_at is None else datetime.fromtimestamp(admitted_at, UTC),
        )

    def bound(self, namespace: str, gang: str) -> tuple[Counter[str], tuple[str, ...]]:
        """The gang's bound pods: how many per podset, and their nodes."""
        with self._lock:
            pods = list(self._gang_pods.get((namespace, gang), {}).values())
        out: Counter[str] = Counter()
        nodes: set[str] = set()
        for pod in pods:
            if (node := (pod.get("spec") or {}).get("nodeName")) and pod_active(pod):
                out[(pod["metadata"].get("labels") or {}).get(rec.PODSET_LABEL, "main")] += 1
                nodes.add(node)
        return out, tuple(sorted(nodes))

    def gang_pods(self, namespace: str, gang: str) -> list[JSON]:
        with self._lock:
            return list(self._gang_pods.get((namespace, gang), {}).values())

    def ever_ready(self, wl: Mapping[str, Any]) -> bool:
        """Whether the gang was fully Ready since its current admission: Kueue's PodsReady
        condition (set because waitForPodsReady is on, with a timeout that never fires)."""
        c = rec.conditions(wl).get("PodsReady")
        if c is None:
            return False
        if condition_time(wl, "PodsReady") < condition_time(wl, "Admitted"):
            return False  # left over from an earlier admission
        return c.get("status") == "True" or c.get("reason") in ("WaitForRecovery", "Recovered")

    def observe(self, wl: Mapping[str, Any], pods: list[JSON]) -> GangObservation:
        size = sum(int(ps.get("count", 1)) for ps in (wl.get("spec") or {}).get("podSets") or [])
        active = [p for p in pods if pod_active(p)]
        bound = [p for p in active if (p.get("spec") or {}).get("nodeName")]
        ready = sum(1 for p in bound if rec.pod_ready(p))
        ever = self.ever_ready(wl) or (not rec.conditions(wl).get("PodsReady") and ready >= size)
        failed: list[str] = []
        since: list[float] = []
        for node_name in sorted({p["spec"]["nodeName"] for p in bound}):
            node = self.nodes.get(node_name)
            is_ready, changed = rec.node_ready_since(node) if node is not None else (False, None)
            if not is_ready:
                failed.append(node_name)
                if changed is not None:
                    since.append(changed)
        pr = rec.conditions(wl).get("PodsReady") or {}
        if ever and pr.get("status") == "False":
            since.append(condition_time(wl, "PodsReady"))
        return GangObservation(
            size=size,
            bound=len(bound),
            ready=ready,
            admitted_at=condition_time(wl, "Admitted"),
            ever_ready=ever,
            degraded_since=min(since) if ever and since else None,
            failed_nodes=tuple(failed),
        )

    def promises(self, admitted: list[AdmittedGang]) -> list[Promise]:
        """What every admitted gang still needs (its unbound pods in its chosen domain), in
        admission order; each gang is parsed only when its promise has to be redone."""
        out = []
        for a in admitted:
            try:
                policy = self.policy(a.policy)
            except InputError:
                continue
            ns = a.wl["metadata"]["namespace"]
            gid = gang_id(a.wl["metadata"]["name"])
            updates = (rec.check_state(a.wl, a.check) or {}).get("podSetUpdates") or []
            bound, occupied = self.bound(ns, gid)
            out.append(
                Promise(
                    a.key,
                    (fingerprint(updates, bound), occupied),
                    ns,
                    partial(self.unbound_gang, a.wl, updates, bound),
                    policy.placement,
                    occupied,
                )
            )
        return out

    def promised_snapshot(self, levels: tuple[str, ...], admitted: list[AdmittedGang]) -> Snapshot:
        """A fresh snapshot with every admitted gang's promise, for read-only what-ifs off the
        admission path (the gangs API's explain); the pass itself uses the kept `capacity`."""
        snap = self.capacity.build(levels)
        for p in self.promises(admitted):
            try:
                promise(snap, p.gang(), p.namespace, p.policy, p.occupied, keep_what_fits=True)
            except InputError as err:
                log.warning("admitted workload %s: promised capacity not counted: %s", p.key, err)
        return snap

    def unbound_gang(self, wl: JSON, updates: list[JSON], bound: Counter[str]) -> Gang:
        return remaining(in_domain(self.gang(wl), updates), bound)
