"""`gangctl get gangs`, `gangctl explain` and `gangctl wait` on live gangs, as a user runs them:
the console script, settings from the environment, TLS and a ServiceAccount token; a gang asked
for by the job that owns it (KIND/NAME), typed before Kueue has made its Workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import JOBS
from tests.support import grpcauth
from tests.support.cli import Running
from tests.support.cluster import E2ECluster
from tests.support.kube import unique, wait_for, workload_of
from tests.support.objects import JOBSETS, gpu_job

GANGCTL = str(Path(sys.executable).parent / "gangctl")
US = "topology.k8s.aws/ultraserver-id"
REPO = Path(__file__).resolve().parents[2]
VIEWER = [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]}]


def _env(cluster: E2ECluster, token: str) -> dict[str, str]:
    return {
        **os.environ,
        "GANGCTL_SERVER": grpcauth.address(),
        "GANGCTL_CA_FILE": str(grpcauth.ca_file(cluster)),
        "GANGCTL_TOKEN": token,
    }


def gangctl(cluster: E2ECluster, token: str, *args: str, timeout: float = 240) -> tuple[int, str, str]:
    done = subprocess.run(
        [GANGCTL, *args],
        env=_env(cluster, token),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_get_explain_and_wait_on_live_gangs(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    client = cluster.client
    queue = gang_queue()
    grpcauth.grant(
        client,
        namespace,
        "viewer",
        [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]}],
    )
    token = grpcauth.service_account_token(client, namespace, "viewer")
    pinned = {"metadata": {"annotations": {"gangplugin.io/required-topology": US}}}
    small, big = unique("small"), unique("big")
    client.create(JOBS, gpu_job(small, namespace, queue, pods=4, gpus=4, **pinned), namespace)
    # 20 pods of 4 GPUs in one UltraServer of 18 nodes: never fits.
    client.create(JOBS, gpu_job(big, namespace, queue, pods=20, gpus=4, **pinned), namespace)
    wl_small = wait_for(lambda: workload_of(client, namespace, small), 60, "the small Workload")["metadata"][
        "name"
    ]
    wl_big = wait_for(lambda: workload_of(client, namespace, big), 60, "the big Workload")["metadata"]["name"]

    code, out, err = gangctl(
        cluster, token, "wait", wl_small, "-n", namespace, "--for", "ready", "--timeout", "3m"
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"waiting for gang {namespace}/{wl_small} to be ready")
    assert out.splitlines()[-1] == f"gang {namespace}/{wl_small} is ready: 4/4 pods Ready"

    code, out, err = gangctl(cluster, token, "get", "gangs", "-n", namespace, "-o", "json")
    assert code == 0, err
    gangs = {g["name"]: g for g in json.loads(out)["gangs"]}
    running = gangs[wl_small]
    assert (running["phase"], running["podsReady"], running["podsTotal"], running["domainLevel"]) == (
        "Running",
        4,
        4,
        US,
    )
    assert running["domainValue"].startswith("gb200-us-") and running["localQueue"] == queue
    big_gang = wait_for(
        lambda: (
            (g := json.loads(gangctl(cluster, token, "get", "gangs", "-n", namespace, "-o", "json")[1]))
            and next((x for x in g["gangs"] if x["name"] == wl_big and x["checkState"] == "Pending"), None)
        ),
        90,
        "the big gang's check Pending",
    )
    assert big_gang["phase"] == "Pending" and big_gang["podsReady"] == 0

    code, out, err = gangctl(cluster, token, "get", "gangs", "-n", namespace)
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "QUEUE", "READY", "DOMAIN", "PHASE", "AGE"]
    row = next(r.split() for r in rows if r.startswith(wl_small))
    assert row[1:5] == [queue, "4/4", running["domainValue"], "Running"]

    code, out, err = gangctl(cluster, token, "explain", wl_big, "-n", namespace)
    assert code == 0, err
    assert "Phase:     Pending" in out and "Now:       does not fit" in out
    assert "Quota is reserved; the gang check holds it until the whole gang fits." in out
    code, out, err = gangctl(cluster, token, "explain", wl_small, "-n", namespace, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["summary"].startswith(f"Running in {US}=") and len(doc["pods"]) == 4

    # The same commands without rights in another namespace, or without a server, say what to do.
    code, _, err = gangctl(cluster, token, "get", "gangs", "-A")
    assert code == 1 and "PERMISSION_DENIED" in err and "in all namespaces" in err
    code, _, err = gangctl(
        cluster, token, "get", "gangs", "--server", "127.0.0.1:1", "-n", namespace, timeout=60
    )
    assert code == 1 and "not reachable at --server 127.0.0.1:1" in err and "port-forward" in err
    code, _, err = gangctl(cluster, token, "explain", "", "-n", namespace)
    assert code == 2 and err.strip() == "error: name: is required"


def _bare_gangctl(kubeconfig: str, *args: str, **env: str) -> tuple[int, str, str]:
    """gangctl as a kubectl user runs it: a kubeconfig and nothing else."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GANGCTL_", "GRPC_"))}
    done = subprocess.run(
        [GANGCTL, *args],
        env={**clean, "KUBECONFIG": kubeconfig, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_the_kubeconfig_alone_is_enough(cluster: E2ECluster, namespace: str, gang_queue: Any) -> None:
    """The local cluster's kubeconfig (a client-certificate admin, and the gangplugin.io/grpc
    extension `up` writes): no server, CA or token settings."""
    assert cluster.local, "the kubeconfig of a cluster KUBECONFIG names may lack the extension"
    client = cluster.client
    job = unique("kc")
    client.create(JOBS, gpu_job(job, namespace, gang_queue(), pods=2, gpus=4))
    name = wait_for(lambda: workload_of(client, namespace, job), 60, "the Workload")["metadata"]["name"]
    code, out, err = _bare_gangctl(str(cluster.kubeconfig), "get", "gangs", "-A", "-o", "json")
    assert code == 0, err
    assert (namespace, name) in {(g["namespace"], g["name"]) for g in json.loads(out)["gangs"]}
    code, out, err = _bare_gangctl(str(cluster.kubeconfig), "explain", name, "-n", namespace)
    assert code == 0 and f"{namespace}/{name}" in out, err
    code, out, err = _bare_gangctl(
        str(cluster.kubeconfig), "wait", name, "-n", namespace, "--for", "ready", "--timeout", "2m"
    )
    assert code == 0 and out.splitlines()[-1].startswith(f"gang {namespace}/{name} is ready"), err


def test_an_exec_plugin_user_in_a_merged_kubeconfig(
    cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    """KUBECONFIG=mine:cluster's: my file has a user whose exec plugin prints a ServiceAccount's
    token (as `aws eks get-token` prints an EKS one) and a context on the cluster the other file
    names. RBAC then decides for that identity, and refusals are one readable line."""
    assert cluster.local, "uses the extension the local cluster's kubeconfig carries"
    client = cluster.client
    grpcauth.grant(
        client,
        namespace,
        "viewer",
        [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]}],
    )
    token = tmp_path / "token"
    token.write_text(grpcauth.service_account_token(client, namespace, "viewer"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        f" 'status': {{'token': pathlib.Path({str(token)!r}).read_text().strip()}}}}))\n"
    )
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "viewer",
                "contexts": [
                    {"name": "viewer", "context": {"cluster": "gangplugin-local", "user": "viewer"}}
                ],
                "users": [
                    {
                        "name": "viewer",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": sys.executable,
                                "args": [str(plugin)],
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
            }
        )
    )
    merged = f"{mine}:{cluster.kubeconfig}"
    code, out, err = _bare_gangctl(merged, "get", "gangs", "-n", namespace, "-o", "json")
    assert code == 0 and json.loads(out) == {"gangs": []}, err
    code, _, err = _bare_gangctl(merged, "get", "gangs", "-A")
    assert code == 1 and "PERMISSION_DENIED" in err and f"system:serviceaccount:{namespace}:viewer" in err
    # The token sent to the port that wants a client certificate: a failed handshake, said in
    # gangctl's words only (no gRPC C-core log line).
    mtls = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["extensions"][0]
    code, _, err = _bare_gangctl(
        merged, "get", "gangs", "-n", namespace, GANGCTL_SERVER=mtls["extension"]["client-certificate-server"]
    )
    assert code == 1 and err.startswith("error: UNAVAILABLE"), err
    assert ".cc:" not in err and len(err.strip().splitlines()) <= 3, err


def test_a_job_by_kind_and_name_typed_before_its_workload_exists(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """README's tour: `kubectl apply -f train.yaml && gangctl wait job/train-1`. The wait starts
    before the Job is created; it follows the Workload Kueue makes of it to Ready. The same
    Job is then shown and explained by its KIND/NAME, and a JobSet (the real JobSet controller's)
    by its plural.group form."""
    client = cluster.client
    queue = gang_queue()
    grpcauth.grant(client, namespace, "viewer", VIEWER)
    token = grpcauth.service_account_token(client, namespace, "viewer")
    job = unique("train")
    env = _env(cluster, token)
    waiting = Running(
        [GANGCTL, "wait", f"job/{job}", "-n", namespace, "--for", "ready", "--timeout", "3m"], env
    )
    watching = Running(
        [GANGCTL, "get", "gangs", f"jobs.batch/{job}", "-n", namespace, "-w", "-o", "wide"], env
    )
    try:
        first = waiting.until(lambda line: line.startswith("waiting"), 60, "wait's first line")
        assert first == f"waiting for the gang of job/{job} in namespace {namespace} to be ready (timeout 3m)"
        pinned = {"metadata": {"annotations": {"gangplugin.io/required-topology": US}}}
        client.create(JOBS, gpu_job(job, namespace, queue, pods=4, gpus=4, **pinned), namespace)
        code, err = waiting.finish(240)
        wl = wait_for(lambda: workload_of(client, namespace, job), 60, "the Workload")["metadata"]["name"]
        assert code == 0, (err, waiting.seen)
        assert waiting.seen[-1] == f"gang {namespace}/{wl} is ready: 4/4 pods Ready"
        # -w printed the gang as it went, a row per change, the last one Running.
        running = watching.until(lambda line: " Running " in line, 60, "the watch's Running row")
        assert running.startswith(wl) and running.rstrip().endswith(f"job/{job}")
    finally:
        waiting.stop()
        watching.stop()

    code, out, err = gangctl(cluster, token, "get", "gangs", f"job/{job}", "-n", namespace, "-o", "wide")
    assert code == 0, err
    head, row = out.splitlines()
    assert "BIND MODE" in head and "OWNER" in head
    assert row.split()[:5] == [wl, queue, "4/4", row.split()[3], "Running"] and row.rstrip().endswith(
        f"job/{job}"
    )
    code, out, err = gangctl(cluster, token, "explain", f"job/{job}", "-n", namespace)
    assert code == 0 and f"Gang:      {namespace}/{wl}" in out and f"Owner:     job/{job}" in out, err

    name = unique("js")
    jobset = yaml.safe_load((REPO / "deploy" / "samples" / "jobset-gang.yaml").read_text())
    jobset["metadata"].update(name=name, namespace=namespace, labels={"kueue.x-k8s.io/queue-name": queue})
    client.create(JOBSETS, jobset)
    code, out, err = gangctl(
        cluster, token, "wait", f"jobset/{name}", "-n", namespace, "--timeout", "3m", "-o", "name"
    )
    wl = workload_of(client, namespace, name)
    assert code == 0 and wl is not None and out == f"gang/{namespace}/{wl['metadata']['name']}\n", err
    code, out, err = gangctl(
        cluster, token, "get", "gangs", f"jobsets.jobset.x-k8s.io/{name}", "-n", namespace, "-o", "json"
    )
    (gang,) = json.loads(out)["gangs"]
    assert (
        gang["owner"] == {"group": "jobset.x-k8s.io", "kind": "JobSet", "name": name}
        and gang["podsTotal"] == 5
    )
