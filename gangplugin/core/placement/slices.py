"""Slices: consecutive groups of a podset's pods, each inside one domain of the slice level
(`gangplugin.io/slice-size` with `slice-required-topology` or `slice-preferred-topology`, and
Kueue's `podset-slice-*` annotations read the same way). Here: the slicing each podset asks for,
checked against the snapshot's levels and the gang's level; the slicings to try when a preferred
slice level cannot be met; and how many slices each domain holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gangplugin.core.errors import InputError
from gangplugin.core.names import (
    SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)
from gangplugin.core.placement.model import Gang
from gangplugin.core.topology import Snapshot


@dataclass(frozen=True, slots=True)
class Slicing:
    """How one podset is cut into slices."""

    size: int  # pods per slice
    level: int  # index of the level whose one domain holds each slice
    required: bool  # False: preferred, so it may be widened towards the gang's level, then dropped


def slicings(
    snapshot: Snapshot, gang: Gang, required: int | None, preferred: int | None
) -> list[Slicing | None]:
    """Each podset's slicing (None: not sliced), checked against the snapshot's levels and the
    gang's `required` and `preferred` level indexes."""
    out: list[Slicing | None] = []
    for i, podset in enumerate(gang.podsets):
        annotations = f"podSets[{i}].template.metadata.annotations."
        size = podset.slice_size
        label = podset.slice_required_topology or podset.slice_preferred_topology
        if size is None and label is None:
            out.append(None)
            continue
        if podset.slice_required_topology and podset.slice_preferred_topology:
            raise InputError(
                f"{annotations}{SLICE_PREFERRED_TOPOLOGY_ANNOTATION}",
                f"give one of {SLICE_REQUIRED_TOPOLOGY_ANNOTATION} and {SLICE_PREFERRED_TOPOLOGY_ANNOTATION}",
            )
        if size is None:
            raise InputError(
                f"{annotations}{SLICE_SIZE_ANNOTATION}", "is missing: a slice level needs the pods per slice"
            )
        field_name = (
            SLICE_REQUIRED_TOPOLOGY_ANNOTATION
            if podset.slice_required_topology
            else SLICE_PREFERRED_TOPOLOGY_ANNOTATION
        )
        if label is None:
            raise InputError(
                f"{annotations}{SLICE_REQUIRED_TOPOLOGY_ANNOTATION}",
                f"is missing: {SLICE_SIZE_ANNOTATION} needs the level each slice must fit in "
                f"(or {SLICE_PREFERRED_TOPOLOGY_ANNOTATION})",
            )
        if size < 1 or podset.count % size:
            divisors = [d for d in range(1, podset.count + 1) if podset.count % d == 0]
            raise InputError(
                f"{annotations}{SLICE_SIZE_ANNOTATION}",
                f"{size} does not divide the podset's {podset.count} pods: use a divisor of {podset.count} "
                f"({', '.join(map(str, divisors[-6:]))}) or make podSets[{i}].count a multiple of {size}",
            )
        level = snapshot.level_index(label)
        if level is None:
            raise InputError(
                f"{annotations}{field_name}",
                f"unknown topology label {label!r}; the levels are {', '.join(snapshot.levels)}",
            )
        for gang_level in (required, preferred):
            if gang_level is not None and level <= gang_level:
                raise InputError(
                    f"{annotations}{field_name}",
                    f"{label} is not narrower than the gang's level {snapshot.levels[gang_level]}: name a "
                    "slice level below it (slices sit inside the gang's domain) or widen the gang's level",
                )
        out.append(Slicing(size, level, bool(podset.slice_required_topology)))
    return out


def slice_attempts(
    asked: Sequence[Slicing | None], required: int | None, preferred: int | None
) -> list[list[Slicing | None]]:
    """The slicings to try in turn: as asked, then preferred slice levels widened one level at a
    time while they stay below the gang's level, then without the preferred slices."""
    floor = max((level for level in (required, preferred) if level is not None), default=-1) + 1
    attempts = []
    widen = 0
    while True:
        attempt: list[Slicing | None] = []
        moved = False
        for slicing in asked:
            if slicing is None or slicing.required:
                attempt.append(slicing)
            elif slicing.level - widen >= floor:
                attempt.append(Slicing(slicing.size, slicing.level - widen, False))
                moved = True
            else:
                attempt.append(None)
        attempts.append(attempt)
        if not moved:
            return attempts
        widen += 1


def slices_per_domain(snapshot: Snapshot, slicing: Slicing, pods_per_domain: Sequence[int]) -> list[int]:
    """Slices each domain at or above the slice level holds: a labelled domain of the slice level
    holds (pods that fit there) // slice size; a wider one, the sum over its children."""
    domains = snapshot.domains
    slices = [0] * len(domains)
    for domain in snapshot.by_level[slicing.level]:
        whole = pods_per_domain[domain] // slicing.size
        if whole and domains[domain].value is not None:
            up = domain
            while up >= 0:
                slices[up] += whole
                up = domains[up].parent
    return slices
