"""`place`: where every pod of a gang goes, or why it cannot run now.

The level: from the preferred level (or the required one, or with neither the narrowest),
towards the required level (or the widest), the first level where one domain holds every pod;
among those domains the best fit (least room left over, ties by name). With no such domain a
gang with a required level is infeasible; any other is spread over the fewest domains of its
preferred level (or, without one, the narrowest level above hostname). Slicings are tried as
asked, then with preferred slice levels widened (`slices.slice_attempts`). Slices and pods the gang
check recorded where it counted them (`recorded`) are placed there first."""

from __future__ import annotations

from collections.abc import Collection

from gangplugin.core.placement.explain import fit_reason, refusal, requirement, spread_reason
from gangplugin.core.placement.levels import GangLevels, gang_levels
from gangplugin.core.placement.model import Gang, Placement, PlacementPolicy, validate_gang
from gangplugin.core.placement.planner import Planner
from gangplugin.core.placement.recorded import anew, joined, split
from gangplugin.core.placement.slices import slice_attempts, slicings
from gangplugin.core.placement.spares import held_spares
from gangplugin.core.topology import HOSTNAME_LABEL, Snapshot


def place(
    snapshot: Snapshot,
    gang: Gang,
    policy: PlacementPolicy | None = None,
    occupied: Collection[str] = (),
    *,
    explain: bool = True,
) -> Placement:
    """Where every pod of `gang` goes, or why it cannot run now. See the package docstring.
    `occupied`: nodes where other pods of the gang already run (their UltraServers' spares are
    the gang's to use).

    `explain=False` skips the reason of a refusal (a pass over every node): for callers that
    ask again and again and only need the answer, such as the capacity simulator.

    Raises InputError for a gang without podsets, a count below 1, or a topology annotation
    naming a label that is not one of the snapshot's levels.
    """
    validate_gang(gang)
    policy = policy or PlacementPolicy()
    recorded = split(gang, snapshot.levels)
    if recorded is not None:  # where the check counted its pods, if they still fit there
        pinned, origin = recorded
        result = place(snapshot, pinned, policy, occupied, explain=False)
        if result.feasible:
            return joined(gang, origin, result)
        return anew(_fresh(snapshot, gang, policy, occupied, explain), gang)
    return _fresh(snapshot, gang, policy, occupied, explain)


def _fresh(
    snapshot: Snapshot, gang: Gang, policy: PlacementPolicy, occupied: Collection[str], explain: bool
) -> Placement:
    """`place` without a record: each slicing as asked, then widened."""
    levels = gang_levels(snapshot, gang)
    asked = slicings(snapshot, gang, levels.required, levels.preferred)
    spares = held_spares(snapshot, policy, occupied)
    planner = Planner(snapshot, gang, spares)
    first: Placement | None = None
    for attempt in slice_attempts(asked, levels.required, levels.preferred):
        planner.slicing = attempt
        result = _attempt(planner, levels, policy.climb_levels, explain)
        if result.feasible:
            return result
        first = first or result  # the miss as asked explains best
    assert first is not None
    return first


def _attempt(planner: Planner, wanted: GangLevels, climb: bool, explain: bool) -> Placement:
    """One attempt of `place` with the planner's slicing."""
    snapshot = planner.snapshot
    required, preferred = wanted
    labels = snapshot.levels
    narrowest = len(labels) - 1
    stop = required if required is not None else 0
    if preferred is not None and preferred >= stop:
        start = preferred
    else:
        start = required if required is not None else narrowest
    needs = planner.needs
    domain_counts = [counts.per_domain for counts in planner.counts]  # per podset
    last = stop if climb else start
    first, first_need = domain_counts[0], needs[0]  # the cheap test first: most domains fail it
    domains = snapshot.domains
    for level in range(start, last - 1, -1):
        fitting = [
            domain
            for domain in snapshot.by_level[level]
            if first[domain] >= first_need
            and domains[domain].value is not None
            # a narrower domain counts only inside a labelled domain of the required level
            and (required is None or domains[domain].key[required] is not None)
            and all(planner.fits(podset, domain) for podset in range(len(needs)))
        ]
        fitting.sort(
            key=lambda domain: (
                sum(domain_counts[podset][domain] - need for podset, need in enumerate(needs)),
                domains[domain].value,
                tuple(value or "" for value in domains[domain].key),
            )
        )
        for domain in fitting:
            result = planner.fill_one(domain)
            if result is not None:
                return Placement(
                    True,
                    labels[level],
                    (domains[domain].value or "",),
                    planner.assignments(result),
                    fit_reason(planner, level, domain, result),
                )
    if required is not None:
        why = refusal(planner, required) if explain else "does not fit"
        return Placement(False, None, (), (), why, requirement(planner, required) if explain else "")
    if preferred is not None:
        spread_level = preferred
    else:
        above_host = [i for i, label in enumerate(labels) if label != HOSTNAME_LABEL]
        spread_level = above_host[-1] if above_host else narrowest
    spread = planner.fill_spread(spread_level)
    if spread is None:
        why = refusal(planner, None) if explain else "does not fit"
        return Placement(False, None, (), (), why, requirement(planner, None) if explain else "")
    used = {snapshot.path[node][spread_level] for picks in spread for node, _ in picks}
    values = tuple(sorted({value for domain in used if (value := domains[domain].value) is not None}))
    return Placement(
        True,
        None,
        values,
        planner.assignments(spread),
        spread_reason(planner, spread_level, len(used), preferred is not None, spread),
    )
