"""The extender's decisions for one pod of a gang: the gang's plan, this pod's node, the verdict
on every candidate node, node scores, and when a gang's bind barrier opens.

A gang is the pods of one namespace sharing the `gangplugin.io/gang` label; its size is their
`gangplugin.io/gang-size` annotation. When the first pod of a gang reaches the scheduler's
filter, `plan_gang` places the whole gang with the core engine (`placement.place`) on a
snapshot that already counts the capacity other in-flight gangs reserved; the extender then
reserves the plan's nodes, and `assign` hands each member one node of the plan. A gang that
does not fit gets no node at all, so its pods wait whole instead of holding part of the cluster.

A gang found partially bound (the extender died between Binding calls) is completed in the
domain its bound pods already occupy; if it cannot be, `plan_gang` names the bound pods to
delete so their controller recreates them and the gang starts over whole.

kube-scheduler's view of a node can differ from the extender's for a while (a Terminating pod
it still counts during its grace period). When it leaves a member's planned node out of the
candidates, `filter_gang_pod` names the plan's nodes it refused (`FilterVerdict.rejected`);
the caller remembers them for that pod shape and `plan_gang` plans the whole gang again
without them (`rejected`), so a re-plan never picks the same refused node and the gang either
gets a placement the scheduler accepts or the plan's reason why it cannot be placed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.errors import InputError
from gangplugin.core.names import GANG_SIZE_ANNOTATION
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.topology import HOSTNAME_LABEL, Node, Snapshot, pods_fitting, request_items

PodKey = tuple[str, str]  # (namespace, name)
GangKey = tuple[str, str]  # (namespace, gang label value)
Requests = tuple[tuple[str, int], ...]  # a pod's requests, sorted: its shape
SliceAsk = tuple[int | None, str | None, str | None]  # slice size, required level, preferred level
# What makes two pods of a gang interchangeable in a plan.
Signature = tuple[Requests, PodConstraints, str | None, str | None, SliceAsk, tuple[str, ...]]
# What kube-scheduler judges a pod by (its requests and constraints, not gang topology).
Shape = tuple[Requests, PodConstraints]

SIZE_FIELD = f"metadata.annotations.{GANG_SIZE_ANNOTATION}"
# Why a plain pod may not use a node kube-scheduler found room on.
TOO_FULL = "too little free capacity (counting capacity reserved for gangs being bound)"


@dataclass(frozen=True, slots=True)
class GangPod:
    """A pod as the extender sees it. `error` is set (and the rest may be empty) when the pod
    carries gang metadata that cannot be used; such a pod is refused with that message."""

    namespace: str
    name: str
    uid: str = ""
    gang: str | None = None
    size: int | None = None
    node: str | None = None
    requests: Mapping[str, int] = field(default_factory=dict)
    constraints: PodConstraints = field(default_factory=PodConstraints)
    required_topology: str | None = None
    preferred_topology: str | None = None
    slices: SliceAsk = (None, None, None)
    slice_domains: tuple[str, ...] = ()  # where the gang check counted its podset's slices
    index: int | None = None  # the pod's index in its podset (an Indexed Job's completion index)
    pod_set: str | None = None  # the Kueue podset it belongs to (its kueue.x-k8s.io/podset label)
    finished: bool = False  # Succeeded or Failed: holds no node and is no longer a member
    deleting: bool = False  # being deleted: still holds its node until it is gone, but a member no more
    # bindMode Ungate: `gated` while the pod waits behind gangplugin's scheduling gate; `pinned`,
    # once the ungater removed it, the node it pinned the pod to (kube-scheduler binds it there).
    gated: bool = False
    pinned: str | None = None
    # Its gangplugin.io/bind-mode label. bindMode PodGroup: `pod_group` names the native PodGroup
    # the pod belongs to (spec.schedulingGroup.podGroupName), which the ungater creates before it
    # removes the gate; None where the API server dropped the field (GenericWorkload off).
    bind_mode: str | None = None
    pod_group: str | None = None
    # A controller owns it (an ownerReference with controller: true), so a deleted pod is made
    # again: the only way to move a pinned pod, whose pin is final.
    replaceable: bool = False
    error: str | None = None

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def placed(self) -> str | None:
        """The node the pod holds: bound there, or pinned there and not bound yet."""
        return self.node or self.pinned

    @property
    def gang_key(self) -> GangKey | None:
        return None if self.gang is None else (self.namespace, self.gang)

    @property
    def signature(self) -> Signature:
        return (
            tuple(sorted(self.requests.items())),
            self.constraints,
            self.required_topology,
            self.preferred_topology,
            self.slices,
            self.slice_domains,
        )

    @property
    def shape(self) -> Shape:
        return (tuple(sorted(self.requests.items())), self.constraints)


@dataclass(frozen=True, slots=True)
class Slot:
    """One pod's place in a plan: a node for a pod of this signature."""

    signature: Signature
    node: str
    requests: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Where the members of `gang` that are not bound yet go (`slots`), or why they cannot.

    `level`/`domains`: the topology level and domain value(s) the gang is kept in.
    `abandon`: bound members to delete because the rest of a partially bound gang cannot join them.
    """

    gang: GangKey
    size: int
    feasible: bool
    reason: str
    level: str | None = None
    domains: tuple[str, ...] = ()
    slots: tuple[Slot, ...] = ()
    abandon: tuple[PodKey, ...] = ()
    expires_at: float = 0.0


@dataclass(frozen=True, slots=True)
class FilterVerdict:
    """The answer to a filter call: nodes that pass, and a reason for every node that does not."""

    passed: tuple[str, ...]
    failed: Mapping[str, str]
    replan: bool = False  # the plan's node for this pod was refused by the scheduler: plan again
    rejected: tuple[str, ...] = ()  # with replan: the plan's nodes the scheduler refused this pod


def gang_size(pod: GangPod, members: Iterable[GangPod]) -> int:
    """The gang's size; InputError when a member says otherwise than `pod`."""
    if pod.error is not None:
        raise InputError(f"pod {pod.namespace}/{pod.name}", pod.error)
    assert pod.size is not None
    for m in members:
        if m.size is not None and m.size != pod.size and m.key != pod.key:
            raise InputError(
                f"pod {pod.namespace}/{pod.name}: {SIZE_FIELD}",
                f"{pod.size} disagrees with {m.size} on {m.name} of gang {pod.gang!r}; "
                "give every pod of the gang the same size",
            )
    return pod.size


