"""What the real-node tests and bench/real_nodes.py share: the cluster (control plane, Kueue, the
training-operator and the real nodes, no fake nodes, no gangplugin process), gangplugin installed
onto it by the Helm chart, PyTorchJobs of the rank program and what their ranks printed."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import NODES, PODS, ApiError, Client, Resource
from gangplugin.kube.resources import GANG_POLICIES
from gangplugin.kube.shape import ULTRASERVER
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports, cache_dir
from gangplugin.localcluster.realnodes.images import GANGPLUGIN, NodeImages
from gangplugin.localcluster.realnodes.pool import KIND_LABEL
from tests.support.kube import wait_for

CHART = REPO / "deploy" / "helm" / "gangplugin"
NAMESPACE = "gangplugin-system"
PYTORCHJOBS = Resource("kubeflow.org/v1", "pytorchjobs")
DEPLOYMENTS = Resource("apps/v1", "deployments")
SERVICES = Resource("v1", "services")
ENDPOINT_SLICES = Resource("discovery.k8s.io/v1", "endpointslices")
LEASES = Resource("coordination.k8s.io/v1", "leases")
JOB_LABEL = "training.kubeflow.org/job-name"
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "training-operator", "kueue", "real-nodes")
# A rank's readiness probe looks every second; a step every half second.
STEP_SECONDS = "0.5"
# Bounds a job's deletion with its pods (5 s of grace each) on a busy machine.
GONE = 300.0


def real_node_cluster(base: int, kueue_version: str, log: Any = print, name: str = "") -> LocalCluster:
    return LocalCluster(
        state_dir=REPO / ".local" / (name or f"e2e-real-nodes-{base}"),
        ports=Ports(base),
        log=log,
        components=COMPONENTS,
        kueue_version=kueue_version,
    )


def images(local: LocalCluster) -> NodeImages:
    return NodeImages.read(local.state_dir / "real-nodes" / "images.json")


def helm(local: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(cache_dir() / "bin" / "helm"),
            f"--kubeconfig={local.kubeconfig}",
            "--namespace",
            NAMESPACE,
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def chart_values(local: LocalCluster) -> dict[str, Any]:
    """gangplugin's own image as the nodes hold it (never pulled), certificates the chart makes,
    its second scheduler (the extender's client, through the Service), all on real nodes."""
    repository, tag = images(local).named(GANGPLUGIN).rsplit(":", 1)
    on_real = {KIND_LABEL[0]: KIND_LABEL[1]}
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "certificates": {"mode": "generate"},
        "nodeSelector": on_real,
        "logFormat": "text",
        "scheduler": {"enabled": True, "replicas": 1, "nodeSelector": on_real},
        # Leave room on the nodes' two shared cores for the ranks.
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
    }


