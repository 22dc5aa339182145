"""The cluster map: every node in its UltraServer, drawn by state, with its gangs and the room
each UltraServer has left (spares kept, capacity promised to admitted gangs counted)."""

from __future__ import annotations

import copy
from typing import Any

from gangplugin.console.model import ClusterMap, MapDomain, NodeState
from gangplugin.kube.client import NODES, PODS, WORKLOADS
from tests.support.caches import gpu_node, owned, pod, workload
from tests.support.console_world import World, standard

US = "topology.k8s.aws/ultraserver-id"


def ultraservers(cmap: ClusterMap) -> dict[str, MapDomain]:
    out: dict[str, MapDomain] = {}

    def walk(domains: tuple[MapDomain, ...]) -> None:
        for d in domains:
            if d.level == US:
                out[d.value] = d
            walk(d.children)

    walk(cmap.domains)
    return out


def states(domain: MapDomain) -> dict[str, NodeState]:
    return {n.name: n.state for n in domain.nodes}


def not_ready(node: dict[str, Any]) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node["status"]["conditions"][0]["status"] = "False"
    return node


def test_nodes_sit_in_their_ultraserver_inside_their_zone() -> None:
    world = World()
    standard(world)
    cmap = world.source.cluster_map()
    assert [d.value for d in cmap.domains] == ["us-east-1a"]
    assert [d.value for d in cmap.domains[0].children] == ["us-1", "us-2"]
    assert [n.name for n in ultraservers(cmap)["us-1"].nodes] == [f"us1-{i}" for i in range(4)]
    assert cmap.node_count == 8 and cmap.spares_per_ultraserver == 1


def test_states_gangs_and_room() -> None:
    world = World()
    standard(world)
    world.put(NODES, not_ready(gpu_node("us2-0", "us-2")))
    cordoned = gpu_node("us2-1", "us-2")
    cordoned["spec"]["unschedulable"] = True
    world.put(NODES, cordoned)
    pinned = {US: "us-1"}
    world.put(WORKLOADS, owned(workload("job-a", 2, check="Ready", admitted=True, pinned=pinned), name="a"))
    world.put(PODS, pod("a-0", "job-a", node="us1-0", ready=True), pod("a-1", "job-a", node="us1-1"))
    cmap = world.source.cluster_map()
    us1, us2 = ultraservers(cmap)["us-1"], ultraservers(cmap)["us-2"]
    # the spare is the idle node with the highest name; us2-3 in us-2
    assert states(us1) == {
        "us1-0": NodeState.IN_USE,
        "us1-1": NodeState.IN_USE,
        "us1-2": NodeState.FREE,
        "us1-3": NodeState.SPARE,
    }
    assert states(us2) == {
        "us2-0": NodeState.NOT_READY,
        "us2-1": NodeState.CORDONED,
        "us2-2": NodeState.FREE,
        "us2-3": NodeState.SPARE,
    }
    node = us1.nodes[0]
    assert [(g.namespace, g.name, g.job, g.pods) for g in node.gangs] == [("team-a", "job-a", "Job/a", 1)]
    assert (node.gpus, node.gpus_used) == (4, 4)
    assert (us1.largest_gang, us2.largest_gang) == (1, 1)


def test_room_counts_what_admitted_gangs_were_promised_and_do_not_hold_yet() -> None:
    world = World()
    standard(world)
    # admitted into us-2, no pod bound yet: the gang check promised it 2 nodes there
    world.put(WORKLOADS, workload("job-b", 2, check="Ready", admitted=True, pinned={US: "us-2"}))
    room = {k: d.largest_gang for k, d in ultraservers(world.source.cluster_map()).items()}
    assert room == {"us-1": 3, "us-2": 1}
    # one pod bound: one node held by it, one still promised
    world.put(PODS, pod("b-0", "job-b", node="us2-0"))
    room = {k: d.largest_gang for k, d in ultraservers(world.source.cluster_map()).items()}
    assert room == {"us-1": 3, "us-2": 1}
    # a gang still waiting for the check is promised nothing
    world.put(WORKLOADS, workload("job-c", 3, check="Pending"))
    assert ultraservers(world.source.cluster_map())["us-1"].largest_gang == 3


def test_a_heartbeat_keeps_the_map_a_node_going_not_ready_redraws_it() -> None:
    world = World()
    standard(world)
    topics: list[str] = []
    world.source.subscribe(lambda t: topics.append(t.value))
    first = world.source.cluster_map()
    beat = gpu_node("us1-0", "us-1")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2027-01-15T08:00:10Z"
    world.put(NODES, beat)
    assert topics == [] and world.source.cluster_map() is first
    world.put(NODES, not_ready(gpu_node("us1-0", "us-1")))
    assert topics == ["map"]
    assert states(ultraservers(world.source.cluster_map())["us-1"])["us1-0"] is NodeState.NOT_READY


def test_a_node_without_topology_labels_is_still_drawn() -> None:
    world = World()
    bare = gpu_node("lonely", "x")
    bare["metadata"]["labels"] = {"kubernetes.io/hostname": "lonely"}
    world.put(NODES, bare)
    cmap = world.source.cluster_map()
    assert [(d.level, [n.name for n in d.nodes]) for d in cmap.domains] == [("", ["lonely"])]
