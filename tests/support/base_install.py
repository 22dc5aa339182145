"""deploy/manifests/base's identities put to work against the local cluster: its ServiceAccounts
and RBAC created for real, tokens of them, the base's second kube-scheduler running with one, and
a gang that goes through Kueue, gangplugin's admission check, that scheduler and gangplugin's
extender. Shared by the manifests test (gangplugin as a process) and the image test (as containers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from gangplugin.core.names import GANG_LABEL
from gangplugin.kube.client import EVENTS, JOBS, NODES, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.lease import LEASES
from gangplugin.localcluster.cluster import LocalCluster, cache_dir
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.grpcauth import service_account_token
from tests.support.kube import job_pods, unique, wait_for, workload_of
from tests.support.manifests import kubectl, render
from tests.support.objects import gpu_job

NAMESPACE = "gangplugin-system"
US = "topology.k8s.aws/ultraserver-id"
# kind -> (plural, namespaced): what the least-privilege tests create for real.
RBAC_KINDS = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
}


def run_kubectl(cluster: E2ECluster, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl()), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def docs(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)


def _resource(obj: dict[str, Any]) -> Resource:
    group_version, kind = obj["apiVersion"], obj["kind"]
    return Resource(group_version, RBAC_KINDS[kind][0], namespaced=RBAC_KINDS[kind][1])


@contextlib.contextmanager
def installed_rbac(cluster: E2ECluster) -> Iterator[list[dict[str, Any]]]:
    """The base's Namespace, ServiceAccounts and RBAC, created for real; what was not there before
    is deleted afterwards, except the Namespace (the local cluster's gangplugin may use it)."""
    objs = [o for o in render() if o["kind"] in RBAC_KINDS]
    new = [
        o
        for o in objs
        if o["kind"] != "Namespace"
        and cluster.client.get_or_none(_resource(o), o["metadata"]["name"], o["metadata"].get("namespace"))
        is None
    ]
    out = run_kubectl(
        cluster, "apply", "--server-side", "--field-manager=e2e-manifests", "-f", "-", stdin=docs(objs)
    )
    assert out.returncode == 0, out.stderr
    yield objs
    for obj in reversed(new):
        with contextlib.suppress(ApiError):
            cluster.client.delete(_resource(obj), obj["metadata"]["name"], obj["metadata"].get("namespace"))


def token_kubeconfig(cluster: E2ECluster, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount `account` with a TokenRequest token."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"])
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": server}],
                "users": [
                    {
                        "name": account,
                        "user": {"token": service_account_token(cluster.client, NAMESPACE, account)},
                    }
                ],
                "contexts": [{"name": account, "context": {"cluster": "c", "user": account}}],
                "current-context": account,
            }
        )
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def refused(log: Path) -> list[str]:
    """The log lines of requests the API server refused."""
    return [
        ln for ln in log.read_text(errors="replace").splitlines() if "forbidden" in ln.lower() or " 403" in ln
    ]


def ok(url: str, **kw: Any) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0, **kw).status_code == 200
    return False


@contextlib.contextmanager
def local_gangplugin_stopped(cluster: E2ECluster) -> Iterator[LocalCluster]:
    """The local cluster's own gangplugin stopped (its Lease released, its ports free) while a test
    runs gangplugin otherwise; restarted afterwards."""
    assert cluster.local, "this test replaces the local cluster's gangplugin (KUBECONFIG must be unset)"
    local = e2e_local_cluster()
    for replica in reversed(local.gangplugin_replicas()):  # the leader last: nobody takes over
        local.stop_process(replica, signal.SIGTERM)  # forgotten: the keeper leaves it stopped
    try:
        yield local
    finally:
        local.restart("gangplugin")


@contextlib.contextmanager
def gangplugin_scheduler(cluster: E2ECluster, local: LocalCluster, tmp_path: Path) -> Iterator[Path]:
    """The base's second kube-scheduler (its ConfigMap) as its ServiceAccount,
    calling the extender where the local cluster's leader serves it; yields its log."""
    sched_config = token_kubeconfig(cluster, "gangplugin-scheduler", tmp_path / "scheduler.kubeconfig")
    cfg = yaml.safe_load(next(o for o in render() if o["kind"] == "ConfigMap")["data"]["config.yaml"])
    cfg["clientConnection"] = {"kubeconfig": str(sched_config)}
    for ext in cfg["extenders"]:  # the Service and the secrets' mounts, as the local cluster has them
        ext["urlPrefix"] = f"https://127.0.0.1:{local.ports.gangplugin_extender}"
        assert set(ext["tlsConfig"]) == set(local.extender_tls_config())
        ext["tlsConfig"] = local.extender_tls_config()
    (tmp_path / "scheduler.yaml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    sched_log = tmp_path / "scheduler.log"
    proc = start(
        [
            str(cache_dir() / "bin" / "kube-scheduler"),
            f"--config={tmp_path / 'scheduler.yaml'}",
            f"--authentication-kubeconfig={sched_config}",
            f"--authorization-kubeconfig={sched_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ],
        sched_log,
    )
    try:
        wait_for(
            lambda: proc.poll() is None and ok(f"https://127.0.0.1:{port}/healthz", verify=False),
            60,
            f"the gangplugin-scheduler healthy ({sched_log})",
        )
        lease = cfg["leaderElection"]
        wait_for(
            lambda: (
                (cluster.client.get_or_none(LEASES, lease["resourceName"], lease["resourceNamespace"]) or {})
                .get("spec", {})
                .get("holderIdentity")
            ),
            60,
            "the gangplugin-scheduler to hold its Lease",
        )
        yield sched_log
    finally:
        stop(proc)


def run_gang(
    client: Client, namespace: str, queue: str, scheduler: str | None = "gangplugin-scheduler"
) -> list[dict[str, Any]]:
    """A 4-pod gang in one UltraServer, queued in `queue`, admitted by Kueue through gangplugin's
    check and bound by `scheduler` (None: the cluster's default-scheduler, which has no
    extender): its pods, all bound and Ready."""
    job = gpu_job(
        unique("job"),
        namespace,
        queue,
        4,
        4,
        metadata={"annotations": {"gangplugin.io/required-topology": US}},
    )
    if scheduler is not None:
        job["spec"]["template"]["spec"]["schedulerName"] = scheduler
    client.create(JOBS, job)
    job_name = job["metadata"]["name"]

    def running() -> list[dict[str, Any]] | None:
        pods = job_pods(client, namespace, job_name)
        ok = len(pods) == 4 and all(p["spec"].get("nodeName") and is_true(p, "Ready") for p in pods)
        return pods if ok else None

    pods = wait_for(running, 180, f"the gang of {job_name} bound and Ready")
    wl = workload_of(client, namespace, job_name)
    assert wl is not None and is_true(wl, "Admitted")
    assert all(GANG_LABEL in p["metadata"]["labels"] for p in pods), "admission's podSetUpdates"
    node_us = {n["metadata"]["name"]: n["metadata"]["labels"].get(US) for n in client.list(NODES)["items"]}
    assert len({node_us[p["spec"]["nodeName"]] for p in pods}) == 1
    scheduled = [
        e
        for e in client.list(EVENTS, namespace)["items"]
        if e.get("reason") == "Scheduled" and e["involvedObject"]["name"].startswith(job_name)
    ]
    bound_by = {e.get("reportingComponent") or e["source"]["component"] for e in scheduled}
    assert bound_by == {scheduler or "default-scheduler"}
    return pods
