"""Training plans: offering search over a long horizon, and how fast quota follows a block boundary.

Run: .venv/bin/python bench/plans.py   (part 2 starts its own local cluster; GANGPLUGIN_PORT_BASE
picks its ports, default 48000; BENCH_PLANS_SEARCH_ONLY=1 skips it)

1. Offering search over a 182-day horizon: 20 pools (4 instance types x 5 zones, 64 instances
   each) and 500 existing reservations of 1-16 instances spread over the horizon (fixed seed);
   two requests (one that fits in one block early, one of whole pools that needs the search to
   walk the horizon and try two-block splits). p50/p99 of repeated searches, and the ratio to a
   baseline of 10 reservations measured in the same run (target: under 100 ms).
2. Reaction delay of the TrainingPlan controller on the local cluster: three plans with
   back-to-back short blocks (test overrides) feed one ClusterQueue; at each of the six block
   boundaries the time from the boundary until the ClusterQueue's nominalQuota says the new
   value, seen by polling it every 10 ms (target: within 2 s).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.support

from gangplugin.core.offerings import (
    CapacityInventory,
    CapacityPool,
    CapacityReservation,
    OfferingRequest,
    search_offerings,
)
from gangplugin.core.plans import TargetResource
from gangplugin.kube.client import CLUSTER_QUEUES, Client, Resource
from gangplugin.kube.resources import RESOURCE_FLAVORS, TRAINING_PLANS
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports
from tests.support.objects import capacity_block, cluster_queue, resource_flavor, training_plan

NOW = datetime(2026, 11, 20, 10, 7, tzinfo=UTC)
HORIZON = timedelta(days=182)
TYPES = ("ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p4d.24xlarge", "ml.trn1.32xlarge")
ZONES = tuple(f"us-east-1{z}" for z in "abcdf")
P5 = TYPES[0]


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


def request(count: int, days: int, target: TargetResource) -> OfferingRequest:
    return OfferingRequest(
        target_resource=target,
        duration_hours=days * 24,
        start_after=NOW,
        end_before=NOW + HORIZON,
        now=NOW,
        instance_type=P5,
        instance_count=count,
    )


CASES = {
    # Fits in one block early on.
    "16 x p5, 14 days": request(16, 14, TargetResource.TRAINING_JOB),
    # Whole pools for a month: blocked by reservations almost everywhere, so the search walks the
    # horizon and tries splits into two blocks.
    "64 x p5, 30 days": request(64, 30, TargetResource.HYPERPOD_CLUSTER),
}


def search_times(inv: CapacityInventory, req: OfferingRequest, runs: int) -> tuple[list[float], str]:
    found = "+".join(str(len(o.blocks)) for o in search_offerings(inv, req)) or "none"
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        search_offerings(inv, req)
        out.append(time.perf_counter() - start)
    return sorted(out), found


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def bench_search() -> None:
    print(f"offering search, {len(TYPES) * len(ZONES)} pools, 182-day horizon")
    print(
        f"{'request':<17} {'reservations':>12} {'offerings (blocks)':>19} {'p50':>9} {'p99':>9} {'ratio':>6}"
    )
    worst = 0.0
    for name, req in CASES.items():
        base = None
        for n in (10, 500):
            times, found = search_times(inventory(n), req, 30)
            p50, p99 = statistics.median(times), pct(times, 0.99)
            base = base or p50
            if n == 500:
                worst = max(worst, p99)
            ms50, ms99 = p50 * 1000, p99 * 1000
            print(f"{name:<17} {n:>12} {found:>19} {ms50:>7.2f}ms {ms99:>7.2f}ms {p50 / base:>5.1f}x")
    print(f"target with 500 reservations: p99 < 100 ms: {'ok' if worst < 0.1 else 'OVER'}")


def queue_objects(name: str) -> list[tuple[Resource, dict[str, Any]]]:
    """A flavor of the P5 nodes and a ClusterQueue of no GPUs of its own, both named `name`."""
    cq = cluster_queue(name, name, 0, cpu=None, memory=None)
    return [(RESOURCE_FLAVORS, resource_flavor(name, P5)), (CLUSTER_QUEUES, cq)]


def plan(name: str, cq: str, start: datetime, end: datetime) -> dict[str, Any]:
    return training_plan(name, cq, [capacity_block(start, end)], lead="1s")


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
