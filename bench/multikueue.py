"""MultiKueue dispatchers compared on one machine: gangplugin's (Kueue's External mode) against
Kueue's AllAtOnce and Incremental, over a manager and two worker clusters running gangplugin's
gang check (`gangplugin/localcluster/multikueue.py`: worker-a has 2 GB200 UltraServers of 4
nodes, worker-b 2 of 6; every pod takes a whole 4-GPU node and every gang asks for one
UltraServer).

Per dispatcher, `--reps` repetitions (default 3) of:
- latency: `--singles` gangs (default 3) of 4 pods submitted one at a time on idle workers:
  manager submission -> the winning worker's copy of the Workload admitted (as the bench's own
  watch of that worker sees it);
- a burst: gangs of 6, 4, 4, 3 and 2 pods (19 of the 20 nodes) submitted at once; once each is
  admitted somewhere or refused everywhere it was sent, it reports the burst's latency (median
  over the gangs placed), the gangs placed, the copies that held quota in a worker that did not
  run the gang (and their GPUs), and the fragmentation it leaves: free nodes in UltraServers a
  gang already uses (fragments), and the largest gang that would still fit in one UltraServer.
Each figure is printed as the median (min-max) over the repetitions.

    .venv/bin/python bench/multikueue.py [--reps 3] [--singles 3] [-o json]

Ports: GANGPLUGIN_PORT_BASE (default 25000) for the manager, +1,000 and +2,000 for the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.support

from gangplugin.core.table import table
from gangplugin.kube.client import JOBS, NODES, PODS, WORKLOADS, Client
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, wait_all_synced
from gangplugin.kube.kueue_records import conditions, is_true
from gangplugin.localcluster.cluster import REPO
from gangplugin.localcluster.multikueue import DISPATCHERS, MultiKueueClusters
from tests.support.objects import indexed_job, trainer_container

NS = "team-a"
US = "topology.k8s.aws/ultraserver-id"
BURST = (6, 4, 4, 3, 2)
GPUS_PER_POD = 4
TIMEOUT = 600.0  # what must happen, on a loaded machine


def job(name: str, pods: int) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": {"gangplugin.io/required-topology": US}},
        "spec": {"restartPolicy": "Never", "containers": [trainer_container(GPUS_PER_POD, memory=None)]},
    }
    return indexed_job(name, NS, pods, template, labels={"kueue.x-k8s.io/queue-name": "training"})


def _refused(wl: Mapping[str, Any]) -> bool:
    """The worker said no: its gang check wrote why it waits, or its Kueue could not reserve."""
    checks = (wl.get("status") or {}).get("admissionChecks") or []
    if any(s.get("state") == "Pending" and s.get("message") for s in checks):
        return True
    quota = conditions(wl).get("QuotaReserved", {})
    return quota.get("status") == "False" and bool(quota.get("message"))


@dataclass
class Copy:
    quota_reserved: bool = False
    admitted_at: float | None = None  # monotonic, when the bench saw it admitted
    refused: bool = False
    domain: str | None = None  # the UltraServer its gang check admitted it to
    present: bool = True  # False once deleted (its worker was given up)


def _domain(wl: Mapping[str, Any]) -> str | None:
    for state in (wl.get("status") or {}).get("admissionChecks") or []:
        for update in state.get("podSetUpdates") or []:
            if US in (update.get("nodeSelector") or {}):
                return str(update["nodeSelector"][US])
    return None


@dataclass
class Watch:
    """Every worker's copies of the bench's gangs, as the bench's watches see them (monotonic time)."""

    copies: dict[str, dict[str, Copy]] = field(default_factory=dict)  # Workload name -> worker -> Copy
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, worker: str, old: Mapping[str, Any] | None, wl: Mapping[str, Any] | None) -> None:
        now = time.monotonic()
        with self.lock:
            if wl is None:
                assert old is not None
                gone = self.copies.get(old["metadata"]["name"], {}).get(worker)
                if gone is not None:
                    gone.present = False
                return
            c = self.copies.setdefault(wl["metadata"]["name"], {}).setdefault(worker, Copy())
            c.present = True
            c.quota_reserved |= is_true(wl, "QuotaReserved")
            if c.admitted_at is None and is_true(wl, "Admitted"):
                c.admitted_at = now
            c.refused = _refused(wl)
            c.domain = _domain(wl) or c.domain

    def of(self, name: str) -> dict[str, Copy]:
        with self.lock:
            return {
                w: Copy(c.quota_reserved, c.admitted_at, c.refused, c.domain, c.present)
                for w, c in self.copies.get(name, {}).items()
            }


