"""The Helm chart (deploy/helm/gangplugin), installed by a real helm into the local cluster, and the
image run as the Deployment it installed.

- `helm install` with the certificates the chart generates (no cert-manager here) and a
  nodeSelector no node has: the Deployment's pods stay Pending, and a container of the image
  (`make image`) stands for the first one, with the installed Deployment's args, env, mounts (the
  chart's own Secrets) and ServiceAccount, as tests/e2e/test_image.py does for the kustomize base.
- `helm upgrade` keeps the generated CA and certificates (lookup), and changes what it is told.
- The chart's webhook configurations, with the chart's CA bundle, are pointed at that container
  (in a cluster they reach it through the gangplugin-webhook Service); kube-scheduler runs
  without the extender, as a cluster's default scheduler does: the default bindMode, Ungate,
  needs no second scheduler. A gang goes through Kueue, the container's admission check, its pod
  webhook and its ungater, and kube-scheduler binds it in one UltraServer.
- `helm uninstall` removes what it installed; the CRDs (crds/) stay, as Helm keeps them.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.core.names import GANG_LABEL
from gangplugin.kube.client import PODS, Client, Resource
from gangplugin.kube.lease import LEASES
from gangplugin.kube.resources import SECRETS
from gangplugin.localcluster.cluster import LocalCluster
from gangplugin.localcluster.manifests import CRDS
from tests.support import base_install, containers
from tests.support.base_install import NAMESPACE, refused, run_gang
from tests.support.cluster import E2ECluster
from tests.support.grpcauth import service_account_token
from tests.support.kube import gang_queues, wait_for
from tests.support.manifests import CHART, cached_binary

US = "topology.k8s.aws/ultraserver-id"
DEPLOYMENTS = Resource("apps/v1", "deployments")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
WEBHOOKS = {
    "validating": Resource(
        "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False
    ),
    "mutating": Resource(
        "admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False
    ),
}
GENERATED = ("gangplugin-ca", "gangplugin-serving-tls", "gangplugin-extender-client-ca")
# No node has it: the pods stay Pending, no kubelet (kwok) fakes them, no Service gets endpoints.
UNSCHEDULABLE = {"gangplugin.io/e2e": "a-container-stands-for-this-pod"}


def helm(cluster: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cached_binary("helm")), f"--kubeconfig={cluster.kubeconfig}", "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def image() -> str:
    return containers.build_image()


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    return {**{k: v for k, v in obj.items() if k not in ("metadata", "status")}, "metadata": meta}


@contextlib.contextmanager
def local_webhooks_set_aside(client: Client) -> Iterator[None]:
    """The local cluster's own webhook configurations (they call its gangplugin) removed while
    the chart's serve, and put back afterwards."""
    saved = []
    for res in WEBHOOKS.values():
        obj = client.get_or_none(res, "gangplugin-local")
        if obj is not None:
            saved.append((res, _clean(obj)))
            client.delete(res, "gangplugin-local")
    try:
        yield
    finally:
        for res, obj in saved:
            client.create(res, obj)


@contextlib.contextmanager
def scheduler_without_extender(local: LocalCluster) -> Iterator[None]:
    local.restart("kube-scheduler", extender=False)
    try:
        yield
    finally:
        local.restart("kube-scheduler")


