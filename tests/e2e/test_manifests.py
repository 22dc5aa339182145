"""deploy/manifests/base against the real API server, and its RBAC put to work.

- Every rendered object passes a server-side dry run, except cert-manager's Issuers and
  Certificates: cert-manager is not installed here (its CRDs come from no registry this project
  can reach), so those are checked to be the only kinds the server does not know.
- Least privilege for real: the ServiceAccounts and RBAC of the base are created, and
  `gangplugin serve` (every component) and a second kube-scheduler with
  deploy/scheduler/in-cluster.yaml run with those identities' tokens in place of the local
  cluster's gangplugin. A gang whose pods set `schedulerName: gangplugin-scheduler` is admitted,
  placed and bound through them, a TrainingPlan gets its status and its ClusterQueue its quota
  bookkeeping, and neither log shows a request the API server refused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gangplugin.core.names import GANG_LABEL, PLAN_QUOTA_ANNOTATION
from gangplugin.kube.client import EVENTS, JOBS, NODES, ApiError, Client, Resource
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, TRAINING_PLANS
from gangplugin.localcluster.cluster import cache_dir
from tests.e2e.conftest import E2ECluster, e2e_local_cluster
from tests.e2e.kube import gpu_job, is_true, job_pods, queue_objects, unique, wait_for, workload_of
from tests.unit.test_manifests import CERT_MANAGER, kubectl, render, render_text

NAMESPACE = "gangplugin-system"
LEASES = Resource("coordination.k8s.io/v1", "leases")
US = "topology.k8s.aws/ultraserver-id"
# kind -> (plural, namespaced): what the least-privilege test creates for real.
RBAC_KINDS = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
}


def _kubectl(cluster: E2ECluster, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl()), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _docs(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)


def _resource(obj: dict[str, Any]) -> Resource:
    group_version, kind = obj["apiVersion"], obj["kind"]
    return Resource(group_version, RBAC_KINDS[kind][0], namespaced=RBAC_KINDS[kind][1])


@pytest.fixture(scope="module")
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
    out = _kubectl(
        cluster, "apply", "--server-side", "--field-manager=e2e-manifests", "-f", "-", stdin=_docs(objs)
    )
    assert out.returncode == 0, out.stderr
    yield objs
    for obj in reversed(new):
        with contextlib.suppress(ApiError):
            cluster.client.delete(_resource(obj), obj["metadata"]["name"], obj["metadata"].get("namespace"))


def test_every_object_passes_a_server_side_dry_run(cluster: E2ECluster, installed_rbac: Any) -> None:
    ours = [o for o in render() if o["apiVersion"] != CERT_MANAGER]
    out = _kubectl(
        cluster,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "--field-manager=e2e-manifests",
        "-f",
        "-",
        stdin=_docs(ours),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(server dry run)") == len(ours), out.stdout
    # cert-manager's kinds: unknown here, and the only ones the server rejects.
    theirs = [o for o in render() if o["apiVersion"] == CERT_MANAGER]
    assert {o["kind"] for o in theirs} == {"Issuer", "Certificate"}
    out = _kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=render_text())
    assert out.returncode != 0
    lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
    unknown = [ln for ln in lines if ln.startswith("resource mapping not found")]
    assert all(ln == "ensure CRDs are installed first" for ln in lines if ln not in unknown), out.stderr
    assert sorted(unknown) == sorted(
        f'resource mapping not found for name: "{o["metadata"]["name"]}" namespace: "{NAMESPACE}" '
        f'from "STDIN": no matches for kind "{o["kind"]}" in version "{CERT_MANAGER}"'
        for o in theirs
    ), out.stderr


def _token_kubeconfig(cluster: E2ECluster, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount `account` with a TokenRequest token."""
    answer = cluster.client.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"])
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": server}],
                "users": [{"name": account, "user": {"token": answer["status"]["token"]}}],
                "contexts": [{"name": account, "context": {"cluster": "c", "user": account}}],
                "current-context": account,
            }
        )
    )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _refused(log: Path) -> list[str]:
    return [
        ln for ln in log.read_text(errors="replace").splitlines() if "forbidden" in ln.lower() or " 403" in ln
    ]


def _ok(url: str, **kw: Any) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0, **kw).status_code == 200
    return False


