"""GangService: gangs read from the watch caches the admission controller keeps.

The phase, domain and explanation are the core's (`core.gangs`); whether a waiting gang fits now
is the admission check's own decision (the core's gate, `core.gate`, over the controller's
promised-capacity snapshot), so `gangctl explain` says exactly what the next admission pass will decide.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc

from gangplugin.admission.controller import GangAdmission
from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc
from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import (
    Evaluation,
    Phase,
    Pods,
    WorkloadState,
    explain,
    gang_domain,
    pod_gang_phase,
    workload_phase,
)
from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.core.timeutil import parse_time, to_seconds
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.informer import Informer

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, gang name)
#: Concurrent WatchGangs streams; each holds a server thread.
MAX_WATCHES = 8


def _active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not (
        pod.get("metadata") or {}
    ).get("deletionTimestamp")


def _count(pods: list[JSON], total: int) -> Pods:
    active = [p for p in pods if _active(p)]
    bound = [p for p in active if (p.get("spec") or {}).get("nodeName")]
    return Pods(total, len(bound), sum(1 for p in bound if rec.pod_ready(p)))


def _created(obj: Mapping[str, Any]) -> float | None:
    try:
        return float(to_seconds(parse_time((obj.get("metadata") or {}).get("creationTimestamp"), "t")))
    except InputError:
        return None


def _size(pods: list[JSON]) -> int:
    sizes = []
    for p in pods:
        value = ((p.get("metadata") or {}).get("annotations") or {}).get(GANG_SIZE_ANNOTATION, "")
        if str(value).isdigit():
            sizes.append(int(value))
    return max(sizes) if sizes else len(pods)


def _check_field(field: str, value: str) -> None:
    if not value:
        raise InputError(field, "is required")
    if len(value) > 253:
        raise InputError(field, "is longer than 253 characters")


def owner_of(wl: Mapping[str, Any]) -> gangs_pb2.Owner | None:
    """The job that owns a Workload: its controller ownerReference (Kueue sets the job as one)."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            group = str(ref.get("apiVersion") or "").rpartition("/")[0]
            return gangs_pb2.Owner(
                group=group, kind=str(ref.get("kind") or ""), name=str(ref.get("name") or "")
            )
    return None


def owned_by(wl: Mapping[str, Any], owner: gangs_pb2.Owner) -> bool:
    """Whether `owner` (kind in any case, group only when given) owns the Workload."""
    found = owner_of(wl)
    return (
        found is not None
        and found.name == owner.name
        and found.kind.lower() == owner.kind.lower()
        and (not owner.group or found.group == owner.group)
    )


def _asked_owner(request: Any) -> gangs_pb2.Owner | None:
    """The owner a request names (None: it asks by name). InputError for a half-given one."""
    if not request.HasField("owner"):
        return None
    owner: gangs_pb2.Owner = request.owner
    if request.name:
        raise InputError("name", "give either name or owner, not both")
    _check_field("owner.kind", owner.kind)
    _check_field("owner.name", owner.name)
    return owner


def _describe(owner: gangs_pb2.Owner) -> str:
    return f"{owner.kind}{'.' + owner.group if owner.group else ''} {owner.name!r}"


