"""Only kube-scheduler may call the extender, and even it cannot bind a pod where the pod's own
constraints do not allow (issue 11): the request a shell could once send,

    curl --insecure -X POST https://127.0.0.1:<base+611>/bind \\
      -d '{"PodName":"probe","PodNamespace":"sec-probe","PodUID":"<uid>","Node":"p5-01"}'

is sent here with httpx, against the running local cluster's extender.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from gangplugin.kube.client import EVENTS, NODES, PODS, Client
from gangplugin.localcluster.pki import CertificateAuthority
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.kube import wait_for
from tests.support.objects import gpu_pod


def _probe(client: Client, namespace: str) -> tuple[str, str]:
    """A one-GPU pod whose nodeSelector no node matches (so it stays Pending), and a GPU node
    outside that selector; returns (the pod's uid, the node's name)."""
    pod = client.create(PODS, gpu_pod(namespace, "probe", gpus=1, node_selector={"no-such-label": "x"}))
    gpu_nodes = [
        n["metadata"]["name"]
        for n in client.list(NODES)["items"]
        if "nvidia.com/gpu" in n.get("status", {}).get("allocatable", {})
    ]
    assert gpu_nodes, "the local cluster has GPU nodes"
    wait_for(
        lambda: [
            e
            for e in client.list(EVENTS, namespace)["items"]
            if e.get("reason") == "FailedScheduling" and e["involvedObject"]["name"] == "probe"
        ],
        60,
        "kube-scheduler to find no node for the probe pod",
    )
    return str(pod["metadata"]["uid"]), sorted(gpu_nodes)[0]


def _bind(cluster: E2ECluster, namespace: str, uid: str, node: str, cert: tuple[Path, Path] | None) -> Any:
    """POST /bind as curl --insecure would (no check of the server), with `cert` as the client's
    certificate; the answer's JSON, or the transport error that ended the call."""
    assert cluster.local, "this test calls the local cluster's extender (KUBECONFIG must be unset)"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(*map(str, cert))
    port = e2e_local_cluster().ports.gangplugin_extender
    body = {"PodName": "probe", "PodNamespace": namespace, "PodUID": uid, "Node": node}
    try:
        return httpx.post(f"https://127.0.0.1:{port}/bind", json=body, verify=ctx, timeout=30).json()
    except (httpx.TransportError, ssl.SSLError) as err:
        return err


def _bind_as_scheduler(cluster: E2ECluster, namespace: str, uid: str, node: str) -> Any:
    """/bind with kube-scheduler's client certificate, once the extender's pod cache has the pod."""
    tls = e2e_local_cluster().extender_tls_config()
    cert = (Path(tls["certFile"]), Path(tls["keyFile"]))

    def known() -> Any:
        answer = _bind(cluster, namespace, uid, node, cert)
        return None if "unknown to the extender" in str(answer) else answer

    return wait_for(known, 30, "the extender to know the probe pod")


def _node_of(client: Client, namespace: str) -> str | None:
    return client.get(PODS, "probe", namespace)["spec"].get("nodeName")


def test_bind_without_the_schedulers_certificate_is_refused_and_nothing_is_bound(
    cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    client = cluster.client
    uid, node = _probe(client, namespace)
    local = e2e_local_cluster()
    callers = {
        "no client certificate": None,
        "a certificate of another CA": CertificateAuthority(tmp_path).issue(
            "kube-scheduler", common_name="kube-scheduler", client=True
        ),
        # The cluster's own CA, which the API server trusts (here: cluster-admin's certificate),
        # is not the extender's client CA.
        "the cluster CA's admin certificate": (local.pki_dir / "admin.crt", local.pki_dir / "admin.key"),
    }
    for who, cert in callers.items():
        answer = _bind(cluster, namespace, uid, node, cert)
        assert isinstance(answer, httpx.TransportError | ssl.SSLError), f"{who}: answered {answer!r}"
    # The handshake failed before a request was sent, so no handler ran. That the listener was
    # there to refuse (not down): the scheduler's certificate is answered, and refused on the
    # merits, after the three above; the extender binds before it answers, so by now any binding
    # those calls made would show.
    answer = _bind_as_scheduler(cluster, namespace, uid, node)
    assert "does not allow that node" in str(answer), answer
    assert _node_of(client, namespace) is None


def test_the_schedulers_certificate_cannot_bind_a_pod_outside_its_node_selector(
    cluster: E2ECluster, namespace: str
) -> None:
    client = cluster.client
    uid, node = _probe(client, namespace)
    answer = _bind_as_scheduler(cluster, namespace, uid, node)
    why = (
        f"refusing to bind pod {namespace}/probe to node {node}: "
        "the pod does not allow that node (not matching nodeSelector/affinity)"
    )
    assert answer == {"Error": why}
    events = wait_for(
        lambda: [
            e
            for e in client.list(EVENTS, namespace)["items"]
            if e.get("reason") == "BindRefused" and e["involvedObject"]["name"] == "probe"
        ],
        30,
        "a BindRefused event on the pod",
    )
    assert events[0]["type"] == "Warning" and events[0]["message"] == why
    assert events[0]["involvedObject"]["uid"] == uid
    assert _node_of(client, namespace) is None


@pytest.mark.parametrize("uid", ["", "not-the-pods-uid"])
def test_a_bind_naming_another_uid_is_refused(cluster: E2ECluster, namespace: str, uid: str) -> None:
    client = cluster.client
    real_uid, _ = _probe(client, namespace)
    answer = _bind_as_scheduler(cluster, namespace, uid, "no-node")
    assert answer == {
        "Error": f"refusing to bind pod {namespace}/probe to node no-node: "
        f"the request names uid {uid or '(none)'}, the pod's uid is {real_uid}"
    }
    assert _node_of(client, namespace) is None