@pytest.fixture
def serving_as_service_accounts(
    cluster: E2ECluster, installed_rbac: Any, tmp_path: Path
) -> Iterator[tuple[Path, Path]]:
    """gangplugin and the gangplugin-scheduler running as the base's ServiceAccounts; yields
    their logs. The local cluster's own gangplugin is stopped meanwhile and restarted after."""
    assert cluster.local, "this test replaces the local cluster's gangplugin (KUBECONFIG must be unset)"
    local = e2e_local_cluster()
    own = local.running_processes().get("gangplugin")
    if own:
        os.killpg(own, signal.SIGTERM)
        wait_for(
            lambda: not local.running_processes().get("gangplugin"), 30, "the cluster's gangplugin to stop"
        )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        gp_config = _token_kubeconfig(cluster, "gangplugin", tmp_path / "gangplugin.kubeconfig")
        comp = local._gangplugin()
        assert comp is not None
        argv = [a if not a.startswith("--kubeconfig=") else f"--kubeconfig={gp_config}" for a in comp.argv]
        gp_log = tmp_path / "gangplugin.log"
        procs.append(_start(argv, gp_log))

        def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError, OSError):
                return procs[0].poll() is None and comp.health()
            return False

        wait_for(ready, 120, f"gangplugin ready ({gp_log})")

        sched_config = _token_kubeconfig(cluster, "gangplugin-scheduler", tmp_path / "scheduler.kubeconfig")
        cfg = yaml.safe_load(next(o for o in render() if o["kind"] == "ConfigMap")["data"]["config.yaml"])
        cfg["clientConnection"] = {"kubeconfig": str(sched_config)}
        for ext in cfg["extenders"]:  # the Service and the secrets' mounts, as the local cluster has them
            ext["urlPrefix"] = f"https://127.0.0.1:{local.ports.gangplugin_extender}"
            assert set(ext["tlsConfig"]) == set(local.extender_tls_config())
            ext["tlsConfig"] = local.extender_tls_config()
        (tmp_path / "scheduler.yaml").write_text(yaml.safe_dump(cfg))
        port = _free_port()
        sched_log = tmp_path / "scheduler.log"
        procs.append(
            _start(
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
        )
        wait_for(
            lambda: procs[1].poll() is None and _ok(f"https://127.0.0.1:{port}/healthz", verify=False),
            60,
            f"the gangplugin-scheduler healthy ({sched_log})",
        )
        yield gp_log, sched_log
    finally:
        for proc in reversed(procs):
            _stop(proc)
        local.restart("gangplugin")


def test_least_privilege_runs_a_gang_end_to_end(
    cluster: E2ECluster, namespace: str, serving_as_service_accounts: tuple[Path, Path]
) -> None:
    client: Client = cluster.client
    gp_log, sched_log = serving_as_service_accounts
    lease_cfg = yaml.safe_load(next(o for o in render() if o["kind"] == "ConfigMap")["data"]["config.yaml"])
    lease = lease_cfg["leaderElection"]
    wait_for(
        lambda: (
            (client.get_or_none(LEASES, lease["resourceName"], lease["resourceNamespace"]) or {})
            .get("spec", {})
            .get("holderIdentity")
        ),
        60,
        "the gangplugin-scheduler to hold its Lease",
    )
    made: list[tuple[Resource, str]] = []
    try:
        name = unique("rbac")
        client.create(
            GANG_POLICIES,
            {
                "apiVersion": "gangplugin.io/v1alpha1",
                "kind": "GangPolicy",
                "metadata": {"name": name},
                "spec": {},
            },
        )
        made.append((GANG_POLICIES, name))
        client.create(
            ADMISSION_CHECKS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {
                    "controllerName": "gangplugin.io/gang",
                    "parameters": {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": name},
                },
            },
        )
        made.append((ADMISSION_CHECKS, name))
        for res, obj in queue_objects(name, namespace, 64, "ml.p6e-gb200.36xlarge"):
            if obj["kind"] == "ClusterQueue":
                obj["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": name}]}
                cq_res = res
            client.create(res, obj)
            if not res.namespaced:
                made.append((res, name))
        wait_for(lambda: is_true(client.get(cq_res, name), "Active"), 60, "the ClusterQueue Active")

        # A 4-pod gang in one UltraServer, scheduled by the second scheduler through the extender.
        job = gpu_job(
            unique("job"),
            namespace,
            name,
            4,
            4,
            metadata={"annotations": {"gangplugin.io/required-topology": US}},
        )
        job["spec"]["template"]["spec"]["schedulerName"] = "gangplugin-scheduler"
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
        node_us = {
            n["metadata"]["name"]: n["metadata"]["labels"].get(US) for n in client.list(NODES)["items"]
        }
        assert len({node_us[p["spec"]["nodeName"]] for p in pods}) == 1
        scheduled = [
            e
            for e in client.list(EVENTS, namespace)["items"]
            if e.get("reason") == "Scheduled" and e["involvedObject"]["name"].startswith(job_name)
        ]
        assert {e.get("reportingComponent") or e["source"]["component"] for e in scheduled} == {
            "gangplugin-scheduler"
        }

        # A plan for a future block: the controller writes its status and the queue's bookkeeping.
        plan_queue = unique("plan")
        for res, obj in queue_objects(plan_queue, namespace, 8, "ml.p5.48xlarge"):
            client.create(res, obj)
            if not res.namespaced:
                made.append((res, plan_queue))
        start = (datetime.now(UTC) + timedelta(days=2)).replace(hour=11, minute=30, second=0, microsecond=0)
        client.create(
            TRAINING_PLANS,
            {
                "apiVersion": "gangplugin.io/v1alpha1",
                "kind": "TrainingPlan",
                "metadata": {"name": plan_queue},
                "spec": {
                    "targetResource": "training-job",
                    "clusterQueue": plan_queue,
                    "flavor": plan_queue,
                    "resourcesPerInstance": {"nvidia.com/gpu": 8},
                    "reservedCapacity": [
                        {
                            "instanceType": "ml.p5.48xlarge",
                            "instanceCount": 1,
                            "availabilityZone": "us-east-1b",
                            "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "endTime": (start + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        }
                    ],
                },
            },
        )
        made.append((TRAINING_PLANS, plan_queue))
        wait_for(
            lambda: (client.get(TRAINING_PLANS, plan_queue).get("status") or {}).get("phase") == "Scheduled",
            60,
            "the TrainingPlan's status",
        )
        wait_for(
            lambda: (
                PLAN_QUOTA_ANNOTATION in (client.get(cq_res, plan_queue)["metadata"].get("annotations") or {})
            ),
            60,
            "the plan's quota bookkeeping on its ClusterQueue",
        )
    finally:
        for res, obj_name in reversed(made):
            with contextlib.suppress(ApiError):
                client.delete(res, obj_name)
    time.sleep(1)  # let the last writes' answers reach the logs
    assert _refused(gp_log) == [], f"gangplugin was refused by the API server ({gp_log})"
    assert _refused(sched_log) == [], f"the gangplugin-scheduler was refused by the API server ({sched_log})"