def _podsets(
    snapshot: Snapshot,
    pod: GangPod,
    pending: Sequence[GangPod],
    bound: Sequence[GangPod],
    need: int,
    pin: tuple[str, str] | None,
    rejected: Mapping[Shape, Collection[str]],
) -> list[tuple[PodSet, Signature]]:
    """Pending members grouped by signature; members not created yet are taken to be like `pod`.
    Each podset excludes the nodes kube-scheduler rejected for its shape. Returns each podset
    with the signature its pods carry."""
    groups: dict[Signature, list[GangPod]] = {}
    for m in (pod, *(m for m in pending if m.key != pod.key)):
        groups.setdefault(m.signature, []).append(m)
    unseen = max(need - sum(len(g) for g in groups.values()), 0)
    out = []
    for i, (sig, ms) in enumerate(groups.items()):
        first = ms[0]
        cons = first.constraints
        if pin is not None:
            cons = dataclasses.replace(cons, node_selector=tuple(sorted({*cons.node_selector, pin})))
        count = len(ms) + (unseen if sig == pod.signature else 0)
        base = PodSet(
            f"{i}",
            count,
            first.requests,
            cons,
            first.required_topology,
            first.preferred_topology,
            frozenset(rejected.get(first.shape, ())),
            *first.slices,
            slice_domains=first.slice_domains,
        )
        same = [m.placed for m in bound if m.signature == sig and m.placed is not None]
        out += [(ps, sig) for ps in _complete_slices(snapshot, base, same)]
    return out


