"""Shared by the benchmarks that start a local cluster (extender.py, admission.py, scale.py; `make
bench` skips this file): a HyperPod-shaped cluster of any size, filled with running gangs, and
kube-scheduler's throughput on it with or without gangplugin's extender.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import ssl
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.kube.client import NAMESPACES, PODS, Client, Resource
from gangplugin.kube.shape import nodes_from_shape
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports

GPU = "nvidia.com/gpu"
GB200, P5 = "ml.p6e-gb200.36xlarge", "ml.p5.48xlarge"
PER_ULTRASERVER = 18
WRITERS = 16  # concurrent creates: what keeps kube-apiserver busy on 2 cores


def hyperpod_shape(nodes: int) -> dict[str, Any]:
    """A LocalClusterShape of about `nodes` nodes: nine tenths GB200 UltraServers of 18 nodes
    (4 GPUs each) under three network layers, the rest a pool of P5 nodes (8 GPUs each)."""
    ultraservers = max(1, nodes * 9 // 10 // PER_ULTRASERVER)
    p5 = max(1, nodes - ultraservers * PER_ULTRASERVER)
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "LocalClusterShape",
        "spec": {
            "groups": [
                {
                    "name": "gb200",
                    "instanceType": GB200,
                    "ultraServerType": "ml.u-p6e-gb200x72",
                    "availabilityZone": "us-east-1a",
                    "ultraServerCount": ultraservers,
                    "instancesPerUltraServer": PER_ULTRASERVER,
                    "instancesPerNetworkLayer": [576, 144, 72],
                    "allocatable": {"cpu": "144", "memory": "1700Gi", "pods": "110", GPU: "4"},
                },
                {
                    "name": "p5",
                    "instanceType": P5,
                    "availabilityZone": "us-east-1b",
                    "instanceCount": p5,
                    "instancesPerNetworkLayer": [256, 64, 16],
                    "allocatable": {"cpu": "192", "memory": "1900Gi", "pods": "110", GPU: "8"},
                },
            ]
        },
    }


def start(name: str, shape: dict[str, Any], components: str) -> LocalCluster:
    """The local cluster `.local/<name>` with the nodes of `shape` and `gangplugin serve` running
    `components` (unless GANGPLUGIN_COMPONENTS says otherwise); ports from GANGPLUGIN_PORT_BASE
    (default 30000). The caller stops it with `down`."""
    path = Path(tempfile.mkdtemp()) / "shape.yaml"
    path.write_text(yaml.safe_dump(shape))
    os.environ["GANGPLUGIN_SHAPE"] = str(path)
    os.environ.setdefault("GANGPLUGIN_COMPONENTS", components)
    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "30000"))
    cluster = LocalCluster(REPO / ".local" / name, Ports(base), log=lambda _m: None)
    cluster.up()
    return cluster


def raw_pod(
    name: str, gpus: int | str, gang: str | None = None, size: int = 0, node: str | None = None
) -> dict[str, Any]:
    """A trainer pod asking for `gpus`, a member of `gang` (of `size`) when given, bound to `node`
    when given (an already running pod: nothing schedules it)."""
    meta: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}"}
    if gang:
        meta["labels"] = {GANG_LABEL: gang}
        meta["annotations"] = {GANG_SIZE_ANNOTATION: str(size)}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "trainer",
                "image": "trainer:latest",
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", GPU: str(gpus)},
                    "limits": {GPU: str(gpus)},
                },
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def create_all(client: Client, res: Resource, objs: Iterable[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda obj: client.create(res, obj), objs))


def namespace(client: Client, name: str) -> None:
    if client.get_or_none(NAMESPACES, name) is None:
        client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def fill_running_gangs(
    client: Client, shape: dict[str, Any], fraction: float, gang_size: int = 8, ns: str = "running"
) -> int:
    """Bind whole-node pods, in gangs of `gang_size`, to a random `fraction` of the nodes (created
    with spec.nodeName: they need no scheduling, kwok runs them); the number of GPUs they use."""
    rnd = random.Random(13)
    used = [n for n in nodes_from_shape(shape) if rnd.random() < fraction]
    namespace(client, ns)
    pods, gpus = [], 0
    for i, node in enumerate(used):
        gang, member = divmod(i, gang_size)
        size = min(gang_size, len(used) - gang * gang_size)
        node_gpus = node["status"]["allocatable"][GPU]
        pod = raw_pod(f"run-{gang}-{member}", node_gpus, f"run-{gang}", size, node["metadata"]["name"])
        pod["metadata"]["namespace"] = ns
        del pod["metadata"]["uid"], pod["status"]
        pods.append(pod)
        gpus += int(node_gpus)
    create_all(client, PODS, pods)
    return gpus


def total_gpus(shape: dict[str, Any]) -> int:
    return sum(int(n["status"]["allocatable"][GPU]) for n in nodes_from_shape(shape))


# -- kube-scheduler throughput ------------------------------------------------------------------

# kube-scheduler's own view of where a pod's time goes (histograms: sum and count)
ALGORITHM = ("scheduler_scheduling_algorithm_duration_seconds", "")
ATTEMPT = "scheduler_scheduling_attempt_duration_seconds"
SCHEDULED = 'profile="default-scheduler",result="scheduled"'


def scheduler_metrics(cluster: LocalCluster) -> str:
    """Mean scheduling-algorithm (filter, extenders, scores) and whole-attempt time per pod, and
    the attempts that did not schedule (retries), from the scheduler started for this run."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # kube-scheduler's self-signed cert
    ctx.load_cert_chain(cluster.pki_dir / "admin.crt", cluster.pki_dir / "admin.key")
    text = httpx.get(f"https://127.0.0.1:{cluster.ports.scheduler}/metrics", verify=ctx, timeout=10).text
    sums: dict[tuple[str, str], float] = {}
    counts: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        for suffix, into in (("_sum", sums), ("_count", counts)):
            if name.endswith(suffix):
                into[(name.removesuffix(suffix), labels.rstrip("}"))] = float(value)

    def mean_ms(key: tuple[str, str]) -> float:
        return 1000 * sums.get(key, 0.0) / counts[key] if counts.get(key) else 0.0

    failed = sum(v for (n, labels), v in counts.items() if n == ATTEMPT and labels != SCHEDULED)
    return (
        f"algorithm {mean_ms(ALGORITHM):.1f} ms, attempt {mean_ms((ATTEMPT, SCHEDULED)):.1f} ms, "
        f"{failed:.0f} attempts that did not schedule"
    )


