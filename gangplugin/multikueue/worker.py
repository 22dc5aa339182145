"""One worker cluster as the dispatcher reads it through its MultiKueueCluster kubeconfig: its
watch caches, and what they say about a gang (`WorkerView`): where the gang's queue leads, the
quota and plans there, the capacity its nodes have now, and the state of the gang's copy.

Capacity is what the worker's own gang check counts: its nodes and bound pods, and the pods of
every gang its check admitted that hold no node yet, placed again in their domain
(`core.admission.promise`, as the check's `admission/capacity.py` counts them), in admission
order. It is rebuilt per dispatch pass (`snapshot`), not kept current per event.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gangplugin.core.admission import gang_id, promise, remaining
from gangplugin.core.dispatch import Copy, CopyState, FlavorQuota, Worker, copy_state
from gangplugin.core.errors import InputError
from gangplugin.core.names import GANG_LABEL, PREEMPTION_ANNOTATION
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.resources import canonical
from gangplugin.core.topology import BoundPod, Node, Snapshot, build_snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.admitted import holds_capacity, in_domain, workload_gang
from gangplugin.kube.client import JSON
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.kube.records import bound_pod_from_k8s, node_from_k8s

log = logging.getLogger(__name__)

#: QuotaReserved=False reasons of a Workload Kueue has not decided yet (Kueue >= v0.19); any
#: other reason with a message is its refusal ("Pending" in older Kueues, WaitingForQuota...).
UNDECIDED_REASONS = frozenset({"PendingEvaluation", "WaitingForPreemptedWorkloads", "WaitingForPodsReady"})


class Cache(Protocol):
    def get(self, key: str) -> Any: ...

    def items(self) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the dispatcher keeps of a worker's pod: the capacity it holds, and whose gang it is."""

    bound: BoundPod | None
    gang: str | None
    podset: str