def _complete_slices(snapshot: Snapshot, podset: PodSet, bound_nodes: Sequence[str]) -> list[PodSet]:
    """A podset in slices whose other members are bound (recreated pods, a gang bound in part):
    first the pods that complete the slices the bound ones started, each pinned to its slice's
    domain, then whole new slices. Without a usable slice level, the podset unsliced."""
    size, label = podset.slice_size, podset.slice_required_topology or podset.slice_preferred_topology
    if size is None or label is None or not bound_nodes:
        return [podset]
    unsliced = podset.unsliced()
    started: dict[str, int] = {}
    for name in bound_nodes:
        node = snapshot.node(name)
        value = node.labels.get(label) if node is not None else None
        if value is None:
            return [unsliced]  # a bound member outside any slice domain: slices are not kept
        started[value] = started.get(value, 0) + 1
    missing = {v: -c % size for v, c in sorted(started.items()) if c % size}
    rest = podset.count - sum(missing.values())
    if rest < 0 or rest % size:
        return [unsliced]
    out = [
        dataclasses.replace(
            unsliced,
            name=f"{podset.name}/{value}",
            count=k,
            constraints=dataclasses.replace(
                podset.constraints,
                node_selector=tuple(sorted({*podset.constraints.node_selector, (label, value)})),
            ),
        )
        for value, k in missing.items()
    ]
    if rest:
        out.append(dataclasses.replace(podset, count=rest))
    return out


def plan_gang(
    snapshot: Snapshot,
    pod: GangPod,
    members: Sequence[GangPod],
    policy: PlacementPolicy | None = None,
    *,
    expires_at: float = 0.0,
    rejected: Mapping[Shape, Collection[str]] | None = None,
    keep_bound: bool = False,
) -> GangPlan:
    """Place every member of `pod`'s gang that is not bound yet. See the module docstring.

    `members`: every known pod of the gang (bound or not, `pod` may be among them); `snapshot`
    must count capacity reserved by other gangs but not by this one; `rejected`: per pod shape,
    nodes kube-scheduler refused lately, which no member of that shape is planned on (the gang
    is still planned whole: without them, or not at all); `keep_bound`: the gang's bound
    members are never abandoned (a Kueue gang: its admission check recovers or requeues it
    whole). The spares of an UltraServer where members are bound are theirs to use (a pod
    recreated after its node failed). Raises InputError for a gang-size that members disagree
    on or a topology annotation naming an unknown level.
    """
    members = [m for m in members if not m.finished and not m.deleting]
    size = gang_size(pod, members)
    gkey = pod.gang_key
    assert gkey is not None
    # Pinned members (bindMode Ungate) hold their node as bound ones do.
    bound = [m for m in members if m.placed is not None and m.key != pod.key]
    pending = [m for m in members if m.placed is None]
    need = size - len(bound)
    pin: tuple[str, str] | None = None
    required = pod.required_topology
    if bound and required is not None and snapshot.level_index(required) is not None:
        nodes = [snapshot.node(m.placed or "") for m in bound]
        values = {n.labels.get(required) if n is not None else None for n in nodes}
        if len(values) == 1 and None not in values:
            pin = (required, str(next(iter(values))))
    podsets = _podsets(snapshot, pod, pending, bound, need, pin, rejected or {})
    try:
        gang = Gang(tuple(ps for ps, _ in podsets), f"{gkey[0]}/{gkey[1]}")
        placement = place(snapshot, gang, policy, [m.placed for m in bound if m.placed is not None])
    except InputError as err:
        raise InputError(f"pod {pod.namespace}/{pod.name}: {err.field}", err.problem) from err
    if not placement.feasible:
        where = f" next to its {len(bound)} bound pod(s) in {pin[0]} {pin[1]}" if pin else ""
        reason = f"gang {gkey[1]} ({size} pods) cannot be placed whole{where}: {placement.reason}"
        abandon = () if keep_bound else tuple(sorted(m.key for m in bound))
        return GangPlan(gkey, size, False, reason, abandon=abandon, expires_at=expires_at)
    by_set = {ps.name: (ps, sig) for ps, sig in podsets}
    slots = tuple(
        Slot(by_set[a.pod_set][1], a.node, by_set[a.pod_set][0].requests) for a in placement.assignments
    )
    level, domains = placement.level, placement.domains
    if pin is not None:
        level, domains = pin[0], (pin[1],)
    return GangPlan(gkey, size, True, placement.reason, level, domains, slots, (), expires_at)


def assign(plan: GangPlan, pod: GangPod, claims: Mapping[PodKey, int]) -> int | None:
    """The index of `pod`'s slot in `plan` (see `SlotPicker.pick`); None if full."""
    return SlotPicker(plan, claims).pick(pod)


