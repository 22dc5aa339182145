"""Placement time against cluster size and gang size, and the topology model's memory.

Run: .venv/bin/python bench/placement.py

Clusters shaped like HyperPod GB200: 4-GPU nodes, 18 per UltraServer, 4 UltraServers per
network-node-layer-3, 4 of those per layer-2, 2 zones (fixed seed). About 30% of the GPUs
(and some cpu/memory) are taken by bound pods of 1-4 GPUs. Gangs of 1-GPU pods (8 cpu,
64Gi) that prefer one UltraServer, so every gang size fits every cluster and the engine has
to spread the large ones. Build = `build_snapshot` from node and pod records; place = one
`place` call on the built snapshot (best of several runs; spares are computed once per
snapshot and cached, as between binds in the extender). Growth compares the time at N
nodes with the time at 500 nodes, against N log N / (500 log 500).

Then the shapes of large GB200 jobs: a 1,024-pod gang in slices of 16 (each slice in one
UltraServer, the gang preferring one network-node-layer-1); three podsets placed jointly (a
1-pod launcher, 64 one-GPU and 64 two-GPU workers, in one network-node-layer-2); and the
replacement of 3 failed nodes under a running 64-pod gang at once (`recover`).
"""

from __future__ import annotations

import math
import random
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place, recover
from gangplugin.core.topology import DEFAULT_LEVELS, BoundPod, Node, Snapshot, build_snapshot

GPU = "nvidia.com/gpu"
CLUSTERS = (500, 2000, 5000)
GANGS = (8, 64, 512, 1024)
POLICY = PlacementPolicy(spares_per_ultraserver=1)
SHORT = {
    "topology.kubernetes.io/zone": "zone",
    "topology.k8s.aws/network-node-layer-1": "nn-l1",
    "topology.k8s.aws/network-node-layer-2": "nn-l2",
    "topology.k8s.aws/network-node-layer-3": "nn-l3",
    "topology.k8s.aws/ultraserver-id": "us",
    "kubernetes.io/hostname": "host",
}


def cluster(size: int, seed: int = 11) -> tuple[list[Node], list[BoundPod]]:
    rng = random.Random(seed)
    nodes = []
    for i in range(size):
        us = i // 18
        l3, l2 = us // 4, us // 16
        labels = {
            "topology.kubernetes.io/zone": f"us-east-1{'ab'[l2 % 2]}",
            "topology.k8s.aws/network-node-layer-1": f"nn-l1-{l2 // 4}",
            "topology.k8s.aws/network-node-layer-2": f"nn-l2-{l2}",
            "topology.k8s.aws/network-node-layer-3": f"nn-l3-{l3}",
            "topology.k8s.aws/ultraserver-id": f"us-{us:04d}",
            "kubernetes.io/hostname": f"hyperpod-i-{i:08x}",
            "node.kubernetes.io/instance-type": "ml.p6e-gb200.36xlarge",
        }
        alloc = {"cpu": 143_900, "memory": 884 * 2**30, "pods": 737, GPU: 4, "vpc.amazonaws.com/efa": 17}
        nodes.append(Node(f"hyperpod-i-{i:08x}", labels, alloc))
    pods: list[BoundPod] = []
    target, used = int(size * 4 * 0.3), 0
    free = [4] * size
    while used < target:
        n = rng.randrange(size)
        g = min(rng.randint(1, 4), free[n], target - used)
        if g == 0:
            continue
        free[n] -= g
        used += g
        pods.append(
            BoundPod(
                "team", f"p{len(pods)}", nodes[n].name, {GPU: g, "cpu": 30_000 * g, "memory": 150 * 2**30 * g}
            )
        )
    rng.shuffle(nodes)
    return nodes, pods


def gang(count: int) -> Gang:
    requests = {GPU: 1, "cpu": 8000, "memory": 64 * 2**30}
    return Gang((PodSet("main", count, requests, preferred_topology="topology.k8s.aws/ultraserver-id"),))


US, NN1, NN2 = "topology.k8s.aws/ultraserver-id", DEFAULT_LEVELS[1], DEFAULT_LEVELS[2]
WORKER = {GPU: 1, "cpu": 8000, "memory": 64 * 2**30}


def sliced_gang(count: int = 1024) -> Gang:
    ps = PodSet("main", count, WORKER, preferred_topology=NN1, slice_size=16, slice_required_topology=US)
    return Gang((ps,))


def joint_gang() -> Gang:
    return Gang(
        (
            PodSet("launcher", 1, {"cpu": 4000, "memory": 16 * 2**30}, required_topology=NN2),
            PodSet("small", 64, WORKER, required_topology=NN2),
            PodSet("large", 64, {GPU: 2, "cpu": 16000, "memory": 128 * 2**30}, required_topology=NN2),
        )
    )


