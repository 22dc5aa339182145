"""Offering search time against the number of reservations in the inventory.

Run: .venv/bin/python bench/offerings.py

Four p5 pools (zones a-d, 64 instances each) and N background reservations of 1-8 instances
spread over the next 60 days (fixed seed); their lengths shrink as N grows, so the booked
instance-hours (about 16% of the pools) stay the same and only the number of reservations changes.
Two requests per inventory, both in a 35-day window:

- "one block": 16 instances for 7 days (training-job), found as single blocks;
- "two blocks": 32 instances for 20 days (hyperpod-cluster), with every pool fully booked on
  days 15-16, so no single block fits and the search tries every split of the days.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

from gangplugin.core.offerings import (
    CapacityInventory,
    CapacityPool,
    CapacityReservation,
    OfferingRequest,
    search_offerings,
)
from gangplugin.core.plans import TargetResource

P5 = "ml.p5.48xlarge"
NOW = datetime(2026, 11, 20, 10, 7, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")


def inventory(reservations: int, seed: int = 7) -> CapacityInventory:
    rng = random.Random(seed)
    pools = tuple(CapacityPool(P5, z, 64) for z in ZONES)
    taken = []
    for _ in range(reservations):
        start = NOW + timedelta(minutes=rng.randrange(0, 60 * 24 * 60))
        length = timedelta(minutes=rng.randrange(24 * 60, 240 * 60) * 100 // reservations)
        taken.append(CapacityReservation(rng.choice(ZONES), rng.randint(1, 8), start, start + length, P5))
    return CapacityInventory(pools, tuple(taken))


def walled(inv: CapacityInventory) -> CapacityInventory:
    """`inv` with every pool fully booked on days 15-16."""
    wall = [CapacityReservation(z, 64, NOW + timedelta(days=15), NOW + timedelta(days=16), P5) for z in ZONES]
    return CapacityInventory(inv.pools, (*inv.reservations, *wall))


def request(count: int, hours: int, target: TargetResource) -> OfferingRequest:
    return OfferingRequest(
        target_resource=target,
        duration_hours=hours,
        start_after=NOW,
        end_before=NOW + timedelta(days=35),
        now=NOW,
        instance_type=P5,
        instance_count=count,
    )


CASES = {
    "one block": (request(16, 7 * 24, TargetResource.TRAINING_JOB), False),
    "two blocks": (request(32, 20 * 24, TargetResource.HYPERPOD_CLUSTER), True),
}


def time_search(inv: CapacityInventory, req: OfferingRequest) -> tuple[float, str]:
    found = search_offerings(inv, req)
    runs, start = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - start < 0.5:
        search_offerings(inv, req)
        runs += 1
    shape = "+".join(str(len(o.blocks)) for o in found) or "none"
    return (time.perf_counter() - start) / runs, shape


def main() -> None:
    sizes = (10, 100, 1000)
    print(f"{'case':<11} {'reservations':>12} {'offerings (blocks)':>19} {'time':>10} {'ratio':>7}")
    for name, (req, wall) in CASES.items():
        base = None
        for n in sizes:
            inv = walled(inventory(n)) if wall else inventory(n)
            seconds, shape = time_search(inv, req)
            base = base or seconds
            print(f"{name:<11} {n:>12} {shape:>19} {seconds * 1000:>8.2f}ms {seconds / base:>6.1f}x")


if __name__ == "__main__":
    main()
