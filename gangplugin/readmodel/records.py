"""The typed records the read model keeps of Kubernetes objects: what the gang check reads of
a node, a pod and a Workload, parsed once (a node or pod when its watch event arrives, a
Workload once per resourceVersion), so no reader parses JSON again.

Transforms never raise: a node whose capacity cannot be read is kept with `node=None` (it
holds no capacity, its readiness still counts), a pod whose requests cannot be read holds none.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangplugin.core.admission import QueuedWorkload, gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.keys import KUEUE_PODSET_PREFIX
from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION, GROUP, READY_AT_ANNOTATION
from gangplugin.core.states import CheckState
from gangplugin.core.topology import FINISHED_PHASES, HOSTNAME_LABEL, BoundPod, Node
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.informer import object_key
from gangplugin.kube.records import bound_pod_from_k8s, node_from_k8s

log = logging.getLogger(__name__)

# Kueue's pod-group integrations mark each pod with its group (the Workload's name) and name its
# podset in an annotation.
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
ROLE_ANNOTATION = "kueue.x-k8s.io/role-hash"
# Kueue's name for the podset of a pod that carries none (a Job's only podset).
DEFAULT_PODSET = "main"
# PodsReady reasons of a gang that lost a pod or a node after it ran and is being made whole
# again (Kueue's waitForPodsReady recovery): it was Ready, and counts so (the Sequential rule).
RECOVERING_REASONS = frozenset({"WaitForRecovery", "Recovered"})
JOB_KIND = ("batch/v1", "Job")


@dataclass(frozen=True, slots=True)
class JobRef:
    """The batch Job an object names as an owner (a Workload Kueue made for it, its pods)."""

    name: str
    uid: str


def job_owner(meta: Mapping[str, Any]) -> JobRef | None:
    """The batch Job among `meta`'s ownerReferences (None: none)."""
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, Mapping) and (owner.get("apiVersion"), owner.get("kind")) == JOB_KIND:
            return JobRef(str(owner.get("name", "")), str(owner.get("uid", "")))
    return None


