"""The policies a replay compares, each as the way it decides a gang: the GangPolicy its gate
reads, how it places a gang, and whether it preempts.

`gangplugin` is the check's own placement (with the GangPolicy's spares and reservation);
`gangplugin-no-reservation` the same without reservation; `best-fit` the same with no spares,
no reservation and no climbing above the preferred level (close to Kueue's TAS BestFit);
`first-fit` is topology blind (the first nodes by name with room); `optimal` admits the
packing optimum of the first waiting gangs (`core/optimal.py`, our spares kept free)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gangplugin.core.admission import AdmissionDecision, decide
from gangplugin.core.gate import Placer
from gangplugin.core.optimal import optimal_admissions
from gangplugin.core.placement import Assignment, Gang, Placement, PlacementPolicy
from gangplugin.core.policy import GangPolicy, ReservationPolicy
from gangplugin.core.topology import Snapshot

#: Ours with the GangPolicy's reservation turned off: what reservation costs and gives.
NO_RESERVATION = "gangplugin-no-reservation"
POLICIES = ("gangplugin", NO_RESERVATION, "best-fit", "first-fit", "optimal")


def first_fit(snapshot: Snapshot, gang: Gang, order: Sequence[int]) -> Placement:
    """Topology blind: each pod on the first node (in `order`) with room, all or nothing."""
    taken: dict[int, dict[str, int]] = {}
    out: list[Assignment] = []
    for ps in gang.podsets:
        req = [(r, q) for r, q in ps.requests.items() if q > 0]
        index = 0
        for n in order:
            if index == ps.count:
                break
            if not snapshot.usable[n]:
                continue
            free = taken.get(n) or snapshot.free[n]
            fits = min((free.get(r, 0) // q for r, q in req), default=ps.count)
            k = min(fits, ps.count - index, free.get("pods", ps.count))
            if k <= 0:
                continue
            taken[n] = {**free, **{r: free.get(r, 0) - k * q for r, q in req}}
            if "pods" in free:
                taken[n]["pods"] = free["pods"] - k
            node = snapshot.nodes[n]
            assert node is not None
            out += [Assignment(ps.name, index + i, node.name) for i in range(k)]
            index += k
        if index < ps.count:
            return Placement(False, None, (), (), f"only {index} of {ps.count} pods fit (first fit)")
    return Placement(True, None, (), tuple(out), "first fit")


@dataclass(frozen=True, slots=True)
class Way:
    """How one compared policy decides a gang: the GangPolicy its gate reads, how it places a
    gang, and whether it preempts."""

    policy: GangPolicy
    place: Placer
    preempts: bool


def way(name: str, policy: GangPolicy, snapshot: Snapshot, explain: bool) -> Way:
    """The policy's way; `explain` says why a gang does not fit (costly). Only ours reserves."""
    if name != "gangplugin":
        policy = replace(policy, reservation=ReservationPolicy())
    if name in ("gangplugin", NO_RESERVATION, "best-fit"):

        def placed(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            return decide(snap, gang, gang.name, gp.placement, annotations, explain=explain)

        if name == "best-fit":
            policy = replace(policy, placement=PlacementPolicy(0, climb_levels=False))
        return Way(policy=policy, place=placed, preempts=True)
    if name == "first-fit":
        order = snapshot.live_node_ids()

        def first(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            p = first_fit(snap, gang, order)
            return AdmissionDecision(p.feasible, p.reason, placement=p)

        return Way(policy=policy, place=first, preempts=False)
    if name == "optimal":

        def optimum(
            snap: Snapshot, gang: Gang, gp: GangPolicy, annotations: Mapping[str, str]
        ) -> AdmissionDecision:
            spares = snap.spare_nodes(gp.placement.spares_per_ultraserver)
            (p,) = optimal_admissions(snap, [gang], spares)
            return AdmissionDecision(p.feasible, p.reason, placement=p)

        # it ignores Sequential mode
        return Way(policy=replace(policy, admission="Parallel"), place=optimum, preempts=False)
    raise ValueError(f"unknown policy {name!r}; the policies are {', '.join(POLICIES)}")


def spares_held(policy_name: str, policy: GangPolicy) -> int:
    """Spare nodes per UltraServer the policy keeps out of every gang's reach: ours and the
    optimum's are the GangPolicy's; best-fit and first-fit hold none."""
    ours = ("gangplugin", NO_RESERVATION, "optimal")
    return policy.placement.spares_per_ultraserver if policy_name in ours else 0
