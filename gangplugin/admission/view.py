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
from gangplugin.core.keys import KUEUE_PODSET_PREFIX
from gangplugin.core.names import GANG_LABEL, GROUP, READY_AT_ANNOTATION
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
from gangplugin.kube.job_records import LEADERWORKERSET, RAYJOB, TRAINJOB
from gangplugin.kube.resources import (
    ADMISSION_CHECKS,
    GANG_POLICIES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    TRAINING_PLANS,
)

log = logging.getLogger(__name__)

# Kueue's pod-group integrations mark each pod with its group (the Workload's name; see
# `pod_group_of`) and name its podset in an annotation.
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
ROLE_ANNOTATION = "kueue.x-k8s.io/role-hash"
# The podset of a RayJob's submitter pod in Kueue's Workload (K8sJobMode).
RAYJOB_SUBMITTER = "submitter"
# The replicated Jobs a Trainer runtime runs before its trainer Job (Kueue's podsets of a TrainJob).
TRAINER_INITIALIZERS = ("dataset-initializer", "model-initializer")


def pod_group_of(pod: Mapping[str, Any]) -> str | None:
    """The Kueue pod group a pod belongs to: its label (a plain pod group, and a
    LeaderWorkerSet's pods on Kueue v0.17) or, as Kueue v0.19 marks a LeaderWorkerSet's pods,
    the annotation of the same name."""
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(POD_GROUP_LABEL) or (meta.get("annotations") or {}).get(
        POD_GROUP_LABEL
    )


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


def _ours(pod: Mapping[str, Any] | None) -> dict[str, str]:
    """The annotations of `pod` under our prefix and Kueue's podset prefix: how its gang is
    placed or drained, and any misspelt key there, which the gate's keys step then names."""
    ann = (pod or {}).get("metadata", {}).get("annotations") or {}
    return {k: v for k, v in ann.items() if k.startswith((f"{GROUP}/", KUEUE_PODSET_PREFIX))}


def _of_leader_worker_set(wl: Mapping[str, Any]) -> bool:
    owners = wl.get("metadata", {}).get("ownerReferences") or []
    return any(o.get("kind") == LEADERWORKERSET.kind for o in owners)


