"""The local cluster's components: which run, in which order, on which ports, at which Kueue
version, and the clusters the next issues need (a control plane with Kueue only, several at once)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gangplugin.localcluster.cluster import LocalCluster, Ports, versions
from gangplugin.localcluster.components import CONTROL_PLANE, DEFAULT, REGISTRY, choose
from gangplugin.localcluster.components.gangplugin import Gangplugin
from gangplugin.localcluster.components.kueue import serves
from gangplugin.localcluster.errors import ClusterError

# Webhook paths of Kueue v0.17.0's config/components/webhook/manifests.yaml (a sample of each form).
KUEUE_WEBHOOKS = [
    "/mutate-apps-v1-deployment",
    "/mutate-batch-v1-job",
    "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
    "/mutate-kubeflow-org-v1-pytorchjob",
    "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
    "/mutate-kueue-x-k8s-io-v1beta2-workload",
    "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
    "/mutate--v1-pod",
    "/mutate-ray-io-v1-rayjob",
    "/validate-apps-v1-statefulset",
    "/validate-batch-v1-job",
    "/validate-kueue-x-k8s-io-v1beta2-cohort",
    "/validate--v1-pod",
    "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
]


def test_every_port_of_every_component_is_its_own_and_below_the_next_base(tmp_path: Path) -> None:
    cluster = LocalCluster(state_dir=tmp_path, components=[c.name for c in REGISTRY])
    comps = [*CONTROL_PLANE, *REGISTRY, Gangplugin(replica=2), Gangplugin(replica=3)]
    ports = [p for c in comps for name, p in c.listens(cluster.spec).items() if "extender" not in name]
    ports.append(cluster.ports.gangplugin_extender)  # shared by the replicas: only the leader binds it
    assert len(ports) == len(set(ports))
    assert all(cluster.ports.base <= p < cluster.ports.base + 1000 for p in ports)


def test_clusters_nine_ports_apart_share_no_port(tmp_path: Path) -> None:
    # tests/e2e/test_localcluster_faults.py runs up to five clusters so beside the session's.
    def ports(base: int) -> set[int]:
        spec = LocalCluster(state_dir=tmp_path / str(base), ports=Ports(base)).spec
        return {p for c in choose(DEFAULT) for p in c.listens(spec).values()}

    sets = [ports(26000 + 9 * k) for k in range(6)]
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    assert max(max(s) for s in sets) < 27000


def test_components_start_in_the_registry_s_order_with_the_control_plane_first() -> None:
    names = [c.name for c in choose(["gangplugin", "kwok", "kueue", "etcd"])]
    assert names == ["etcd", "kube-apiserver", "kwok", "kueue", "gangplugin"]
    assert [c.name for c in choose(DEFAULT)] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "jobset",
        "kueue",
        "gangplugin",
    ]


def test_an_unknown_component_or_a_missing_requirement_is_named() -> None:
    with pytest.raises(ClusterError, match=r"unknown component trainer; the local cluster runs .*jobset"):
        choose(["kueue", "trainer"])
    with pytest.raises(ClusterError, match="gangplugin needs kueue: choose it too"):
        choose(["gangplugin"])


def test_gangplugin_with_adds_to_the_defaults_and_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANGPLUGIN_WITH", "")
    assert LocalCluster(state_dir=tmp_path).components == ("etcd", "kube-apiserver", *DEFAULT)
    monkeypatch.setenv("GANGPLUGIN_WITH", "kuberay")
    with pytest.raises(ClusterError, match="unknown component kuberay"):
        LocalCluster(state_dir=tmp_path)


def test_a_control_plane_with_kueue_only_runs_no_nodes_no_gangplugin_and_no_extender(tmp_path: Path) -> None:
    cluster = LocalCluster(
        state_dir=tmp_path, components=("kube-controller-manager", "kube-scheduler", "kueue")
    )
    assert cluster.components == (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kueue",
    )
    tmp_path.mkdir(exist_ok=True)
    cluster.process("kube-scheduler")
    assert "extenders" not in yaml.safe_load((tmp_path / "scheduler-config.yaml").read_text())
    with pytest.raises(ClusterError, match="kwok is not a component of this cluster"):
        cluster.restart("kwok")


def test_kueue_s_binary_and_manifests_follow_the_chosen_version(tmp_path: Path) -> None:
    default = LocalCluster(state_dir=tmp_path / "a", ports=Ports(26000))
    (tmp_path / "a").mkdir()
    proc = default.process("kueue")
    assert proc and Path(proc.argv[0]).name == f"kueue-{versions()['KUEUE_VERSION']}"
    newer = LocalCluster(state_dir=tmp_path / "b", ports=Ports(27000), kueue_version="v0.19.2")
    (tmp_path / "b").mkdir()
    proc = newer.process("kueue")
    assert proc and Path(proc.argv[0]).name == "kueue-v0.19.2"
    # A restart from another shell starts the version the cluster was started with.
    newer.stop_process("kueue")
    assert LocalCluster(state_dir=tmp_path / "b").spec.kueue_version == "v0.19.2"


def test_webhooks_installed_are_kueue_s_own_and_its_enabled_frameworks() -> None:
    enabled = ["batch/job", "jobset.x-k8s.io/jobset", "pod"]
    assert [p for p in KUEUE_WEBHOOKS if serves(p, enabled)] == [
        "/mutate-batch-v1-job",
        "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "/mutate-kueue-x-k8s-io-v1beta2-workload",
        "/mutate--v1-pod",
        "/validate-batch-v1-job",
        "/validate-kueue-x-k8s-io-v1beta2-cohort",
        "/validate--v1-pod",
    ]
    more = ["kubeflow.org/pytorchjob", "leaderworkerset.x-k8s.io/leaderworkerset", "statefulset"]
    assert [p for p in KUEUE_WEBHOOKS if serves(p, more) and "kueue-x-k8s-io" not in p] == [
        "/mutate-kubeflow-org-v1-pytorchjob",
        "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "/validate-apps-v1-statefulset",
    ]