def pod_record(obj: JSON) -> PodRecord:
    """The worker pod cache's transform (slim records: a big worker has many pods)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    try:
        bound = bound_pod_from_k8s(obj)
    except InputError:
        bound = None
    return PodRecord(bound, labels.get(GANG_LABEL), str(labels.get(rec.PODSET_LABEL, "main")))


def node_record(obj: JSON) -> Node | None:
    try:
        return node_from_k8s(obj)
    except InputError as err:
        log.warning("worker node %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None


@dataclass(frozen=True, slots=True)
class Target:
    """Where the gang's queue leads in the worker: its ClusterQueue, the gang check's policy and
    level order, the quota per flavor, the plans feeding that ClusterQueue, and the admitted
    gangs of that policy not Ready yet (its Sequential gate)."""

    cluster_queue: str
    policy: GangPolicy
    levels: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]
    plans: tuple[TrainingPlan, ...]
    unready: tuple[str, ...] = ()


@dataclass
class Caches:
    nodes: Cache
    pods: Cache
    workloads: Cache
    checks: Cache
    policies: Cache
    topologies: Cache
    flavors: Cache
    cluster_queues: Cache
    local_queues: Cache
    plans: Cache


class WorkerView:
    def __init__(self, name: str, caches: Caches) -> None:
        self.name = name
        self.caches = caches
        self.lookup = GangPolicies(caches.workloads, caches.checks, caches.policies, caches.topologies)

    # -- where a gang's queue leads ----------------------------------------------------------------

    def target(self, namespace: str, queue: str, requests: Mapping[str, int]) -> Target | str:
        """Where a gang of that LocalQueue name would go here, or why it cannot go here at all."""
        c = self.caches
        lq = c.local_queues.get(f"{namespace}/{queue}")
        if lq is None:
            return f"no LocalQueue {namespace}/{queue}"
        cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
        cq = c.cluster_queues.get(cq_name) if cq_name else None
        if cq is None:
            return f"LocalQueue {namespace}/{queue} points at ClusterQueue {cq_name!r}, which does not exist"
        ours = self.lookup.our_checks()
        check = next((name for name in _checks_of(cq) if name in ours), None)
        if check is None:
            return (
                f"ClusterQueue {cq_name} has no gangplugin.io/gang check: nothing there admits a gang whole"
            )
        try:
            policy = self.lookup.policy(ours[check])
            levels = self.lookup.levels(policy)
        except InputError as err:
            return f"its gang check cannot be used: {err}"
        plans = tuple(p for p in c.plans.items() if p is not None and p.cluster_queue == cq_name)
        unready = self._unready(ours[check]) if policy.sequential else ()
        return Target(cq_name, policy, levels, self._flavors(cq, requests), plans, unready)

    def _unready(self, policy: str | None) -> tuple[str, ...]:
        """The admitted gangs of that GangPolicy whose pods are not all Ready yet (Kueue's
        PodsReady condition), as the gang check's Sequential gate counts them."""
        ours = self.lookup.our_checks()
        out = []
        for wl in self.caches.workloads.items():
            found = GangPolicies.check_of(wl, ours)
            if found is None or ours[found[0]] != policy or not holds_capacity(wl, found[1]):
                continue
            if not rec.is_true(wl, "PodsReady"):
                out.append(f"{wl['metadata'].get('namespace', '')}/{wl['metadata']['name']}")
        return tuple(sorted(out))

    def _flavors(self, cq: Mapping[str, Any], requests: Mapping[str, int]) -> tuple[FlavorQuota, ...]:
        """The ClusterQueue's flavors as Kueue tries them for these requests: in each resource
        group that covers some of them, its flavors in order; across groups, every combination in
        that order (Kueue picks a flavor per group). `free`: nominal quota less what Workloads
        with quota reserved in it hold (borrowing from a cohort is not counted)."""
        used = self._reserved(str(cq["metadata"]["name"]))
        groups = []
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            covered = [str(r) for r in group.get("coveredResources") or []]
            if not any(r in requests for r in covered):
                continue
            options = []
            for f in group.get("flavors") or []:
                name = str(f.get("name", ""))
                rf = self.caches.flavors.get(name)
                labels = {
                    str(k): str(v)
                    for k, v in (((rf or {}).get("spec") or {}).get("nodeLabels") or {}).items()
                }
                free = {}
                for res in f.get("resources") or []:
                    r = str(res.get("name", ""))
                    try:
                        nominal = canonical(r, res.get("nominalQuota", 0), f"{name}.nominalQuota")
                    except InputError:
                        nominal = 0
                    free[r] = nominal - used.get((name, r), 0)
                options.append(FlavorQuota(name, labels, free))
            groups.append(options)
        combos: list[FlavorQuota] = [FlavorQuota("", {}, {})]
        for options in groups:
            combos = [
                FlavorQuota(
                    f"{a.name}+{b.name}" if a.name else b.name,
                    {**a.node_labels, **b.node_labels},
                    {**a.free, **b.free},
                    {**a.flavors, **{r: b.name for r in b.free}},
                )
                for a in combos
                for b in options
            ]
        return tuple(c for c in combos if c.name)

    def _reserved(self, cluster_queue: str) -> Counter[tuple[str, str]]:
        """(flavor, resource) -> what Workloads with quota reserved in the ClusterQueue hold."""
        used: Counter[tuple[str, str]] = Counter()
        for wl in self.caches.workloads.items():
            admission = (wl.get("status") or {}).get("admission") or {}
            if admission.get("clusterQueue") != cluster_queue or rec.is_true(wl, "Finished"):
                continue
            if not rec.is_true(wl, "QuotaReserved"):
                continue
            for psa in admission.get("podSetAssignments") or []:
                flavors = psa.get("flavors") or {}
                for r, amount in (psa.get("resourceUsage") or {}).items():
                    try:
                        used[(str(flavors.get(r, "")), str(r))] += canonical(str(r), amount, "resourceUsage")
                    except InputError:
                        continue
        return used

    def worker(self, target: Target, snapshot: Snapshot) -> Worker:
        return Worker(
            self.name,
            snapshot,
            target.policy,
            target.cluster_queue,
            target.flavors,
            target.plans,
            unready=target.unready,
        )

    # -- capacity -----------------------------------------------------------------------------------

    def snapshot(self, levels: tuple[str, ...]) -> Snapshot:
        """Its nodes, bound pods and the capacity its gang check promised to admitted gangs whose
        pods hold no node yet (in admission order), in `levels` order."""
        c = self.caches
        nodes = [n for n in c.nodes.items() if n is not None]
        pods: list[PodRecord] = c.pods.items()
        snap = build_snapshot(nodes, [p.bound for p in pods if p.bound is not None], levels)
        bound: dict[tuple[str, str], Counter[str]] = {}
        occupied: dict[tuple[str, str], set[str]] = {}
        for p in pods:
            if p.gang and p.bound is not None:
                key = (p.bound.namespace, p.gang)
                bound.setdefault(key, Counter())[p.podset] += 1
                occupied.setdefault(key, set()).add(p.bound.node_name)
        ours = self.lookup.our_checks()
        admitted = []
        for wl in c.workloads.items():
            found = GangPolicies.check_of(wl, ours)
            if found is not None and holds_capacity(wl, found[1]):
                admitted.append((_condition_time(wl, "Admitted"), str(wl["metadata"]["name"]), wl, found))
        flavors = {f["metadata"]["name"]: f for f in c.flavors.items()}
        for _, _, wl, (check, state) in sorted(admitted, key=lambda a: (a[0], a[1])):
            ns = str(wl["metadata"].get("namespace", ""))
            key = (ns, gang_id(wl["metadata"]["name"]))
            try:
                policy = self.lookup.policy(ours[check])
                gang = in_domain(workload_gang(wl, flavors), state.get("podSetUpdates") or [])
            except InputError as err:
                log.warning("worker %s: %s not counted: %s", self.name, key, err)
                continue
            rest = remaining(gang, bound.get(key, Counter()))
            promise(snap, rest, ns, policy.placement, sorted(occupied.get(key, ())))
        return snap

    # -- the gang's copy ----------------------------------------------------------------------------

    def copy(self, key: str) -> Copy:
        """The state of this worker's copy of the manager Workload `key` ("ns/name")."""
        wl = self.caches.workloads.get(key)
        if wl is None:
            return Copy(CopyState.ABSENT)
        conds = rec.conditions(wl)
        quota = conds.get("QuotaReserved") or {}
        quota_message = ""
        if quota.get("status") == "False" and str(quota.get("reason", "")) not in UNDECIDED_REASONS:
            quota_message = str(quota.get("message") or "")
        found = GangPolicies.check_of(wl, self.lookup.our_checks())
        state = found[1] if found is not None else {}
        return copy_state(
            quota_reserved=rec.is_true(wl, "QuotaReserved"),
            quota_message=quota_message,
            admitted=rec.is_true(wl, "Admitted"),
            finished=rec.is_true(wl, "Finished"),
            evicted=rec.is_true(wl, "Evicted"),
            evicted_message=str((conds.get("Evicted") or {}).get("message") or ""),
            check=str(state["state"]) if state.get("state") else None,
            check_message=str(state.get("message") or ""),
            preempting=PREEMPTION_ANNOTATION in ((wl.get("metadata") or {}).get("annotations") or {}),
        )

    def holds_quota(self, key: str) -> bool:
        """Whether its copy of `key` has quota reserved here (its Kueue counts it then)."""
        wl = self.caches.workloads.get(key)
        return wl is not None and rec.is_true(wl, "QuotaReserved")


def _checks_of(cq: Mapping[str, Any]) -> list[str]:
    spec = cq.get("spec") or {}
    names = [str(n) for n in spec.get("admissionChecks") or []]
    names += [
        str(r.get("name")) for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    ]
    return names


def _condition_time(wl: Mapping[str, Any], kind: str) -> float:
    c = rec.conditions(wl).get(kind) or {}
    try:
        return rec.epoch(c.get("lastTransitionTime"), f"status.conditions[{kind}].lastTransitionTime")
    except InputError:
        return 0.0
