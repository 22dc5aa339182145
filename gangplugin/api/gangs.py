"""GangService: gangs read from the read model.

The phase, domain and explanation are the core's (`core.gangs`), each gang summarized by the
read model (`readmodel.summaries`); whether a waiting gang fits now is the admission check's own
decision (the core's gate, `core.gate`, over the facts the admission pass reads too,
`readmodel.decisions.explain`), so `gangctl explain` says exactly what the next admission pass
will decide.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc
from gangplugin.api.replies import or_not_found
from gangplugin.core.errors import InputError
from gangplugin.kube.client import JSON
from gangplugin.readmodel import decisions
from gangplugin.readmodel.model import Follower, ReadModel
from gangplugin.readmodel.records import PodRecord, WorkloadRecord
from gangplugin.readmodel.summaries import GangSummary, Owner, Summaries, owner_of

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, gang name)
#: Concurrent WatchGangs streams; each holds a server thread.
MAX_WATCHES = 8


#: The gate's steps whose message tells a waiting gang more than placement's reason does.
def _check_field(field: str, value: str) -> None:
    if not value:
        raise InputError(field, "is required")
    if len(value) > 253:
        raise InputError(field, "is longer than 253 characters")


def _owner(owner: gangs_pb2.Owner) -> Owner:
    return Owner(group=owner.group, kind=owner.kind, name=owner.name)


def _asked_owner(request: Any) -> Owner | None:
    """The owner a request names (None: it asks by name). InputError for a half-given one."""
    if not request.HasField("owner"):
        return None
    owner: gangs_pb2.Owner = request.owner
    if request.name:
        raise InputError("name", "give either name or owner, not both")
    _check_field("owner.kind", owner.kind)
    _check_field("owner.name", owner.name)
    return _owner(owner)


def _describe(owner: Owner) -> str:
    return f"{owner.kind}{'.' + owner.group if owner.group else ''} {owner.name!r}"


class _Publisher(Follower):
    """The read model's changes, as the keys of the gangs they touch, for every open watch."""

    def __init__(self, model: ReadModel) -> None:
        self.model = model
        self._lock = threading.Lock()
        self.watchers: list[queue.SimpleQueue[Key]] = []

    def publish(self, key: Key) -> None:
        with self._lock:
            for w in self.watchers:
                w.put(key)

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        some = new or old
        assert some is not None
        self.publish((some.namespace, some.name))

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        some = new or old
        assert some is not None
        if some.gang:  # the gang a pod label names: its Workload's, else the pod gang of that label
            owner = self.model.workload_of_gang(some.namespace, some.gang)
            self.publish((some.namespace, owner.partition("/")[2] if owner else some.gang))

    def add(self, events: queue.SimpleQueue[Key]) -> bool:
        with self._lock:
            if len(self.watchers) >= MAX_WATCHES:
                return False
            self.watchers.append(events)
            return True

    def remove(self, events: queue.SimpleQueue[Key]) -> None:
        with self._lock:
            self.watchers.remove(events)


