"""Recovery of a running gang: one node to take the pods of a failed node (`replace`), and every
failed node replaced at once, all or none (`recover`).

Candidates keep the gang's required domain and the required slice domain of the moved pods. The
closest in the topology to the failed node win (deepest shared level), within that a spare of an
UltraServer the gang runs in first, then the tightest fit, then the name. Spares of other
UltraServers are never used (`held_spares`). Candidates are searched ring by ring outwards from
the failed node's domains, so a nearby replacement costs no pass over the whole cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.errors import InputError
from gangplugin.core.placement.capacity import is_extended, request_shape
from gangplugin.core.placement.levels import gang_levels
from gangplugin.core.placement.model import (
    Assignment,
    Gang,
    PlacementPolicy,
    Recovery,
    Replacement,
    validate_gang,
)
from gangplugin.core.placement.slices import slicings
from gangplugin.core.placement.spares import held_spares
from gangplugin.core.resources import PODS, format_quantity
from gangplugin.core.topology import ULTRASERVER_LABEL, Snapshot

#: node id -> requests already moved onto it by earlier moves of the same decision
_Taken = Mapping[int, Mapping[str, int]]


class CandidateRank(NamedTuple):
    """A node that can take the moved pods, as a sort key: the smallest is the replacement."""

    unshared_levels: int  # levels below the deepest one it shares with the failed node
    not_spare: bool  # False for a spare (of an UltraServer the gang runs in): spares first
    leftover: int  # extended resources left on it after the move: the tightest fit first
    name: str


class _Ring(NamedTuple):
    """One of the failed node's domains (the root: level -1), searched from the narrowest out."""

    domain: int
    level: int


def replace(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_node: str,
    policy: PlacementPolicy | None = None,
) -> Replacement:
    """One node to take every pod `assignments` put on `failed_node` (see the module docstring).

    The snapshot must already count the gang's pods on its other nodes.
    """
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    held = held_spares(snapshot, policy, {a.node for a in assignments})
    return _replace(snapshot, gang, assignments, failed_node, spares, held, {})


def _replace(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_node: str,
    spares: frozenset[int],
    held: frozenset[int],
    taken: _Taken,
) -> Replacement:
    """`replace` with the spare sets given and `taken` already used by earlier moves of the same
    decision. Once the best node found shares a level no node outside the current ring can, the
    wider rings cannot beat it."""
    moving = [a for a in assignments if a.node == failed_node]
    if not moving:
        return Replacement(True, None, False, (), f"no pod of the gang is on {failed_node}")
    need, constraints, required, whose = _moving(snapshot, gang, moving)
    rings, anchor_key = _rings(snapshot, assignments, failed_node, required)
    best_rank: CandidateRank | None = None
    best_node = -1
    seen: set[int] = set()
    for ring in rings:
        for i in snapshot.subtree_nodes(ring.domain):
            if i in seen:
                continue
            seen.add(i)
            rank = _candidate_rank(
                snapshot, i, failed_node, need, constraints, anchor_key, spares, held, taken
            )
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_node = rank, i
        if best_rank is not None and len(snapshot.levels) - best_rank.unshared_levels > ring.level:
            break  # outside this ring a node shares at most `ring.level` levels with the failed one
    if best_rank is None:
        where = (
            f" in {whose} {snapshot.levels[required]}"
            if required is not None and anchor_key is not None
            else ""
        )
        return Replacement(
            False,
            None,
            False,
            (),
            f"no node{where} can take the {len(moving)} pod(s) of {failed_node} "
            f"({', '.join(f'{format_quantity(r, q)} {r}' for r, q in sorted(need.items()))})",
        )
    node = snapshot.nodes[best_node]
    assert node is not None
    used_spare = not best_rank.not_spare
    kind = f"spare of UltraServer {node.labels.get(ULTRASERVER_LABEL)}" if used_spare else "node"
    moved = sorted(moving, key=lambda a: (a.pod_set, a.index))
    return Replacement(
        True,
        node.name,
        used_spare,
        tuple(Assignment(a.pod_set, a.index, node.name) for a in moved),
        f"{failed_node} replaced by {kind} {node.name}",
    )


def _moving(
    snapshot: Snapshot, gang: Gang, moving: Sequence[Assignment]
) -> tuple[dict[str, int], set[PodConstraints], int | None, str]:
    """What the pods to move need together (resources and pods), their constraints, and the
    level whose domain they must stay in (the gang's required level, or a slice's: a pod of a
    slice stays in its slice's domain, the failed node's, since its slice is all there)."""
    required = gang_levels(snapshot, gang).required
    by_name = {podset.name: podset for podset in gang.podsets}
    per_set: Counter[str] = Counter()
    for a in moving:
        if a.pod_set not in by_name:
            raise InputError("assignments", f"podset {a.pod_set!r} is not in the gang")
        per_set[a.pod_set] += 1
    whose = "the gang's"
    for podset, slicing in zip(gang.podsets, slicings(snapshot, gang, required, None), strict=True):
        if (
            podset.name in per_set
            and slicing is not None
            and slicing.required
            and (required is None or slicing.level > required)
        ):
            required, whose = slicing.level, "its slice's"
    need: dict[str, int] = {PODS: len(moving)}
    for name, pods in per_set.items():
        for resource, amount in request_shape(by_name[name]):
            need[resource] = need.get(resource, 0) + pods * amount
    return need, {by_name[name].constraints for name in per_set}, required, whose