class SlotPicker:
    """Slots of `plan` for members one after another, each taking its slot from the next: the
    index is built once, so a gang's pins are linear in its size (with a scan of the slots per
    member, the pins of a 1,024-pod gang took 13 CPU-seconds)."""

    def __init__(self, plan: GangPlan, claims: Mapping[PodKey, int]) -> None:
        self.plan, self.claims = plan, claims
        self.taken = set(claims.values())
        self.same: dict[Signature, list[int]] = {}  # slots by signature, in plan order
        for i, slot in enumerate(plan.slots):
            self.same.setdefault(slot.signature, []).append(i)
        self._next_of: dict[Signature, int] = {}  # per signature: no free slot before this one
        self._next_any = 0  # no free slot at all before this index

    def pick(self, pod: GangPod) -> int | None:
        """The slot it holds, else the slot of its signature at its pod index when that is free
        (a plan's slots of one signature are in tree order, so consecutive indexes sit together:
        slices), else the first free slot of its signature, else the first free slot (a member
        unseen at planning time may differ); None if full. The slot is taken from then on."""
        held = self.claims.get(pod.key)
        if held is not None and held < len(self.plan.slots):
            return held
        same = self.same.get(pod.signature, [])
        slot = None
        if pod.index is not None and pod.index < len(same) and same[pod.index] not in self.taken:
            slot = same[pod.index]
        if slot is None:
            k = self._next_of.get(pod.signature, 0)
            while k < len(same) and same[k] in self.taken:
                k += 1
            self._next_of[pod.signature] = k
            slot = same[k] if k < len(same) else None
        if slot is None:
            while self._next_any < len(self.plan.slots) and self._next_any in self.taken:
                self._next_any += 1
            slot = self._next_any if self._next_any < len(self.plan.slots) else None
        if slot is not None:
            self.taken.add(slot)
        return slot


def filter_gang_pod(plan: GangPlan, node_names: Sequence[str], target: str | None) -> FilterVerdict:
    """The verdict for a gang member: only its planned node passes. When it does, the other
    nodes get no reason: kube-scheduler shows filter reasons only for a pod no node passes, and
    decoding one per candidate (hundreds) would cost its serial scheduling cycle more than the
    rest of the call. When no node passes, each gets the reason (the plan's, when the gang
    cannot be placed: it names the domains, spares and capacity that fall short)."""
    gang = plan.gang[1]
    if not plan.feasible:
        return FilterVerdict((), dict.fromkeys(node_names, plan.reason))
    if target is None:
        reason = f"gang {gang} has more pods than its size {plan.size}; every planned node is taken"
        return FilterVerdict((), dict.fromkeys(node_names, reason))
    if target not in node_names:
        reason = (
            f"the node gang {gang}'s plan gives this pod ({target}) was rejected by the scheduler; "
            "the gang is planned again without it"
        )
        candidates = set(node_names)
        refused = tuple(sorted({sl.node for sl in plan.slots if sl.node not in candidates}))
        return FilterVerdict((), dict.fromkeys(node_names, reason), replan=True, rejected=refused)
    return FilterVerdict((target,), {})


def stranded_pin(snapshot: Snapshot, pod: GangPod) -> str | None:
    """Why kube-scheduler can no longer bind `pod` to the node the ungater pinned it to, or
    None (not pinned, bound already, leaving, or the node still takes it). A pin is final (a
    pod's nodeSelector cannot change once its gate is gone), so such a pod has to be made again,
    behind the gate, to be pinned elsewhere. `snapshot` must be synced: a node it does not know
    is a node that was deleted."""
    if pod.pinned is None or pod.node is not None or pod.finished or pod.deleting:
        return None
    node = snapshot.node(pod.pinned)
    where = f"pod {pod.namespace}/{pod.name} is pinned to {pod.pinned}, which"
    if node is None:
        return f"{where} is gone"
    if not node.ready:
        return f"{where} is NotReady"
    if node.unschedulable:
        return f"{where} is cordoned"
    taint = pod.constraints.untolerated(node.taints)
    return None if taint is None else f"{where} has the taint {taint}, which the pod does not tolerate"


def filter_pinned_pod(pinned: str, node_names: Sequence[str]) -> FilterVerdict:
    """A member the ungater pinned (bindMode Ungate): its pin passes, nothing else. Met only
    when the pod reaches a kube-scheduler that runs the extender; the pin already chose."""
    if pinned in node_names:
        return FilterVerdict((pinned,), {})
    why = f"the gang's placement pinned this pod to {pinned}, which kube-scheduler found unfit"
    return FilterVerdict((), dict.fromkeys(node_names, why))


