"""The spare rule, in one place: with `spares_per_ultraserver = k`, the k idle nodes (no pod
holding an accelerator on them) with the highest names in each UltraServer
(`Snapshot.spare_nodes`) are held back from every gang except one already running in that
UltraServer, for which they are the first choice to replace a failed node. The admission check's
`place` and `recover` and the extender's plan of a recreated pod all ask `held_spares`."""

from __future__ import annotations

from collections.abc import Collection

from gangplugin.core.placement.model import PlacementPolicy
from gangplugin.core.topology import ULTRASERVER_LABEL, Snapshot


def held_spares(
    snapshot: Snapshot, policy: PlacementPolicy, occupied: Collection[str] = ()
) -> frozenset[int]:
    """The spare nodes a gang may not use: every UltraServer's spares, except those of an
    UltraServer where the gang already has pods (`occupied`: their nodes), which exist to take
    its pods from a failed node."""
    spares = snapshot.spare_nodes(policy.spares_per_ultraserver)
    if not spares or not occupied:
        return spares
    own = {
        ultraserver
        for node in map(snapshot.node, occupied)
        if node is not None and (ultraserver := node.labels.get(ULTRASERVER_LABEL)) is not None
    }
    return frozenset(
        i
        for i in spares
        if (node := snapshot.nodes[i]) is None or node.labels.get(ULTRASERVER_LABEL) not in own
    )
