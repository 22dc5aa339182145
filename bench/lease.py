"""The leader Lease's renewals during the heaviest admission passes we have, on an idle and on a
loaded machine: does the leader renew on time whatever the passes and the machine do?

Run: .venv/bin/python bench/lease.py [--nodes 5000] [--waiting 1000] [--burst 300] [--minutes 3]
     [--reps 2] [--load 4] [--baseline <checkout>]
(starts its own local cluster, `.local/bench-lease`, ports GANGPLUGIN_PORT_BASE or 30000, and
stops it at the end; `--nodes 500 --waiting 100 --minutes 1 --reps 1` checks it in minutes).
`--baseline` names another checkout of gangplugin (e.g. `git archive` of the commit before a
change): every repetition then runs the heavy and loaded phases with this checkout's `gangplugin
serve` and with that one's (its replicas rolled with PYTHONPATH set to it), on the same cluster.
`--control-plane-nice 0,-10` runs them again for each niceness of etcd and kube-apiserver (every
thread of theirs reniced), to tell a slow interpreter from a starved API server.

The cluster: `--nodes` kwok nodes shaped like HyperPod (bench/_cluster.py), 30% of them running
gangs (pods created bound), `gangplugin serve`'s replicas with leader election as `make up`
starts them. Phases, each `--minutes` long, measured on the leader's /metrics:
  quiet    nothing submitted: the baseline of this run.
  heavy    `--waiting` gangs of 18 4-GPU pods that must share one UltraServer wait with quota
           reserved (no UltraServer is free whole: the check holds them NoFit, and every pass
           decides them all again); at the phase's start a burst of `--burst` gangs of 8 1-GPU
           pods arrives at once (admitted among them), and all along a running pod is deleted
           and made again every second, so a pass follows another.
  loaded   the same, with `--load` x the cores of busy loops beside it (a CPU hog at load
           `--load` x cores on top of whatever else runs).
`heavy` and `loaded` are repeated `--reps` times. Per phase: renewals; renew latency (from when
a renewal was due, a retry period after the last try, to the API server's answer: the renew
deadline is 10 s) p50/p99/max, and of it how late the renewing code began (it waited for a core
or the GIL) p99; kube-apiserver's own time for the Lease PUTs p99; etcd's requests that took too
long (its own warnings, over 100 ms) and the longest; admission passes and their p50/max; the
machine's 1-minute load average at the end; leader changes (must be 0). Latency
figures are histogram bucket bounds ("<= 0.5" fell in the bucket ending at 0.5 s), p99 also as a
ratio to the quiet baseline's.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import ssl
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import _cluster
import admission
import httpx
import orjson
from _cluster import GB200, GPU
from scale import delete_workloads, histogram, quantile

from gangplugin.kube.client import PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.lease import LEASES
from gangplugin.kube.shape import ULTRASERVER
from gangplugin.localcluster.cluster import GANGPLUGIN_NAMESPACE, LocalCluster
from gangplugin.server.main import DEFAULT_COMPONENTS

RENEW = "gangplugin_leader_renew_latency_seconds"
WAKEUP = "gangplugin_leader_renew_wakeup_seconds"
PASS = "gangplugin_admission_pass_duration_seconds"
APISERVER = "apiserver_request_duration_seconds"
LEASE_PUT = ('group="coordination.k8s.io"', 'resource="leases"', 'verb="PUT"')
WAITING_NS, BURST_NS = "lease-waiting", "lease-burst"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--waiting", type=int, default=1000, help="gangs waiting with quota reserved")
    ap.add_argument("--burst", type=int, default=300, help="gangs submitted at once in each phase")
    ap.add_argument("--minutes", type=float, default=3.0, help="length of each phase")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of the heavy and loaded phases")
    ap.add_argument("--load", type=float, default=4.0, help="busy loops per core in the loaded phase")
    ap.add_argument("--baseline", help="another checkout whose gangplugin serve to measure alike")
    ap.add_argument(
        "--control-plane-nice", help="nicenesses of etcd and kube-apiserver to measure at, comma-separated"
    )
    return ap.parse_args()


# -- what the leader and the API server say -----------------------------------------------------


def _leader_port(cluster: LocalCluster) -> int:
    ca = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
    for n in (1, 2, 3):
        port = cluster.ports.gangplugin_replica(n)[0]
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=ca, timeout=10).text.startswith("leader"):
                return port
    raise RuntimeError("no gangplugin replica leads")


@dataclass(frozen=True, slots=True)
class Scrape:
    leader: str
    transitions: int
    gangplugin: str
    apiserver: str
    etcd_log: int  # bytes of etcd's log so far


def etcd_slow(cluster: LocalCluster, since: int) -> tuple[int, float]:
    """etcd's "took too long" warnings (requests over 100 ms) logged after byte `since`, and the
    longest of them in seconds."""
    with (cluster.log_dir / "etcd.log").open("rb") as log:
        log.seek(since)
        lines = [line for line in log.read().decode(errors="replace").splitlines() if "took too long" in line]
    longest = 0.0
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            longest = max(longest, _seconds(orjson.loads(line)["took"]))
    return len(lines), longest


def _seconds(go: str) -> float:
    """A Go duration as etcd logs it: 2.2s, 123.4ms, 1m2.5s."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
    i = 0
    while i < len(go):
        if go[i].isdigit() or go[i] == ".":
            number += go[i]
            i += 1
            continue
        unit = next(u for u in ("ms", "µs", "us", "ns", "h", "m", "s") if go.startswith(u, i))
        total += float(number) * units[unit]
        number, i = "", i + len(unit)
    return total