def filter_single_pod(
    snapshot: Snapshot, pod: GangPod, node_names: Sequence[str], reserved: Container[str]
) -> FilterVerdict:
    """A pod outside any gang. kube-scheduler has already checked that it fits each candidate
    by real usage; what only the extender knows is capacity reserved for gangs being bound, so
    only the `reserved` nodes are checked again, with those reservations counted."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    req = request_items(pod.requests)
    ids, free = snapshot.node_ids, snapshot.free
    for name in node_names:
        if name not in reserved:
            passed.append(name)
            continue
        i = ids.get(name)
        if i is not None and pods_fitting(free[i], req):
            passed.append(name)
        else:
            failed[name] = TOO_FULL
    return FilterVerdict(tuple(passed), failed)


def scores(
    snapshot: Snapshot, pod: GangPod, node_names: Sequence[str], target: str | None
) -> list[tuple[str, int]]:
    """Scores 0..10. A gang member: its planned node 10, the rest 0. Another pod: 10 for the
    candidate `place` would pick for one such pod, the best fit (fewest more copies of it fit
    there, ties by name), other nodes by how many topology levels they share with that node.
    kube-scheduler has already judged every candidate's constraints, so only capacity is
    weighed: one `pods_fitting` per candidate, no planner (this runs for every plain GPU pod)."""
    if target is not None:
        return [(n, 10 if n == target else 0) for n in node_names]
    req = request_items(pod.requests)
    ids, free = snapshot.node_ids, snapshot.free
    best, best_key = -1, (0, "")
    for name in node_names:
        i = ids.get(name)
        if i is not None:
            c = pods_fitting(free[i], req)
            if c and (best < 0 or (c, name) < best_key):
                best, best_key = i, (c, name)
    if best < 0:
        return [(n, 0) for n in node_names]
    levels = [lv for lv, label in enumerate(snapshot.levels) if label != HOSTNAME_LABEL]
    best_path = snapshot.path[best]
    # the levels a node can share with the best one: down to its first unlabelled level
    shared_levels = []
    for lv in levels:
        if snapshot.domains[best_path[lv]].value is None:
            break
        shared_levels.append(lv)
    paths, scale = snapshot.path, max(len(levels), 1)
    out = []
    for name in node_names:
        i = ids.get(name)
        if i is None:
            out.append((name, 0))
        elif i == best:
            out.append((name, 10))
        else:
            path, shared = paths[i], 0
            for lv in shared_levels:
                if path[lv] != best_path[lv]:
                    break
                shared += 1
            out.append((name, 9 * shared // scale))
    return out


def barrier_open(size: int, bound: Iterable[PodKey], arrived: Iterable[PodKey]) -> bool:
    """Every member has a node: bound already, or waiting at the barrier with one."""
    return len({*bound, *arrived}) >= size


def bind_refusal(
    pod: GangPod, uid: str, node_name: str, node: Node | None, planned: str | None
) -> str | None:
    """Why `bind` must not place `pod` (as the watch cache has it) on `node_name` when asked
    with `uid`, or None. `planned`: the node the gang's plan gives this member (None: no plan
    gives it one). Whoever calls bind gets no more than the pod's own constraints and the plan
    allow: a pod already bound, another pod of the same name, a node the pod's nodeSelector,
    affinity or tolerations exclude, or a gang member sent elsewhere than its plan says."""
    what = f"refusing to bind pod {pod.namespace}/{pod.name} to node {node_name}"
    if uid != pod.uid:
        return f"{what}: the request names uid {uid or '(none)'}, the pod's uid is {pod.uid}"
    if pod.node is not None:
        return f"{what}: the pod is already bound to {pod.node}"
    if node is None:
        return f"{what}: there is no such node"
    why = pod.constraints.refusal(node.labels, node.name, node.taints)
    if why is not None:
        return f"{what}: the pod does not allow that node ({why})"
    if pod.gang is not None and planned != node_name:
        plan = f"gives it {planned}" if planned else "gives it no node (yet)"
        return f"{what}: gang {pod.gang}'s plan {plan}"
    return None