class GangService(gangs_pb2_grpc.GangServiceServicer):
    def __init__(
        self,
        admission: GangAdmission,
        local_queues: Informer[JSON],
        cluster_queues: Informer[JSON],
        stop: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.adm, self.local_queues, self.cluster_queues = admission, local_queues, cluster_queues
        self.stop, self.clock = stop, clock
        self._lock = threading.Lock()
        self._watchers: list[queue.SimpleQueue[Key]] = []
        self._by_gang_id: dict[Key, str] = {}  # (ns, gang label) -> Workload name (hashed ids)
        # After the view's handlers, on its dispatcher: a published gang reads an index that
        # already holds the change.
        admission.view.workloads.add_handler(self._on_workload, admission.view.dispatcher)
        admission.view.pods.add_handler(self._on_pod, admission.view.dispatcher)

    # -- watch plumbing: handlers only publish keys ---------------------------------------------

    def _publish(self, key: Key) -> None:
        with self._lock:
            for w in self._watchers:
                w.put(key)

    def _on_workload(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        with self._lock:
            if new is None:
                self._by_gang_id.pop((ns, gang_id(name)), None)
            else:
                self._by_gang_id[(ns, gang_id(name))] = name
        self._publish((ns, name))

    def _on_pod(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang:
            self._publish(self._owner(meta.get("namespace", ""), gang))

    def _owner(self, namespace: str, gang: str) -> Key:
        """The gang a pod label names: its Workload's, else the pod gang of that label."""
        with self._lock:
            return namespace, self._by_gang_id.get((namespace, gang), gang)

    # -- reading gangs ------------------------------------------------------------------------------

    def _check_of(self, wl: Mapping[str, Any], ours: Mapping[str, str | None]) -> str | None:
        """Our check on this Workload: from its status, else from its ClusterQueue's strategy."""
        for state in (wl.get("status") or {}).get("admissionChecks") or []:
            if state.get("name") in ours:
                return str(state["name"])
        cq = self._cluster_queue(wl)
        obj = self.cluster_queues.get(cq) if cq else None
        for rule in (((obj or {}).get("spec") or {}).get("admissionChecksStrategy") or {}).get(
            "admissionChecks"
        ) or []:
            if rule.get("name") in ours:
                return str(rule["name"])
        return None

    def _cluster_queue(self, wl: Mapping[str, Any]) -> str:
        admitted = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if admitted:
            return str(admitted)
        lq_name = (wl.get("spec") or {}).get("queueName")
        lq = self.local_queues.get(f"{wl['metadata'].get('namespace', '')}/{lq_name}") if lq_name else None
        return str(((lq or {}).get("spec") or {}).get("clusterQueue") or "")

    def _bind_mode(self, policy_name: str | None) -> str:
        """The bindMode of the check's GangPolicy ("" when it cannot be read: the check says why)."""
        try:
            return self.adm.view.policy(policy_name).bind_mode
        except InputError:
            return ""

    def _levels(self, policy_name: str | None) -> tuple[str, ...]:
        try:
            return self.adm.view.levels(self.adm.view.policy(policy_name))
        except InputError:
            return DEFAULT_LEVELS

    def _domain(
        self, pinned: Mapping[str, str], pods: list[JSON], levels: tuple[str, ...]
    ) -> tuple[str, str] | None:
        labels = []
        for p in pods:
            node_name = (p.get("spec") or {}).get("nodeName")
            node = self.adm.view.nodes.get(node_name) if node_name and _active(p) else None
            if node is not None:
                labels.append((node.get("metadata") or {}).get("labels") or {})
        return gang_domain(pinned, labels, levels)

    def workload_gang(self, wl: JSON, ours: Mapping[str, str | None]) -> gangs_pb2.Gang | None:
        """The gang of a Workload that passes our check (None for other Workloads)."""
        check = self._check_of(wl, ours)
        if check is None:
            return None
        meta = wl["metadata"]
        ns, gid = meta.get("namespace", ""), gang_id(meta["name"])
        state = rec.check_state(wl, check) or {}
        pods = self.adm.view.gang_pods(ns, gid)
        total = 0
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            count = ps.get("count", 1) if isinstance(ps, Mapping) else 0
            total += count if isinstance(count, int) and not isinstance(count, bool) else 0
        counts = _count(pods, total)
        phase = workload_phase(
            WorkloadState(
                active=(wl.get("spec") or {}).get("active") is not False,
                finished=rec.is_true(wl, "Finished"),
                quota_reserved=rec.is_true(wl, "QuotaReserved"),
                admitted=rec.is_true(wl, "Admitted"),
                evicted=rec.is_true(wl, "Evicted"),
                check_state=state.get("state"),
            ),
            counts,
        )
        pinned: dict[str, str] = {}
        bind_mode = ""
        for upd in state.get("podSetUpdates") or []:
            pinned.update(upd.get("nodeSelector") or {})
            bind_mode = bind_mode or str((upd.get("labels") or {}).get(BIND_MODE_LABEL) or "")
        domain = self._domain(pinned, pods, self._levels(ours[check]))
        return self._message(
            wl,
            kind="Workload",
            gang=gid,
            phase=phase,
            pods=counts,
            domain=domain,
            local_queue=str((wl.get("spec") or {}).get("queueName") or ""),
            cluster_queue=self._cluster_queue(wl),
            admission_check=check,
            check_state=str(state.get("state") or ""),
            message=str(state.get("message") or ""),
            retry_count=int(state.get("retryCount") or 0),
            owner=owner_of(wl),
            bind_mode=bind_mode or self._bind_mode(ours[check]),
        )

    def pod_gang(self, namespace: str, gang: str, pods: list[JSON] | None = None) -> gangs_pb2.Gang | None:
        pods = self.adm.view.gang_pods(namespace, gang) if pods is None else pods
        active = [p for p in pods if _active(p)]
        if not active:
            return None
        counts = _count(active, _size(active))
        oldest = min(active, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        return self._message(
            oldest,
            kind="PodGang",
            name=gang,
            gang=gang,
            phase=pod_gang_phase(counts),
            pods=counts,
            domain=self._domain({}, active, DEFAULT_LEVELS),
            bind_mode="Extender",  # pod gangs outside Kueue always go through the extender
        )

    def _message(
        self,
        obj: Mapping[str, Any],
        *,
        kind: str,
        gang: str,
        phase: Phase,
        pods: Pods,
        domain: tuple[str, str] | None,
        name: str | None = None,
        **extra: Any,
    ) -> gangs_pb2.Gang:
        meta = obj.get("metadata") or {}
        created = _created(obj)
        return gangs_pb2.Gang(
            namespace=meta.get("namespace", ""),
            name=name or meta.get("name", ""),
            kind=kind,
            gang_id=gang,
            pods_total=pods.total,
            pods_bound=pods.bound,
            pods_ready=pods.ready,
            domain_level=domain[0] if domain else "",
            domain_value=domain[1] if domain else "",
            phase=phase.value,
            creation_time=str(meta.get("creationTimestamp") or ""),
            age_seconds=max(0, int(self.clock() - created)) if created is not None else 0,
            **extra,
        )

    def find(self, namespace: str, name: str) -> tuple[gangs_pb2.Gang, JSON | None] | None:
        """A gang by name: the Workload of that name when it is a gang, else the pod gang."""
        wl = self.adm.view.workloads.get(f"{namespace}/{name}")
        if wl is not None:
            found = self.workload_gang(wl, self.adm.view.our_checks())
            if found is not None:
                return found, wl
        with self._lock:
            owned = (namespace, name) in self._by_gang_id
        pod_gang = None if owned else self.pod_gang(namespace, name)
        return None if pod_gang is None else (pod_gang, None)

    def owned(self, namespace: str, owner: gangs_pb2.Owner) -> list[tuple[gangs_pb2.Gang, JSON]]:
        """The gangs of the Workloads `owner` owns in the namespace, by Workload name."""
        ours = self.adm.view.our_checks()
        out = []
        for wl in self.adm.view.workloads.items():
            mine = wl["metadata"].get("namespace") == namespace and owned_by(wl, owner)
            if mine and (g := self.workload_gang(wl, ours)) is not None:
                out.append((g, wl))
        return sorted(out, key=lambda found: found[0].name)

    def gangs(self, namespace: str = "") -> list[gangs_pb2.Gang]:
        ours = self.adm.view.our_checks()
        out = []
        owned: set[Key] = set()
        for wl in self.adm.view.workloads.items():
            meta = wl["metadata"]
            if namespace and meta.get("namespace") != namespace:
                continue
            owned.add((meta.get("namespace", ""), gang_id(meta["name"])))
            if ours and (g := self.workload_gang(wl, ours)) is not None:
                out.append(g)
        plain: dict[Key, list[JSON]] = {}
        for pod in self.adm.view.pods.items():
            meta = pod.get("metadata") or {}
            gang = (meta.get("labels") or {}).get(GANG_LABEL)
            key = (meta.get("namespace", ""), gang or "")
            if gang and (not namespace or key[0] == namespace) and key not in owned:
                plain.setdefault(key, []).append(pod)
        for (ns, gang), pods in plain.items():
            if (g := self.pod_gang(ns, gang, pods)) is not None:
                out.append(g)
        return sorted(out, key=lambda g: (g.namespace, g.name))

    # -- explain -----------------------------------------------------------------------------------

    def evaluate(self, wl: JSON, check: str) -> Evaluation | None:
        """What the admission pass would decide for this waiting gang now: the pass's own
        `evaluate` (the gate of `core.gate`, in its one order) on a fresh snapshot."""
        verdict = self.adm.admission.explain(wl, check, self.clock())
        if verdict is None:
            return None
        if verdict.blocked_by is not None:
            blocker = verdict.blocked_by
            return Evaluation(False, f"waiting for gang {blocker} to be Ready", blocked_by=blocker)
        placement = verdict.decision.placement if verdict.decision is not None else None
        if placement is None or verdict.preemption is not None:  # the message says whom it preempts
            return Evaluation(False, verdict.message)
        return Evaluation(placement.feasible, placement.reason, placement.level, tuple(placement.domains))

    def explanation(self, gang: gangs_pb2.Gang, wl: JSON | None) -> gangs_pb2.GangExplanation:
        evaluation = None
        if wl is not None and gang.phase == Phase.PENDING.value and gang.check_state == "Pending":
            evaluation = self.evaluate(wl, gang.admission_check)
        pods = self.adm.view.gang_pods(gang.namespace, gang.gang_id)
        placements = sorted(
            (
                gangs_pb2.PodPlacement(
                    name=p["metadata"]["name"], node=p["spec"]["nodeName"], ready=rec.pod_ready(p)
                )
                for p in pods
                if _active(p) and (p.get("spec") or {}).get("nodeName")
            ),
            key=lambda p: p.name,
        )
        domain = (gang.domain_level, gang.domain_value) if gang.domain_level else None
        summary = explain(
            Phase(gang.phase),
            Pods(gang.pods_total, gang.pods_bound, gang.pods_ready),
            queue=gang.cluster_queue,
            domain=domain,
            check_message=gang.message,
            retry_count=gang.retry_count,
            evaluation=evaluation,
        )
        out = gangs_pb2.GangExplanation(gang=gang, summary=summary, pods=placements)
        if evaluation is not None:
            out.evaluated = True
            out.fits_now = evaluation.fits
            out.level = evaluation.level or ""
            out.domains.extend(evaluation.domains)
            out.reason = evaluation.reason
        return out

    # -- RPCs ------------------------------------------------------------------------------------

    def _get(self, request: Any, context: grpc.ServicerContext) -> tuple[gangs_pb2.Gang, JSON | None]:
        try:
            _check_field("namespace", request.namespace)
            owner = _asked_owner(request)
            if owner is None:
                _check_field("name", request.name)
        except InputError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if owner is not None:
            return self._get_owned(request.namespace, owner, context)
        found = self.find(request.namespace, request.name)
        if found is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"name {request.name!r}: no gang in namespace {request.namespace!r} (neither a Workload "
                "whose ClusterQueue uses the gangplugin.io/gang check nor pods with that gang label)",
            )
        assert found is not None
        return found

    def _get_owned(
        self, namespace: str, owner: gangs_pb2.Owner, context: grpc.ServicerContext
    ) -> tuple[gangs_pb2.Gang, JSON]:
        found = self.owned(namespace, owner)
        if not found:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"owner: {_describe(owner)} owns no gang in namespace {namespace!r} (no Workload of it yet, "
                "or its ClusterQueue does not use the gangplugin.io/gang check)",
            )
        if len(found) > 1:
            names = ", ".join(g.name for g, _ in found)
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"owner: {_describe(owner)} owns {len(found)} gangs ({names}); ask for one by its name",
            )
        return found[0]

    def GetGang(self, request: gangs_pb2.GetGangRequest, context: grpc.ServicerContext) -> gangs_pb2.Gang:
        return self._get(request, context)[0]

    def ListGangs(
        self, request: gangs_pb2.ListGangsRequest, context: grpc.ServicerContext
    ) -> gangs_pb2.ListGangsResponse:
        return gangs_pb2.ListGangsResponse(gangs=self.gangs(request.namespace))

    def ExplainGang(
        self, request: gangs_pb2.ExplainGangRequest, context: grpc.ServicerContext
    ) -> gangs_pb2.GangExplanation:
        gang, wl = self._get(request, context)
        return self.explanation(gang, wl)

    def WatchGangs(
        self, request: gangs_pb2.WatchGangsRequest, context: grpc.ServicerContext
    ) -> Iterator[gangs_pb2.GangEvent]:
        if request.name and not request.namespace:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "namespace: is required when name is given")
        try:
            owner = _asked_owner(request)
        except InputError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if owner is not None and not request.namespace:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "namespace: is required when owner is given")
        events: queue.SimpleQueue[Key] = queue.SimpleQueue()
        with self._lock:
            if len(self._watchers) >= MAX_WATCHES:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, f"{MAX_WATCHES} watches are open; try again later"
                )
            self._watchers.append(events)
        try:
            yield from self._watch(request, context, events)
        finally:
            with self._lock:
                self._watchers.remove(events)

    def _watch(
        self,
        request: gangs_pb2.WatchGangsRequest,
        context: grpc.ServicerContext,
        events: queue.SimpleQueue[Key],
    ) -> Iterator[gangs_pb2.GangEvent]:
        owner = request.owner if request.HasField("owner") else None

        def wanted(key: Key) -> bool:
            if request.namespace and key[0] != request.namespace:
                return False
            if owner is not None:  # a gone Workload is still told about (DELETED) once sent
                wl = self.adm.view.workloads.get(f"{key[0]}/{key[1]}")
                return key in sent or (wl is not None and owned_by(wl, owner))
            return not request.name or key[1] == request.name

        def same(a: gangs_pb2.Gang, b: gangs_pb2.Gang) -> bool:
            return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)

        def without_age(g: gangs_pb2.Gang) -> gangs_pb2.Gang:
            copy = gangs_pb2.Gang()
            copy.CopyFrom(g)
            copy.age_seconds = 0
            return copy

        sent: dict[Key, gangs_pb2.Gang] = {}
        if owner is not None:
            initial = [g for g, _ in self.owned(request.namespace, owner)]
        elif request.name:
            found = self.find(request.namespace, request.name)
            initial = [] if found is None else [found[0]]
        else:
            initial = self.gangs(request.namespace)
        for g in initial:
            sent[(g.namespace, g.name)] = without_age(g)
            yield gangs_pb2.GangEvent(type="ADDED", gang=g)
        while context.is_active() and not self.stop.is_set():
            try:
                keys = {events.get(timeout=1.0)}
            except queue.Empty:
                continue
            while not events.empty():
                keys.add(events.get_nowait())
            for key in sorted(k for k in keys if wanted(k)):
                found = self.find(*key)
                prev = sent.get(key)
                if found is None:
                    if prev is not None:
                        del sent[key]
                        yield gangs_pb2.GangEvent(type="DELETED", gang=prev)
                    continue
                now = without_age(found[0])
                if prev is None or not same(prev, now):
                    sent[key] = now
                    yield gangs_pb2.GangEvent(type="ADDED" if prev is None else "MODIFIED", gang=found[0])