def _refuse_late_members(wl: Mapping[str, Any]) -> None:
    """A gang whose controller makes some of its pods only once others ran could never start
    whole (the ungater and the bind barrier wait for every pod): a RayJob in K8sJobMode, whose
    submitter pod (Kueue's podset "submitter") KubeRay makes once its Ray cluster is Ready, and
    a TrainJob whose runtime has initializers, whose trainer Job the JobSet starts once they
    completed (dependsOn)."""
    owners = {o.get("kind") for o in wl.get("metadata", {}).get("ownerReferences") or []}
    podsets = [ps.get("name") for ps in (wl.get("spec") or {}).get("podSets") or []]
    if RAYJOB.kind in owners and RAYJOB_SUBMITTER in podsets:
        raise InputError(
            "RayJob spec.submissionMode",
            "K8sJobMode (the default) cannot start whole: KubeRay creates its submitter pod only once "
            "the Ray cluster runs; use submissionMode: HTTPMode (KubeRay submits the job itself) or "
            "InteractiveMode, or queue a RayCluster",
        )
    if TRAINJOB.kind in owners and (initializers := [n for n in podsets if n in TRAINER_INITIALIZERS]):
        raise InputError(
            "TrainJob spec.runtimeRef",
            f"its runtime's {', '.join(map(str, initializers))} must complete before the trainer's "
            "node pods are created (dependsOn), so the gang cannot start whole; use a runtime "
            "without initializers (torch-distributed), or initialize in a job of its own first",
        )


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
        # (namespace, Kueue pod group) -> pods by name: a LeaderWorkerSet group's pods.
        self._group_pods: dict[tuple[str, str], dict[str, JSON]] = {}
        self._lock = threading.Lock()
        self.pods.add_handler(self.capacity.on_pod, dispatcher)
        self.pods.add_handler(self._index_pod, dispatcher)
        self.nodes.add_handler(self.capacity.on_node, dispatcher)

    def _index_pod(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj.get("metadata", {})
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        for index, value in ((self._gang_pods, gang), (self._group_pods, pod_group_of(obj))):
            if not value:
                continue
            idx = (meta.get("namespace", ""), value)
            with self._lock:
                pods = index.setdefault(idx, {})
                if new is None:
                    pods.pop(meta.get("name", ""), None)
                    if not pods:
                        del index[idx]
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
        _refuse_late_members(wl)
        flavors = {f["metadata"]["name"]: f for f in self.flavors.items()}
        return workload_gang(self.with_pod_group_annotations(wl), flavors)

    def with_pod_group_annotations(self, wl: Mapping[str, Any]) -> Mapping[str, Any]:
        """Kueue builds the podset templates of a plain pod group, and (v0.17) of a
        LeaderWorkerSet's group, without the pods' annotations; the topology annotations a user
        put on the pods (or on the LeaderWorkerSet's templates, which its pods carry) are read
        from the pods: a plain group's owners, a LeaderWorkerSet group's pod of each podset."""
        owners = wl.get("metadata", {}).get("ownerReferences") or []
        ns = wl["metadata"].get("namespace", "")
        raw = (wl.get("spec") or {}).get("podSets") or []
        if owners and all(o.get("kind") == "Pod" for o in owners):
            found = (_ours(self.pods.get(f"{ns}/{o.get('name')}")) for o in owners)
            first = next((extra for extra in found if extra), {})
            extras = [first for _ in raw]
        elif _of_leader_worker_set(wl):
            by_podset = self._group_pods_by_podset(wl)
            extras = [_ours(by_podset.get(str(ps.get("name")))) for ps in raw]
        else:
            return wl
        podsets = []
        for ps, extra in zip(raw, extras, strict=True):
            template = dict(ps.get("template") or {})
            meta = dict(template.get("metadata") or {})
            meta["annotations"] = {**extra, **(meta.get("annotations") or {})}
            template["metadata"] = meta
            podsets.append({**ps, "template": template})
        return {**wl, "spec": {**(wl.get("spec") or {}), "podSets": podsets}}

    def _group_pods_by_podset(self, wl: Mapping[str, Any]) -> dict[str, JSON]:
        """A pod group's pods, one per podset (Kueue names each pod's podset in its role-hash
        annotation); the group is the Workload's name."""
        meta = wl.get("metadata", {})
        with self._lock:
            pods = list(self._group_pods.get((meta.get("namespace", ""), meta.get("name", "")), {}).values())
        out: dict[str, JSON] = {}
        for pod in pods:
            role = (pod.get("metadata", {}).get("annotations") or {}).get(ROLE_ANNOTATION)
            if role:
                out.setdefault(str(role), pod)
        return out

    def podsets_without_pods(self, wl: Mapping[str, Any]) -> list[str]:
        """The podsets of a LeaderWorkerSet group's Workload with no pod yet: Kueue makes the
        Workload before the StatefulSets make the pods, and the group's topology annotations
        are read from its pods, so it is decided only once each podset has one."""
        if not _of_leader_worker_set(wl):
            return []
        seen = self._group_pods_by_podset(wl)
        names = [str(ps.get("name")) for ps in (wl.get("spec") or {}).get("podSets") or []]
        return [n for n in names if n not in seen]

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
        condition (set because waitForPodsReady is on, with a timeout that never fires), or,
        where Kueue's says only that the job runs, the watchdog's READY_AT_ANNOTATION."""
        if rec.pods_ready_means_running(wl):
            raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(READY_AT_ANNOTATION)
            try:
                at = rec.epoch(raw, READY_AT_ANNOTATION) if raw else None
            except InputError:
                at = None
            return at is not None and at >= condition_time(wl, "Admitted")
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
        if ever and rec.pods_ready_means_running(wl):  # Kueue's PodsReady stays True: the pods say
            since += [t for p in bound if not rec.pod_ready(p) and (t := rec.ready_changed(p)) is not None]
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
