"""What a placement question and its answers are made of: the gang and its podsets, the policy,
and the results of `place` (`Placement`), `replace` (`Replacement`) and `recover` (`Recovery`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.errors import InputError
from gangplugin.core.keys import UnknownKey


@dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods; `requests` per pod in canonical units (without `pods`).

    `excluded_nodes`: nodes these pods may not use although the snapshot shows room there
    (kube-scheduler rejected them for such a pod: its view of the node differs for a while).
    `slice_size` with `slice_required_topology` (or `slice_preferred_topology`): consecutive
    groups of that many pods each inside one domain of that level (see the package docstring);
    `slice_domains`: the domain of each slice at that level as the gang check admitted it
    (`gangplugin.io/slice-domains`), where `place` puts the slices first (`recorded`); for a
    podset not in slices, the domain of each pod at the narrowest level above hostname.
    """

    name: str
    count: int
    requests: Mapping[str, int] = field(default_factory=dict)
    constraints: PodConstraints = field(default_factory=PodConstraints)
    required_topology: str | None = None
    preferred_topology: str | None = None
    excluded_nodes: frozenset[str] = frozenset()
    slice_size: int | None = None
    slice_required_topology: str | None = None
    slice_preferred_topology: str | None = None
    slice_domains: tuple[str, ...] = ()
    # Keys on its pod template under our (or Kueue's podset) prefix that name nothing: the gang
    # check holds such a gang rather than place it without what the key was meant to ask.
    unknown_keys: tuple[UnknownKey, ...] = ()

    def unsliced(self) -> PodSet:
        return dataclasses.replace(
            self,
            slice_size=None,
            slice_required_topology=None,
            slice_preferred_topology=None,
            slice_domains=(),
        )


@dataclass(frozen=True, slots=True)
class Gang:
    """Every pod of a Kueue Workload: it runs whole or not at all."""

    podsets: tuple[PodSet, ...]
    name: str = ""

    def unknown_keys(self) -> list[tuple[int, UnknownKey]]:
        """(podset index, key) for each unknown key on its podsets' pod templates."""
        return [(i, k) for i, ps in enumerate(self.podsets) for k in ps.unknown_keys]


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    spares_per_ultraserver: int = 0
    #: False: try one domain at the starting level only, never a wider one (Kueue's TAS BestFit
    #: does not climb; the capacity simulator compares with it).
    climb_levels: bool = True


@dataclass(frozen=True, slots=True)
class Assignment:
    pod_set: str
    index: int
    node: str

    def to_dict(self) -> dict[str, Any]:
        return {"podSet": self.pod_set, "index": self.index, "node": self.node}


@dataclass(frozen=True, slots=True)
class Placement:
    """`level`: node label of the level whose one domain holds the gang (None when spread or
    infeasible); `domains`: the values used at that level (or at the preferred level when spread)."""

    feasible: bool
    level: str | None
    domains: tuple[str, ...]
    assignments: tuple[Assignment, ...]
    reason: str
    #: `reason` without what changes while the gang waits (the room domains and nodes have
    #: now): what a Workload's check message says, so that it is not rewritten with every
    #: count; empty: `reason` has nothing that changes.
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "level": self.level,
            "domains": list(self.domains),
            "assignments": [a.to_dict() for a in self.assignments],
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Replacement:
    """Where the pods of a failed node go: one node for all of them, or infeasible."""

    feasible: bool
    node: str | None
    used_spare: bool
    assignments: tuple[Assignment, ...]  # the moved pods only, at their new node
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "node": self.node,
            "usedSpare": self.used_spare,
            "assignments": [a.to_dict() for a in self.assignments],
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Recovery:
    """Where the pods of every failed node go, decided together: a move per node, or none."""

    feasible: bool
    moves: tuple[Replacement, ...]
    reason: str


def validate_gang(gang: Gang) -> None:
    if not gang.podsets:
        raise InputError("podSets", "a gang needs at least one podset")
    seen: set[str] = set()
    for i, podset in enumerate(gang.podsets):
        if podset.count < 1:
            raise InputError(f"podSets[{i}].count", f"must be at least 1, not {podset.count}")
        if podset.name in seen:
            raise InputError(f"podSets[{i}].name", f"podset {podset.name!r} appears twice")
        seen.add(podset.name)
        for resource, amount in podset.requests.items():
            if amount < 0:
                raise InputError(f"podSets[{i}].requests.{resource}", "must not be negative")
