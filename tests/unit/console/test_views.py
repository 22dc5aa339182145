"""What pages draw: gang colours that differ and stay put, hidden gangs unnamed on the map."""

from __future__ import annotations

from gangplugin.console.access import Namespaces
from gangplugin.console.model import ClusterMap, GangRef, MapDomain, MapNode, NodeState
from gangplugin.console.views import HIDDEN, PALETTE, gang_colours, map_page

US = "topology.k8s.aws/ultraserver-id"


def test_gang_colours_differ_and_stay_put() -> None:
    keys = [("team-a", f"job-{i}") for i in range(len(PALETTE))]
    colours = gang_colours(keys)
    assert len(set(colours.values())) == len(PALETTE)  # as many gangs as colours: all differ
    assert gang_colours(reversed(keys)) == colours  # the same gangs, the same colours
    assert gang_colours(keys[:3]) == gang_colours(keys[:3])
    assert all(c.startswith("#") for c in colours.values())


def test_the_map_names_only_the_gangs_a_user_may_see() -> None:
    node = MapNode(
        "n1",
        NodeState.IN_USE,
        gangs=(GangRef("team-a", "job-a", "Job/a", 1), GangRef("team-b", "job-b", "Job/b", 2)),
        gpus=4,
        gpus_used=4,
    )
    cmap = ClusterMap((MapDomain(US, "us-1", nodes=(node,), largest_gang=0),), 1, 1)
    colours = gang_colours([("team-a", "job-a"), ("team-b", "job-b")])
    (box,) = map_page(cmap, Namespaces(every=False, some=frozenset({"team-a"})), colours).boxes
    (cell,) = box.cells
    assert "team-a/job-a (Job/a): 1 pod" in cell.title and "job-b" not in cell.title
    assert f"{HIDDEN}: 2 pods" in cell.title
    assert cell.colour == ""  # its main gang (most pods there) is one the user may not see
    (box,) = map_page(cmap, Namespaces(every=True), colours).boxes
    assert box.cells[0].colour == colours[("team-b", "job-b")]
    assert box.room == "room for a gang of 0 nodes" and box.caption == "UltraServer us-1"
