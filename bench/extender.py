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
30000) with a generated 500-node shape (`_cluster.hyperpod_shape`), and for each configuration
stops kube-scheduler, creates the 2,000 pods, starts kube-scheduler and times until every pod
is bound (`_cluster.scheduling_throughput`).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from typing import Any

import _cluster
import orjson
from _cluster import raw_pod

from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.server import ExtenderHandlers
from gangplugin.kube.client import Client

GPU = "nvidia.com/gpu"


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


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49] * 1000, qs[98] * 1000


def latency(n_nodes: int, runs: int = 300) -> list[tuple[str, float, float]]:
    rnd = random.Random(7)
    cache = GangReservations()
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

NODES, PODS_TOTAL, GANG_SIZE = 500, 2000, 8


def throughput() -> list[tuple[str, float, float, str]]:
    cluster = _cluster.start("bench-extender", _cluster.hyperpod_shape(NODES), "extender")
    client = Client.from_kubeconfig(cluster.kubeconfig)
    rows = []
    try:
        for label, mode in (("without extender", _cluster.NONE), ("with extender", _cluster.EXTENDER)):
            elapsed, metrics = _cluster.scheduling_throughput(
                cluster, client, mode, PODS_TOTAL, GANG_SIZE, f"bench-{mode.name}"
            )
            rows.append((label, elapsed, PODS_TOTAL / elapsed, metrics))
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
    print(f"\n(b) scheduling throughput, {NODES} kwok nodes, {PODS_TOTAL} 1-GPU pods in gangs of {GANG_SIZE}")
    rows = throughput()
    for label, elapsed, rate, metrics in rows:
        print(f"  {label:<18} {elapsed:7.1f} s  {rate:7.1f} pods/s   per pod: {metrics}")
    print(f"  ratio with/without: {rows[1][2] / rows[0][2]:.2f} (target >= 0.7)")


if __name__ == "__main__":
    main()
