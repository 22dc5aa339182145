"""Admission decisions of the gang check: the order waiting gangs are decided in, which domain
a gang fits into now and what Kueue must stamp on its pods (podSetUpdates). Whether it may go
now at all, and in which order of gates, is `core.gate`'s.

Capacity promised to admitted gangs whose pods are not bound yet is counted by binding
synthetic pods into the same `Snapshot` placement reads (`promise`), never by a second model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, GANG_SIZE_ANNOTATION, SLICE_DOMAINS_ANNOTATION
from gangplugin.core.placement import Gang, Placement, PlacementPolicy, eligible_nodes, fit_counter, place
from gangplugin.core.placement.recorded import (
    describe_records,
    format_slice_domains,
    record_level,
    recorded_slice_domains,
    rest_of_record,
)
from gangplugin.core.states import CheckState
from gangplugin.core.topology import BoundPod, Snapshot

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PROMISED_PREFIX = "~promised"
#: How the check's message of a gang that does not fit now begins.
NOT_NOW = "gang does not fit now: "


def gang_id(workload_name: str) -> str:
    """The value of the `gangplugin.io/gang` label: the Workload's name when it is a valid
    label value (<= 63 chars), else a readable prefix plus a hash, stable across restarts."""
    if len(workload_name) <= 63 and _LABEL_VALUE.match(workload_name):
        return workload_name
    digest = hashlib.sha256(workload_name.encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", workload_name)[:52].strip("-_.") or "gang"
    return f"{head}-{digest}"


def with_selector(gang: Gang, selector: Mapping[str, str], podsets: Sequence[str] | None = None) -> Gang:
    """The gang with `selector` added to the nodeSelector of its podsets (all, or those named)."""
    out = []
    for ps in gang.podsets:
        if selector and (podsets is None or ps.name in podsets):
            merged = dict(ps.constraints.node_selector)
            merged.update(selector)
            ps = replace(ps, constraints=replace(ps.constraints, node_selector=tuple(sorted(merged.items()))))
        out.append(ps)
    return Gang(tuple(out), gang.name)


@dataclass(frozen=True, slots=True)
class PodSetUpdate:
    """Kueue's `PodSetUpdate`: what Kueue merges into a podset's pod template on admission."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        return out


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """`ready`: the check goes Ready with `pod_set_updates`; else it stays Pending with `message`.
    `detail`: the message with what changes while the gang waits (the room there is now), for
    people (`gangctl explain`, Events); the check's message leaves it out, so that the Workload
    is not rewritten with every count (empty: `message` says all)."""

    ready: bool
    message: str
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    domain: Mapping[str, str] = field(default_factory=dict)
    placement: Placement | None = None
    detail: str = ""


def domain_selector(placement: Placement) -> dict[str, str]:
    """The node label that pins the one domain a placement chose (its level = its value; the
    topology labels' values are unique cluster-wide, as UltraServer ids and network-node ids
    are); empty when the gang was spread."""
    if not placement.feasible or placement.level is None or len(placement.domains) != 1:
        return {}
    return {placement.level: placement.domains[0]}


def _asks_topology(gang: Gang) -> bool:
    return any(ps.required_topology or ps.preferred_topology for ps in gang.podsets)


def pinned_domain(snapshot: Snapshot, gang: Gang, placement: Placement) -> dict[str, str]:
    """The nodeSelector that keeps a gang's pods in its domain: none unless it asked for a
    level. A gang in slices is pinned to its gang-level domain only (the widest of the level
    asked for and the one found): a podset has one nodeSelector, so the slices inside it are
    kept by the extender's plan, which places each pod."""
    if not _asks_topology(gang):
        return {}
    if not any(ps.slice_size for ps in gang.podsets):
        return domain_selector(placement)
    if not placement.feasible or placement.level is None or not placement.assignments:
        return {}
    asked = [
        i
        for ps in gang.podsets
        for label in (ps.required_topology, ps.preferred_topology)
        if label and (i := snapshot.level_index(label)) is not None
    ]
    found = snapshot.level_index(placement.level)
    assert found is not None
    level = snapshot.levels[min(found, max(asked))]
    node = snapshot.node(placement.assignments[0].node)
    value = node.labels.get(level) if node is not None else None
    return {level: value} if value else {}