def scrape(cluster: LocalCluster, client: Client) -> Scrape:
    pki = cluster.pki_dir
    lease = client.get(LEASES, "gangplugin", GANGPLUGIN_NAMESPACE)["spec"]
    admin = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    api = httpx.get(f"https://127.0.0.1:{cluster.ports.apiserver}/metrics", verify=admin, timeout=30).text
    size = (cluster.log_dir / "etcd.log").stat().st_size
    return Scrape(
        lease["holderIdentity"], lease.get("leaseTransitions", 0), scrape_leader(cluster), api, size
    )


def _series(text: str, name: str, labels: tuple[str, ...]) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of the series of a labelled histogram that carry every
    one of `labels`, summed over the rest of their labels."""
    sums: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and all(label in line for label in labels):
            le = float(line.split('le="', 1)[1].split('"', 1)[0])
            sums[le] = sums.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return sorted(sums.items())


def _count(buckets: list[tuple[float, float]], before: list[tuple[float, float]]) -> int:
    return int(buckets[-1][1] - dict(before).get(buckets[-1][0], 0.0)) if buckets else 0


@dataclass(frozen=True, slots=True)
class Figures:
    phase: str
    renewals: int
    p50: float
    p99: float
    most: float
    wakeup_p99: float
    apiserver_p99: float
    etcd_slow: int
    etcd_longest: float
    passes: int
    pass_p50: float
    pass_max: float
    load: float
    leader_changes: int


def figures(phase: str, a: Scrape, b: Scrape, etcd: tuple[int, float]) -> Figures:
    r0, r1 = histogram(a.gangplugin, RENEW), histogram(b.gangplugin, RENEW)
    w0, w1 = histogram(a.gangplugin, WAKEUP), histogram(b.gangplugin, WAKEUP)
    p0, p1 = histogram(a.gangplugin, PASS), histogram(b.gangplugin, PASS)
    s0, s1 = (_series(x.apiserver, APISERVER, LEASE_PUT) for x in (a, b))
    if a.leader != b.leader:  # the new leader's histograms started afresh
        r0, w0, p0 = [], [], []
    passes = _count(p1, p0)
    return Figures(
        phase=phase,
        renewals=_count(r1, r0),
        p50=quantile(r1, r0, 0.5),
        p99=quantile(r1, r0, 0.99),
        most=quantile(r1, r0, 1.0),
        wakeup_p99=quantile(w1, w0, 0.99),
        apiserver_p99=quantile(s1, s0, 0.99) if _count(s1, s0) else float("nan"),
        etcd_slow=etcd[0],
        etcd_longest=etcd[1],
        passes=passes,
        pass_p50=quantile(p1, p0, 0.5) if passes else 0.0,
        pass_max=quantile(p1, p0, 1.0) if passes else 0.0,
        load=os.getloadavg()[0],
        leader_changes=b.transitions - a.transitions,
    )


# -- the work -------------------------------------------------------------------------------------


def waiting_gang(name: str) -> dict[str, Any]:
    """18 whole 4-GPU nodes in one UltraServer of 18: it waits while every UltraServer runs a pod."""
    wl = admission.workload(name, WAITING_NS)
    pod_set = wl["spec"]["podSets"][0]
    pod_set["count"] = _cluster.PER_ULTRASERVER
    pod_set["template"]["metadata"]["annotations"] = {"gangplugin.io/required-topology": ULTRASERVER}
    pod_set["template"]["spec"]["containers"][0]["resources"]["requests"][GPU] = "4"
    return wl


def queue(client: Client, ns: str) -> None:
    _cluster.namespace(client, ns)
    for res, obj in admission.queue_objects(ns, ["gang"], gangs=10**6):
        client.create(res, obj)


def submit(client: Client, objs: list[dict[str, Any]]) -> None:
    _cluster.create_all(client, WORKLOADS, objs)


def wait_held(cluster: LocalCluster, n: int, timeout: float = 1800) -> None:
    """Until the check holds `n` gangs waiting (its gauge, after a pass), or what it holds stops
    growing for long: a few may have found a free UltraServer."""
    deadline, last, since = time.monotonic() + timeout, -1.0, time.monotonic()
    while time.monotonic() < deadline:
        text = scrape_leader(cluster)
        held = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("gangplugin_waiting_gangs{")
        )
        if held >= n:
            return
        if held != last:
            last, since = held, time.monotonic()
        elif time.monotonic() - since > 120 and held > 0.9 * n:
            return
        time.sleep(2)
    raise RuntimeError(f"the check holds {last:.0f} of {n} gangs waiting after {timeout:.0f}s")


def scrape_leader(cluster: LocalCluster) -> str:
    ca = str(cluster.pki_dir / "ca.crt")
    return httpx.get(f"https://127.0.0.1:{_leader_port(cluster)}/metrics", verify=ca, timeout=30).text


class Churn:
    """A running pod deleted and made again, one a second: capacity comes and goes, so the check
    passes over every waiting gang again and again."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.stop = threading.Event()
        self.pods = [p for p in client.list(PODS, "running")["items"] if p["spec"].get("nodeName")][:50]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.wait(1.0):
            pod = self.pods[i % len(self.pods)]
            i += 1
            meta = pod["metadata"]
            again = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
                "spec": {k: pod["spec"][k] for k in ("containers", "nodeName")},
            }
            with contextlib.suppress(httpx.HTTPError, ApiError, RuntimeError):  # RuntimeError: closed
                self.client.request(
                    "DELETE", PODS.path(meta["namespace"], meta["name"]), params={"gracePeriodSeconds": "0"}
                )
                for _ in range(50):
                    if self.client.get_or_none(PODS, meta["name"], meta["namespace"]) is None:
                        break
                    time.sleep(0.1)
                self.client.create(PODS, again)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def hog(per_core: float) -> Iterator[int]:
    """Busy loops, `per_core` x the cores of them, for as long as the block runs."""
    n = max(1, round(per_core * (os.cpu_count() or 1)))
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
            p.join()


