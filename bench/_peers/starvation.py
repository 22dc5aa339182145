"""The starvation part (issue 33): a steady stream of 2-4 pod gangs, each required in one
UltraServer and running a known time, asking for a little more than the GB200 nodes hold, and
one gang of a whole UltraServer (18 pods) submitted mid-stream: how long until it runs, and the
GPU-hours its UltraServer left idle meanwhile (the price of making room for it).

Every system gets the same stream (the same seed). Each stream gang is deleted its run time
after all its pods run (as the stream part does); batch Jobs also declare that end, plus a
margin, in `activeDeadlineSeconds` (what a gang check that reserves reads; the bench's own
deletion comes first). On gangplugin, the bench's GangPolicy reserves after RESERVE_AFTER for
this part only (`spec.reservation`), and is put back as it was afterwards.

Run it alone at the smallest size that shows the effect (2 UltraServers):
  .venv/bin/python bench/peers.py --nodes 40 --reps 1 --parts starvation
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from _peers.figures import spread
from _peers.report import OURS, cell, ratio
from _peers.runs import WRITERS, Figures, Run, _again, _created
from _peers.systems import GANG_POLICY, ensure
from _peers.watch import Seen
from _peers.workload import PER_ULTRASERVER, Gang
from gangplugin.core.table import table
from gangplugin.kube.client import JOBS
from gangplugin.kube.resources import GANG_POLICIES

#: Most stream gangs run LONG seconds, every third SHORT ones (those can run beside a reserved
#: start); the declared deadline is the run time plus MARGIN.
LONG, SHORT, MARGIN = 60.0, 10.0, 30.0
#: How much of the GB200 nodes the stream asks for at once, on average.
DEMAND = 1.2
#: When the big gang comes (seconds into the stream), and the stream's length.
BIG_AT, STREAM = 40.0, 240.0
RESERVE_AFTER = "10s"


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    gang: Gang
    runtime: float


def stream(seed: int, nodes: int) -> list[Arrival]:
    """2-4 pod gangs (required in one UltraServer), at a steady rate that asks for DEMAND times
    the `nodes` (Little's law over the mean size and run time)."""
    rnd = random.Random(seed + 33)
    mean_runtime = (2 * LONG + SHORT) / 3
    rate = DEMAND * nodes / (3 * mean_runtime)  # gangs per second; 3 pods on average
    out: list[Arrival] = []
    for i in itertools.count():
        at = i / rate
        if at >= STREAM:
            return out
        pods = rnd.choice((2, 3, 4))
        out.append(Arrival(at, Gang(f"st{i:04d}-{pods}", pods), SHORT if i % 3 == 2 else LONG))
    raise AssertionError("unreachable")


def declared(run: Run, gang: Gang, runtime: float) -> list[tuple[Any, dict[str, Any]]]:
    """The gang's objects, its batch Jobs declaring how long they run."""
    objects = run.system.objects(gang)
    for res, obj in objects:
        if res is JOBS:
            obj["spec"]["activeDeadlineSeconds"] = int(runtime + MARGIN)
    return objects


def submit(run: Run, gang: Gang, runtime: float) -> None:
    for res, obj in declared(run, gang, runtime):
        _again(lambda res=res, obj=obj: _created(run.thread_client(), res, obj), f"create {gang.name}")


@contextmanager
def reserving(run: Run) -> Iterator[None]:
    """On gangplugin, the bench's GangPolicy reserves during the part."""
    if run.system.name != "gangplugin":
        yield
        return
    spec = {**GANG_POLICY["spec"], "reservation": {"afterWaiting": RESERVE_AFTER}}
    ensure(run.client, GANG_POLICIES, {**GANG_POLICY, "spec": spec})
    try:
        yield
    finally:
        ensure(run.client, GANG_POLICIES, GANG_POLICY)


def idle_gpu_seconds(pods: dict[str, Seen], nodes: dict[str, int], start: float, end: float) -> float:
    """The GPUs of `nodes` (name -> GPUs) no pod held, integrated from `start` to `end`."""
    busy = 0.0
    for s in pods.values():
        if s.node in nodes and s.bound is not None:
            held_from, held_to = max(s.bound, start), min(end if s.deleted is None else s.deleted, end)
            busy += max(0.0, held_to - held_from) * s.gpus
    return sum(nodes.values()) * (end - start) - busy


def starvation(run: Run, seed: int) -> Figures:
    arrivals = stream(seed, run.capacity.nodes)
    big = Gang("big-18", PER_ULTRASERVER)
    run.log(f"  starvation: {len(arrivals)} gangs over {STREAM:.0f} s, an 18-pod gang at {BIG_AT:.0f} s")
    gangs = {a.gang.name: a for a in arrivals}
    with reserving(run), run.watch() as w, ThreadPoolExecutor(WRITERS) as pool:
        t0 = time.monotonic()
        due = [(t0 + a.at, a.gang.name) for a in arrivals] + [(t0 + BIG_AT, big.name)]
        heapq.heapify(due)
        ends: list[tuple[float, str]] = []
        ending: set[str] = set()
        submitted: dict[str, float] = {}
        ran: float | None = None
        deadline = t0 + STREAM + run.limits.start
        while ran is None and time.monotonic() < deadline:
            now = time.monotonic()
            while due and due[0][0] <= now:
                name = heapq.heappop(due)[1]
                submitted[name] = time.monotonic()
                a = gangs.get(name)
                pool.submit(submit, run, a.gang if a else big, a.runtime if a else 3600.0)
            running = w.by_gang("running")
            for name, a in gangs.items():
                seen = running.get(name, {})
                if name in submitted and name not in ending and len(seen) >= a.gang.pods:
                    ending.add(name)
                    heapq.heappush(ends, (max(seen.values()) + a.runtime, name))
            while ends and ends[0][0] <= now:
                pool.submit(run.delete_one, gangs[heapq.heappop(ends)[1]].gang)
            if len(running.get(big.name, {})) >= big.pods:
                ran = max(running[big.name].values())
            time.sleep(0.2)
        pods = w.snapshot()
    nodes = {n.name: n.gpus for n in run.nodes()}
    us_of = {n.name: n.ultraserver for n in run.nodes()}
    where = {us_of[s.node] for s in pods.values() if s.gang == big.name and s.node and s.deleted is None}
    took = math.nan if ran is None else ran - submitted[big.name]
    idle = math.nan
    if ran is not None and len(where) == 1:
        domain = {n: g for n, g in nodes.items() if us_of[n] in where}
        idle = idle_gpu_seconds(pods, domain, submitted[big.name], ran) / 3600
    run.clear_all()
    run.log(
        f"  starvation: the 18-pod gang ran {took:.1f} s after submission (the stream ran "
        f"{STREAM:.0f} s), its UltraServer idle {idle:.2f} GPU-h meanwhile"
    )
    return {
        "starvation big s": took,
        "starvation idle GPU-h": idle,
        "starvation stream gangs": len(submitted) - 1,
    }


#: The part's rows: (label, figure key, format, the goal against every peer, its text).
ROWS = (
    (
        "starvation: 18-pod gang submission -> all Running s",
        "starvation big s",
        "{:.1f}",
        0.5,
        "<= 0.5x the best peer",
    ),
    (
        "starvation: its UltraServer's idle GPU-h meanwhile",
        "starvation idle GPU-h",
        "{:.2f}",
        1.0,
        "<= the best peer",
    ),
)


def render(results: dict[str, list[dict[str, Any]]]) -> str | None:
    """The part's own table (as the main one: median (min-max) per system, gangplugin's ratio to
    each peer, the goal), or None when no system ran it."""
    systems = [s for s in (OURS, *sorted(results)) if s in results]
    systems = list(dict.fromkeys(systems))
    peers = [s for s in systems if s != OURS]
    body = []
    for label, key, fmt, factor, goal in ROWS:
        samples = {s: [float(r.get(key, math.nan)) for r in results[s]] for s in systems}
        if all(math.isnan(v) for vs in samples.values() for v in vs):
            continue
        med = {s: spread(samples[s])[0] for s in systems}
        line = [label, *(cell(samples[s], fmt) for s in systems), *(ratio(med[OURS], med[p]) for p in peers)]
        judged = [p for p in peers if not math.isnan(med[p])]
        if OURS in med and judged and not math.isnan(med[OURS]):
            met = all(med[OURS] <= factor * med[p] for p in judged)
            line.append(f"{goal}: {'met' if met else 'MISSED'}")
        else:
            line.append(f"{goal}: not measured")
        body.append(line)
    if not body or OURS not in results:
        return None
    header = ["FIGURE", *(s.upper() for s in systems), *(f"/{p.upper()}" for p in peers), "GOAL"]
    return table(header, body)