def decide(
    snapshot: Snapshot,
    gang: Gang,
    gang_label: str,
    policy: PlacementPolicy,
    annotations: Mapping[str, str] | None = None,
    *,
    explain: bool = True,
    bind_mode: str | None = None,
) -> AdmissionDecision:
    """Admit the whole gang into one domain now, or say why it does not fit (the gates before
    placement are `core.gate`'s).

    A gang that asked for a topology level is pinned to the chosen domain by nodeSelector;
    one that asked for none is only checked to fit (kube-scheduler keeps its freedom).
    `annotations` are stamped on every pod besides the gang size (e.g. the block end);
    `bind_mode` (the GangPolicy's) is stamped as a label; `explain=False` leaves out why a gang
    does not fit (see `place`)."""
    placement = place(snapshot, gang, policy, explain=explain)
    if not placement.feasible:
        return AdmissionDecision(
            False,
            f"{NOT_NOW}{placement.summary or placement.reason}",
            placement=placement,
            detail=f"{NOT_NOW}{placement.reason}" if placement.summary else "",
        )
    domain = pinned_domain(snapshot, gang, placement)
    size = str(sum(ps.count for ps in gang.podsets))
    labels = {GANG_LABEL: gang_label, **({BIND_MODE_LABEL: bind_mode} if bind_mode else {})}
    # Where its pods were counted, so that its promise and the ungater's plan put them there too.
    recorded = recorded_slice_domains(snapshot, gang, placement).items()
    slices = {name: format_slice_domains(domains) for name, domains in recorded}
    updates = tuple(
        PodSetUpdate(
            ps.name,
            labels,
            {
                **(annotations or {}),
                GANG_SIZE_ANNOTATION: size,
                **({SLICE_DOMAINS_ANNOTATION: slices[ps.name]} if ps.name in slices else {}),
            },
            domain,
        )
        for ps in gang.podsets
    )
    where = ", ".join(f"{k}={v}" for k, v in domain.items()) if domain else "no topology pinned"
    if recorded:
        where += f"; recorded {describe_records(recorded)}"
    return AdmissionDecision(True, f"gang admitted: {placement.reason} [{where}]", updates, domain, placement)


def promise(
    snapshot: Snapshot,
    gang: Gang,
    namespace: str,
    policy: PlacementPolicy,
    occupied: Collection[str] = (),
    *,
    keep_what_fits: bool = False,
) -> int:
    """Charge `gang` (an admitted gang's pods that are not bound yet, with its domain in the
    nodeSelector; `occupied`: the nodes of its bound pods) to the snapshot as synthetic pods;
    returns how many were charged: all of them, or 0 when they no longer fit whole. With
    `keep_what_fits`, a promise that no longer fits whole (a node of its domain failed, a pod
    took a node it was promised) charges the room still left to it there instead, pod by pod:
    that room is the gang's until it is whole or requeued, not the next gang's (which would
    then be admitted into the same nodes). Nothing is promised twice, never beyond what exists."""
    if not gang.podsets:
        return 0
    # Only whether it fits: why not is nobody's question here (explaining it walked every node,
    # a sixth of the admission pass's time in a 5,000-node burst).
    placement = place(snapshot, gang, policy, occupied, explain=False)
    if placement.feasible:
        return charge(snapshot, gang, placement, namespace)
    return _charge_what_fits(snapshot, gang, namespace, policy, occupied) if keep_what_fits else 0


def _charge_what_fits(
    snapshot: Snapshot, gang: Gang, namespace: str, policy: PlacementPolicy, occupied: Collection[str]
) -> int:
    """Synthetic pods of `gang` on the room its eligible nodes (its domain) still have, node by
    node, up to its pods; named as `promised_pods` names them."""
    charged = 0
    for ps, nodes in zip(gang.podsets, eligible_nodes(snapshot, gang, policy, occupied), strict=True):
        fits = fit_counter(ps)
        index = 0
        for node_id in nodes:
            node = snapshot.nodes[node_id]
            while node is not None and index < ps.count and fits(snapshot.free[node_id], {}) > 0:
                pod = f"{PROMISED_PREFIX}/{gang.name}/{ps.name}/{index}"
                snapshot.bind(BoundPod(namespace, pod, node.name, dict(ps.requests)))
                index += 1
        charged += index
    return charged


def charge(snapshot: Snapshot, gang: Gang, placement: Placement, namespace: str) -> int:
    """Bind a placement's pods into the snapshot as synthetic pods (promised capacity)."""
    if not gang.name:
        raise ValueError("a promised gang needs its name: synthetic pods are keyed by it")
    by_name = {ps.name: ps for ps in gang.podsets}
    for a in placement.assignments:  # named as `promised_pods` names them
        snapshot.bind(
            BoundPod(
                namespace,
                f"{PROMISED_PREFIX}/{gang.name}/{a.pod_set}/{a.index}",
                a.node,
                dict(by_name[a.pod_set].requests),
            )
        )
    return len(placement.assignments)


def promised_pods(gang: Gang) -> Iterator[str]:
    """The names of the synthetic pods `promise`/`charge` may bind for `gang`."""
    for ps in gang.podsets:
        for i in range(ps.count):
            yield f"{PROMISED_PREFIX}/{gang.name}/{ps.name}/{i}"


