"""The capacity the admission pass reads: one core `Snapshot` per topology level order, kept
current from node and pod watch events (O(levels) per event, never a rebuild per pass), plus
the pods promised to admitted gangs that are not bound yet, as synthetic pods.

Everything here is a cache of a function of API objects: built from the watch caches on first
use, so a restarted controller rebuilds the same capacity (promises in admission order).
A promise is redone only when what it stands for changed (the gang's domain or how many of
its pods are bound), so a pass costs O(new admissions), not O(all admitted gangs).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.admission import promise, release
from gangplugin.core.errors import InputError
from gangplugin.core.placement import Gang, PlacementPolicy
from gangplugin.core.topology import Snapshot, build_snapshot
from gangplugin.kube.client import JSON
from gangplugin.kube.records import bound_pod_from_k8s, node_from_k8s

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Promise:
    """What an admitted gang still needs: `gang` (its unbound pods, in its domain), keyed by
    `fingerprint` (changes when the domain or the bound count does)."""

    key: str
    fingerprint: Any
    namespace: str
    gang: Callable[[], Gang]
    policy: PlacementPolicy


@dataclass
class _View:
    snapshot: Snapshot
    promised: dict[str, tuple[Any, str, Gang]] = field(default_factory=dict)  # key -> (fp, ns, gang)


class CapacityView:
    def __init__(self, nodes: Callable[[], Iterable[JSON]], pods: Callable[[], Iterable[JSON]]) -> None:
        self._nodes, self._pods = nodes, pods
        self._views: dict[tuple[str, ...], _View] = {}
        self._lock = threading.Lock()

    # -- watch events (informer threads) ---------------------------------------------------------

    def on_node(self, _kind: str, old: JSON | None, new: JSON | None) -> None:
        with self._lock:
            if not self._views:
                return
            if new is None:
                assert old is not None
                for v in self._views.values():
                    v.snapshot.remove_node(old["metadata"]["name"])
                return
            try:
                node = node_from_k8s(new)
            except InputError as err:
                log.warning("node %s ignored: %s", new.get("metadata", {}).get("name"), err)
                return
            for v in self._views.values():
                v.snapshot.upsert_node(node)

    def on_pod(self, _kind: str, old: JSON | None, new: JSON | None) -> None:
        with self._lock:
            if not self._views:
                return
            obj = new if new is not None else old
            assert obj is not None
            meta = obj.get("metadata", {})
            try:
                pod = bound_pod_from_k8s(new) if new is not None else None
            except InputError:
                pod = None
            for v in self._views.values():
                if pod is None:
                    v.snapshot.unbind(str(meta.get("namespace", "default")), str(meta.get("name", "")))
                else:
                    v.snapshot.bind(pod)

    # -- the admission pass (its one worker) -----------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def snapshot(self, levels: tuple[str, ...], promises: list[Promise]) -> Snapshot:
        """The snapshot for `levels` with exactly `promises` charged (call under `locked`)."""
        view = self._views.get(levels)
        if view is None:
            view = self._views[levels] = _View(self.build(levels))
        wanted = {p.key: p for p in promises}
        for key, (fp, ns, gang) in list(view.promised.items()):
            p = wanted.get(key)
            if p is None or p.fingerprint != fp:
                release(view.snapshot, gang, ns)
                del view.promised[key]
        for p in promises:
            if p.key in view.promised:
                continue
            try:
                gang = p.gang()
            except InputError as err:
                log.warning("admitted workload %s: promised capacity not counted: %s", p.key, err)
                continue
            promise(view.snapshot, gang, p.namespace, p.policy)
            view.promised[p.key] = (p.fingerprint, p.namespace, gang)
        return view.snapshot

    def record(self, levels: tuple[str, ...], key: str, fingerprint: Any, namespace: str, gang: Gang) -> None:
        """A gang this pass admitted and charged to the snapshot (under `locked`)."""
        self._views[levels].promised[key] = (fingerprint, namespace, gang)

    def build(self, levels: tuple[str, ...]) -> Snapshot:
        """Nodes and bound pods as the watch caches hold them now (no promises)."""
        nodes = []
        for obj in self._nodes():
            try:
                nodes.append(node_from_k8s(obj))
            except InputError as err:
                log.warning("node %s ignored: %s", obj.get("metadata", {}).get("name"), err)
        pods = []
        for obj in self._pods():
            try:
                pod = bound_pod_from_k8s(obj)
            except InputError:
                continue
            if pod is not None:
                pods.append(pod)
        return build_snapshot(nodes, pods, levels)