def _secret_files(client: Client, name: str) -> dict[str, bytes]:
    data = client.get(SECRETS, name, NAMESPACE)["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def _ca_bundles(client: Client) -> set[str]:
    return {
        h["clientConfig"]["caBundle"]
        for r in WEBHOOKS.values()
        for h in client.get(r, "gangplugin")["webhooks"]
    }


def _point_webhooks_at(client: Client, port: int) -> None:
    """Each of the chart's webhooks calls https://127.0.0.1:<port><its path>, with its CA bundle."""
    for res in WEBHOOKS.values():
        config = client.get(res, "gangplugin")
        for hook in config["webhooks"]:
            cc = hook["clientConfig"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{cc['service']['path']}",
                "caBundle": cc["caBundle"],
            }
        client.request("PUT", res.path(None, "gangplugin"), body=config)


def _healthy(port: int, ca: bytes) -> bool:
    context = ssl.create_default_context(cadata=ca.decode())
    return base_install.ok(f"https://127.0.0.1:{port}/healthz", verify=context)


def _holder(client: Client) -> str | None:
    lease = client.get_or_none(LEASES, "gangplugin", NAMESPACE) or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def test_helm_installs_the_chart_and_its_image_admits_a_gang(
    cluster: E2ECluster, namespace: str, image: str, tmp_path: Path
) -> None:
    client = cluster.client
    repository, tag = image.rsplit(":", 1)
    values = {
        "certificates": {"mode": "generate"},
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "nodeSelector": UNSCHEDULABLE,
        "logFormat": "text",
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    with (
        base_install.local_gangplugin_stopped(cluster) as local,
        scheduler_without_extender(local),
        local_webhooks_set_aside(client),
    ):
        out = helm(cluster, "install", "gangplugin", str(CHART), "-f", str(tmp_path / "values.yaml"))
        assert out.returncode == 0, out.stderr
        log = tmp_path / "gangplugin.log"
        name: str | None = None
        try:
            first = {s: _secret_files(client, s) for s in GENERATED}
            bundles = _ca_bundles(client)
            assert bundles == {base64.b64encode(first["gangplugin-ca"]["ca.crt"]).decode()}
            assert client.get(DEPLOYMENTS, "gangplugin", NAMESPACE)["spec"]["replicas"] == 2

            out = helm(cluster, "upgrade", "gangplugin", str(CHART), "--reuse-values", "--set", "replicas=1")
            assert out.returncode == 0, out.stderr
            assert {s: _secret_files(client, s) for s in GENERATED} == first, "upgrade made new certificates"
            assert _ca_bundles(client) == bundles
            deployment = client.get(DEPLOYMENTS, "gangplugin", NAMESPACE)
            assert deployment["spec"]["replicas"] == 1
            assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image

            selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())

            def one_pod() -> str | None:
                pods = client.list(PODS, NAMESPACE, label_selector=selector)["items"]
                live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
                return live[0]["metadata"]["name"] if len(live) == 1 else None

            name = wait_for(one_pod, 60, "the Deployment's one pod")
            health, grpc, webhook = local.ports.gangplugin_replica(1)
            ports = {
                "health": health,
                "grpc": grpc,
                "webhook": webhook,
                "extender": local.ports.gangplugin_extender,
            }
            spec = deployment["spec"]["template"]["spec"]
            token = service_account_token(client, NAMESPACE, spec["serviceAccountName"])
            account = {
                "token": token.encode(),
                "ca.crt": (local.pki_dir / "ca.crt").read_bytes(),
                "namespace": NAMESPACE.encode(),
            }
            secrets = {s: _secret_files(client, s) for s in GENERATED}
            argv = containers.run_argv(
                deployment, image, name, NAMESPACE, ports, secrets, account, local.ports.apiserver, tmp_path
            )
            out = containers.engine(*argv)
            assert out.returncode == 0, out.stderr
            ca = first["gangplugin-ca"]["ca.crt"]
            wait_for(
                lambda: _healthy(health, ca), 120, f"{name} to answer /healthz with the chart's certificate"
            )
            wait_for(lambda: _holder(client) == name, 60, f"{name} to hold the Lease")
            _point_webhooks_at(client, webhook)

            with gang_queues(client, namespace) as make_queue:
                # Its GangPolicy went through the chart's webhook; the default-scheduler binds it.
                pods = run_gang(client, namespace, make_queue(gpu_quota=64), scheduler=None)
            for pod in pods:
                labels = pod["metadata"]["labels"]
                assert GANG_LABEL in labels and labels["gangplugin.io/bind-mode"] == "Ungate", labels
                assert not pod["spec"].get("schedulingGates"), "the ungater released every pod"
        finally:
            if name is not None:
                containers.keep_logs_and_remove(name, log)
            out = helm(cluster, "uninstall", "gangplugin", "--wait", "--timeout", "2m")
            assert out.returncode == 0, out.stderr
        assert client.get_or_none(DEPLOYMENTS, "gangplugin", NAMESPACE) is None
        assert client.get_or_none(CLUSTER_ROLES, "gangplugin") is None
        assert all(client.get_or_none(r, "gangplugin") is None for r in WEBHOOKS.values())
        assert all(client.get_or_none(SECRETS, s, NAMESPACE) is None for s in GENERATED)
        assert client.get_or_none(CRDS, "gangpolicies.gangplugin.io") is not None, "Helm keeps crds/"
    assert log.stat().st_size > 0, log
    assert refused(log) == [], f"the chart's ServiceAccount was refused by the API server ({log})"
