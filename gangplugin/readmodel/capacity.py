"""The capacity the gang check counts, kept live (as Kueue's TAS cache is kept apart from the
snapshot a scheduling cycle takes of it): the nodes and bound pods as the read model's handlers
have seen them (a gang's pod the ungater pinned counts on its node until it is bound there);
for the admission pass, one core `Snapshot` per topology level order, kept current from node
and pod watch events (O(levels) per event, never a rebuild per pass), plus
the pods promised to admitted gangs that are not bound yet, as synthetic pods; for any other
reader, a fresh snapshot (`build`).

Everything here is a cache of a function of API objects: built from the watch caches on first
use, so a restarted controller rebuilds the same capacity (promises in admission order).
A promise is redone only when what it stands for changed (the gang's domain or how many of
its pods are bound), so a pass costs O(new admissions), not O(all admitted gangs).

Admissions the pass wrote but the Workload cache has not shown yet are *assumed*, as
kube-scheduler assumes a pod it is binding: their capacity stays charged, in every level order,
until the cache holds a newer version of the Workload than the one the write was made on.
Without that, a pass running on a cache that still shows such a gang Pending released its
capacity and could promise the same nodes to the next gang in the queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.admission import charge, crowded, promise, release
from gangplugin.core.errors import InputError
from gangplugin.core.placement import Gang, Placement, PlacementPolicy
from gangplugin.core.topology import BoundPod, Node, Snapshot, build_snapshot
from gangplugin.readmodel.records import NodeRecord, PodRecord
from gangplugin.runtime.memory import freeze_long_lived

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Promise:
    """What an admitted gang still needs: `gang` (its unbound pods, in its domain), keyed by
    `fingerprint` (changes when the domain or the bound count does)."""

    key: str
    fingerprint: Any
    namespace: str
    gang: Callable[[Snapshot], Gang]  # of the snapshot it is promised into (its nodes' labels)
    policy: PlacementPolicy
    occupied: tuple[str, ...] = ()  # the nodes of its bound pods (their UltraServers' spares are its)


@dataclass(frozen=True, slots=True, kw_only=True)
class Assumed:
    """A gang the pass admitted (wrote Ready) that the cache still shows as before the write.

    `resource_version`: the version the write was conditioned on; the cache showing any other
    version has seen the write. `certain`: False when the write's outcome is unknown (a
    transport error): the Workload is read again before the admission is forgotten."""

    resource_version: str
    certain: bool
    fingerprint: Any
    namespace: str
    gang: Gang  # with its domain in the nodeSelector
    placement: Placement
    policy: PlacementPolicy


@dataclass
class _View:
    snapshot: Snapshot
    promised: dict[str, tuple[Any, str, Gang]] = field(default_factory=dict)  # key -> (fp, ns, gang)
    # promises charged only in part (they no longer fit whole): placed again at every snapshot,
    # since the room they lack may have come back
    partial: set[str] = field(default_factory=set)


class LiveCapacity:
    def __init__(self) -> None:
        # Nodes and bound pods as the handlers have seen them, in the dispatcher's order: a view
        # built from the informers' stores (ahead of the dispatcher) would have older queued
        # events applied on top of newer state.
        self._nodes: dict[str, Node] = {}
        self._bound: dict[tuple[str, str], BoundPod] = {}
        self._views: dict[tuple[str, ...], _View] = {}
        self._lock = threading.RLock()  # `snapshot` builds under it
        self.assumed: dict[str, Assumed] = {}  # Workload key -> its admission in flight

    # -- watch events (the read model's dispatcher) -------------------------------------------

    def on_node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        with self._lock:
            if new is None:
                assert old is not None
                self._nodes.pop(old.name, None)
                for v in self._views.values():
                    v.snapshot.remove_node(old.name)
                return
            node = new.node
            if node is None:
                return  # its capacity cannot be read (logged by the cache): counted as it was
            self._nodes[node.name] = node
            for v in self._views.values():
                v.snapshot.upsert_node(node)

    def on_pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        with self._lock:
            some = new or old
            assert some is not None
            pod = new.bound if new is not None else None
            if pod is None:
                self._bound.pop(some.key, None)
            else:
                self._bound[some.key] = pod
            for v in self._views.values():
                if pod is None:
                    v.snapshot.unbind(*some.key)
                else:
                    v.snapshot.bind(pod)

    # -- the admission pass (its one worker) -----------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def snapshot(self, levels: tuple[str, ...], promises: list[Promise]) -> Snapshot:
        """The snapshot for `levels` with exactly `promises` and the assumed admissions charged
        (call under `locked`)."""
        view = self._views.get(levels)
        if view is None:
            view = self._views[levels] = _View(self.build(levels))
            freeze_long_lived()  # kept current for the life of the process, never rebuilt
        wanted = {p.key: p for p in promises}
        for key, (fp, ns, gang) in list(view.promised.items()):
            p = wanted.get(key)
            kept = (
                p.fingerprint == fp
                if p is not None
                else key in self.assumed and self.assumed[key].fingerprint == fp
            )
            if not kept or key in view.partial:
                release(view.snapshot, gang, ns)
                del view.promised[key]
                view.partial.discard(key)
        # Promises charged where real pods have bound since are placed again, in admission order.
        for key, (_, ns, gang) in list(view.promised.items()):
            if crowded(view.snapshot, gang, ns):
                release(view.snapshot, gang, ns)
                del view.promised[key]
        for key, a in self.assumed.items():
            if key not in view.promised and key not in wanted:
                # placed again in its domain; where it no longer fits, counted where it was decided
                if not promise(view.snapshot, a.gang, a.namespace, a.policy):
                    charge(view.snapshot, a.gang, a.placement, a.namespace)
                view.promised[key] = (a.fingerprint, a.namespace, a.gang)
        for p in promises:
            if p.key in view.promised:
                continue
            try:
                gang = p.gang(view.snapshot)
            except InputError as err:
                log.warning("admitted workload %s: promised capacity not counted: %s", p.key, err)
                continue
            charged = promise(view.snapshot, gang, p.namespace, p.policy, p.occupied, keep_what_fits=True)
            view.promised[p.key] = (p.fingerprint, p.namespace, gang)
            if charged < sum(ps.count for ps in gang.podsets):
                view.partial.add(p.key)
        return view.snapshot

    def assume(self, key: str, admission: Assumed) -> None:
        """Charge an admission the pass decided to every level order's snapshot (under `locked`),
        and keep it charged until `forget`: the pass's next decisions and passes count it."""
        self.assumed[key] = admission
        for view in self._views.values():
            if key not in view.promised:
                charge(view.snapshot, admission.gang, admission.placement, admission.namespace)
                view.promised[key] = (admission.fingerprint, admission.namespace, admission.gang)

    def forget(self, key: str) -> None:
        """The admission is no longer assumed: its write failed, or the cache shows the Workload
        as it is now. The next `snapshot` keeps its capacity only if it is a promise."""
        self.assumed.pop(key, None)

    def build(self, levels: tuple[str, ...]) -> Snapshot:
        """A fresh snapshot of the nodes and bound pods as the handlers have seen them (no
        promises), for a reader off the admission pass (a what-if, a node replacement)."""
        with self._lock:
            return build_snapshot(self._nodes.values(), self._bound.values(), levels)
