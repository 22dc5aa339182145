"""The gang reservations the extender and the ungater share: nodes and pods from watch events,
kept as an incrementally updated core `Snapshot`, the plans of gangs in flight and the capacity
those plans reserve, and the capacity the gang check promised to admitted gangs (`promises`).

Both components plan with this one object (`GangReservations.filter` for kube-scheduler's calls,
`GangReservations.pins` for the ungater), so a gang planned by one is never given the nodes the
other reserved. One replica holds it (the leader), built from the API after a restart.

Reservations are charged to the snapshot as placeholder pods (one per plan slot), so every
later plan and filter sees them without a second bookkeeping of free capacity. A slot's
placeholder is released when the member it was given to shows up bound in the pod cache,
or when the plan is dropped (barrier timeout, expiry, re-plan, the gang's last pod gone).
Everything here is rebuilt from the API after a restart: plans are short-lived reservations,
like kube-scheduler's own assumed pods, and members waiting at a barrier that died are retried
by the scheduler.

Nodes kube-scheduler refused for a gang member's planned slot are remembered per pod shape
(`rejected`) and left out of that shape's next plans, until `reject_ttl` passes, a watch event
changes the node or frees a pod on it, or kube-scheduler offers the node for that shape again.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import (
    FilterVerdict,
    GangKey,
    GangPlan,
    GangPod,
    PodKey,
    Shape,
    SlotPicker,
    assign,
    bind_refusal,
    filter_gang_pod,
    filter_pinned_pod,
    filter_single_pod,
    gang_size,
    plan_gang,
    scores,
    stranded_pin,
)
from gangplugin.core.placement import PlacementPolicy
from gangplugin.core.topology import BoundPod, Snapshot, build_snapshot
from gangplugin.extender.promises import AdmittedGang, Promises
from gangplugin.kube.client import JSON
from gangplugin.readmodel.records import NodeRecord

log = logging.getLogger(__name__)

_PLACEHOLDER_PREFIX = "\0reserved:"


# (namespace, gang) -> the gang's placement policy and topology levels, or None for the defaults;
# raises InputError when the gang's GangPolicy or Topology cannot be used.
PolicyOf = Callable[[str, str], tuple[PlacementPolicy, tuple[str, ...]] | None]
# A Workload -> what the gang check promised its gang, or None (not admitted by our check now).
AdmittedOf = Callable[[JSON], AdmittedGang | None]
# Kueue's name for the podset of a pod that carries none (a Job's only podset).
DEFAULT_POD_SET = "main"
# Why a Kueue gang is not planned yet (see `GangReservations.admission_unseen`).
UNSEEN_ADMISSION = "its admission has not reached the gang reservations yet; trying again"


class AdmissionUnseen(Exception):
    """A Kueue gang's pods asked for nodes before its admission reached the reservations: the
    scheduler is answered with an error, so it retries the pod after its backoff."""


class GangReservations:
    """Thread-safe: watch handlers write, extender calls and the ungater read and plan, all under
    one lock.

    One snapshot per set of topology levels in use (the defaults, plus those of GangPolicies'
    Topologies, built on first use); every watch event and reservation updates all of them."""

    def __init__(
        self,
        policy: PlacementPolicy | None = None,
        plan_ttl: float = 40.0,
        policy_of: PolicyOf | None = None,
        reject_ttl: float = 60.0,
        admitted_of: AdmittedOf | None = None,
    ) -> None:
        self.policy = policy or PlacementPolicy()
        self.plan_ttl = plan_ttl
        self.reject_ttl = reject_ttl
        self.policy_of = policy_of
        self.admitted_of = admitted_of
        self.promises = Promises()
        # Gangs whose admission this process announced (`on_admitting`) -> the Workload revision
        # it was decided on; the watch's versions up to it are older than the admission.
        self.announced: dict[GangKey, int] = {}
        self.lock = threading.RLock()
        self.snapshot = Snapshot()  # the default levels: plain pods and gangs without a policy
        self.snapshots: dict[tuple[str, ...], Snapshot] = {self.snapshot.levels: self.snapshot}
        self.bound: dict[PodKey, BoundPod] = {}  # what the snapshots charge: pods and placeholders
        # node -> pods bound or pinned to it before the node itself was seen (the pod and node
        # watches list in any order): charged when the node arrives.
        self.early: dict[str, set[PodKey]] = {}
        self.pods: dict[PodKey, GangPod] = {}
        self.gangs: dict[GangKey, set[PodKey]] = {}
        self.plans: dict[GangKey, GangPlan] = {}
        self.claims: dict[GangKey, dict[PodKey, int]] = {}
        self.reserved: dict[GangKey, set[int]] = {}  # slot indexes whose placeholder is charged
        self.reserved_on: Counter[str] = Counter()  # node -> placeholders charged to it
        # node -> pods pinned there (bindMode Ungate) that kube-scheduler has not bound yet: it
        # does not know of them, so a plain pod it found room for must be checked against them.
        self.pinned_on: Counter[str] = Counter()
        # pod shape -> node -> when kube-scheduler's refusal of it stops counting
        self.rejected: dict[Shape, dict[str, float]] = {}

    # -- the snapshots -----------------------------------------------------------------------

    def _bind(self, pod: BoundPod) -> None:
        self.bound[(pod.namespace, pod.name)] = pod
        if self.snapshot.node(pod.node_name) is None:
            self.early.setdefault(pod.node_name, set()).add((pod.namespace, pod.name))
        for snap in self.snapshots.values():
            snap.bind(pod)

    def _unbind(self, namespace: str, name: str) -> None:
        if self.bound.pop((namespace, name), None) is not None:
            for snap in self.snapshots.values():
                snap.unbind(namespace, name)

    def snapshot_for(self, levels: tuple[str, ...]) -> Snapshot:
        snap = self.snapshots.get(levels)
        if snap is None:
            nodes = [n for n in self.snapshot.nodes if n is not None]
            snap = self.snapshots[levels] = build_snapshot(nodes, self.bound.values(), levels)
            self.promises.charge_into(snap)
        return snap

    def admission_unseen(self, pod: GangPod) -> bool:
        """A pod of a gang the gang check admitted (it carries the bind-mode label the check
        stamps) whose admission these reservations have not seen on the Workload watch. Such a
        gang is not planned yet: the admission pass writes its admissions in the order it decided
        them (or announces them first, in this process), and the Workload watch delivers them in
        that order, so once this gang's admission is here, every admission decided before it is
        here too, and its plan leaves their promised capacity alone (planned sooner, it took
        nodes the pass had just promised another gang). An announced admission is not enough:
        the watch delivers every Workload change the pass saw before deciding it (another gang
        finished or deleted, its promise given back) only ahead of the admission's own write;
        planned before those, a gang the check counted in particular UltraServers of a wide
        domain found them still promised to a gang that had left, and was pinned elsewhere."""
        return (
            pod.bind_mode is not None
            and self.admitted_of is not None
            and (pod.gang_key not in self.promises.admitted or pod.gang_key in self.announced)
        )

    def _settings_of(self, gkey: GangKey) -> tuple[PlacementPolicy, Snapshot, bool]:
        """The gang's placement policy and snapshot, and whether Kueue's gang check owns it."""
        found = self.policy_of(*gkey) if self.policy_of is not None else None
        if found is None:
            return self.policy, self.snapshot, False
        policy, levels = found
        return policy, self.snapshot_for(levels), True

    # -- watch handlers --------------------------------------------------------------------

    def on_node(self, kind: str, old: NodeRecord | None, new: NodeRecord | None) -> None:
        with self.lock:
            if new is None:
                if old is not None:
                    self._forget_rejections(old.name)
                    self.promises.moved |= self.promises.touching(old.name)
                    for snap in self.snapshots.values():
                        snap.remove_node(old.name)
                return
            node = new.node
            if node is None:
                return  # its capacity cannot be read (the node cache logs why)
            if self.snapshot.node(node.name) != node:  # not a mere heartbeat
                self._forget_rejections(node.name)
                self.promises.moved |= self.promises.touching(node.name)
            for snap in self.snapshots.values():
                snap.upsert_node(node)
            for key in self.early.pop(node.name, ()):
                pod = self.bound.get(key)
                if pod is not None and pod.node_name == node.name:
                    for snap in self.snapshots.values():
                        snap.bind(pod)

    def _track_pin(self, old: GangPod | None, new: GangPod | None) -> None:
        was = old.pinned if old is not None and old.node is None and not old.finished else None
        now = new.pinned if new is not None and new.node is None and not new.finished else None
        if was == now:
            return
        if was is not None:
            self.pinned_on[was] -= 1
            if self.pinned_on[was] <= 0:
                del self.pinned_on[was]
        if now is not None:
            self.pinned_on[now] += 1

    def on_pod(self, kind: str, old: GangPod | None, new: GangPod | None) -> None:
        with self.lock:
            some = new or old
            if some is not None:  # against what the cache holds: the ungater feeds its pins too
                self._track_pin(self.pods.get(some.key), new)
            held = old.node if old is not None and not old.finished else None
            if held is not None and (new is None or new.node != held or new.finished):
                self._forget_rejections(held)  # the pod frees its node
                self.promises.moved |= self.promises.short()
            if new is None:
                if old is not None:
                    self._forget(old)
                return
            if old == new:
                return  # a status-only update (kwok, kubelet): nothing the extender reads changed
            self.pods[new.key] = new
            gkey = new.gang_key
            if gkey is not None:
                self.gangs.setdefault(gkey, set()).add(new.key)
                if gkey in self.promises.admitted:
                    self.promises.stale.add(gkey)  # what it holds itself may have changed
            # A pinned pod (bindMode Ungate) holds its node from the pin on: no other plan
            # may take it while kube-scheduler has yet to bind it there.
            if new.placed is not None and not new.finished:
                self._bind(BoundPod(new.namespace, new.name, new.placed, new.requests))
                if gkey is not None:
                    self._release_claim(gkey, new.key)
                if old is None or old.placed != new.placed:
                    self.promises.moved |= self.promises.crowded_on(new.placed, self.snapshot)
            else:
                self._unbind(new.namespace, new.name)

    def on_workload(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        """What the gang check promised the Workload's gang, from the moment it is admitted."""
        obj = new or old
        if obj is None or self.admitted_of is None:
            return
        meta = obj["metadata"]
        gkey = (str(meta.get("namespace", "")), gang_id(str(meta["name"])))
        admitted = self.admitted_of(new) if new is not None else None
        with self.lock:
            announced = self.announced.get(gkey)
            if announced is not None:
                if new is not None and _revision(new) <= announced:
                    return  # the version the admission was decided on, or older: it stands
                del self.announced[gkey]  # newer: the Workload itself says what holds
            self._admit(gkey, admitted)

    def recheck(self, workloads: Iterable[JSON]) -> None:
        """Read again the Workloads promised nothing: one the watch delivered before its
        AdmissionCheck, GangPolicy or ResourceFlavor (the watches list in any order, as after a
        restart) was promised nothing then, and its gang would wait for its admission for good."""
        for wl in workloads:
            meta = wl["metadata"]
            with self.lock:
                if (str(meta.get("namespace", "")), gang_id(str(meta["name"]))) in self.promises.admitted:
                    continue
            self.on_workload("MODIFIED", None, wl)

    def on_admitting(self, admitted: JSON) -> None:
        """An admission the gang check of this process decided and is writing (`admitted`: the
        Workload as the write will make it): promised from now, ahead of the Workload watch,
        until a newer version of the Workload arrives or the admission is withdrawn."""
        if self.admitted_of is None:
            return
        meta = admitted["metadata"]
        gkey = (str(meta.get("namespace", "")), gang_id(str(meta["name"])))
        promised = self.admitted_of(admitted)
        with self.lock:
            self.announced[gkey] = _revision(admitted)
            self._admit(gkey, promised)

    def on_withdrawn(self, workload: JSON) -> None:
        """The announced admission was not written: the Workload as it is says what holds,
        unless the watch has shown a newer version since."""
        meta = workload["metadata"]
        gkey = (str(meta.get("namespace", "")), gang_id(str(meta["name"])))
        with self.lock:
            if self.announced.pop(gkey, None) is None:
                return
            self._admit(gkey, self.admitted_of(workload) if self.admitted_of is not None else None)

    def _admit(self, gkey: GangKey, admitted: AdmittedGang | None) -> None:
        """Under the lock: `admitted` is what the gang is promised now (None: nothing)."""
        if admitted == self.promises.admitted.get(gkey):
            return  # a status update that changes nothing promised
        if admitted is None:
            del self.promises.admitted[gkey]
        else:
            self.promises.admitted[gkey] = admitted
        self.promises.stale.add(gkey)

    def _forget(self, pod: GangPod) -> None:
        self.pods.pop(pod.key, None)
        self._unbind(pod.namespace, pod.name)
        gkey = pod.gang_key
        if gkey is None:
            return
        if gkey in self.promises.admitted:
            self.promises.stale.add(gkey)
        self._release_claim(gkey, pod.key)
        members = self.gangs.get(gkey)
        if members is not None:
            members.discard(pod.key)
            if not members:
                del self.gangs[gkey]
                # Its last pod is gone (its Job deleted): a plan slot no pod claimed would hold
                # its node until the plan expired, room the gang check counts free. In CI a
                # RayCluster deleted with one pod short of its barrier held a node of us-4 for
                # 2 minutes, and a wide gang the check counted there was pinned elsewhere.
                if gkey in self.plans:
                    self.drop(gkey)

    # -- nodes kube-scheduler refused ------------------------------------------------------

    def _forget_rejections(self, node: str) -> None:
        for shape, nodes in list(self.rejected.items()):
            nodes.pop(node, None)
            if not nodes:
                del self.rejected[shape]

    def _rejected_for(self, pod: GangPod, node_names: Sequence[str], now: float) -> dict[Shape, set[str]]:
        """The refusals still in force; nodes kube-scheduler offers for `pod` now are forgiven."""
        offered = self.rejected.get(pod.shape)
        if offered:
            candidates = set(node_names)
            for name in [n for n in offered if n in candidates]:
                del offered[name]
        out: dict[Shape, set[str]] = {}
        for shape in list(self.rejected):
            nodes = self.rejected[shape]
            for name in [n for n, until in nodes.items() if until <= now]:
                del nodes[name]
            if nodes:
                out[shape] = set(nodes)
            else:
                del self.rejected[shape]
        return out

    def _record_rejections(self, pod: GangPod, nodes: Sequence[str], now: float) -> None:
        if nodes:
            log.info(
                "kube-scheduler refused %s for pod %s/%s; planning gang %s without them for %gs",
                ", ".join(nodes),
                pod.namespace,
                pod.name,
                pod.gang,
                self.reject_ttl,
            )
            self.rejected.setdefault(pod.shape, {}).update(dict.fromkeys(nodes, now + self.reject_ttl))

    # -- promises --------------------------------------------------------------------------

    def _settle(self) -> None:
        """Charge again the promises events made stale (see `promises`); call under the lock
        before reading capacity. A gang whose own plan is in flight holds its nodes by it."""
        promises = self.promises
        stale, moved = promises.stale | promises.moved, promises.moved
        promises.stale, promises.moved = set(), set()
        # Gangs admitted into one UltraServer first: a gang admitted into a wider domain has
        # room elsewhere in it, and placed first it could take the UltraServer's room.
        for gkey in sorted(stale, key=lambda g: (not promises.pinned_to_ultraserver(g), g)):
            if gkey in self.plans:
                promises.release(gkey, self.snapshots.values())
                continue
            placed: dict[str, list[str]] = {}
            for m in self.members(gkey):
                if m.placed is not None and not m.finished and not m.deleting:
                    placed.setdefault(m.pod_set or DEFAULT_POD_SET, []).append(m.placed)
            promises.charge(gkey, self.snapshots.values(), self.snapshot, placed, again=gkey in moved)

    def _plan(self, gkey: GangKey, plan: GangPlan) -> None:
        """A plan made for `gkey` on snapshots without its promise: reserved if it is feasible
        (then it holds the gang's nodes), else the promise comes back."""
        if plan.feasible:
            self._reserve(plan)
        else:
            self.promises.stale.add(gkey)

    # -- reservations ----------------------------------------------------------------------

    def _placeholder(self, gkey: GangKey, slot: int) -> tuple[str, str]:
        return gkey[0], f"{_PLACEHOLDER_PREFIX}{gkey[1]}#{slot}"

    def _unreserve(self, gkey: GangKey, slot: int) -> None:
        self._unbind(*self._placeholder(gkey, slot))
        node = self.plans[gkey].slots[slot].node
        self.reserved_on[node] -= 1
        if self.reserved_on[node] <= 0:
            del self.reserved_on[node]

    def _reserve(self, plan: GangPlan) -> None:
        slots = set(range(len(plan.slots)))
        for i in slots:
            s = plan.slots[i]
            ns, name = self._placeholder(plan.gang, i)
            self._bind(BoundPod(ns, name, s.node, s.requests))
            self.reserved_on[s.node] += 1
        self.plans[plan.gang] = plan
        self.reserved[plan.gang] = slots
        self.claims[plan.gang] = {}

    def _release_claim(self, gkey: GangKey, pod: PodKey) -> None:
        """The member is bound (its own requests now count) or gone: free its slot's placeholder."""
        claims = self.claims.get(gkey)
        if claims is None or pod not in claims:
            return
        slot = claims.pop(pod)
        reserved = self.reserved.get(gkey, set())
        if slot in reserved:
            reserved.discard(slot)
            self._unreserve(gkey, slot)
        if not reserved and not claims:
            self.drop(gkey)

    def drop(self, gkey: GangKey) -> None:
        """Forget a gang's plan and give back everything it still reserves (what the gang check
        promised its pods that hold no node is promised again)."""
        for slot in self.reserved.pop(gkey, set()):
            self._unreserve(gkey, slot)
        self.plans.pop(gkey, None)
        self.claims.pop(gkey, None)
        if gkey in self.promises.admitted:
            self.promises.stale.add(gkey)

    def _sweep(self, now: float) -> None:
        for gkey in [g for g, p in self.plans.items() if p.expires_at <= now]:
            log.info("plan of gang %s/%s expired; releasing its reservation", *gkey)
            self.drop(gkey)

    # -- extender calls --------------------------------------------------------------------

    def known(self, gkey: GangKey) -> int:
        """How many pods of the gang the cache holds (finished and leaving ones too): at least its
        members, at no cost per member."""
        with self.lock:
            return len(self.gangs.get(gkey, ()))

    def members(self, gkey: GangKey) -> list[GangPod]:
        with self.lock:
            return [self.pods[k] for k in sorted(self.gangs.get(gkey, ())) if k in self.pods]

    def bound_members(self, gkey: GangKey) -> list[PodKey]:
        with self.lock:
            return [m.key for m in self.members(gkey) if m.node is not None and not m.finished]

    def filter(
        self, pod: GangPod, node_names: Sequence[str], now: float
    ) -> tuple[FilterVerdict, GangPlan | None]:
        """The verdict for `pod` over `node_names`; also the gang's plan when one was made here.
        Raises InputError for gang metadata that cannot be used."""
        if pod.error is not None:
            raise InputError(f"pod {pod.namespace}/{pod.name}", pod.error)
        if pod.pinned is not None:
            return filter_pinned_pod(pod.pinned, node_names), None
        gkey = pod.gang_key
        with self.lock:
            self._sweep(now)
            self._settle()
            if gkey is None:
                # Capacity reserved for gangs being bound, pinned, or promised to admitted ones.
                held = self.reserved_on.keys() | self.pinned_on.keys() | set(self.promises.nodes())
                return filter_single_pod(self.snapshot, pod, node_names, held), None
            if gkey not in self.plans and self.admission_unseen(pod):
                raise AdmissionUnseen(f"gang {gkey[1]} of pod {pod.namespace}/{pod.name}: {UNSEEN_ADMISSION}")
            made = None
            # A plan the scheduler refused is made again at once, without the refused nodes:
            # the second plan cannot pick them, so each round makes progress.
            for _ in range(2):
                plan = self.plans.get(gkey)
                if plan is None:
                    members = [m for m in self.members(gkey) if m.key != pod.key]
                    policy, snap, checked = self._settings_of(gkey)
                    self.promises.release(gkey, self.snapshots.values())  # its plan replaces it
                    plan = plan_gang(
                        snap,
                        pod,
                        [*members, pod],
                        policy,
                        expires_at=now + self.plan_ttl,
                        rejected=self._rejected_for(pod, node_names, now),
                        keep_bound=checked,
                    )
                    made = plan
                    self._plan(gkey, plan)
                elif plan.size != pod.size:
                    raise InputError(
                        f"pod {pod.namespace}/{pod.name}: metadata.annotations.gangplugin.io/gang-size",
                        f"{pod.size} disagrees with {plan.size} of the gang's plan; "
                        "give every pod the same size",
                    )
                target = None
                if plan.feasible:
                    claims = self.claims[gkey]
                    slot = assign(plan, pod, claims)
                    if slot is not None:
                        claims[pod.key] = slot
                        target = plan.slots[slot].node
                verdict = filter_gang_pod(plan, node_names, target)
                if not verdict.replan:
                    break
                self._record_rejections(pod, verdict.rejected, now)
                self.drop(gkey)
            return verdict, made

    def pins(self, gkey: GangKey, now: float) -> tuple[list[tuple[GangPod, str]], str]:
        """bindMode Ungate: the node of every gated member of the gang, planned whole by the
        same `plan_gang` as filter (the pinned and bound members hold their nodes, spares of
        their UltraServer are theirs), and reserved until each pin shows up in the pod cache.
        Empty, with why, while members are missing or the gang does not fit."""
        with self.lock:
            members = [m for m in self.members(gkey) if not m.finished and not m.deleting]
            gated = [m for m in members if m.gated]
            if not gated:
                return [], "no pod of the gang waits behind the placement gate"
            size = gang_size(gated[0], members)
            if len(members) < size:
                # Pinning part of a gang would let that part hold nodes for a gang that may never
                # be whole; its pods come together (one Job's), the watchdog times out the rest.
                return [], f"{len(members)} of the gang's {size} pods exist; waiting for the rest"
            self._sweep(now)
            self._settle()
            plan = self.plans.get(gkey)
            if plan is None:
                if self.admission_unseen(gated[0]):
                    return [], UNSEEN_ADMISSION
                policy, snap, checked = self._settings_of(gkey)
                self.promises.release(gkey, self.snapshots.values())  # its plan replaces it

                def planned() -> GangPlan:
                    return plan_gang(
                        snap, gated[0], members, policy, expires_at=now + self.plan_ttl, keep_bound=checked
                    )

                plan = planned()
                displaced = None if plan.feasible else self._displacing(gkey, gated[0], snap, planned)
                if displaced is not None:
                    plan = displaced
                else:
                    self._plan(gkey, plan)
                if not plan.feasible:
                    return [], plan.reason
            claims = self.claims[gkey]
            picker = SlotPicker(plan, claims)
            out = []
            for m in gated:
                slot = picker.pick(m)
                if slot is None:
                    self.drop(gkey)
                    return [], f"gang {gkey[1]} has more pods than its size {size}"
                claims[m.key] = slot
                out.append((m, plan.slots[slot].node))
            return out, plan.reason

    def _displacing(
        self, gkey: GangKey, pod: GangPod, snap: Snapshot, planned: Callable[[], GangPlan]
    ) -> GangPlan | None:
        """Under the lock: the plan of an admitted gang that does not fit in its domain only
        because other gangs' promises sit there, with those promises placed again around it;
        None (nothing changed) unless every promise still fits as well as before. The check
        counts a gang admitted into a wide domain (a network layer, in slices) somewhere in it,
        and the reservations place its promise on their own, possibly on the room the check
        counted for a gang admitted into one UltraServer of that layer: at 500 nodes 2-5 such
        gangs a burst stayed gated, the domain full of another gang's slice of 12 or 16. Only
        for a gang admitted into one UltraServer: for one admitted into a wider domain every
        promise in it would be placed again, each time it is retried."""
        if not self.promises.pinned_to_ultraserver(gkey):
            return None
        domain = [n.name for n in snap.nodes if n is not None and pod.constraints.selects(n.labels, n.name)]
        others = set().union(*(self.promises.on(n) for n in domain)) - {gkey}
        if not others:
            return None
        self._settle()  # admissions not charged yet go first: the displaced are placed after them
        short = self.promises.short()
        snapshots = list(self.snapshots.values())
        for g in others:
            self.promises.release(g, snapshots)
        plan = planned()
        if plan.feasible:
            self._reserve(plan)  # its nodes first: the others are placed around them
        self.promises.moved |= others  # placed again, even where nothing they stand for changed
        self._settle()
        if plan.feasible and self.promises.short() <= short:
            log.info(
                "gang %s/%s: placed around the promises of %s, placed again elsewhere in their domains",
                *gkey,
                ", ".join(f"{ns}/{g}" for ns, g in sorted(others)),
            )
            return plan
        if plan.feasible:
            self.drop(gkey)
            self.promises.stale.discard(gkey)  # its promise comes back after theirs, as before
        self.promises.moved |= others
        self._settle()
        return None

    def stranded(self, gkey: GangKey) -> list[tuple[GangPod, str]]:
        """The gang's members pinned to a node that can no longer take them, each with why."""
        with self.lock:
            return [(m, why) for m in self.members(gkey) if (why := stranded_pin(self.snapshot, m))]

    def pinned_to(self, node: str) -> set[GangKey]:
        """The gangs with a member pinned to `node` and not bound yet."""
        with self.lock:
            if node not in self.pinned_on:
                return set()
            return {
                p.gang_key
                for p in self.pods.values()
                if p.pinned == node and p.node is None and p.gang_key is not None
            }

    def planned_node(self, pod: GangPod) -> str | None:
        """The node the plan of `pod`'s gang gave it (in filter, or the ungater's pin), or None."""
        gkey = pod.gang_key
        if gkey is None or pod.pinned is not None:
            return pod.pinned
        with self.lock:
            plan, slot = self.plans.get(gkey), self.claims.get(gkey, {}).get(pod.key)
            return plan.slots[slot].node if plan is not None and slot is not None else None

    def bind_refusal(self, pod: GangPod, uid: str, node: str) -> str | None:
        """Why `bind` must not bind `pod` to `node` (core `bind_refusal`), or None."""
        with self.lock:
            return bind_refusal(pod, uid, node, self.snapshot.node(node), self.planned_node(pod))

    def prioritize(self, pod: GangPod, node_names: Sequence[str]) -> list[tuple[str, int]]:
        with self.lock:
            self._settle()
            return scores(self.snapshot, pod, node_names, self.planned_node(pod))


def _revision(obj: JSON) -> int:
    """A Workload's resourceVersion as the etcd revision it is (0 if it is not one): versions
    of one object are only compared, to tell the version an admission was decided on from later."""
    rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
    return int(rv) if rv.isdigit() else 0