@dataclass(frozen=True, slots=True)
class Mode:
    """How gangs reach their nodes: GangPolicy.spec.bindMode (None: no gangplugin at all, the
    pods' gang labels mean nothing to kube-scheduler) and whether kube-scheduler calls the
    extender. Ungate runs without it: kube-scheduler binds pinned pods alone."""

    name: str
    extender: bool
    bind_mode: str | None = None


NONE = Mode("none", extender=False)
EXTENDER = Mode("extender", extender=True, bind_mode="Extender")
UNGATE = Mode("ungate", extender=False, bind_mode="Ungate")


def gated(client: Client, ns: str) -> int:
    """Pods of `ns` still behind a scheduling gate."""
    return sum(1 for p in client.list(PODS, ns, limit=500)["items"] if p["spec"].get("schedulingGates"))


def delete_pods(client: Client, ns: str) -> None:
    # a delete-collection of 2,000 pods can outlast the client's timeout: ask until none is left
    while client.list(PODS, ns)["items"]:
        with contextlib.suppress(httpx.TimeoutException):
            client.request("DELETE", f"/api/v1/namespaces/{ns}/pods", params={"gracePeriodSeconds": "0"})


def scheduling_throughput(
    cluster: LocalCluster,
    client: Client,
    mode: Mode,
    pods_total: int,
    gang_size: int,
    ns: str,
    *,
    from_submission: bool = False,
) -> tuple[float, str]:
    """Seconds until `pods_total` one-GPU pods in gangs of `gang_size` are all bound, in `mode`;
    and kube-scheduler's own metrics. By default the pods are created while kube-scheduler is
    stopped and the clock starts when it starts (its binding rate alone; Ungate pods are pinned
    as they are created, before it starts). `from_submission`: kube-scheduler runs throughout
    and the clock starts at the first create, so creating, gating and pinning are timed too,
    for every mode alike."""
    namespace(client, ns)
    if from_submission:
        cluster.restart("kube-scheduler", extender=mode.extender)
    else:  # hold scheduling while the pods are created: stop the scheduler, create, start it
        cluster.stop_process("kube-scheduler", signal.SIGTERM)
    pods = []
    for i in range(pods_total):
        # named as a Job's pods are (<job>-<index>): a gang's members sort together
        gang, member = divmod(i, gang_size)
        p = raw_pod(f"gang-{gang}-{member}", 1, f"gang-{gang}", gang_size)
        p["metadata"]["namespace"] = ns
        if mode.bind_mode == "Ungate":  # what the gang check stamps on a Kueue gang's pods
            p["metadata"]["labels"][BIND_MODE_LABEL] = "Ungate"
        del p["metadata"]["uid"], p["status"]
        pods.append(p)
    t0 = time.monotonic()
    create_all(client, PODS, pods)
    created = time.monotonic() - t0
    notes = f"created in {created:.1f} s; "
    if not from_submission:
        if mode.bind_mode == "Ungate":
            while left := gated(client, ns):
                if time.monotonic() - t0 > 600:
                    raise RuntimeError(f"{mode.name}: {left} of {pods_total} pods still gated after 600s")
                time.sleep(0.5)
            notes += f"all pinned {time.monotonic() - t0:.1f} s after the first; "
        t0 = time.monotonic()
        cluster.restart("kube-scheduler", extender=mode.extender)
    while True:
        # only the unbound pods come back, so polling costs the cluster little
        left = len(client.list(PODS, ns, field_selector="spec.nodeName=")["items"])
        if not left:
            break
        if time.monotonic() - t0 > 600:
            raise RuntimeError(f"{mode.name}: {left} of {pods_total} pods still unbound after 600s")
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    if from_submission:
        notes += f"the last bound {elapsed - created:.1f} s after the last was created; "
    metrics = notes + scheduler_metrics(cluster)
    delete_pods(client, ns)
    return elapsed, metrics


# -- pods Running, seen by a watch --------------------------------------------------------------


class RunningPods:
    """Watches one namespace's pods from now on; `wait(n)` returns when `n` of them have been
    seen Running (the watch's time, so polling adds nothing)."""

    def __init__(self, client: Client, ns: str) -> None:
        self.client, self.ns = client, ns
        self.running: dict[str, float] = {}
        self._stop = threading.Event()
        rv = client.list(PODS, ns, limit=1)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                for event in self.client.watch(PODS, self.ns, resource_version=rv, timeout_seconds=5):
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    phase = (obj.get("status") or {}).get("phase")
                    if event["type"] in ("ADDED", "MODIFIED") and phase == "Running":
                        self.running.setdefault(obj["metadata"]["name"], time.monotonic())

    def wait(self, n: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while len(self.running) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(self.running)} of {n} pods Running in {self.ns} after {timeout}s")
            time.sleep(0.1)
        self._stop.set()
        return max(self.running.values())


def spread(samples: list[float], fmt: Callable[[float], str] = "{:.2f}".format) -> str:
    """`median (min-max)` of repeated measurements."""
    return f"{fmt(statistics.median(samples))} ({fmt(min(samples))}-{fmt(max(samples))})"
