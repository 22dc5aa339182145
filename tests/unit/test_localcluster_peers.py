"""The peers' local-cluster components (bench/peers.py's; never in `make up`): optional, each
configured for our topology as its own documentation does, on ports of their own."""

from pathlib import Path

import yaml

from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.localcluster.cluster import LocalCluster
from gangplugin.localcluster.components import DEFAULT, REGISTRY, choose, kai, kueue_tas, volcano

SHAPE = Path(__file__).resolve().parents[2] / "deploy" / "local" / "cluster-shape.yaml"
PEERS = ("kueue-tas", *volcano.VOLCANO, *kai.KAI)


def test_the_peers_are_optional_and_need_what_they_run_beside():
    assert not set(PEERS) & set(DEFAULT)
    assert {c.name for c in REGISTRY if c.optional} >= set(PEERS)
    names = [c.name for c in choose(["kube-controller-manager", "kwok", *kai.KAI])]
    assert names[-5:] == list(kai.KAI)  # the queue controller first: it installs the CRDs
    assert [c.name for c in choose(["kueue", "kueue-tas"])][-2:] == ["kueue", "kueue-tas"]


def test_kueue_tas_has_our_levels_and_a_flavor_per_instance_type():
    assert [lv["nodeLabel"] for lv in kueue_tas.topology()["spec"]["levels"]] == list(DEFAULT_LEVELS)
    flavors = {f["metadata"]["name"]: f["spec"] for f in kueue_tas.flavors(SHAPE)}
    assert flavors["p6e-gb200-36xlarge"] == {
        "nodeLabels": {"node.kubernetes.io/instance-type": "ml.p6e-gb200.36xlarge"},
        "topologyName": "hyperpod",
    }
    assert set(flavors) == {"p6e-gb200-36xlarge", "p5-48xlarge"}


def test_volcano_discovers_hypernodes_from_our_labels_widest_first():
    (source,) = volcano.discovery_config()["networkTopologyDiscovery"]
    assert source["source"] == "label" and source["enabled"]
    (labels,) = source["config"]["networkTopologyTypes"].values()
    # its discoverer builds tiers from the bottom: tier 1 the UltraServer, above it the layers
    assert [lv["nodeLabel"] for lv in labels] == list(DEFAULT_LEVELS)
    assert labels[-1]["nodeLabel"] == "kubernetes.io/hostname"
    actions = [a.strip() for a in volcano.SCHEDULER_CONF["actions"].split(",")]
    assert actions == ["enqueue", "allocate", "preempt", "backfill"]
    plugins = {p["name"]: p for tier in volcano.SCHEDULER_CONF["tiers"] for p in tier["plugins"]}
    assert "gang" in plugins
    # HyperNode-level bin packing weighs GPUs, the resource every bench pod asks for
    args = plugins["network-topology-aware"]["arguments"]
    assert args["hypernode.binpack.resources"] == "nvidia.com/gpu"
    assert args["hypernode.binpack.resources.nvidia.com/gpu"] > args["hypernode.binpack.cpu"]


def test_kai_runs_its_operators_default_shard():
    conf = kai.scheduler_config()
    assert conf["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    plugins = [p["name"] for p in conf["tiers"][0]["plugins"]]
    assert plugins[:3] == ["predicates", "proportion", "priority"] and "topology" in plugins
    assert "gpuspread" not in plugins  # binpack placement: gpupack instead
    (placement,) = [p for p in conf["tiers"][0]["plugins"] if p["name"] == "nodeplacement"]
    assert placement["arguments"] == {"gpu": "binpack", "cpu": "binpack"}
    assert [lv["nodeLabel"] for lv in kai.topology()["spec"]["levels"]] == list(DEFAULT_LEVELS)
    child = kai.queue(kai.QUEUE, kai.PARENT_QUEUE)
    assert child["spec"]["parentQueue"] == kai.PARENT_QUEUE
    assert child["spec"]["resources"]["gpu"] == {"quota": 0, "limit": -1, "overQuotaWeight": 1}


def test_each_kai_process_names_the_cluster_and_listens_on_its_own_ports(tmp_path: Path):
    cluster = LocalCluster(state_dir=tmp_path, components=["kube-controller-manager", "kwok", *kai.KAI])
    spec = cluster.spec
    for comp in choose(kai.KAI)[2:]:
        assert isinstance(comp, kai._Kai)
        argv = comp.args(spec)
        assert any(str(tmp_path) in a for a in argv), comp.name  # `down` tells it is this cluster's
        ports = set(comp.listens(spec).values())
        assert all(str(p) in " ".join(argv) for p in ports), comp.name
    written = yaml.safe_load((tmp_path / "kai-scheduler.yaml").read_text())
    assert written == kai.scheduler_config()


def _hypernode(name: str, tier: int, label: str, members: list[str]) -> dict[str, object]:
    member_type = "Node" if tier == 1 else "HyperNode"
    return {
        "metadata": {"name": name, "labels": {label: "v", volcano.SOURCE_LABEL: "label"}},
        "spec": {
            "tier": tier,
            "members": [{"type": member_type, "selector": {"exactMatch": {"name": m}}} for m in members],
        },
    }


def test_a_hypernode_volcano_discovered_twice_is_found_and_the_first_by_name_kept():
    layer = "topology.k8s.aws/network-node-layer-2"
    tree = [
        _hypernode("hn-tier1-a", 1, volcano.ULTRASERVER_LABEL, ["n1", "n2"]),
        _hypernode("hn-tier2-x", 2, layer, ["hn-tier1-a"]),
    ]
    assert volcano.duplicate_hypernodes(tree) == [] and volcano.one_parent_each(tree)
    # the second discovery's copy of the tier-2 HyperNode: same value, a name sorted after
    twice = [*tree, _hypernode("hn-tier2-y", 2, layer, ["hn-tier1-a"])]
    assert volcano.duplicate_hypernodes(twice) == ["hn-tier2-y"]
    assert not volcano.one_parent_each(twice)
    # another value of the same label at the same tier is no copy
    other = {**tree[1], "metadata": {"name": "hn-tier2-z", "labels": {layer: "w"}}}
    assert volcano.duplicate_hypernodes([*tree, other]) == []