def crowded(snapshot: Snapshot, gang: Gang, namespace: str) -> bool:
    """Whether a promised pod of `gang` sits on a node whose pods now ask for more than it has:
    pods bind where kube-scheduler puts them, not where a promise sat, so a gang's real pods can
    land on the nodes another gang's promise was charged to. Such a promise is placed again."""
    for name in promised_pods(gang):
        node = snapshot.node_of(namespace, name)
        if node is not None and snapshot.overcommitted(node):
            return True
    return False


def release(snapshot: Snapshot, gang: Gang, namespace: str) -> None:
    """Undo `promise`/`charge` of `gang` (every synthetic pod it could have bound)."""
    for name in promised_pods(gang):
        snapshot.unbind(namespace, name)


def remaining(
    gang: Gang,
    bound: Mapping[str, int],
    snapshot: Snapshot | None = None,
    on: Mapping[str, Sequence[str]] | None = None,
) -> Gang:
    """The podsets of `gang` reduced by the pods already bound or pinned (per podset name). A
    podset whose rest is no longer whole slices is counted without them: this is capacity
    promised, and the extender keeps the slices pod by pod. Where the check recorded the podset's
    domains, the rest keeps the record less the domains its placed pods are in (`on`: their
    nodes per podset, in `snapshot`), or none (`rest_of_record`)."""
    out = []
    for ps in gang.podsets:
        placed = bound.get(ps.name, 0)
        left = ps.count - placed
        if left <= 0:
            continue
        record: tuple[str, ...] = ()
        nodes = (on or {}).get(ps.name, ())
        if placed and ps.slice_domains and snapshot is not None and len(nodes) == placed:
            level = record_level(ps, snapshot.levels)
            if level is not None:
                record = rest_of_record(ps, snapshot.levels, (_label(snapshot, n, level[0]) for n in nodes))
        ps = replace(ps, count=left, slice_domains=record if placed else ps.slice_domains)
        if ps.slice_size and left % ps.slice_size:
            ps = ps.unsliced()
        out.append(ps)
    return Gang(tuple(out), gang.name)


def _label(snapshot: Snapshot, node_name: str, label: str) -> str | None:
    node = snapshot.node(node_name)
    return node.labels.get(label) if node is not None else None


def sequential_blocker(candidate: str, unready_admitted: Sequence[str]) -> str | None:
    """In Sequential mode, the gang (if any) that must become Ready before `candidate` may go."""
    others = sorted(k for k in unready_admitted if k != candidate)
    return others[0] if others else None


@dataclass(frozen=True, slots=True)
class QueuedWorkload:
    """What the admission order reads of a Workload that carries the gang check (times in epoch
    seconds). `state`: the check's state (None: one Kueue does not define); `assumed`: admitted
    by a write the caller has made but not read back yet (it counts as admitted, not Ready)."""

    key: str
    policy: str | None
    state: CheckState | None
    quota_reserved: bool
    finished: bool = False
    evicted: bool = False
    quota_reserved_at: float = 0.0
    created_at: float = 0.0
    admitted_at: float = 0.0
    ever_ready: bool = False
    assumed: bool = False


@dataclass(frozen=True, slots=True)
class AdmissionQueue:
    """`candidates`: gangs to decide, in queue order (quota reserved first, then created, then
    name); `admitted`: gangs holding capacity, in admission order (their promises are charged in
    that order); `unready`: per policy, admitted gangs not Ready yet (the Sequential gate)."""

    candidates: tuple[QueuedWorkload, ...]
    admitted: tuple[QueuedWorkload, ...]
    unready: Mapping[str | None, tuple[str, ...]]


def admission_queue(workloads: Sequence[QueuedWorkload]) -> AdmissionQueue:
    """Which Workloads the admission pass decides, in which order, and which hold capacity."""
    candidates, admitted = [], []
    unready: dict[str | None, list[str]] = {}
    for wl in workloads:
        if not wl.quota_reserved or wl.finished:
            continue
        if wl.assumed:
            unready.setdefault(wl.policy, []).append(wl.key)
        elif wl.state is CheckState.READY:
            admitted.append(wl)
            if not wl.ever_ready:
                unready.setdefault(wl.policy, []).append(wl.key)
        elif wl.state is CheckState.PENDING and not wl.evicted:
            candidates.append(wl)
    candidates.sort(key=lambda w: (w.quota_reserved_at, w.created_at, w.key))
    admitted.sort(key=lambda w: (w.admitted_at, w.key))
    return AdmissionQueue(
        tuple(candidates), tuple(admitted), {k: tuple(sorted(v)) for k, v in unready.items()}
    )