def recovery_case(snap: Snapshot) -> Callable[[], object]:
    """A 64-pod gang preferring one UltraServer, bound; 3 of its nodes fail: `recover` them."""
    g = Gang((PodSet("main", 64, WORKER, preferred_topology=US),), "running")
    placed = place(snap, g, POLICY)
    assert placed.feasible
    for a in placed.assignments:
        snap.bind(BoundPod("bench", f"running-{a.index}", a.node, WORKER))
    failed = sorted({a.node for a in placed.assignments})[:3]
    return partial(recover, snap, g, placed.assignments, failed, POLICY)


def timed(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def main() -> None:
    builds: dict[int, float] = {}
    places: dict[tuple[int, int], float] = {}
    outcome: dict[tuple[int, int], str] = {}
    for size in CLUSTERS:
        nodes, pods = cluster(size)
        builds[size] = timed(partial(build_snapshot, nodes, pods, DEFAULT_LEVELS), 5)
        snap = build_snapshot(nodes, pods, DEFAULT_LEVELS)
        for count in GANGS:
            g = gang(count)
            result = place(snap, g, POLICY)
            outcome[size, count] = (
                (SHORT.get(result.level, result.level) if result.level else f"spread {len(result.domains)}")
                if result.feasible
                else "infeasible"
            )
            places[size, count] = timed(partial(place, snap, g, POLICY), 7)

    print("time in ms; 1-GPU pods preferring one UltraServer; ~30% of GPUs in use; 1 spare per UltraServer")
    print("(place column: time and where the gang landed: the one domain's level, or spread over k)")
    header = f"{'nodes':>6} {'build':>8} " + " ".join(f"{f'{c} pods':>20}" for c in GANGS)
    print(header)
    for size in CLUSTERS:
        cells = " ".join(f"{places[size, c] * 1e3:9.2f} {outcome[size, c]:>10}" for c in GANGS)
        print(f"{size:>6} {builds[size] * 1e3:8.1f} {cells}")

    print()
    print("growth vs 500 nodes: (time ratio) / (n log n ratio); <= 1 means no worse than n log n")
    print(f"{'nodes':>6} {'nlogn':>7} {'build':>8} " + " ".join(f"{f'{c} pods':>10}" for c in GANGS))
    base = CLUSTERS[0]
    for size in CLUSTERS[1:]:
        nlogn = (size * math.log(size)) / (base * math.log(base))
        ratios = " ".join(f"{places[size, c] / places[base, c] / nlogn:10.2f}" for c in GANGS)
        print(f"{size:>6} {nlogn:7.2f} {builds[size] / builds[base] / nlogn:8.2f} {ratios}")

    nodes, pods = cluster(5000)
    tracemalloc.start()
    snap = build_snapshot(nodes, pods, DEFAULT_LEVELS)
    place(snap, gang(8), POLICY)  # the kept fit counts of a pod shape, computed on first use
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print()
    print(
        f"topology model at 5000 nodes ({len(pods)} bound pods, {len(snap.domains)} domains): "
        f"{current / 2**20:.1f} MiB held, {peak / 2**20:.1f} MiB peak while building "
        "(node and pod records not counted)"
    )
    target = places[5000, 1024] * 1e3
    print(
        f"target: 1024 pods on 5000 nodes under 50 ms: {target:.1f} ms -> {'ok' if target < 50 else 'MISSED'}"
    )
    shapes()


def shapes() -> None:
    cases = {
        "1024 pods in slices of 16": (lambda snap: partial(place, snap, sliced_gang(), POLICY), 50.0),
        "3 podsets (1 + 64 + 64) jointly": (lambda snap: partial(place, snap, joint_gang(), POLICY), 100.0),
        "recover 3 failed nodes": (recovery_case, 10.0),
    }
    times: dict[tuple[str, int], float] = {}
    print()
    print("large-job shapes, time in ms (where it landed)")
    print(f"{'nodes':>6} " + " ".join(f"{name:>34}" for name in cases))
    for size in CLUSTERS:
        nodes, pods = cluster(size)
        cells = []
        for name, (make, _) in cases.items():
            snap = build_snapshot(nodes, pods, DEFAULT_LEVELS)
            fn = make(snap)
            result = fn()
            times[name, size] = timed(fn, 7)
            where = getattr(result, "level", None) or ("spread" if getattr(result, "domains", ()) else "")
            ok = "ok" if result.feasible else "infeasible"  # type: ignore[attr-defined]
            cells.append(f"{times[name, size] * 1e3:9.2f} {SHORT.get(where, where) or ok:>24}")
        print(f"{size:>6} " + " ".join(cells))
    print()
    print("growth vs 500 nodes: (time ratio) / (n log n ratio); <= 1 means no worse than n log n")
    base = CLUSTERS[0]
    for size in CLUSTERS[1:]:
        nlogn = (size * math.log(size)) / (base * math.log(base))
        ratios = " ".join(f"{times[n, size] / times[n, base] / nlogn:34.2f}" for n in cases)
        print(f"{size:>6} {ratios}")
    for name, (_, limit) in cases.items():
        t = times[name, 5000] * 1e3
        print(
            f"target: {name} on 5000 nodes under {limit:.0f} ms: {t:.1f} ms "
            f"-> {'ok' if t < limit else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