def phase(name: str, cluster: LocalCluster, client: Client, args: argparse.Namespace, rep: int) -> Figures:
    burst = [
        admission.workload(f"b{rep}-{uuid.uuid4().hex[:6]}-{i:04d}", BURST_NS) for i in range(args.burst)
    ]
    before = scrape(cluster, client)
    churn = Churn(client) if name != "quiet" else None
    if churn is not None:
        submit(client, burst)
    time.sleep(args.minutes * 60)
    after = scrape(cluster, client)
    if churn is not None:
        churn.close()
        delete_workloads(client, BURST_NS)
    return figures(name, before, after, etcd_slow(cluster, before.etcd_log))


def row(f: Figures, base: Figures) -> str:
    ratio = f.p99 / base.p99 if base.p99 else float("nan")
    return (
        f"{f.phase:<16} {f.renewals:>8} {f.p50:>7.2f} {f.p99:>7.2f} {ratio:>6.1f}x {f.most:>7.2f} "
        f"{f.wakeup_p99:>9.2f} {f.apiserver_p99:>9.2f} {f.etcd_slow:>6} {f.etcd_longest:>7.2f} "
        f"{f.passes:>7} {f.pass_p50:>7.2f} "
        f"{f.pass_max:>7.1f} {f.load:>6.1f} {f.leader_changes:>8}"
    )


