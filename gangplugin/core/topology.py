"""The topology model: nodes grouped into a tree of domains by their topology labels.

Levels are node labels, widest first (the `spec.levels` of a Kueue `Topology`). A domain at
level i is the set of nodes that share the values of levels 0..i; a node lacking a label sits
in an *unlabeled* domain (value None) at that level, which counts for spreading but never
qualifies as "the one domain" a gang asked for. Under the deepest level hang the nodes.

`Snapshot` is built once from nodes and the pods bound to them (`build_snapshot`) and then
kept current with `bind`, `unbind`, `upsert_node` and `remove_node`, each costing O(levels)
per kept pod shape for the fit counts (`fit_counts`), not a rebuild. Node ids are stable ints;
every list a placement reads (a domain's children, its nodes) is sorted by name, so results
never depend on the order the input came in.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.eligibility import PodConstraints, Taint
from gangplugin.core.errors import InputError
from gangplugin.core.resources import ACCELERATORS, PODS

ZONE_LABEL = "topology.kubernetes.io/zone"
ULTRASERVER_LABEL = "topology.k8s.aws/ultraserver-id"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
DEFAULT_LEVELS: tuple[str, ...] = (
    ZONE_LABEL,
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    ULTRASERVER_LABEL,
    HOSTNAME_LABEL,
)
#: Phases of pods that no longer hold their requests.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
#: A pod's requests as sorted (resource, amount) pairs, without `pods`.
Requests = tuple[tuple[str, int], ...]
#: How many pod shapes `Snapshot.plain_fit_counts` keeps current at most.
_KEPT_SHAPES = 32
#: A pod that asks for no node and tolerates no taint.
NO_CONSTRAINTS = PodConstraints()


def request_items(requests: Mapping[str, int]) -> Requests:
    """A pod's requests as `pods_fitting` reads them: positive amounts, sorted, without `pods`
    (every pod takes one pod slot, counted on its own)."""
    return tuple(sorted((r, q) for r, q in requests.items() if q > 0 and r != PODS))


def pods_fitting(free: Mapping[str, int], req: Requests, cap: int = 1 << 40) -> int:
    """How many pods with requests `req` fit in `free`, at most `cap`."""
    c = free.get(PODS, cap)
    if c > cap:
        c = cap
    for r, q in req:
        k = free.get(r, 0) // q
        if k < c:
            c = k
    return c if c > 0 else 0


@dataclass(frozen=True, slots=True)
class Node:
    """The parts of a Kubernetes Node placement reads. `allocatable` is in canonical units."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod with `spec.nodeName` set; `requests` are the pod's effective requests (canonical)."""

    namespace: str
    name: str
    node_name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    phase: str = "Running"


@dataclass(slots=True)
class Domain:
    """One node of the topology tree (mutable bookkeeping; read-only to placement)."""

    id: int
    level: int  # -1 for the root
    value: str | None  # the label value at `level`; None for the root and unlabeled domains
    key: tuple[str | None, ...]  # values of levels 0..level
    parent: int  # -1 for the root
    children: list[int] = field(default_factory=list)  # domain ids, sorted by value
    nodes: list[int] = field(default_factory=list)  # node ids (deepest level only), sorted by name


def validate_levels(levels: Iterable[str], field_name: str = "levels") -> tuple[str, ...]:
    out = tuple(levels)
    if not out:
        raise InputError(field_name, "a topology needs at least one level")
    for i, level in enumerate(out):
        if not isinstance(level, str) or not level:
            raise InputError(f"{field_name}[{i}]", "each level is a non-empty node label")
    if len(set(out)) != len(out):
        raise InputError(field_name, "a node label appears twice")
    return out


def _sort_key(value: str | None) -> str:
    return "" if value is None else value


