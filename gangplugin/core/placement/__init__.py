"""All-or-nothing, topology-aware placement of a gang, and replacement of a failed node.

The algorithm, over a `Snapshot` built once (see `core/topology.py`), in the spirit of Kueue's
`tas_flavor_snapshot.go`:

1. For each podset, count per node how many of its (identical) pods fit: the node must be
   Ready, not cordoned, not a held spare, tolerate the taints and match nodeSelector/affinity;
   the count is the minimum over requested resources of free // request, and free pod slots.
   The counts are summed bottom-up over the domain tree (`capacity`).
2. Pick the level (`place`). The gang's level comes from the pod-template annotations
   `gangplugin.io/required-topology` and `gangplugin.io/preferred-topology` (the narrowest of
   each across podsets, `levels`). Starting at the preferred level (or the required one, or
   with neither the narrowest level), walk up towards the required level (or the widest) and
   take the first level where one domain holds every pod. Among the domains that do, the best
   fit wins: least room left over, ties by name.
3. If no single domain fits: with a required level the gang is infeasible; otherwise it is
   spread over the fewest domains of the preferred level (without annotations, the narrowest
   level above hostname): largest first, the last one the tightest that holds the rest.
4. Inside a chosen domain, descend level by level with the same rule (fewest children,
   largest first, the last one best fit) down to the nodes (`descent`). Pods get nodes in tree
   order, so consecutive indexes sit close together.

Slices (`slices`): a podset may ask for slices (`gangplugin.io/slice-size: N` with
`gangplugin.io/slice-required-topology` or `slice-preferred-topology: <level A>`): each
consecutive group of N pods lands inside one domain of level A, and the gang's own level (B,
above A, optional) holds all slices together. A domain above A can hold the sum over its
level-A domains of (pods that fit there) // N slices; the descent then picks domains in slice
units (fewest, fullest: largest first, the last one the tightest; of equal slices the one with
fewer pods of room, which strands less, as Kueue's BestFit) down to level A, and inside
each level-A domain places its slices' pods as above. Each level-A domain gets whole slices,
so consecutive indexes (tree order) form the slices. A preferred slice level that cannot be
met is widened level by level towards B, then dropped. Where the gang check counted an
admitted gang's slices, or the pods of one admitted wider than an UltraServer (`recorded`), they
are placed first.

Several podsets are filled one after another on a working copy of free capacity, in every
fill order when there are few podsets, then by exact search on a small domain (`planner`). A
domain is accepted only if all fit. Nothing is ever half placed: the result has an assignment
for every pod, or none. Why a gang does not fit is told by `explain`.

Spares (`spares`): with `spares_per_ultraserver = k`, the k idle nodes with the highest names in
each UltraServer are held back from every gang except one already running in that UltraServer,
for which they are the first choice to replace a failed node (`recovery`: `replace`, `recover`).
A gang that could not fit even with every pod gone (larger than every domain of its required
level, spares kept) is told it can never start whole, with the numbers and the fix
(`wholeness`). The answer is a pure function of its inputs; input order never matters.
"""

from gangplugin.core.placement.capacity import eligible_nodes, fit_counter
from gangplugin.core.placement.levels import GangLevels, gang_levels
from gangplugin.core.placement.model import (
    Assignment,
    Gang,
    Placement,
    PlacementPolicy,
    PodSet,
    Recovery,
    Replacement,
    validate_gang,
)
from gangplugin.core.placement.place import place
from gangplugin.core.placement.recovery import recover, replace
from gangplugin.core.placement.spares import held_spares
from gangplugin.core.placement.wholeness import NeverWhole, holds_whole, never_whole

__all__ = [
    "Assignment",
    "Gang",
    "GangLevels",
    "NeverWhole",
    "Placement",
    "PlacementPolicy",
    "PodSet",
    "Recovery",
    "Replacement",
    "eligible_nodes",
    "fit_counter",
    "gang_levels",
    "held_spares",
    "holds_whole",
    "never_whole",
    "place",
    "recover",
    "replace",
    "validate_gang",
]