# -- nodes ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """A node: `node` as placement reads it (None: its capacity cannot be read), its labels,
    whether it is Ready and since when (its Ready condition's last transition; None: unknown)."""

    name: str
    node: Node | None
    labels: Mapping[str, str]
    ready: bool
    ready_since: float | None


def node_record(obj: JSON) -> NodeRecord:
    """The node watch cache's transform."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    try:
        node: Node | None = node_from_k8s(obj)
    except InputError as err:
        log.warning("node %s holds no capacity: %s", name, err)
        node = None
    try:
        ready, since = rec.node_ready_since(obj)
    except InputError:
        ready, since = node is not None and node.ready, None
    if node is not None:
        labels: Mapping[str, str] = node.labels
    else:
        raw = (obj.get("metadata") or {}).get("labels") or {}
        labels = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    return NodeRecord(name=name, node=node, labels=labels, ready=ready, ready_since=since)


# -- pods ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRecord:
    """A pod as the gang check reads it. `gang`: its gangplugin.io/gang label; `pod_group`: the
    Kueue pod group it belongs to (`role`: its podset there); `placement`: its annotations under
    our prefix and Kueue's podset prefix (a pod group's topology is read from its pods);
    `bound`: the capacity it holds (None: not bound, or finished), on the node a gang's pod is
    pinned to until it is bound there; `scheduled_at`: when it got its
    node (the console's timeline of a gang)."""

    namespace: str
    name: str
    uid: str
    node: str | None
    phase: str
    deleting: bool
    ready: bool
    created: str
    gang: str | None
    gang_size: int | None
    podset: str | None  # its Kueue podset label (None: none)
    pod_group: str | None
    role: str | None
    placement: tuple[tuple[str, str], ...]
    bound: BoundPod | None
    scheduled_at: float | None = None  # when it got its node (PodScheduled True; None: not yet)
    ready_changed: float | None = None  # when its Ready condition last changed (None: not said)
    job: JobRef | None = None  # the batch Job that owns it (None: none)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def active(self) -> bool:
        """Not finished and not being deleted: a member of its gang."""
        return self.phase not in FINISHED_PHASES and not self.deleting

    @property
    def placed_on(self) -> str | None:
        """The node of an active pod bound to one."""
        return self.node if self.node and self.active else None


def _size(raw: object) -> int | None:
    text = str(raw or "").strip()
    return int(text) if text.isdigit() else None


def _scheduled_at(obj: JSON) -> float | None:
    c = rec.conditions(obj).get("PodScheduled") or {}
    if c.get("status") != "True" or not c.get("lastTransitionTime"):
        return None
    try:
        return rec.epoch(c["lastTransitionTime"], "status.conditions[PodScheduled].lastTransitionTime")
    except InputError:
        return None


def _pinned_node(labels: JSON, meta: JSON, spec: JSON, status: JSON) -> str | None:
    """The node the ungater pinned a gang's pod to (nodeSelector on its hostname, no gate left)
    while kube-scheduler has not bound it yet: the capacity counts it there, not promised anew
    (the promise of a gang's unbound pods, placed again once some are bound, went to other
    UltraServers of a wide domain than the pins, and the check admitted a gang onto the nodes
    the pinned pods were about to take: at 500 nodes, held back 46-51 s by the ungater)."""
    selector = spec.get("nodeSelector") or {}
    node = selector.get(HOSTNAME_LABEL) if isinstance(selector, dict) else None
    if (
        spec.get("nodeName")
        or not node
        or not labels.get(GANG_LABEL)
        or spec.get("schedulingGates")
        or meta.get("deletionTimestamp")
        or str(status.get("phase", "")) in FINISHED_PHASES
    ):
        return None
    return str(node)


def pod_record(obj: JSON) -> PodRecord:
    """The pod watch cache's transform."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    try:
        pinned = _pinned_node(labels, meta, spec, status)
        bound = bound_pod_from_k8s({**obj, "spec": {**spec, "nodeName": pinned}} if pinned else obj)
    except InputError:
        bound = None
    return PodRecord(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node=str(spec["nodeName"]) if spec.get("nodeName") else None,
        phase=str(status.get("phase", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=rec.pod_ready(obj),
        created=str(meta.get("creationTimestamp") or ""),
        gang=str(labels[GANG_LABEL]) if labels.get(GANG_LABEL) else None,
        gang_size=_size(annotations.get(GANG_SIZE_ANNOTATION)),
        podset=str(labels[rec.PODSET_LABEL]) if labels.get(rec.PODSET_LABEL) else None,
        pod_group=str(group)
        if (group := labels.get(POD_GROUP_LABEL) or annotations.get(POD_GROUP_LABEL))
        else None,
        role=str(annotations[ROLE_ANNOTATION]) if annotations.get(ROLE_ANNOTATION) else None,
        placement=tuple(
            sorted(
                (str(k), str(v))
                for k, v in annotations.items()
                if str(k).startswith((f"{GROUP}/", KUEUE_PODSET_PREFIX))
            )
        ),
        bound=bound,
        scheduled_at=_scheduled_at(obj),
        ready_changed=rec.ready_changed(obj),
        job=job_owner(meta),
    )


# -- Workloads -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckEntry:
    """One admission check's entry in a Workload's `status.admissionChecks`."""

    name: str
    state: CheckState | None
    message: str
    retry_count: int
    pod_set_updates: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodsReady:
    """Kueue's PodsReady condition (set because waitForPodsReady is on)."""

    status: bool
    reason: str
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRecord:
    """What the gang check reads of a Workload's metadata and status (times in epoch seconds,
    0 when unknown). Its podsets are read separately (`gangs.py`): they can fail to parse."""

    key: str
    namespace: str
    name: str
    gang_id: str
    resource_version: str
    checks: tuple[CheckEntry, ...]
    quota_reserved: bool
    admitted: bool
    finished: bool
    evicted: bool
    deleting: bool  # metadata.deletionTimestamp: its job was deleted, Kueue lets it go
    active: bool
    quota_reserved_at: float
    created_at: float
    admitted_at: float
    pods_ready: PodsReady | None
    cluster_queue: str
    queue_name: str
    size: int
    # A kind whose PodsReady Kueue sets when the job runs, not when its pods are Ready (Kubeflow's):
    # the watchdog says when the gang was fully Ready instead (READY_AT_ANNOTATION, `ready_at`).
    pods_ready_means_running: bool = False
    ready_at: float | None = None

    def check(self, names: Mapping[str, object] | frozenset[str]) -> CheckEntry | None:
        """The entry of the first of `names` the Workload carries."""
        for c in self.checks:  # a loop, not next(genexpr): every pass asks for every Workload
            if c.name in names:
                return c
        return None

    def queued(
        self, state: CheckState | None, policy: str | None = None, *, assumed: bool = False
    ) -> QueuedWorkload:
        """The Workload as the admission order (`core.admission.admission_queue`) reads it, with
        its check in `state` under GangPolicy `policy`; `assumed`: see `QueuedWorkload`."""
        return QueuedWorkload(
            key=self.key,
            policy=policy,
            state=state,
            quota_reserved=self.quota_reserved,
            finished=self.finished,
            evicted=self.evicted,
            quota_reserved_at=self.quota_reserved_at,
            created_at=self.created_at,
            admitted_at=self.admitted_at,
            ever_ready=self.ever_ready,
            assumed=assumed,
        )

    @property
    def ever_ready(self) -> bool:
        """Whether the gang was fully Ready since its current admission: its PodsReady is newer
        than its Admitted, and True, or a recovery from a failed node (WaitForRecovery,
        Recovered: it ran, and is being made whole); for a kind whose PodsReady says only that it
        runs, the watchdog's READY_AT_ANNOTATION since its admission. The one Sequential rule:
        every reader of "admitted and not Ready yet" counts by it."""
        if self.pods_ready_means_running:
            return self.ready_at is not None and self.ready_at >= self.admitted_at
        pr = self.pods_ready
        if pr is None or pr.at < self.admitted_at:
            return False  # none, or left over from an earlier admission
        return pr.status or pr.reason in RECOVERING_REASONS


def _time(obj: Mapping[str, Any], kind: str) -> float:
    c = rec.conditions(obj).get(kind) or {}
    try:
        return rec.epoch(c.get("lastTransitionTime"), f"status.conditions[{kind}].lastTransitionTime")
    except InputError:
        return 0.0


def _created(meta: Mapping[str, Any]) -> float:
    try:
        return rec.epoch(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    except InputError:
        return 0.0


def _entry(raw: Mapping[str, Any]) -> CheckEntry:
    retries = raw.get("retryCount")
    return CheckEntry(
        name=str(raw.get("name", "")),
        state=CheckState.of(raw.get("state")),
        message=str(raw.get("message") or ""),
        retry_count=retries if isinstance(retries, int) and not isinstance(retries, bool) else 0,
        pod_set_updates=tuple(u for u in raw.get("podSetUpdates") or () if isinstance(u, Mapping)),
    )


def workload_record(wl: Mapping[str, Any]) -> WorkloadRecord:
    meta = wl.get("metadata") or {}
    conds = rec.conditions(wl)
    status, spec = wl.get("status") or {}, wl.get("spec") or {}
    pr = conds.get("PodsReady")
    size = 0
    for ps in spec.get("podSets") or []:
        count = ps.get("count", 1) if isinstance(ps, Mapping) else 0
        size += count if isinstance(count, int) and not isinstance(count, bool) else 0
    return WorkloadRecord(
        key=object_key(dict(wl)),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        gang_id=gang_id(str(meta.get("name", ""))),
        resource_version=str(meta.get("resourceVersion", "")),
        checks=tuple(_entry(c) for c in status.get("admissionChecks") or () if isinstance(c, Mapping)),
        quota_reserved=(conds.get("QuotaReserved") or {}).get("status") == "True",
        admitted=(conds.get("Admitted") or {}).get("status") == "True",
        finished=(conds.get("Finished") or {}).get("status") == "True",
        evicted=(conds.get("Evicted") or {}).get("status") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        active=spec.get("active") is not False,
        quota_reserved_at=_time(wl, "QuotaReserved"),
        created_at=_created(meta),
        admitted_at=_time(wl, "Admitted"),
        pods_ready=None
        if pr is None
        else PodsReady(
            status=pr.get("status") == "True", reason=str(pr.get("reason") or ""), at=_time(wl, "PodsReady")
        ),
        cluster_queue=str((status.get("admission") or {}).get("clusterQueue") or ""),
        queue_name=str(spec.get("queueName") or ""),
        size=size,
        pods_ready_means_running=rec.pods_ready_means_running(wl),
        ready_at=_annotated_time(meta, READY_AT_ANNOTATION),
    )


def _annotated_time(meta: Mapping[str, Any], key: str) -> float | None:
    raw = (meta.get("annotations") or {}).get(key)
    try:
        return rec.epoch(raw, key) if raw else None
    except InputError:
        return None