HEADER = (
    f"{'phase':<16} {'renewals':>8} {'p50 s':>7} {'p99 s':>7} {'/quiet':>7} {'max s':>7} "
    f"{'wakeup99':>9} {'apisrv99':>9} {'etcd>':>6} {'etcdmax':>7} {'passes':>7} {'pass50':>7} "
    f"{'passmax':>7} {'load1':>6} {'leader±':>8}"
)


def switch(cluster: LocalCluster, checkout: str | None, waiting: int) -> None:
    """Every gangplugin replica rolled to `checkout`'s code (None: this one's), and the check
    holding the waiting gangs again."""
    if checkout:
        os.environ["PYTHONPATH"] = checkout
    else:
        os.environ.pop("PYTHONPATH", None)
    cluster.restart("gangplugin")
    wait_held(cluster, waiting)


def renice(cluster: LocalCluster, nice: int) -> None:
    """Every thread of etcd and kube-apiserver at `nice` (threads they make later inherit it)."""
    for name in ("etcd", "kube-apiserver"):
        pid = cluster.running_processes()[name]
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def main() -> None:
    args = parse()
    builds = {"this": None, **({"base": args.baseline} if args.baseline else {})}
    nices = [int(n) for n in args.control_plane_nice.split(",")] if args.control_plane_nice else [None]
    shape = _cluster.hyperpod_shape(args.nodes)
    t0 = time.monotonic()
    cluster = _cluster.start("bench-lease", shape, ",".join(DEFAULT_COMPONENTS))
    client = Client.from_kubeconfig(cluster.kubeconfig)
    rows: list[Figures] = []
    try:
        _cluster.fill_running_gangs(client, shape, 0.3)
        admission.setup(client, cluster, GB200)
        queue(client, WAITING_NS)
        queue(client, BURST_NS)
        print(f"{args.nodes} nodes, 30% running, ready in {time.monotonic() - t0:.0f} s", flush=True)
        print(HEADER, flush=True)
        base = phase("quiet", cluster, client, args, 0)
        rows.append(base)
        print(row(base, base), flush=True)
        submit(client, [waiting_gang(f"w-{i:04d}") for i in range(args.waiting)])
        wait_held(cluster, args.waiting)
        for rep in range(args.reps):
            for nice in nices:
                if nice is not None:
                    renice(cluster, nice)
                for label, checkout in builds.items():
                    if len(builds) > 1:
                        switch(cluster, checkout, args.waiting)
                    tag = label if nice is None else f"{label}{nice:+d}"
                    rows.append(phase(f"heavy/{tag}", cluster, client, args, rep))
                    print(row(rows[-1], base), flush=True)
                    with hog(args.load):
                        rows.append(phase(f"loaded/{tag}", cluster, client, args, rep))
                    print(row(rows[-1], base), flush=True)
    finally:
        client.close()
        cluster.down(quiet=True)
    print(f"\nmedian (min-max) over {args.reps} repetitions; the quiet baseline p99 <= {base.p99:.2f} s")
    tags = [b if n is None else f"{b}{n:+d}" for n in nices for b in builds]
    for name in (f"{p}/{t}" for t in tags for p in ("heavy", "loaded")):
        got = [f for f in rows if f.phase == name]
        print(
            f"  {name:<16} renew p99 {_cluster.spread([f.p99 for f in got])} s, "
            f"max {_cluster.spread([f.most for f in got])} s (goal: p99 < 2 s), leader changes "
            f"{sum(f.leader_changes for f in got)} (goal: 0), "
            f"pass max {_cluster.spread([f.pass_max for f in got])} s"
        )
    print(f"renewals per phase p50 {statistics.median(f.renewals for f in rows):.0f}")


if __name__ == "__main__":
    main()