def watch_workers(workers: Mapping[str, Client]) -> tuple[Watch, list[Informer[Any]], Dispatcher]:
    watch = Watch()
    dispatcher = Dispatcher("bench-watch")
    dispatcher.start()
    informers: list[Informer[Any]] = []
    for name, client in workers.items():
        inf: Informer[Any] = Informer(client, WORKLOADS, lambda o: o, namespace=NS, name=f"bench-{name}")
        inf.add_handler(lambda _k, old, new, w=name: watch.on(w, old, new), dispatcher)
        inf.start()
        informers.append(inf)
    assert wait_all_synced(informers, 120), "the bench's watches did not sync"
    return watch, informers, dispatcher


def wait(check: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


class Bench:
    def __init__(self, mk: MultiKueueClusters) -> None:
        self.mk = mk
        self.manager = Client.from_kubeconfig(mk.manager.kubeconfig)
        self.workers = {n: Client.from_kubeconfig(c.kubeconfig) for n, c in mk.workers.items()}
        self.watch, self.informers, self.dispatcher = watch_workers(self.workers)
        self.us_of = {
            n["metadata"]["name"]: n["metadata"]["labels"][US]
            for w, c in self.workers.items()
            for n in c.list(NODES)["items"]
        }
        self.us_size: dict[str, int] = {}
        for us in self.us_of.values():
            self.us_size[us] = self.us_size.get(us, 0) + 1

    def close(self) -> None:
        for inf in self.informers:
            inf.stop()
        self.dispatcher.stop()
        for c in (self.manager, *self.workers.values()):
            c.close()

    def workload_name(self, job_name: str) -> str:
        def found() -> str | None:
            for wl in self.manager.list(WORKLOADS, NS)["items"]:
                if any(o.get("name") == job_name for o in wl["metadata"].get("ownerReferences") or []):
                    return str(wl["metadata"]["name"])
            return None

        name: str = wait(found, f"the manager's Workload of {job_name}")
        return name

    def submit(self, pods: int) -> tuple[str, float]:
        name = f"mk-{uuid.uuid4().hex[:6]}-{pods}"  # random queue order among equals (Kueue's: by name)
        t0 = time.monotonic()
        self.manager.create(JOBS, job(name, pods))
        return name, t0

    def winner(self, wl: str) -> tuple[str, float] | None:
        """The worker the manager's Kueue recorded for the gang, and when the bench saw the
        copy there admitted (several copies may be admitted at once: the first one wins)."""
        found = self.manager.get_or_none(WORKLOADS, wl, NS) or {}
        worker = (found.get("status") or {}).get("clusterName")
        at = self.watch.of(wl).get(worker or "", Copy()).admitted_at
        return (worker, at) if worker and at is not None else None

    def decided(self, wl: str) -> bool:
        """Admitted somewhere, or refused by every worker that holds a copy (gangplugin's
        dispatcher sends it nowhere: it says so in its record)."""
        if self.winner(wl):
            return True
        copies = self.watch.of(wl)
        manager_wl = self.manager.get_or_none(WORKLOADS, wl, NS) or {}
        record = ((manager_wl.get("metadata") or {}).get("annotations") or {}).get("gangplugin.io/dispatch")
        if self.mk.dispatcher == DISPATCHERS["gangplugin"]:
            return (
                not copies
                and bool(record)
                and json.loads(record).get("summary", "").startswith("fits in no worker")
            )
        return bool(copies) and all(c.refused for c in copies.values())

    def clean(self) -> None:
        for j in self.manager.list(JOBS, NS)["items"]:
            self.manager.delete(JOBS, j["metadata"]["name"], NS)
        wait(
            lambda: (
                not self.manager.list(WORKLOADS, NS)["items"]
                and all(
                    not c.list(WORKLOADS, NS)["items"] and not c.list(PODS, NS)["items"]
                    for c in self.workers.values()
                )
            ),
            "every cluster empty of the bench's jobs",
        )

    def single(self, pods: int = 4) -> float:
        name, t0 = self.submit(pods)
        wl = self.workload_name(name)
        _, at = wait(lambda: self.winner(wl), f"{name} admitted in a worker")
        self.clean()
        return at - t0

    def burst(self) -> dict[str, float]:
        submitted = [self.submit(p) for p in BURST]
        names = {n: self.workload_name(n) for n, _ in submitted}
        wait(lambda: all(self.decided(wl) for wl in names.values()), "every gang of the burst decided")
        latencies, placed, losers, loser_gpus = [], 0, 0, 0
        used: dict[str, int] = {}  # UltraServer -> nodes the gangs admitted to it take
        for (name, t0), pods in zip(submitted, BURST, strict=True):
            wl = names[name]
            won = self.winner(wl)
            copies = self.watch.of(wl)
            if won is not None:
                placed += 1
                latencies.append(won[1] - t0)
                domain = copies[won[0]].domain
                assert domain is not None, f"{wl}: admitted in {won[0]} without an UltraServer"
                used[domain] = used.get(domain, 0) + pods
            for w, c in copies.items():
                if c.quota_reserved and (won is None or w != won[0]):
                    losers += 1
                    loser_gpus += pods * GPUS_PER_POD
        fragments, largest = self.fragmentation(used)
        self.clean()
        return {
            "burstLatencyP50": statistics.median(latencies) if latencies else float("nan"),
            "placed": placed,
            "loserCopiesWithQuota": losers,
            "loserGpus": loser_gpus,
            "fragmentNodes": fragments,
            "largestGangThatFits": largest,
        }

    def fragmentation(self, used: Mapping[str, int]) -> tuple[int, int]:
        """Free nodes in UltraServers some gang uses; the most free nodes of one UltraServer."""
        free = {us: size - used.get(us, 0) for us, size in self.us_size.items()}
        return sum(f for us, f in free.items() if used.get(us)), max(free.values())


def spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per dispatcher (default 3)")
    ap.add_argument("--singles", type=int, default=3, help="gangs submitted one at a time per repetition")
    ap.add_argument("--dispatchers", default=",".join(DISPATCHERS), help="which, comma-separated")
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters are stopped on the way out
    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "25000"))
    mk = MultiKueueClusters(REPO / ".local" / f"bench-multikueue-{base}", base)
    started = time.monotonic()
    mk.up()
    print(f"clusters up in {time.monotonic() - started:.0f}s", flush=True)
    results: dict[str, dict[str, list[float]]] = {}
    try:
        bench = Bench(mk)
        try:
            for label in args.dispatchers.split(","):
                mk.use(DISPATCHERS[label])
                out = results.setdefault(label, {})
                for rep in range(args.reps):
                    singles = [bench.single() for _ in range(args.singles)]
                    out.setdefault("latency", []).append(statistics.median(singles))
                    for k, v in bench.burst().items():
                        out.setdefault(k, []).append(v)
                    last = {k: v[-1] for k, v in out.items()}
                    print(f"{label} rep {rep + 1}: latency {singles}, burst {last}", flush=True)
        finally:
            bench.close()
    finally:
        mk.down()
    if args.output == "json":
        print(json.dumps(results, indent=2))
        return
    header = [
        "dispatcher",
        "latency s",
        "burst p50 s",
        f"placed of {len(BURST)}",
        "loser copies w/ quota",
        "loser GPUs",
        "fragment nodes",
        "largest gang fits",
    ]
    keys = [
        "latency",
        "burstLatencyP50",
        "placed",
        "loserCopiesWithQuota",
        "loserGpus",
        "fragmentNodes",
        "largestGangThatFits",
    ]
    print(table(header, [[label, *(spread(r.get(k, [])) for k in keys)] for label, r in results.items()]))


if __name__ == "__main__":
    main()
