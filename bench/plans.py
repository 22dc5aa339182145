"""Training plans: offering search over a long horizon, and how fast quota follows a block boundary.

Run: .venv/bin/python bench/plans.py   (part 2 starts its own local cluster; GANGPLUGIN_PORT_BASE
picks its ports, default 48000; BENCH_PLANS_SEARCH_ONLY=1 skips it)

1. Offering search over a 182-day horizon: 20 pools (4 instance types x 5 zones, 64 instances
   each) and 500 existing reservations of 1-16 instances spread over the horizon (fixed seed),
   searching a 16-instance 14-day p5 block. p50/p99 of repeated searches, against a baseline of
   10 reservations measured in the same run (target: under 100 ms).
2. Reaction delay of the TrainingPlan controller on the local cluster: three plans with
   back-to-back short blocks (test overrides) feed one ClusterQueue; at each of the six block
   boundaries the time from the boundary until the ClusterQueue's nominalQuota says the new
   value, seen by polling it every 10 ms (target: within 2 s).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from gangplugin.core.offerings import (
    CapacityInventory,
    CapacityPool,
    CapacityReservation,
    OfferingRequest,
    search_offerings,
)
from gangplugin.core.plans import TargetResource
from gangplugin.core.timeutil import format_time
from gangplugin.kube.client import CLUSTER_QUEUES, Client, Resource
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports
from gangplugin.plans.controller import TRAINING_PLANS

NOW = datetime(2026, 11, 20, 10, 7, tzinfo=UTC)
HORIZON = timedelta(days=182)
TYPES = ("ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p4d.24xlarge", "ml.trn1.32xlarge")
ZONES = tuple(f"us-east-1{z}" for z in "abcdf")
P5 = TYPES[0]
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False)


def inventory(reservations: int, seed: int = 11) -> CapacityInventory:
    rng = random.Random(seed)
    pools = tuple(CapacityPool(t, z, 64) for t in TYPES for z in ZONES)
    minutes = int(HORIZON.total_seconds() // 60)
    taken = []
    for _ in range(reservations):
        pool = rng.choice(pools)
        start = NOW + timedelta(minutes=rng.randrange(0, minutes))
        length = timedelta(days=rng.randint(1, 14))
        taken.append(
            CapacityReservation(
                pool.availability_zone, rng.randint(1, 16), start, start + length, pool.instance_type
            )
        )
    return CapacityInventory(pools, tuple(taken))


REQUEST = OfferingRequest(
    target_resource=TargetResource.TRAINING_JOB,
    duration_hours=14 * 24,
    start_after=NOW,
    end_before=NOW + HORIZON,
    now=NOW,
    instance_type=P5,
    instance_count=16,
)


def search_times(inv: CapacityInventory, runs: int) -> tuple[list[float], int]:
    found = len(search_offerings(inv, REQUEST))
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        search_offerings(inv, REQUEST)
        out.append(time.perf_counter() - start)
    return sorted(out), found


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def bench_search() -> None:
    base, base_found = search_times(inventory(10), 50)
    times, found = search_times(inventory(500), 50)
    p50, p99 = statistics.median(times), pct(times, 0.99)
    print(f"offering search, {len(TYPES) * len(ZONES)} pools, 182-day horizon, 16 x p5 for 14 days")
    print(f"{'reservations':>12} {'offerings':>9} {'p50':>9} {'p99':>9}")
    print(
        f"{10:>12} {base_found:>9} {statistics.median(base) * 1000:>7.2f}ms {pct(base, 0.99) * 1000:>7.2f}ms"
    )
    print(f"{500:>12} {found:>9} {p50 * 1000:>7.2f}ms {p99 * 1000:>7.2f}ms")
    verdict = "ok" if p99 < 0.1 else "OVER"
    print(f"ratio 500/10 at p50 {p50 / statistics.median(base):.1f}x; target p99 < 100 ms: {verdict}")


def queue_objects(name: str) -> list[tuple[Resource, dict[str, Any]]]:
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": P5}},
    }
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": name, "resources": resources}]}
            ],
        },
    }
    return [(RESOURCE_FLAVORS, flavor), (CLUSTER_QUEUES, cq)]


def plan(name: str, cq: str, start: datetime, end: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": {
            "targetResource": "training-job",
            "clusterQueue": cq,
            "flavor": cq,
            "resourcesPerInstance": {"nvidia.com/gpu": 8},
            "testOverrides": {"anyBlockTimes": True, "terminationLead": "1s"},
            "reservedCapacity": [
                {
                    "instanceType": P5,
                    "instanceCount": 2,
                    "availabilityZone": "us-east-1b",
                    "startTime": format_time(start),
                    "endTime": format_time(end),
                }
            ],
        },
    }


def gpu_quota(client: Client, cq: str) -> str:
    obj = client.get(CLUSTER_QUEUES, cq)
    return str(obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"])


def bench_boundaries() -> None:
    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "48000"))
    cluster = LocalCluster(REPO / ".local" / "bench-plans", Ports(base), log=lambda _m: None)
    cluster.up()
    client = Client.from_kubeconfig(cluster.kubeconfig)
    delays: list[float] = []
    try:
        for res, obj in queue_objects("bench-plans"):
            client.create(res, obj)
        t0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
        # (boundary, the quota from then on): blocks of 4 s with 4 s gaps.
        boundaries: list[tuple[datetime, str]] = []
        for i in range(3):
            start = t0 + timedelta(seconds=8 * i)
            client.create(
                TRAINING_PLANS, plan(f"bench-plans-{i}", "bench-plans", start, start + timedelta(seconds=4))
            )
            boundaries += [(start, "16"), (start + timedelta(seconds=4), "0")]
        for at, value in boundaries:
            while datetime.now(UTC) < at:
                time.sleep(0.01)
            deadline = time.monotonic() + 10
            while gpu_quota(client, "bench-plans") != value and time.monotonic() < deadline:
                time.sleep(0.01)
            seen = datetime.now(UTC)
            delays.append(
                (seen - at).total_seconds() if gpu_quota(client, "bench-plans") == value else float("inf")
            )
    finally:
        client.close()
        cluster.down(quiet=True)
    print("TrainingPlan controller: nominalQuota change after a block boundary (6 boundaries)")
    print("  delays " + " ".join(f"{d * 1000:.0f}ms" for d in delays))
    worst = max(delays)
    print(
        f"  p50 {statistics.median(delays) * 1000:.0f} ms, max {worst * 1000:.0f} ms; "
        f"target within 2 s: {'ok' if worst <= 2 else 'OVER'}"
    )


def main() -> None:
    bench_search()
    if not os.environ.get("BENCH_PLANS_SEARCH_ONLY"):
        bench_boundaries()


if __name__ == "__main__":
    main()
