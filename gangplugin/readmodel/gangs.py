"""A Workload's gang as the core places it: its podsets, named by its gang id, each kept to the
nodes of the ResourceFlavors Kueue assigned it, the placement annotations of a pod group read
from its pods, and the domain our check admitted it to. The gangs that could never start whole
are refused here, for every reader (the admission pass and the MultiKueue dispatcher alike).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gangplugin.core.admission import gang_id, remaining, with_selector
from gangplugin.core.drain import DrainDecision, gang_drain
from gangplugin.core.errors import InputError
from gangplugin.core.names import SLICE_DOMAINS_ANNOTATION
from gangplugin.core.placement import Gang
from gangplugin.core.placement.recorded import parse_slice_domains, with_slice_domains
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.job_records import LEADERWORKERSET, RAYJOB, TRAINJOB
from gangplugin.kube.records import gang_from_k8s
from gangplugin.readmodel.checks import Cache
from gangplugin.readmodel.pods import PodIndex
from gangplugin.readmodel.records import PodRecord

log = logging.getLogger(__name__)

# The podset of a RayJob's submitter pod in Kueue's Workload (K8sJobMode).
RAYJOB_SUBMITTER = "submitter"
# The replicated Jobs a Trainer runtime runs before its trainer Job (Kueue's podsets of a TrainJob).
TRAINER_INITIALIZERS = ("dataset-initializer", "model-initializer")


def refuse_late_members(wl: Mapping[str, Any]) -> None:
    """A gang whose controller makes some of its pods only once others ran could never start
    whole (the ungater and the bind barrier wait for every pod): a RayJob in K8sJobMode, whose
    submitter pod (Kueue's podset "submitter") KubeRay makes once its Ray cluster is Ready, and
    a TrainJob whose runtime has initializers, whose trainer Job the JobSet starts once they
    completed (dependsOn). InputError names the field and the fix."""
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


def gang_of(wl: Mapping[str, Any]) -> Gang:
    """The Workload's podsets as a gang named by its gang id; InputError when it cannot be
    used, or could never start whole (`refuse_late_members`)."""
    refuse_late_members(wl)
    gang = gang_from_k8s(wl)
    return Gang(gang.podsets, gang_id(str(wl["metadata"]["name"])))


def in_domain(gang: Gang, updates: Sequence[Mapping[str, Any]]) -> Gang:
    """The gang with the nodeSelector of each of its podSetUpdates (the domain the check chose)
    and the slice domains it recorded there (`core.placement.recorded`)."""
    slices = {}
    for update in updates:
        name = str(update.get("name"))
        gang = with_selector(gang, update.get("nodeSelector") or {}, [name])
        raw = (update.get("annotations") or {}).get(SLICE_DOMAINS_ANNOTATION)
        if raw is not None:
            try:
                slices[name] = parse_slice_domains(raw, f"podSetUpdates[{name}]")
            except InputError as err:  # a hint only: the slices are placed anew without it
                log.warning("gang %s: recorded slices not used: %s", gang.name, err)
    return with_slice_domains(gang, slices)


_PARSED_MAX = 20_000


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _of_leader_worker_set(wl: Mapping[str, Any]) -> bool:
    owners = wl.get("metadata", {}).get("ownerReferences") or []
    return any(o.get("kind") == LEADERWORKERSET.kind for o in owners)


class Gangs:
    def __init__(
        self,
        pods: Cache[PodRecord],
        index: PodIndex,
        flavors: Cache[JSON],
        plans: Cache[TrainingPlan | None],
    ) -> None:
        self.pods, self.index, self.flavors, self.plans = pods, index, flavors, plans
        # Workload key -> (the cached Workload object, the flavor objects, its gang): every pass
        # reads every admitted gang (promises, victims), and parsing each again was a tenth of
        # the pass's time in a 5,000-node burst. Objects, not resourceVersions, say "unchanged":
        # a copy made for a write keeps its resourceVersion but not its status.
        self._parsed: dict[str, tuple[Mapping[str, Any], Sequence[JSON], Gang]] = {}

    def gang(self, wl: Mapping[str, Any]) -> Gang:
        """The Workload's gang, with the node labels of its assigned flavors in each podset's
        nodeSelector; InputError when it cannot be used."""
        flavors = self.flavors.items()
        annotated = self.with_pod_group_annotations(wl)
        meta = wl.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if annotated is wl:  # a pod group's gang also depends on its pods: never kept
            hit = self._parsed.get(key)
            if hit is not None and hit[0] is wl and _same(hit[1], flavors):
                return hit[2]
        gang = gang_of(annotated)
        for podset, labels in rec.flavor_selector(wl, {f["metadata"]["name"]: f for f in flavors}).items():
            gang = with_selector(gang, labels, [podset])
        if annotated is wl:
            if len(self._parsed) >= _PARSED_MAX:  # Workloads deleted since: start afresh
                self._parsed.clear()
            self._parsed[key] = (wl, flavors, gang)
        return gang

    def promised(self, wl: Mapping[str, Any], updates: Sequence[Mapping[str, Any]]) -> Gang:
        """What our check promised an admitted gang: every pod, in the domain of its podSetUpdates."""
        return in_domain(self.gang(wl), updates)

    def unbound(
        self,
        wl: Mapping[str, Any],
        updates: Sequence[Mapping[str, Any]],
        placed: Mapping[str, Sequence[str]],
        snapshot: Snapshot,
    ) -> Gang:
        """What an admitted gang is still promised: its pods that hold no node yet (`placed`: the
        nodes of those that do, per podset, in `snapshot`), in its domain."""
        counts = {podset: len(on) for podset, on in placed.items()}
        return remaining(self.promised(wl, updates), counts, snapshot, placed)

    def with_pod_group_annotations(self, wl: Mapping[str, Any]) -> Mapping[str, Any]:
        """Kueue builds the podset templates of a plain pod group, and (v0.17) of a
        LeaderWorkerSet's group, without the pods' annotations; the topology annotations a user
        put on the pods (or on the LeaderWorkerSet's templates, which its pods carry) are read
        from the pods: a plain group's owners, a LeaderWorkerSet group's pod of each podset."""
        owners = wl.get("metadata", {}).get("ownerReferences") or []
        ns = wl["metadata"].get("namespace", "")
        raw = (wl.get("spec") or {}).get("podSets") or []
        if owners and all(o.get("kind") == "Pod" for o in owners):
            found = (self.pods.get(f"{ns}/{o.get('name')}") for o in owners)
            first = next((dict(p.placement) for p in found if p is not None and p.placement), {})
            extras = [first for _ in raw]
        elif _of_leader_worker_set(wl):
            by_podset = self._group_pods_by_podset(wl)
            extras = [dict(p.placement) if (p := by_podset.get(str(ps.get("name")))) else {} for ps in raw]
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

    def _group_pods_by_podset(self, wl: Mapping[str, Any]) -> dict[str, PodRecord]:
        """A pod group's pods, one per podset (Kueue names each pod's podset in its role-hash
        annotation); the group is the Workload's name."""
        meta = wl.get("metadata", {})
        out: dict[str, PodRecord] = {}
        for pod in self.index.of_group(meta.get("namespace", ""), meta.get("name", "")):
            if pod.role:
                out.setdefault(pod.role, pod)
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
        """The Workload's ClusterQueue and flavors, and the TrainingPlans feeding that queue."""
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