def _rings(
    snapshot: Snapshot, assignments: Sequence[Assignment], failed_node: str, required: int | None
) -> tuple[list[_Ring], tuple[str | None, ...] | None]:
    """The anchor's domains from the narrowest up to the required level (or the root), where a
    replacement is looked for in that order; the anchor is the failed node (else the gang's
    first other node still known), and its labels per level."""
    anchor_id = snapshot.node_ids.get(failed_node)
    if anchor_id is None:
        others = sorted({a.node for a in assignments if a.node != failed_node})
        anchor_id = next((i for n in others if (i := snapshot.node_ids.get(n)) is not None), None)
    anchor = snapshot.nodes[anchor_id] if anchor_id is not None else None
    anchor_key = tuple(anchor.labels.get(label) for label in snapshot.levels) if anchor is not None else None
    if anchor_id is None:
        return ([_Ring(0, -1)] if required is None else []), anchor_key
    top = required if required is not None else -1
    path = snapshot.path[anchor_id]
    rings = [_Ring(path[level], level) for level in range(len(snapshot.levels) - 1, top - 1, -1)]
    if required is None:
        rings.append(_Ring(0, -1))
    elif anchor_key is not None and anchor_key[required] is None:
        rings = []
    return rings, anchor_key


def _candidate_rank(
    snapshot: Snapshot,
    i: int,
    failed_node: str,
    need: Mapping[str, int],
    constraints: Collection[PodConstraints],
    anchor_key: tuple[str | None, ...] | None,
    spares: frozenset[int],
    held: frozenset[int],
    taken: _Taken,
) -> CandidateRank | None:
    """The rank of node `i` if it can take the moved pods, else None."""
    node = snapshot.nodes[i]
    if node is None or node.name == failed_node or not snapshot.usable[i] or i in held:
        return None
    free = snapshot.free[i]
    used = taken.get(i)
    if used is not None:
        free = {r: q - used.get(r, 0) for r, q in free.items()}
    if PODS not in free:
        free = {**free, PODS: need[PODS]}
    if any(free.get(r, 0) < q for r, q in need.items()):
        return None
    if any(c.refusal(node.labels, node.name, node.taints) is not None for c in constraints):
        return None
    shared = 0
    if anchor_key is not None:
        key = tuple(node.labels.get(label) for label in snapshot.levels)
        while shared < len(key) and key[shared] is not None and key[shared] == anchor_key[shared]:
            shared += 1
    leftover = sum(free.get(r, 0) - q for r, q in need.items() if r != PODS and is_extended(r))
    return CandidateRank(len(snapshot.levels) - shared, i not in spares, leftover, node.name)


def recover(
    snapshot: Snapshot,
    gang: Gang,
    assignments: Sequence[Assignment],
    failed_nodes: Collection[str],
    policy: PlacementPolicy | None = None,
) -> Recovery:
    """Replace every node of `failed_nodes` at once (`replace` for each, in name order, each
    seeing what the ones before it took, with the spares as they were when the nodes failed):
    all moves, or none when one node cannot be replaced, so a gang is never half moved. A pod
    of a slice stays in its slice's domain. The snapshot is not changed."""
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    by_name = {podset.name: podset for podset in gang.podsets}
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    held = held_spares(snapshot, policy, {a.node for a in assignments})
    current = list(assignments)
    moves: list[Replacement] = []
    taken: dict[int, dict[str, int]] = {}
    for failed in sorted(set(failed_nodes)):
        move = _replace(snapshot, gang, current, failed, spares, held, taken)
        if not move.feasible:
            count = len(set(failed_nodes))
            what = "the failed node" if count == 1 else f"all {count} failed nodes"
            return Recovery(False, (), f"{what} cannot be replaced: {move.reason}")
        if move.node is None:
            continue
        moves.append(move)
        moved = {(a.pod_set, a.index): a for a in move.assignments}
        current = [moved.get((a.pod_set, a.index), a) for a in current]
        used = taken.setdefault(snapshot.node_ids[move.node], {})
        for a in move.assignments:
            for resource, amount in by_name[a.pod_set].requests.items():
                used[resource] = used.get(resource, 0) + amount
            used[PODS] = used.get(PODS, 0) + 1
    reason = "; ".join(move.reason for move in moves) or "no pod of the gang is on a failed node"
    return Recovery(True, tuple(moves), reason)