def helm_install(local: LocalCluster, values: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    out = helm(
        local, "install", "gangplugin", str(CHART), "--create-namespace", "-f", str(tmp_path / "values.yaml")
    )
    assert out.returncode == 0, out.stderr


def webhook_answers(client: Client) -> bool:
    """kube-apiserver gets an answer from gangplugin's validating webhook through its Service: a
    server-side dry run of a valid GangPolicy passes. After a node holding one of gangplugin's
    pods was lost and came back, kube-apiserver's next webhook call may still go down its
    connection to that pod and fail ("use of closed network connection"); it dials anew after."""
    policy = {"apiVersion": "gangplugin.io/v1alpha1", "kind": "GangPolicy", "metadata": {"name": "probe"}}
    try:
        client.request("POST", GANG_POLICIES.path(), body=policy, params={"dryRun": "All"})
    except ApiError as err:
        if "failed calling webhook" in str(err):
            return False
        raise
    return True


def service_answers(client: Client, name: str, namespace: str = NAMESPACE) -> bool:
    """A TCP connection to Service `name`'s address and first port is accepted: kube-proxy
    routes it to a ready pod (the host's connections take the same rules as kube-apiserver's)."""
    svc = client.get_or_none(SERVICES, name, namespace)
    if not svc:
        return False
    try:
        with socket.create_connection((svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"]), timeout=2):
            return True
    except OSError:
        return False


def gangplugin_pods(client: Client) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = client.list(
        PODS, NAMESPACE, label_selector="app.kubernetes.io/name=gangplugin"
    )["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def deployment_ready(client: Client, name: str, namespace: str = NAMESPACE) -> bool:
    obj = client.get_or_none(DEPLOYMENTS, name, namespace) or {}
    want = (obj.get("spec") or {}).get("replicas", 1)
    return bool(obj) and (obj.get("status") or {}).get("readyReplicas", 0) >= want


def node_ready(client: Client, name: str) -> bool:
    node = client.get_or_none(NODES, name) or {}
    return ready(node)


def holder(client: Client) -> str | None:
    lease = client.get_or_none(LEASES, "gangplugin", NAMESPACE) or {}
    held: str | None = (lease.get("spec") or {}).get("holderIdentity")
    return held


def pytorchjob(
    name: str, namespace: str, queue: str, ranks: int, worker_image: str, **env: str
) -> dict[str, Any]:
    """A PyTorchJob of `ranks` ranks (a master and ranks-1 workers) of the rank program, one GPU
    each, all in one UltraServer, its readiness the rank's own; `env` reaches every rank."""
    template = {
        "metadata": {"annotations": {"gangplugin.io/required-topology": ULTRASERVER}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "pytorch",  # the training-operator's name for the trainer container
                    "image": worker_image,
                    "imagePullPolicy": "Never",
                    "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                    "env": [
                        {"name": "STEP_SECONDS", "value": STEP_SECONDS},
                        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        *({"name": k, "value": v} for k, v in env.items()),
                    ],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1},
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    replicas = {"Master": 1, **({"Worker": ranks - 1} if ranks > 1 else {})}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "pytorchReplicaSpecs": {
                kind: {"replicas": n, "restartPolicy": "OnFailure", "template": template}
                for kind, n in replicas.items()
            }
        },
    }


def job_pods(client: Client, namespace: str, job: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = client.list(PODS, namespace, label_selector=f"{JOB_LABEL}={job}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def rank_of(pod: dict[str, Any]) -> int:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return int(env["RANK"])


def logs(local: LocalCluster, namespace: str, pod: str) -> str:
    """A pod's output as `kubectl logs` reads it (kube-apiserver, the node's kubelet, its
    containerd); empty when the container has not started or its node is lost."""
    kubectl = str(cache_dir() / "bin" / "kubectl")
    argv = [
        kubectl,
        f"--kubeconfig={local.kubeconfig}",
        "--request-timeout=15s",
        "-n",
        namespace,
        "logs",
        pod,
    ]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except subprocess.TimeoutExpired:  # its node lost: its kubelet answers nothing
        return ""
    return out.stdout


def events(local: LocalCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    """What the rank in `pod` printed."""
    return [json.loads(line) for line in logs(local, namespace, pod).splitlines() if line.startswith("{")]


@dataclass(frozen=True)
class Met:
    """Every rank of a job met and stepped: each rank's pod, node, GPUs and first full step."""

    pods: dict[int, dict[str, Any]]
    first_step: dict[int, dict[str, Any]]
    gpus: dict[int, str]


def all_met(
    local: LocalCluster, client: Client, namespace: str, job: str, ranks: int, after: float = 0.0
) -> Met | None:
    """Met when every rank of `job` has run a step after its latest `met` after `after` (time),
    with the sum of all ranks; else None."""
    pods = {rank_of(p): p for p in job_pods(client, namespace, job) if p["spec"].get("nodeName")}
    if len(pods) != ranks:
        return None
    full = ranks * (ranks + 1) // 2
    first: dict[int, dict[str, Any]] = {}
    gpus: dict[int, str] = {}
    for rank, pod in pods.items():
        seen = events(local, namespace, pod["metadata"]["name"])
        mets = [e for e in seen if e["event"] == "met" and e["t"] > after]
        if not mets:
            return None
        steps = [e for e in seen if e["event"] == "step" and e["t"] > mets[-1]["t"] and e["sum"] == full]
        if not steps:
            return None
        first[rank] = steps[0]
        gpus[rank] = next(e["gpus"] for e in seen if e["event"] == "start")
    return Met(pods, first, gpus)


def ultraserver_of(client: Client) -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get(ULTRASERVER, "")
        for n in client.list(NODES)["items"]
    }


@contextlib.contextmanager
def submitted(client: Client, job: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """`job` created, and deleted afterwards with its pods (waited for: the next test's gangs
    find the nodes as they were)."""
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    made = client.create(PYTORCHJOBS, job)
    try:
        yield made
    finally:
        with contextlib.suppress(ApiError):
            client.request(
                "DELETE", PYTORCHJOBS.path(namespace, name), body={"propagationPolicy": "Foreground"}
            )
        wait_gone(client, namespace, name, GONE)


def wait_gone(client: Client, namespace: str, job: str, timeout: float) -> None:
    wait_for(
        lambda: not client.list(PODS, namespace, label_selector=f"{JOB_LABEL}={job}")["items"],
        timeout,
        f"{job}'s pods gone",
    )


def save_logs(local: LocalCluster, client: Client) -> list[Path]:
    """gangplugin's pods' logs into the cluster's log folder, before they go with the release:
    the files written (the folder also holds earlier runs' pods)."""
    written = []
    for pod in client.list(PODS, NAMESPACE)["items"]:
        name = pod["metadata"]["name"]
        path = local.log_dir / f"pod-{name}.log"
        path.write_text(logs(local, NAMESPACE, name))
        written.append(path)
    return written


def now() -> float:
    return time.time()
