"""One worker cluster as the dispatcher reads it through its MultiKueueCluster kubeconfig: the
read model over the worker's watch caches, and what it says about a gang (`WorkerView`): where
the gang's queue leads, the quota and plans there, the capacity its nodes have now, and the
state of the gang's copy.

Capacity, the admitted gangs not Ready yet and our check on each Workload are read by the same
read model as the worker's own gang check reads them (`readmodel`): its nodes and bound pods,
and the pods of every gang its check admitted that hold no node yet, placed again in their
domain, in admission order. The snapshot is made fresh per dispatch pass.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangplugin.core.dispatch import Copy, CopyState, FlavorQuota, Worker, copy_state
from gangplugin.core.errors import InputError
from gangplugin.core.names import PREEMPTION_ANNOTATION
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.resources import canonical
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.readmodel.model import ReadModel

log = logging.getLogger(__name__)

#: QuotaReserved=False reasons of a Workload Kueue has not decided yet (Kueue >= v0.19); any
#: other reason with a message is its refusal ("Pending" in older Kueues, WaitingForQuota...).
UNDECIDED_REASONS = frozenset({"PendingEvaluation", "WaitingForPreemptedWorkloads", "WaitingForPodsReady"})


@dataclass(frozen=True, slots=True, kw_only=True)
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


class WorkerView:
    def __init__(self, name: str, model: ReadModel) -> None:
        self.name = name
        self.model = model

    # -- where a gang's queue leads ----------------------------------------------------------------

    def target(self, namespace: str, queue: str, requests: Mapping[str, int]) -> Target | str:
        """Where a gang of that LocalQueue name would go here, or why it cannot go here at all."""
        m = self.model
        lq = m.local_queues.get(f"{namespace}/{queue}")
        if lq is None:
            return f"no LocalQueue {namespace}/{queue}"
        cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
        cq = m.cluster_queues.get(cq_name) if cq_name else None
        if cq is None:
            return f"LocalQueue {namespace}/{queue} points at ClusterQueue {cq_name!r}, which does not exist"
        check = m.checks.of_queue(cq, m.our_checks())
        if check is None:
            return (
                f"ClusterQueue {cq_name} has no gangplugin.io/gang check: nothing there admits a gang whole"
            )
        try:
            policy, levels = m.checks.settings(check.policy)
        except InputError as err:
            return f"its gang check cannot be used: {err}"
        plans = tuple(p for p in m.plans.items() if p is not None and p.cluster_queue == cq_name)
        unready = m.unready(check.policy) if policy.sequential else ()
        return Target(
            cluster_queue=cq_name,
            policy=policy,
            levels=levels,
            flavors=self._flavors(cq, requests),
            plans=plans,
            unready=unready,
        )

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
                rf = self.model.flavors.get(name)
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
        for wl in self.model.workloads.items():
            record = self.model.record(wl)
            if record.cluster_queue != cluster_queue or record.finished or not record.quota_reserved:
                continue
            for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
                flavors = psa.get("flavors") or {}
                for r, amount in (psa.get("resourceUsage") or {}).items():
                    try:
                        used[(str(flavors.get(r, "")), str(r))] += canonical(str(r), amount, "resourceUsage")
                    except InputError:
                        continue
        return used

    def worker(self, target: Target, snapshot: Snapshot) -> Worker:
        return Worker(
            name=self.name,
            snapshot=snapshot,
            policy=target.policy,
            cluster_queue=target.cluster_queue,
            flavors=target.flavors,
            plans=target.plans,
            unready=target.unready,
        )

    # -- capacity -----------------------------------------------------------------------------------

    def snapshot(self, levels: tuple[str, ...]) -> Snapshot:
        """Its nodes, bound pods and the capacity its gang check promised to admitted gangs whose
        pods hold no node yet (in admission order), in `levels` order."""
        return self.model.promised_snapshot(levels)

    # -- the gang's copy ----------------------------------------------------------------------------

    def copy(self, key: str) -> Copy:
        """The state of this worker's copy of the manager Workload `key` ("ns/name")."""
        found = self.model.workload(key)
        if found is None:
            return Copy(CopyState.ABSENT)
        wl, record = found
        conds = rec.conditions(wl)
        quota = conds.get("QuotaReserved") or {}
        quota_message = ""
        if quota.get("status") == "False" and str(quota.get("reason", "")) not in UNDECIDED_REASONS:
            quota_message = str(quota.get("message") or "")
        check = self.model.check_of(wl)
        entry = check.entry if check is not None else None
        return copy_state(
            quota_reserved=record.quota_reserved,
            quota_message=quota_message,
            admitted=record.admitted,
            finished=record.finished,
            evicted=record.evicted,
            evicted_message=str((conds.get("Evicted") or {}).get("message") or ""),
            check=entry.state if entry is not None else None,
            check_message=entry.message if entry is not None else "",
            preempting=PREEMPTION_ANNOTATION in ((wl.get("metadata") or {}).get("annotations") or {}),
        )

    def holds_quota(self, key: str) -> bool:
        """Whether its copy of `key` has quota reserved here (its Kueue counts it then)."""
        found = self.model.workload(key)
        return found is not None and found[1].quota_reserved
