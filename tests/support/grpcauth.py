"""Reaching the gRPC API of the e2e cluster's gangplugin: its address, its CA, and tokens of
ServiceAccounts with chosen rights (TokenRequest API), as a real client would get them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import grpc

from gangplugin.kube.client import Client, Resource
from gangplugin.localcluster.cluster import Ports
from tests.support.cluster import E2ECluster, e2e_port_base

SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts")
ROLES = Resource("rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "rolebindings")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False)


def address() -> str:
    return (
        os.environ.get("GANGPLUGIN_GRPC_ADDRESS")
        or f"127.0.0.1:{Ports(base=e2e_port_base()).gangplugin_grpc}"
    )


def ca_file(cluster: E2ECluster) -> Path:
    return Path(os.environ.get("GANGPLUGIN_GRPC_CA_FILE") or cluster.kubeconfig.parent / "pki" / "ca.crt")


def channel(cluster: E2ECluster, token: str | None = None) -> grpc.Channel:
    """TLS to gangplugin's gRPC API; with `token`, every call carries it as a bearer token."""
    creds = grpc.ssl_channel_credentials(root_certificates=ca_file(cluster).read_bytes())
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(address(), creds)


def service_account_token(client: Client, namespace: str, name: str, seconds: int = 600) -> str:
    """A ServiceAccount (created if missing) and a token for it, good for `seconds`."""
    if client.get_or_none(SERVICE_ACCOUNTS, name, namespace) is None:
        client.create(
            SERVICE_ACCOUNTS,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            namespace,
        )
    reply = client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
    )
    return str(reply["status"]["token"])


def grant(client: Client, namespace: str, account: str, rules: list[dict[str, Any]]) -> None:
    """A Role with `rules` in `namespace`, bound to the ServiceAccount."""
    client.create(
        ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account},
            "rules": rules,
        },
        namespace,
    )
    client.create(
        ROLE_BINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
        namespace,
    )


def admin_token(client: Client) -> str:
    """A token of a kube-system ServiceAccount bound to cluster-admin (for tests of other things)."""
    name = "gangplugin-e2e-admin"
    if client.get_or_none(CLUSTER_ROLE_BINDINGS, name) is None:
        service_account_token(client, "kube-system", name)
        client.create(
            CLUSTER_ROLE_BINDINGS,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
            },
        )
    return service_account_token(client, "kube-system", name)


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]
