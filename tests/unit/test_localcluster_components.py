"""The local cluster's components: which run, in which order, on which ports, at which Kueue
version, and the clusters the next issues need (a control plane with Kueue only, several at once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from gangplugin.kube.client import Client
from gangplugin.localcluster import credentials, manifests
from gangplugin.localcluster.cluster import LocalCluster, Ports, versions
from gangplugin.localcluster.components import CONTROL_PLANE, DEFAULT, REGISTRY, choose
from gangplugin.localcluster.components.gangplugin import Gangplugin
from gangplugin.localcluster.components.kueue import CONVERTED, serves
from gangplugin.localcluster.components.kueue import configuration as kueue_configuration
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
    cluster = LocalCluster(state_dir=tmp_path, components=[c.name for c in REGISTRY], gangplugin_replicas=3)
    ports = [p for c in (*CONTROL_PLANE, *REGISTRY) for p in c.listens(cluster.spec).values()]
    assert len(ports) == len(set(ports))
    own = [p for n in (1, 2, 3) for p in Gangplugin(replica=n).replica_ports(cluster.spec).values()]
    assert (
        len(own) == len(set(own)) and cluster.ports.gangplugin_extender not in own
    )  # only the leader binds it
    assert all(cluster.ports.base <= p < cluster.ports.base + 1000 for p in ports)


def test_clusters_nine_ports_apart_share_no_port(tmp_path: Path) -> None:
    # tests/e2e/test_localcluster_faults.py runs up to six clusters so beside the session's.
    def ports(base: int) -> set[int]:
        spec = LocalCluster(state_dir=tmp_path / str(base), ports=Ports(base)).spec
        return {p for c in choose(DEFAULT) for p in c.listens(spec).values()}

    sets = [ports(26000 + 9 * k) for k in range(7)]
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
    with pytest.raises(
        ClusterError, match=r"unknown component mpi-operator; the local cluster runs .*jobset"
    ):
        choose(["kueue", "mpi-operator"])
    with pytest.raises(ClusterError, match="gangplugin needs kueue: choose it too"):
        choose(["gangplugin"])
    with pytest.raises(ClusterError, match="trainer needs jobset: choose it too"):
        choose(["kueue", "trainer"])


def test_gangplugin_with_adds_to_the_defaults_and_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANGPLUGIN_WITH", "")
    assert LocalCluster(state_dir=tmp_path).components == ("etcd", "kube-apiserver", *DEFAULT)
    monkeypatch.setenv("GANGPLUGIN_WITH", "kuberay,lws")
    assert LocalCluster(state_dir=tmp_path).components[-4:] == ("lws", "kuberay", "kueue", "gangplugin")
    monkeypatch.setenv("GANGPLUGIN_WITH", "ray")
    with pytest.raises(ClusterError, match="unknown component ray"):
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


def test_kueue_s_binary_and_manifests_follow_the_chosen_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kueue's metrics certificate goes to a fixed path of the machine; here, to this test's own,
    # so the verdict does not depend on whether a cluster ever ran on this machine.
    monkeypatch.setattr("gangplugin.localcluster.components.kueue.METRICS_CERT_DIR", tmp_path / "certs")
    default = LocalCluster(state_dir=tmp_path / "a", ports=Ports(26000))
    (tmp_path / "a").mkdir()
    credentials.write(default.spec)
    proc = default.process("kueue")
    assert proc and Path(proc.argv[0]).name == f"kueue-{versions()['KUEUE_VERSION']}"
    newer = LocalCluster(state_dir=tmp_path / "b", ports=Ports(27000), kueue_version="v0.19.2")
    (tmp_path / "b").mkdir()
    credentials.write(newer.spec)
    proc = newer.process("kueue")
    assert proc and Path(proc.argv[0]).name == "kueue-v0.19.2"
    # JobSet at the version each Kueue is built against.
    for cluster, key in ((default, "JOBSET_VERSION"), (newer, "JOBSET_NEWEST_VERSION")):
        proc = cluster.process("jobset")
        assert proc and Path(proc.argv[0]).name == f"jobset-{versions()[key]}"
    # A restart from another shell starts the version the cluster was started with.
    newer.stop_process("kueue")
    assert LocalCluster(state_dir=tmp_path / "b").spec.kueue_version == "v0.19.2"
    with pytest.raises(ClusterError, match=r"Kueue v0\.18\.0 is not a version the local cluster runs"):
        LocalCluster(state_dir=tmp_path / "c", kueue_version="v0.18.0")


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


def test_only_the_crds_kueue_converts_go_through_its_conversion_webhook(tmp_path: Path) -> None:
    """As Kueue's config/components/crd kustomization patches them: Kueue v0.19's webhook refuses
    the kinds whose versions share one schema (ResourceFlavor, WorkloadPriorityClass, ...)."""
    applied: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            applied.append(orjson.loads(request.content))
        return httpx.Response(
            200, json={"status": {"conditions": [{"type": "Established", "status": "True"}]}}
        )

    def crd(plural: str) -> dict[str, Any]:
        versions = [{"name": "v1beta1"}, {"name": "v1beta2"}]
        return {
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {"names": {"plural": plural}, "versions": versions},
        }

    client = Client("https://api.test", False, transport=httpx.MockTransport(handle))
    spec = LocalCluster(state_dir=tmp_path).spec
    spec.pki_dir.mkdir(parents=True)
    (spec.pki_dir / "ca.crt").write_text("the cluster CA")
    manifests.apply_crds(
        client, spec, [crd(p) for p in ("workloads", "resourceflavors")], "Kueue", 9443, converted=CONVERTED
    )
    conversion = {c["spec"]["names"]["plural"]: c["spec"].get("conversion") for c in applied}
    assert conversion["resourceflavors"] is None
    assert conversion["workloads"]["strategy"] == "Webhook"
    assert conversion["workloads"]["webhook"]["clientConfig"]["url"].endswith(":9443/convert")


JOB_CONTROLLERS = ("training-operator", "trainer", "lws", "kuberay")


def test_the_job_controllers_are_optional_and_turn_on_their_kueue_integrations(tmp_path: Path) -> None:
    assert not set(JOB_CONTROLLERS) & set(DEFAULT)
    assert not {"kubeflow.org/pytorchjob", "ray.io/rayjob"} & set(
        LocalCluster(state_dir=tmp_path).spec.kueue_frameworks
    )
    cluster = LocalCluster(state_dir=tmp_path, components=[*DEFAULT, *JOB_CONTROLLERS])
    # Before Kueue, so that their CRDs are there when it starts.
    names = list(cluster.components)
    assert all(names.index(c) < names.index("kueue") for c in JOB_CONTROLLERS)
    frameworks = kueue_configuration(cluster.spec)["integrations"]["frameworks"]
    assert frameworks == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/pytorchjob",
        "trainer.kubeflow.org/trainjob",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "pod",
    ]
    # Kueue's webhooks for each of their kinds are kept (the LWS's pods go through its pod webhook).
    kept = [p for p in KUEUE_WEBHOOKS if serves(p, frameworks) and "kueue-x-k8s-io" not in p]
    assert {
        "/mutate-kubeflow-org-v1-pytorchjob",
        "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "/mutate-ray-io-v1-rayjob",
        "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
        "/mutate--v1-pod",
    } <= set(kept)
    assert "/mutate-apps-v1-deployment" not in kept
    # Built by hack/build-upstream.sh extras, as each upstream names its program.
    binaries = {c.name: c.binaries(cluster.spec)[0].name for c in REGISTRY if c.name in JOB_CONTROLLERS}
    assert binaries == {
        "training-operator": "training-operator",
        "trainer": "trainer-controller-manager",
        "lws": "lws",
        "kuberay": "kuberay-operator",
    }
    assert {c.build_group for c in REGISTRY if c.name in JOB_CONTROLLERS} == {"extras"}


def test_each_job_controller_serves_on_127_0_0_1_from_the_cluster_s_certificate_without_leader_election(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(state_dir=tmp_path, ports=Ports(28000), components=[*DEFAULT, *JOB_CONTROLLERS])
    credentials.write(cluster.spec)
    serving = (tmp_path / "serving-certs" / "tls.crt").read_bytes()

    operator = cluster.process("training-operator")
    assert operator is not None
    assert {"--enable-scheme=pytorchjob", "--leader-elect=false", "--webhook-server-port=28946"} <= set(
        operator.argv
    )
    # Its webhook server takes no certificate directory: controller-runtime's default, under TMPDIR.
    tmp = Path(operator.env["TMPDIR"])
    assert (tmp / "k8s-webhook-server" / "serving-certs" / "tls.crt").read_bytes() == serving
    assert str(tmp).startswith(str(tmp_path))

    trainer = cluster.process("trainer")
    assert trainer is not None
    config = yaml.safe_load((tmp_path / "trainer-config.yaml").read_text())
    assert config["certManagement"] == {"enable": False} and config["leaderElection"] == {
        "leaderElect": False
    }
    assert config["webhook"] == {"port": 28947, "host": "127.0.0.1"}
    trainer_tmp = Path(trainer.env["TMPDIR"])
    assert (trainer_tmp / "k8s-webhook-server" / "serving-certs" / "tls.crt").read_bytes() == serving

    assert cluster.process("lws") is not None
    config = yaml.safe_load((tmp_path / "lws-config.yaml").read_text())
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {
        "port": 28948,
        "host": "127.0.0.1",
        "certDir": str(tmp_path / "serving-certs"),
    }

    ray = cluster.process("kuberay")
    assert ray is not None
    assert {"--enable-leader-election=false", "--health-probe-bind-address=127.0.0.1:28891"} <= set(ray.argv)
    # Their metrics listeners are off: nothing reads them, and a port fewer to collide on.
    assert "--metrics-addr=0" in ray.argv and "--metrics-bind-address=0" in operator.argv
    assert config["metrics"] == {"bindAddress": "0"}


def test_adding_components_needs_a_running_cluster_and_is_nothing_for_those_it_runs(tmp_path: Path) -> None:
    cluster = LocalCluster(state_dir=tmp_path, components=[*DEFAULT, "lws"])
    assert cluster.add("lws", "kueue", build=False) == ()  # all of them are its components already
    with pytest.raises(ClusterError, match=r"is not running; `make up` first"):
        cluster.add("kuberay", build=False)
    with pytest.raises(ClusterError, match="unknown component ray"):
        LocalCluster(state_dir=tmp_path).add("ray", build=False)


def test_the_control_plane_runs_niced_and_is_started_again_so(tmp_path: Path) -> None:
    """etcd and kube-apiserver get a busy machine's CPU before the rest (a real control plane has
    nodes of its own); the command the keeper starts again keeps that."""
    cluster = LocalCluster(state_dir=tmp_path)
    for name in ("etcd", "kube-apiserver"):
        proc = cluster.process(name)
        assert proc is not None and proc.nice < 0
        assert proc.command()["argv"][:3] == ["nice", "-n", str(proc.nice)]
    scheduler = cluster.process("kube-scheduler")
    assert scheduler is not None and scheduler.command()["argv"][0] == scheduler.argv[0]
