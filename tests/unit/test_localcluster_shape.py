"""The local cluster's fake nodes carry the labels and capacity of a HyperPod cluster."""

from __future__ import annotations

import itertools
from collections import Counter

import yaml

from gangplugin.kube.shape import NETWORK_LAYERS, ULTRASERVER, nodes_from_shape
from gangplugin.localcluster.cluster import REPO
from gangplugin.localcluster.nodes import NOT_READY_LABEL


def _nodes() -> list[dict]:
    return nodes_from_shape(yaml.safe_load((REPO / "deploy/local/cluster-shape.yaml").read_text()))


def test_shape_has_four_ultraservers_of_18_and_32_p5() -> None:
    nodes = _nodes()
    types = Counter(n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in nodes)
    assert types == {"ml.p6e-gb200.36xlarge": 72, "ml.p5.48xlarge": 32}
    us = Counter(n["metadata"]["labels"].get(ULTRASERVER) for n in nodes)
    assert us.pop(None) == 32
    assert sorted(us.values()) == [18, 18, 18, 18]


def test_network_layers_nest_and_names_are_unique() -> None:
    nodes = _nodes()
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    parent: dict[str, str] = {}
    for n in nodes:
        labels = n["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == n["metadata"]["name"]
        chain = [labels[layer] for layer in NETWORK_LAYERS]
        if ULTRASERVER in labels:
            chain.append(labels[ULTRASERVER])
        for up, down in itertools.pairwise(chain):
            # every domain has exactly one parent domain
            assert parent.setdefault(down, up) == up


def test_gpu_capacity() -> None:
    gpus = Counter(n["status"]["allocatable"]["nvidia.com/gpu"] for n in _nodes())
    assert gpus == {"4": 72, "8": 32}


def test_node_leases_last_longer_on_a_large_shape(tmp_path, monkeypatch) -> None:
    # kwok renews each lease at a quarter of its duration; kube-controller-manager's grace
    # period follows, so a large fake cluster does not go unreachable under its own lease writes.
    from gangplugin.localcluster.cluster import LocalCluster

    def flags() -> tuple[str, str]:
        cluster = LocalCluster(state_dir=tmp_path)
        kwok_proc, kcm_proc = cluster.process("kwok"), cluster.process("kube-controller-manager")
        assert kwok_proc and kcm_proc
        kwok = next(a for a in kwok_proc.argv if a.startswith("--node-lease-duration-seconds="))
        kcm = next(a for a in kcm_proc.argv if a.startswith("--node-monitor-grace"))
        return kwok, kcm

    monkeypatch.delenv("GANGPLUGIN_SHAPE", raising=False)
    assert flags() == ("--node-lease-duration-seconds=40", "--node-monitor-grace-period=50s")
    big = yaml.safe_load((REPO / "deploy/local/cluster-shape.yaml").read_text())
    for group in big["spec"]["groups"]:
        for key in ("ultraServerCount", "instanceCount"):
            if key in group:
                group[key] *= 48  # 104 nodes -> 4,992
    path = tmp_path / "shape.yaml"
    path.write_text(yaml.safe_dump(big))
    monkeypatch.setenv("GANGPLUGIN_SHAPE", str(path))
    assert flags() == ("--node-lease-duration-seconds=399", "--node-monitor-grace-period=498s")


def test_a_node_labelled_not_ready_is_left_notready_by_kwok() -> None:
    # with any other label (the soak and the peers bench once used one) kwok's node-initialize
    # stage sets the failed node Ready again at once, and the fault tests almost nothing
    stages = (REPO / "deploy" / "kwok" / "stages.yaml").read_text()
    assert f'.metadata.labels["{NOT_READY_LABEL}"]' in stages


def test_kwok_plays_pod_stages_16_at_once_and_keeps_its_other_defaults() -> None:
    # given a KwokConfiguration kwok defaults none of its options (v0.8.0 fails to start with
    # nodeLeaseParallelism 0): each of its defaulted options is written out
    docs = list(yaml.safe_load_all((REPO / "deploy" / "kwok" / "stages.yaml").read_text()))
    (config,) = [d for d in docs if d and d.get("kind") == "KwokConfiguration"]
    options = config["options"]
    assert options["podPlayStageParallelism"] == 16
    assert {
        k: options[k]
        for k in ("nodePlayStageParallelism", "nodeLeaseParallelism", "podsOnNodeSyncParallelism")
    } == {
        "nodePlayStageParallelism": 4,
        "nodeLeaseParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
    }
    assert options["enablePodsOnNodeSyncListPager"] is True and options["enableDebuggingHandlers"] is True
