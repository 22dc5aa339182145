"""Extender benchmarks: (a) filter/prioritize latency at 1,000 and 5,000 nodes, driven with real
payloads in-process; (b) scheduling throughput on a local cluster of 500 kwok nodes, 2,000 GPU
pods in gangs of 8, kube-scheduler with the extender against the same kube-scheduler without it.

Run: .venv/bin/python bench/extender.py [--latency-only]

(a) Nodes are raw Node dicts (GB200-shaped: 4 GPUs, 18 per UltraServer, 4 UltraServers per
network-node-layer-3) fed to the extender's cache as watch events; about a third of the nodes
carry a bound 4-GPU pod. Each call is timed from the request body bytes (orjson.loads) to the
response bytes (orjson.dumps) through `ExtenderHandlers`, with `NodeNames` listing every node,
as kube-scheduler sends with nodeCacheCapable and percentageOfNodesToScore 100.
- filter, gang member: a member of an 8-pod gang whose plan exists (the steady state);
- filter, first member: the call that plans the whole gang (once per gang);
- filter / prioritize, plain pod: a 1-GPU pod outside any gang.
(b) starts a separate local cluster (state .local/bench-extender, ports GANGPLUGIN_PORT_BASE or
30000) with a generated 500-node shape, and for each configuration stops kube-scheduler, creates
the 2,000 pods, starts kube-scheduler and times until every pod is bound.
"""

from __future__ import annotations

import contextlib
import os
import random
import ssl
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION
from gangplugin.extender.cache import ExtenderCache
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.server import ExtenderHandlers

GPU = "nvidia.com/gpu"
REPO = Path(__file__).resolve().parents[1]


def raw_node(i: int) -> dict[str, Any]:
    us, l3, l2 = i // 18, i // 72, i // 288
    name = f"gb200-{i:05d}"
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": f"zone-{i // 2500}",
                "topology.k8s.aws/network-node-layer-1": f"nn1-{i // 1152}",
                "topology.k8s.aws/network-node-layer-2": f"nn2-{l2}",
                "topology.k8s.aws/network-node-layer-3": f"nn3-{l3}",
                "topology.k8s.aws/ultraserver-id": f"us-{us}",
                "node.kubernetes.io/instance-type": "ml.p6e-gb200.36xlarge",
            },
        },
        "status": {
            "allocatable": {"cpu": "144", "memory": "1700Gi", "pods": "110", GPU: "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def raw_pod(
    name: str, gpus: int, gang: str | None = None, size: int = 0, node: str | None = None
) -> dict[str, Any]:
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


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49] * 1000, qs[98] * 1000