class GangService(gangs_pb2_grpc.GangServiceServicer):
    def __init__(
        self, model: ReadModel, stop: threading.Event, clock: Callable[[], float] = time.time
    ) -> None:
        self.model = model
        self.summaries = Summaries(model)
        self.stop, self.clock = stop, clock
        self.publisher = _Publisher(model)
        model.follow(self.publisher)

    def message(self, g: GangSummary) -> gangs_pb2.Gang:
        """The wire form of a gang."""
        out = gangs_pb2.Gang(
            namespace=g.namespace,
            name=g.name,
            kind=g.kind.value,
            gang_id=g.gang_id,
            pods_total=g.pods.total,
            pods_bound=g.pods.bound,
            pods_ready=g.pods.ready,
            domain_level=g.domain[0] if g.domain else "",
            domain_value=g.domain[1] if g.domain else "",
            phase=g.phase.value,
            creation_time=g.created,
            age_seconds=max(0, int(self.clock() - g.created_at)) if g.created_at is not None else 0,
            bind_mode=g.bind_mode,
        )
        if g.kind.value == "Workload":
            out.local_queue = g.local_queue
            out.cluster_queue = g.cluster_queue
            out.admission_check = g.admission_check
            out.check_state = g.check_state.value if g.check_state is not None else ""
            out.message = g.message
            out.retry_count = g.retry_count
            if g.owner is not None:
                out.owner.CopyFrom(gangs_pb2.Owner(group=g.owner.group, kind=g.owner.kind, name=g.owner.name))
        return out

    def find(self, namespace: str, name: str) -> tuple[gangs_pb2.Gang, GangSummary, JSON | None] | None:
        found = self.summaries.find(namespace, name)
        return None if found is None else (self.message(found[0]), found[0], found[1])

    # -- explain -----------------------------------------------------------------------------------

    def explanation(self, gang: GangSummary, wl: JSON | None) -> gangs_pb2.GangExplanation:
        said = decisions.explained(self.model, gang, wl, self.clock())
        evaluation, record, worker = said.evaluation, said.dispatch, said.worker
        pods = self.model.gang_pods(gang.namespace, gang.gang_id)
        placements = sorted(
            (
                gangs_pb2.PodPlacement(name=p.name, node=p.placed_on, ready=p.ready)
                for p in pods
                if p.placed_on is not None
            ),
            key=lambda p: p.name,
        )
        out = gangs_pb2.GangExplanation(
            gang=self.message(gang), summary=said.text, pods=placements, worker=worker
        )
        if evaluation is not None:
            out.evaluated = True
            out.fits_now = evaluation.fits
            out.level = evaluation.level or ""
            out.domains.extend(evaluation.domains)
            out.reason = evaluation.reason
        for v in record.verdicts if record is not None else ():
            out.workers.append(
                gangs_pb2.WorkerVerdict(
                    name=v.worker,
                    fits=v.fits,
                    chosen=v.chosen,
                    reason=v.reason,
                    flavor=v.flavor or "",
                    level=v.level or "",
                    domains=list(v.domains),
                    room=v.room or 0,
                )
            )
        return out

    # -- RPCs ------------------------------------------------------------------------------------

    def _get(self, request: Any, context: grpc.ServicerContext) -> tuple[GangSummary, JSON | None]:
        try:
            _check_field("namespace", request.namespace)
            owner = _asked_owner(request)
            if owner is None:
                _check_field("name", request.name)
        except InputError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if owner is not None:
            return self._get_owned(request.namespace, owner, context)
        return or_not_found(
            self.summaries.find(request.namespace, request.name),
            context,
            f"name {request.name!r}: no gang in namespace {request.namespace!r} (neither a Workload "
            "whose ClusterQueue uses the gangplugin.io/gang check nor pods with that gang label)",
        )

    def _get_owned(
        self, namespace: str, owner: Owner, context: grpc.ServicerContext
    ) -> tuple[GangSummary, JSON]:
        found = self.summaries.owned(namespace, owner)
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
        return self.message(self._get(request, context)[0])

    def ListGangs(
        self, request: gangs_pb2.ListGangsRequest, context: grpc.ServicerContext
    ) -> gangs_pb2.ListGangsResponse:
        return gangs_pb2.ListGangsResponse(
            gangs=[self.message(g) for g in self.summaries.all(request.namespace)]
        )

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
        if not self.publisher.add(events):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"{MAX_WATCHES} watches are open; try again later"
            )
        try:
            yield from self._watch(request, owner, context, events)
        finally:
            self.publisher.remove(events)

    def _initial(self, request: gangs_pb2.WatchGangsRequest, owner: Owner | None) -> list[gangs_pb2.Gang]:
        if owner is not None:
            return [self.message(g) for g, _ in self.summaries.owned(request.namespace, owner)]
        if request.name:
            found = self.find(request.namespace, request.name)
            return [] if found is None else [found[0]]
        return [self.message(g) for g in self.summaries.all(request.namespace)]

    def _watch(
        self,
        request: gangs_pb2.WatchGangsRequest,
        owner: Owner | None,
        context: grpc.ServicerContext,
        events: queue.SimpleQueue[Key],
    ) -> Iterator[gangs_pb2.GangEvent]:
        def wanted(key: Key) -> bool:
            if request.namespace and key[0] != request.namespace:
                return False
            if owner is not None:  # a gone Workload is still told about (DELETED) once sent
                wl = self.model.workloads.get(f"{key[0]}/{key[1]}")
                job = owner_of(wl) if wl is not None else None
                return key in sent or (job is not None and job.owns(owner))
            return not request.name or key[1] == request.name

        sent: dict[Key, bytes] = {}  # what was sent last, its age left out
        for g in self._initial(request, owner):
            sent[(g.namespace, g.name)] = _ageless(g)
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
                        gone = gangs_pb2.Gang()
                        gone.ParseFromString(prev)
                        yield gangs_pb2.GangEvent(type="DELETED", gang=gone)
                    continue
                now = _ageless(found[0])
                if prev != now:
                    sent[key] = now
                    yield gangs_pb2.GangEvent(type="ADDED" if prev is None else "MODIFIED", gang=found[0])


def _ageless(g: gangs_pb2.Gang) -> bytes:
    """The gang as sent, but for its age (which changes every second): what tells a change."""
    copy = gangs_pb2.Gang()
    copy.CopyFrom(g)
    copy.age_seconds = 0
    return copy.SerializeToString(deterministic=True)