class Snapshot:
    """Nodes, their free capacity and the domain tree. See the module docstring."""

    def __init__(self, levels: Iterable[str] = DEFAULT_LEVELS) -> None:
        self.levels: tuple[str, ...] = validate_levels(levels)
        self.nodes: list[Node | None] = []  # by node id; None once removed
        self.node_ids: dict[str, int] = {}
        self.free: list[dict[str, int]] = []  # allocatable minus requests of active bound pods
        self.usable: list[bool] = []  # Ready and not cordoned
        self.path: list[tuple[int, ...]] = []  # domain id per level
        self.accelerated: list[int] = []  # active pods bound holding an accelerator
        self.domains: list[Domain] = [Domain(0, -1, None, (), -1)]
        self.domain_ids: dict[tuple[str | None, ...], int] = {(): 0}
        self.by_level: list[list[int]] = [[] for _ in self.levels]
        self._pods: dict[tuple[str, str], tuple[int, Mapping[str, int]]] = {}
        self._pods_on: list[set[tuple[str, str]]] = []
        self._spares: dict[int, frozenset[int]] = {}
        # Answers read off the snapshot as it is now (e.g. why a gang's nodes refuse it), for
        # callers asking the same question again before anything changes: an admission pass
        # refusing 1,000 waiting gangs of one shape. Emptied by every change.
        self.memo: dict[Hashable, Any] = {}
        # Answers read off the nodes alone (what a domain could ever hold), kept while pods come
        # and go; emptied when a node changes.
        self.node_memo: dict[Hashable, Any] = {}
        # (pod shape, constraints) -> (pods of it per node, summed per domain): `fit_counts`
        self._fits: dict[tuple[Requests, PodConstraints], tuple[dict[int, int], list[int]]] = {}

    # -- reading ---------------------------------------------------------------------------

    @property
    def root(self) -> Domain:
        return self.domains[0]

    def node(self, name: str) -> Node | None:
        i = self.node_ids.get(name)
        return None if i is None else self.nodes[i]

    def pod(self, namespace: str, name: str) -> BoundPod | None:
        """A pod this snapshot counts (real or synthetic), as it was bound; None if not counted."""
        entry = self._pods.get((namespace, name))
        if entry is None:
            return None
        node = self.nodes[entry[0]]
        return None if node is None else BoundPod(namespace, name, node.name, entry[1])

    def pod_usage(self, namespace: str, name: str) -> tuple[int, Mapping[str, int]] | None:
        """(node id, requests) of a pod this snapshot counts; None if not counted."""
        return self._pods.get((namespace, name))

    def pods_on(self, node_id: int) -> frozenset[tuple[str, str]]:
        """The (namespace, name) of every pod this snapshot counts on the node (real or synthetic)."""
        return frozenset(self._pods_on[node_id])

    def live_node_ids(self) -> list[int]:
        """Ids of present nodes, ordered by name."""
        return [self.node_ids[n] for n in sorted(self.node_ids)]

    def level_index(self, label: str) -> int | None:
        try:
            return self.levels.index(label)
        except ValueError:
            return None

    def subtree_nodes(self, domain_id: int) -> list[int]:
        """Node ids under a domain, in tree order (by domain value, then node name)."""
        out: list[int] = []
        stack = [domain_id]
        while stack:
            d = self.domains[stack.pop()]
            out.extend(d.nodes)
            stack.extend(reversed(d.children))
        return out

    def idle(self, node_id: int) -> bool:
        """Usable and without an active pod holding an accelerator: a whole node a fresh gang or a
        spare can take. Pods without one (a DaemonSet's, which every node of a real cluster runs;
        CoreDNS) do not count: counted, they left no UltraServer of real nodes a spare."""
        return self.usable[node_id] and self.accelerated[node_id] == 0

    def spare_nodes(self, per_ultraserver: int) -> frozenset[int]:
        """Node ids held as spares: in each UltraServer, the idle nodes with the highest names.

        An UltraServer is the set of nodes sharing a `topology.k8s.aws/ultraserver-id` label
        (whether or not it is a level). If fewer than `per_ultraserver` of its nodes are idle,
        all of them are held.
        """
        if per_ultraserver <= 0:
            return frozenset()
        cached = self._spares.get(per_ultraserver)
        if cached is not None:
            return cached
        groups: dict[str, list[str]] = {}
        for name, i in self.node_ids.items():
            node = self.nodes[i]
            assert node is not None
            us = node.labels.get(ULTRASERVER_LABEL)
            if us is not None and self.idle(i):
                groups.setdefault(us, []).append(name)
        held: set[int] = set()
        for names in groups.values():
            names.sort()
            held.update(self.node_ids[n] for n in names[-per_ultraserver:])
        result = frozenset(held)
        self._spares[per_ultraserver] = result
        return result

    def fit_counts(
        self, req: Requests, constraints: PodConstraints = NO_CONSTRAINTS
    ) -> tuple[Mapping[int, int], Sequence[int]]:
        """Per node, how many pods of `req` with `constraints` fit (usable nodes the constraints
        allow, spares included), and those counts summed per domain (id 0: all).

        Computed once per pod shape (requests and constraints), then kept current by `bind` and
        `unbind` at O(levels) per change: placement asks about the same few shapes again and
        again (a flavor's nodeSelector makes one shape for all its gangs), and a big cluster
        should not cost a pass over every node per question. Read-only to the caller."""
        key = (req, constraints)
        kept = self._fits.get(key)
        if kept is not None:
            return kept
        if len(self._fits) >= _KEPT_SHAPES:
            self._fits.clear()
        nc: dict[int, int] = {}
        dc = [0] * len(self.domains)
        for i in range(len(self.nodes)):
            if not self.allows(i, constraints):
                continue
            c = pods_fitting(self.free[i], req)
            if c:
                nc[i] = c
                dc[0] += c
                for d in self.path[i]:
                    dc[d] += c
        self._fits[key] = (nc, dc)
        return nc, dc

    def allows(self, node_id: int, constraints: PodConstraints) -> bool:
        """Whether a pod with `constraints` may run on the node: present, usable, every blocking
        taint tolerated, nodeSelector and required affinity matched."""
        node = self.nodes[node_id]
        return (
            node is not None
            and self.usable[node_id]
            and constraints.untolerated(node.taints) is None
            and constraints.selects(node.labels, node.name)
        )

    def _refit(self, node_id: int) -> None:
        """Bring the kept pod-shape counts of one node up to date after its free capacity changed."""
        free = self.free[node_id]
        for (req, constraints), (nc, dc) in self._fits.items():
            new = pods_fitting(free, req) if self.allows(node_id, constraints) else 0
            delta = new - nc.get(node_id, 0)
            if not delta:
                continue
            if new:
                nc[node_id] = new
            else:
                del nc[node_id]
            dc[0] += delta
            for d in self.path[node_id]:
                dc[d] += delta

    # -- updating --------------------------------------------------------------------------

    def _domain_for(self, key: tuple[str | None, ...]) -> int:
        d = self.domain_ids.get(key)
        if d is not None:
            return d
        parent = self._domain_for(key[:-1])
        d = len(self.domains)
        level = len(key) - 1
        self.domains.append(Domain(d, level, key[-1], key, parent))
        self.domain_ids[key] = d
        self.by_level[level].append(d)
        siblings = self.domains[parent].children
        value = _sort_key(key[-1])
        if not siblings or value >= _sort_key(self.domains[siblings[-1]].value):
            siblings.append(d)
        else:
            values = [_sort_key(self.domains[c].value) for c in siblings]
            siblings.insert(bisect.bisect_right(values, value), d)
        return d

    def _attach(self, node_id: int, node: Node) -> None:
        labels = node.labels
        key = tuple(labels.get(level) for level in self.levels)
        path = tuple(self._domain_for(key[: i + 1]) for i in range(len(key)))
        self.path[node_id] = path
        leaf = self.domains[path[-1]].nodes
        if not leaf or node.name > self._name(leaf[-1]):
            leaf.append(node_id)
        else:
            names = [self._name(n) for n in leaf]
            leaf.insert(bisect.bisect_right(names, node.name), node_id)

    def _detach(self, node_id: int) -> None:
        self.domains[self.path[node_id][-1]].nodes.remove(node_id)

    def _name(self, node_id: int) -> str:
        node = self.nodes[node_id]
        assert node is not None
        return node.name

    def _changed(self) -> None:
        """Forget what was derived from the nodes' free capacity (the kept fit counts follow
        each change on their own)."""
        self._spares.clear()
        self.memo.clear()

    def upsert_node(self, node: Node) -> None:
        """Add a node or replace what is known of it (labels, allocatable, taints, readiness)."""
        i = self.node_ids.get(node.name)
        if i is not None and self.nodes[i] == node:
            return  # a heartbeat: nothing placement reads changed, so what is kept stays
        self._changed()
        self.node_memo.clear()
        self._fits.clear()  # a node's domains may change: counted again when next asked
        if i is None:
            i = len(self.nodes)
            self.nodes.append(node)
            self.node_ids[node.name] = i
            self.free.append(dict(node.allocatable))
            self.usable.append(node.ready and not node.unschedulable)
            self.path.append(())
            self.accelerated.append(0)
            self._pods_on.append(set())
            self._attach(i, node)
            return
        self._detach(i)
        self.nodes[i] = node
        free = dict(node.allocatable)
        for key in self._pods_on[i]:
            for r, q in self._pods[key][1].items():
                free[r] = free.get(r, 0) - q
        if PODS in free:
            free[PODS] -= len(self._pods_on[i])
        self.free[i] = free
        self.usable[i] = node.ready and not node.unschedulable
        self._attach(i, node)

    def remove_node(self, name: str) -> None:
        """Forget a node; pods bound to it are forgotten too."""
        i = self.node_ids.pop(name, None)
        if i is None:
            return
        self._changed()
        self.node_memo.clear()
        self._fits.clear()
        self._detach(i)
        for key in self._pods_on[i]:
            del self._pods[key]
        self._pods_on[i] = set()
        self.nodes[i] = None
        self.usable[i] = False
        self.free[i] = {}
        self.accelerated[i] = 0

    def bind(self, pod: BoundPod) -> None:
        """Count a pod's requests against its node (finished pods and unknown nodes are ignored)."""
        key = (pod.namespace, pod.name)
        if key in self._pods:
            self.unbind(pod.namespace, pod.name)
        i = self.node_ids.get(pod.node_name)
        if i is None or pod.phase in FINISHED_PHASES:
            return
        self._changed()
        self._pods[key] = (i, pod.requests)
        self._pods_on[i].add(key)
        self.accelerated[i] += holds_accelerator(pod.requests)
        self._charge(i, pod.requests, 1)

    def node_of(self, namespace: str, name: str) -> int | None:
        """The node id a pod is bound to here, or None."""
        entry = self._pods.get((namespace, name))
        return None if entry is None else entry[0]

    def overcommitted(self, node_id: int) -> bool:
        """Whether the pods bound to the node ask for more than it has."""
        return any(v < 0 for v in self.free[node_id].values())

    def unbind(self, namespace: str, name: str) -> None:
        """Release a pod's requests (it finished, was deleted or evicted)."""
        entry = self._pods.pop((namespace, name), None)
        if entry is None:
            return
        self._changed()
        i, requests = entry
        self._pods_on[i].discard((namespace, name))
        self.accelerated[i] -= holds_accelerator(requests)
        self._charge(i, requests, -1)

    def _charge(self, node_id: int, requests: Mapping[str, int], sign: int) -> None:
        free = self.free[node_id]
        delta = {r: -sign * q for r, q in requests.items() if q}
        if PODS in free:
            delta[PODS] = delta.get(PODS, 0) - sign
        for r, q in delta.items():
            free[r] = free.get(r, 0) + q
        if self._fits:
            self._refit(node_id)


def build_snapshot(
    nodes: Iterable[Node], pods: Iterable[BoundPod] = (), levels: Iterable[str] = DEFAULT_LEVELS
) -> Snapshot:
    """The model of a cluster: nodes sorted by name, then the active bound pods charged to them.

    Raises InputError for a node name given twice.
    """
    snap = Snapshot(levels)
    ordered = sorted(nodes, key=lambda n: n.name)
    for a, b in itertools.pairwise(ordered):
        if a.name == b.name:
            raise InputError("nodes", f"node {a.name!r} appears twice")
    for node in ordered:
        snap.upsert_node(node)
    for pod in pods:
        snap.bind(pod)
    return snap


def holds_accelerator(requests: Mapping[str, int]) -> bool:
    """Whether a pod of these requests holds an accelerator (what makes a node taken)."""
    return any(requests.get(r, 0) > 0 for r in ACCELERATORS)
