"""Capacity the gang check promised to admitted gangs, held in the gang reservations from the
moment of admission until the gang's own pods hold it.

The check admits a gang into its domain (check Ready with podSetUpdates) before any of its pods
exists. Until the gang is planned (the ungater's pins; the filter's plan in bindMode Extender)
nothing else in the reservations holds that capacity, and a plain pod kube-scheduler found room
for could take it, leaving the gang short in its domain. So the pods of each admitted gang that
hold no node yet are charged to every snapshot exactly as the check counts them
(`core.admission.promise`: synthetic pods placed in the gang's domain). The filter then keeps
plain pods off that capacity (`filter_single_pod`), and other gangs' plans leave it alone. A
gang's promise gives way to its own plan (whose placeholders, then pins and bound pods, hold the
nodes) and comes back for what the plan did not place when that plan is dropped.

Promises are redone lazily: an event only marks the gangs it touches (`stale`: redone if what
they stand for changed, the admission or the gang's placed pods; `moved`: redone anyway, the
capacity under them changed), and the next call that reads capacity redoes them. A burst of
events (the first list of 5,000 nodes, the pods of a 1,024-pod gang created one by one) costs
one placement per admitted gang, not one per event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gangplugin.core.admission import crowded, promise, promised_pods, release, remaining
from gangplugin.core.gangplan import GangKey
from gangplugin.core.placement import Gang, PlacementPolicy
from gangplugin.core.topology import ULTRASERVER_LABEL, Snapshot


@dataclass(frozen=True, slots=True)
class AdmittedGang:
    """What the gang check promised: every pod of the gang, in its domain (the podSetUpdates'
    nodeSelector), named by its gang id, placed by its GangPolicy."""

    gang: Gang
    policy: PlacementPolicy


@dataclass(frozen=True, slots=True)
class _Charged:
    admitted: AdmittedGang
    placed: tuple[tuple[str, tuple[str, ...]], ...]  # the nodes of the gang's pods that held one, per podset
    rest: Gang  # the pods that held no node when it was charged
    occupied: tuple[str, ...]  # the nodes its placed pods hold (their UltraServers' spares are its)
    nodes: frozenset[str]  # where the promise sits in the default snapshot
    whole: bool  # every pod of `rest` fitted

    def key(self) -> tuple[AdmittedGang | None, tuple[tuple[str, tuple[str, ...]], ...]]:
        """What it stands for: the admission, and where the gang's pods that held a node were."""
        return self.admitted, self.placed


class Promises:
    """Not thread-safe: the gang reservations call it under their lock."""

    def __init__(self) -> None:
        self.admitted: dict[GangKey, AdmittedGang] = {}
        self.stale: set[GangKey] = set()  # to be looked at again before capacity is read
        self.moved: set[GangKey] = set()  # to be placed again before capacity is read
        self._charged: dict[GangKey, _Charged] = {}
        self._on: dict[str, set[GangKey]] = {}  # node -> gangs promised capacity on it

    def nodes(self) -> Iterable[str]:
        """The nodes promised capacity sits on (in the default snapshot)."""
        return self._on.keys()

    def on(self, node: str) -> set[GangKey]:
        """The gangs promised capacity on `node` (in the default snapshot)."""
        return set(self._on.get(node, ()))

    def pinned_to_ultraserver(self, gkey: GangKey) -> bool:
        """Whether the gang was admitted into one UltraServer (its nodeSelector names one)."""
        admitted = self.admitted.get(gkey)
        podsets = admitted.gang.podsets if admitted is not None else ()
        return any(key == ULTRASERVER_LABEL for ps in podsets for key, _ in ps.constraints.node_selector)

    def short(self) -> set[GangKey]:
        """The gangs whose promise did not fit whole (capacity coming free may give them room)."""
        return {g for g, c in self._charged.items() if not c.whole}

    def touching(self, node: str) -> set[GangKey]:
        """The gangs whose promise a change of `node` may move: those promised capacity on it,
        and those whose promise did not fit whole."""
        return self._on.get(node, set()) | self.short()

    def crowded_on(self, node: str, snapshot: Snapshot) -> set[GangKey]:
        """Gangs promised capacity on `node` that real pods now crowd out (see `crowded`)."""
        return {g for g in self._on.get(node, ()) if crowded(snapshot, self._charged[g].rest, g[0])}

    def charge(
        self,
        gkey: GangKey,
        snapshots: Iterable[Snapshot],
        default: Snapshot,
        placed: Mapping[str, Sequence[str]],
        again: bool = False,
    ) -> None:
        """Promise what the gang was admitted with less its placed pods (`placed`: their nodes,
        per podset), in place of whatever was promised it before; nothing for a gang no longer
        admitted. Unless `again`, a promise that already stands for exactly that is kept as it is."""
        snapshots = list(snapshots)
        admitted = self.admitted.get(gkey)
        where = tuple(sorted((podset, tuple(sorted(nodes))) for podset, nodes in placed.items()))
        occupied = tuple(sorted({node for _, nodes in where for node in nodes}))
        held = self._charged.get(gkey)
        if not again and held is not None and held.key() == (admitted, where):
            return
        self.release(gkey, snapshots)
        if admitted is None:
            return
        counts = {podset: len(nodes) for podset, nodes in where}
        rest = remaining(admitted.gang, counts, default, dict(where))
        if not rest.podsets:
            return
        want = sum(ps.count for ps in rest.podsets)
        whole = all([promise(s, rest, gkey[0], admitted.policy, occupied) == want for s in snapshots])
        ids = (default.node_of(gkey[0], name) for name in promised_pods(rest))
        nodes = frozenset(n.name for i in ids if i is not None and (n := default.nodes[i]) is not None)
        self._charged[gkey] = _Charged(admitted, where, rest, occupied, nodes, whole)
        for node in nodes:
            self._on.setdefault(node, set()).add(gkey)

    def charge_into(self, snapshot: Snapshot) -> None:
        """Charge every promise held now to a snapshot made since (another topology order)."""
        for gkey, held in self._charged.items():
            promise(snapshot, held.rest, gkey[0], held.admitted.policy, held.occupied)

    def release(self, gkey: GangKey, snapshots: Iterable[Snapshot]) -> None:
        """Give back what was promised the gang (its plan holds the capacity now, or it is gone)."""
        held = self._charged.pop(gkey, None)
        if held is None:
            return
        for snapshot in snapshots:
            release(snapshot, held.admitted.gang, gkey[0])
        for node in held.nodes:
            gangs = self._on[node]
            gangs.discard(gkey)
            if not gangs:
                del self._on[node]
