"""A local cluster's certificates and its kubeconfig, written into its state directory.

One CA signs the API server's serving certificate, the admin client certificate and the
certificate every webhook, health and gRPC endpoint of the cluster serves; a second CA signs
only kube-scheduler's client certificate, so the extender (--extender-client-ca) answers no other
certificate of the cluster. Existing files are kept: a restarted component sees the same CA.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from gangplugin.core.names import GRPC_EXTENSION
from gangplugin.localcluster.pki import CertificateAuthority, service_account_keys
from gangplugin.localcluster.spec import ClusterSpec

CLUSTER_NAME = "gangplugin-local"
APISERVER_HOSTS = (
    "127.0.0.1",
    "localhost",
    "10.96.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def write(spec: ClusterSpec) -> None:
    ca = CertificateAuthority(spec.pki_dir)
    ca.issue("apiserver", common_name="kube-apiserver", hosts=APISERVER_HOSTS)
    ca.issue("admin", common_name="kubernetes-admin", organization="system:masters", client=True)
    # kube-apiserver's own, to the kubelets of real nodes (logs, exec), as kubeadm's.
    ca.issue(
        "apiserver-kubelet-client",
        common_name="kube-apiserver-kubelet-client",
        organization="system:masters",
        client=True,
    )
    ca.issue("webhook", common_name="gangplugin-local-webhooks", hosts=("127.0.0.1", "localhost"))
    clients = CertificateAuthority(spec.extender_clients_dir, common_name="gangplugin-local-extender-clients")
    clients.issue("kube-scheduler", common_name="kube-scheduler", client=True)
    service_account_keys(spec.pki_dir)
    # controller-runtime's webhook servers (Kueue, JobSet) read tls.crt/tls.key from a directory.
    copy_serving_pair(spec, spec.serving_cert_dir)
    spec.kubeconfig.write_text(yaml.safe_dump(kubeconfig(spec, ca), sort_keys=False))
    spec.kubeconfig.chmod(0o600)


def client_kubeconfig(
    spec: ClusterSpec, name: str, common_name: str, organization: str | None = None
) -> Path:
    """`<state>/kubeconfigs/<name>`: a kubeconfig for the identity `common_name` (in group
    `organization`), with a client certificate of its own from the cluster CA (a real node's
    kubelet is system:node:<node> in system:nodes, kube-proxy is system:kube-proxy)."""
    ca = CertificateAuthority(spec.pki_dir)
    cert, key = ca.issue(f"client-{name}", common_name=common_name, organization=organization, client=True)
    doc = kubeconfig(spec, ca)
    doc["users"][0]["user"] = {"client-certificate": str(cert), "client-key": str(key)}
    path = spec.state_dir / "kubeconfigs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def copy_serving_pair(spec: ClusterSpec, directory: Path) -> None:
    """The cluster's serving certificate as `directory`/tls.crt and tls.key."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(spec.pki_dir / "webhook.crt", directory / "tls.crt")
    shutil.copy(spec.pki_dir / "webhook.key", directory / "tls.key")


def kubeconfig(spec: ClusterSpec, ca: CertificateAuthority) -> dict[str, Any]:
    """The admin's kubeconfig, with where gangctl finds gangplugin's gRPC API (the cluster's
    gangplugin.io/grpc extension: docs/api-and-cli.md, "Credentials")."""
    ports = spec.ports
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {
                    "server": f"https://127.0.0.1:{ports.apiserver}",
                    "certificate-authority": str(ca.cert_path),
                    "extensions": [
                        {
                            "name": GRPC_EXTENSION,
                            "extension": {
                                "server": f"127.0.0.1:{ports.gangplugin_grpc}",
                                "client-certificate-server": f"127.0.0.1:{ports.gangplugin_grpc_mtls}",
                                "certificate-authority": str(ca.cert_path),
                            },
                        }
                    ],
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(spec.pki_dir / "admin.crt"),
                    "client-key": str(spec.pki_dir / "admin.key"),
                },
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": "admin"}}],
        "current-context": CLUSTER_NAME,
    }