def latency(n_nodes: int, runs: int = 300) -> list[tuple[str, float, float]]:
    rnd = random.Random(7)
    cache = ExtenderCache()
    nodes = [raw_node(i) for i in range(n_nodes)]
    for node in nodes:
        cache.on_node("ADDED", None, node)
    for i in rnd.sample(range(n_nodes), n_nodes // 3):
        cache.on_pod(
            "ADDED", None, gang_pod_from_k8s(raw_pod(f"busy-{i}", 4, node=nodes[i]["metadata"]["name"]))
        )
    handlers = ExtenderHandlers(cache)
    names = [n["metadata"]["name"] for n in nodes]
    now = time.time()

    def timed(verb: str, pod: dict[str, Any], repeat: int) -> list[float]:
        body = orjson.dumps({"Pod": pod, "NodeNames": names})
        out = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            args = orjson.loads(body)
            result: Any = handlers.filter(args, now) if verb == "filter" else handlers.prioritize(args)
            orjson.dumps(result)
            out.append(time.perf_counter() - t0)
        return out

    rows = []
    firsts = []
    for g in range(runs // 10):  # each a fresh gang: the call that plans it
        firsts += timed("filter", raw_pod(f"g{g}-0", 4, f"g{g}", 8), 1)
        cache.drop(("bench", f"g{g}"))
    member = raw_pod("m-0", 4, "m", 8)
    timed("filter", member, 1)
    rows.append(("filter, gang member (plan exists)", *percentiles(timed("filter", member, runs))))
    rows.append(("filter, first member (plans the gang)", *percentiles(firsts)))
    solo = raw_pod("solo", 1)
    rows.append(("filter, plain GPU pod", *percentiles(timed("filter", solo, runs))))
    rows.append(("prioritize, gang member", *percentiles(timed("prioritize", member, runs))))
    rows.append(("prioritize, plain GPU pod", *percentiles(timed("prioritize", solo, runs // 3))))
    return rows


# -- (b) throughput on the local cluster ----------------------------------------------------------

SHAPE = {
    "apiVersion": "gangplugin.io/v1alpha1",
    "kind": "LocalClusterShape",
    "spec": {
        "groups": [
            {
                "name": "gb200",
                "instanceType": "ml.p6e-gb200.36xlarge",
                "ultraServerType": "ml.u-p6e-gb200x72",
                "availabilityZone": "us-east-1a",
                "ultraServerCount": 24,
                "instancesPerUltraServer": 18,
                "instancesPerNetworkLayer": [432, 144, 72],
                "allocatable": {"cpu": "144", "memory": "1700Gi", "pods": "110", GPU: "4"},
            },
            {
                "name": "p5",
                "instanceType": "ml.p5.48xlarge",
                "availabilityZone": "us-east-1b",
                "instanceCount": 68,
                "instancesPerNetworkLayer": [68, 34, 17],
                "allocatable": {"cpu": "192", "memory": "1900Gi", "pods": "110", GPU: "8"},
            },
        ]
    },
}
PODS_TOTAL, GANG_SIZE = 2000, 8


# kube-scheduler's own view of where a pod's time goes (histograms: sum and count)
ALGORITHM = ("scheduler_scheduling_algorithm_duration_seconds", "")
ATTEMPT = "scheduler_scheduling_attempt_duration_seconds"
SCHEDULED = 'profile="default-scheduler",result="scheduled"'


def scheduler_metrics(cluster: Any) -> str:
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


def throughput() -> list[tuple[str, float, float, str]]:
    from gangplugin.kube.client import NAMESPACES, PODS, Client
    from gangplugin.localcluster.cluster import LocalCluster, Ports

    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "30000"))
    shape = Path(tempfile.mkdtemp()) / "shape.yaml"
    shape.write_text(yaml.safe_dump(SHAPE))
    os.environ["GANGPLUGIN_SHAPE"] = str(shape)
    os.environ.setdefault("GANGPLUGIN_COMPONENTS", "extender")
    cluster = LocalCluster(REPO / ".local" / "bench-extender", Ports(base), log=lambda _m: None)
    cluster.up()
    client = Client.from_kubeconfig(cluster.kubeconfig)
    rows = []
    try:
        for label, with_extender in (("without extender", False), ("with extender", True)):
            ns = f"bench-{'ext' if with_extender else 'plain'}"
            client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            cluster.restart("kube-scheduler", kill=__import__("signal").SIGTERM, extender=with_extender)
            # hold scheduling while the pods are created: stop the scheduler, create, start it
            pid = cluster.running_processes()["kube-scheduler"]
            os.killpg(pid, 15)
            while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
                time.sleep(0.1)
            pods = []
            for i in range(PODS_TOTAL):
                # named as a Job's pods are (<job>-<index>): a gang's members sort together
                gang, member = divmod(i, GANG_SIZE)
                p = raw_pod(f"gang-{gang}-{member}", 1, f"gang-{gang}", GANG_SIZE)
                p["metadata"]["namespace"] = ns
                del p["metadata"]["uid"], p["status"]
                pods.append(p)
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda p: client.create(PODS, p), pods))
            t0 = time.monotonic()
            cluster.restart("kube-scheduler", extender=with_extender)
            while True:
                # only the unbound pods come back, so polling costs the cluster little
                left = len(client.list(PODS, ns, field_selector="spec.nodeName=")["items"])
                if not left:
                    break
                if time.monotonic() - t0 > 300:
                    raise RuntimeError(f"{label}: {left} of {PODS_TOTAL} pods still unbound after 300s")
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            rows.append((label, elapsed, PODS_TOTAL / elapsed, scheduler_metrics(cluster)))
            # a delete-collection of 2,000 pods can outlast the client's timeout: ask until none is left
            while client.list(PODS, ns)["items"]:
                with contextlib.suppress(httpx.TimeoutException):
                    client.request(
                        "DELETE", f"/api/v1/namespaces/{ns}/pods", params={"gracePeriodSeconds": "0"}
                    )
    finally:
        client.close()
        cluster.down(quiet=True)
    return rows


def main() -> None:
    print("(a) extender call latency, in-process, request bytes to response bytes")
    print(f"{'nodes':>6}  {'call':<40} {'p50 ms':>8} {'p99 ms':>8}")
    for n in (1000, 5000):
        for name, p50, p99 in latency(n):
            print(f"{n:>6}  {name:<40} {p50:>8.2f} {p99:>8.2f}")
    if "--latency-only" in sys.argv:
        return
    print(f"\n(b) scheduling throughput, 500 kwok nodes, {PODS_TOTAL} 1-GPU pods in gangs of {GANG_SIZE}")
    rows = throughput()
    for label, elapsed, rate, metrics in rows:
        print(f"  {label:<18} {elapsed:7.1f} s  {rate:7.1f} pods/s   per pod: {metrics}")
    print(f"  ratio with/without: {rows[1][2] / rows[0][2]:.2f} (target >= 0.7)")


if __name__ == "__main__":
    main()
