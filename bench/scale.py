"""gangplugin at HyperPod scale: a local cluster of 5,000 kwok nodes (GB200 UltraServers of 18
4-GPU nodes under three network layers, a pool of 8-GPU P5 nodes) with about 30% of its GPUs
used by running gangs (pods created bound), and what gangplugin costs there.

Run: .venv/bin/python bench/scale.py [--nodes 500 --nodes 5000] [--reps 3] [--quick]
(one cluster at a time, state .local/bench-scale, ports GANGPLUGIN_PORT_BASE or 30000;
`--nodes 500 --quick` is a check in a few minutes).

(a) at every size: the binding rate for 2,000 1-GPU pods in gangs of 8, per bind mode
    (`_cluster.Mode`: Extender, kube-scheduler calling the extender; Ungate, pods gated at
    creation and pinned by gangplugin, kube-scheduler without the extender), against the same
    kube-scheduler without any extender (`_cluster.scheduling_throughput`), each timed from the
    first pod's creation to the last bind with kube-scheduler running throughout: creating,
    gating and pinning are inside the clock for every mode alike.
At the largest size:
(b) Kueue admission rate with the gang check against a no-op check (bench/admission.py's runs,
    Workloads without pods), and the check's own decision time per gang with 1,000 Workloads
    submitted at once, from gangplugin's /metrics (gangplugin_admission_decision_duration_seconds
    and its CPU time, ..._decision_cpu_seconds: the difference is time spent waiting for a core;
    bucket bounds, so a p99 of "<= 5 ms" means it fell in the bucket ending there).
(c) `gangplugin serve`'s peak and current resident memory (/proc VmHWM, VmRSS) and CPU seconds
    after (a) and (b), its time from process start to /readyz 200 when restarted there, and
    its memory again after (d).
(d) submission to all pods Running for one Job of 64, 512 and 1,024 1-GPU pods through Kueue and
    the gang check, per bind mode (a GangPolicy with that bindMode; kube-scheduler with the
    extender for Extender, without for Ungate), against the same Job without a queue
    (kube-scheduler alone, no gang).
Each figure is the median (min-max) of --reps repetitions, printed next to its target.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.support

import _cluster
import admission
import httpx
from _cluster import GB200, Mode, spread

from gangplugin.kube.client import JOBS, WORKLOADS, Client
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from gangplugin.kube.shape import ULTRASERVER
from gangplugin.localcluster.cluster import LocalCluster
from tests.support.kube import wait_active
from tests.support.objects import admission_check, gang_policy, indexed_job, trainer_container

USED = 0.3  # share of the nodes running gangs before the bench starts
MODES: dict[str, Mode] = {m.name: m for m in (_cluster.EXTENDER, _cluster.UNGATE)}
STATE = "bench-scale"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, action="append", help="cluster sizes (default 500 and 5000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each measurement (default 3)")
    ap.add_argument("--pods", type=int, default=2000, help="pods of the throughput runs (a)")
    ap.add_argument("--workloads", type=int, default=300, help="Workloads per admission run (b)")
    ap.add_argument("--waiting", type=int, default=1000, help="Workloads waiting at once (b)")
    ap.add_argument(
        "--waiting-timeout", type=float, default=600, help="seconds the waiting run lasts at most (b)"
    )
    ap.add_argument("--waiting-reps", type=int, default=3, help="repetitions of the waiting run (b)")
    ap.add_argument("--gangs", default="64,512,1024", help="gang sizes of (d)")
    ap.add_argument("--gang-reps", type=int, help="repetitions of (d) (default --reps)")
    ap.add_argument("--parts", default="abcd", help="which of (a)-(d) to run (b-d at the largest size)")
    ap.add_argument("--modes", default=",".join(MODES), help="bind modes of (a) and (d), comma-separated")
    ap.add_argument("--quick", action="store_true", help="fewer pods and Workloads: a check, not figures")
    args = ap.parse_args()
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        ap.error(f"--modes: unknown {', '.join(sorted(unknown))}; choose among {', '.join(MODES)}")
    args.modes = [MODES[m] for m in args.modes.split(",")]
    args.nodes = sorted(args.nodes or [500, 5000])
    args.gangs = [int(g) for g in args.gangs.split(",")]
    args.gang_reps = args.gang_reps or args.reps
    if args.quick:
        args.pods, args.workloads, args.waiting, args.reps, args.waiting_reps, args.gang_reps = (
            400,
            60,
            100,
            1,
            1,
            1,
        )
        args.gangs = [min(g, 128) for g in args.gangs[:2]]
    return args


def target(ok: bool, text: str) -> str:
    return f"[{'meets' if ok else 'MISSES'} target {text}]"


# -- (a) --------------------------------------------------------------------------------------------


def throughput(cluster: LocalCluster, client: Client, args: argparse.Namespace, nodes: int) -> None:
    print(f"(a) {nodes} nodes: {args.pods} 1-GPU pods in gangs of 8, first creation -> all bound")
    rates: dict[str, list[float]] = {}
    for rep in range(args.reps):
        for mode in (_cluster.NONE, *args.modes):
            elapsed, metrics = _cluster.scheduling_throughput(
                cluster, client, mode, args.pods, 8, f"tp-{mode.name}-{rep}", from_submission=True
            )
            rates.setdefault(mode.name, []).append(args.pods / elapsed)
            print(f"    rep {rep + 1} {mode.name:<9} {args.pods / elapsed:7.1f} pods/s  ({metrics})")
    base = rates[_cluster.NONE.name]
    print(f"  {'no extender':<22} {spread(base, '{:.1f}'.format)} pods/s")
    for mode in args.modes:
        ratios = [r / statistics.median(base) for r in rates[mode.name]]
        print(
            f"  {mode.name:<22} {spread(rates[mode.name], '{:.1f}'.format)} pods/s, ratio "
            f"{spread(ratios)} {target(statistics.median(ratios) >= 0.95, '>= 0.95')}"
        )


# -- (b) --------------------------------------------------------------------------------------------


def histogram(text: str, name: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of a Prometheus histogram in exposition text."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out.append((float(le), float(line.rsplit(" ", 1)[1])))
    return out


def quantile(buckets: list[tuple[float, float]], before: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the bucket holding quantile `q` of what was observed between the two
    scrapes."""
    counts = [(le, c - dict(before).get(le, 0.0)) for le, c in buckets]
    total = counts[-1][1]
    return next(le for le, c in counts if c >= q * total)


def gangplugin_metrics(cluster: LocalCluster) -> str:
    ca = str(cluster.pki_dir / "ca.crt")
    return httpx.get(f"https://127.0.0.1:{cluster.ports.gangplugin_health}/metrics", verify=ca).text


def delete_workloads(client: Client, ns: str) -> None:
    """Their promised capacity goes with them: the next runs start on the same free GPUs."""
    while client.list(WORKLOADS, ns)["items"]:
        # a delete-collection of many Workloads can outlast the client's timeout: ask again
        with contextlib.suppress(httpx.TimeoutException):
            client.request("DELETE", WORKLOADS.path(ns))
        time.sleep(0.5)


def admission_runs(cluster: LocalCluster, client: Client, args: argparse.Namespace) -> None:
    n = args.workloads
    print(f"(b) admission: {n} Workloads of 8 1-GPU pods, Kueue with our check vs a no-op check")
    admission.setup(client, cluster, GB200)
    noop, ours = [], []
    for rep in range(args.reps):
        noop.append(admission.noop_run(client, f"adm-noop-{rep}", n))
        delete_workloads(client, f"adm-noop-{rep}")
        ours.append(admission.run(client, f"adm-gang-{rep}", ["gang"], n, quiet=True)[0])
        delete_workloads(client, f"adm-gang-{rep}")
        print(f"    rep {rep + 1}: no-op {noop[-1]:.1f}/s, gang {ours[-1]:.1f}/s")
    ratios = [o / x for o, x in zip(ours, noop, strict=True)]
    print(f"  no-op check {spread(noop, '{:.1f}'.format)}/s; gang check {spread(ours, '{:.1f}'.format)}/s")
    print(f"  ratio {spread(ratios)} {target(statistics.median(ratios) >= 0.95, '>= 0.95')}")
    names = {
        "decision": "gangplugin_admission_decision_duration_seconds",
        "cpu": "gangplugin_admission_decision_cpu_seconds",
        "pass": "gangplugin_admission_pass_duration_seconds",
    }
    seen: dict[str, list[float]] = {f"{k} p{q}": [] for k in names for q in (50, 99)}
    ends = []
    for rep in range(args.waiting_reps):
        scraped = gangplugin_metrics(cluster)
        before = {k: histogram(scraped, n) for k, n in names.items()}
        rate, latency = admission.run(
            client, f"adm-wait-{rep}", ["gang"], args.waiting, quiet=True, timeout=args.waiting_timeout
        )
        print(f"    rep {rep + 1}: {rate:.1f} admitted/s")
        scraped = gangplugin_metrics(cluster)
        for k, n in names.items():
            for q in (50, 99):
                seen[f"{k} p{q}"].append(quantile(histogram(scraped, n), before[k], q / 100) * 1000)
        ends.append(sorted(latency)[int(0.99 * (len(latency) - 1))])
        delete_workloads(client, f"adm-wait-{rep}")

    def ms(key: str) -> str:
        return spread(seen[key], "{:.1f}".format)

    print(
        f"  {args.waiting} Workloads at once: decision per gang p50 <= {ms('decision p50')} ms, "
        f"p99 <= {ms('decision p99')} ms {target(statistics.median(seen['decision p99']) < 50, '< 50 ms')}"
    )
    print(f"    (its CPU time: p50 <= {ms('cpu p50')} ms, p99 <= {ms('cpu p99')} ms)")
    print(f"    (a whole pass, its snapshot refresh and writes included: p99 <= {ms('pass p99')} ms)")
    print(f"    (quota reserved -> check Ready, queueing included: p99 {spread(ends, '{:.1f}'.format)} s)")


# -- (c) --------------------------------------------------------------------------------------------


def proc_status(pid: int) -> tuple[float, float, float]:
    """VmHWM and VmRSS in MiB, and CPU seconds (user + system) of a process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024, cpu


def started_at(pid: int) -> float:
    """A process's start, wall clock (from its /proc start time in ticks after boot)."""
    btime = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime")
    )
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def memory(cluster: LocalCluster) -> str:
    pid = cluster.running_processes()["gangplugin"]
    hwm, rss, cpu = proc_status(pid)
    return (
        f"peak RSS {hwm:.0f} MiB, RSS {rss:.0f} MiB {target(hwm < 1024, '< 1 GiB')}, "
        f"{cpu:.0f} CPU seconds over {time.time() - started_at(pid):.0f} s"
    )


def resources(cluster: LocalCluster, args: argparse.Namespace) -> None:
    print("(c) gangplugin serve")
    print(f"  after (a), (b): {memory(cluster)}")
    ready, peaks = [], []
    for _ in range(args.reps):
        cluster.restart("gangplugin")
        now = time.time()
        pid = cluster.running_processes()["gangplugin"]
        ready.append(now - started_at(pid))
        peaks.append(proc_status(pid)[0])
    ok = target(statistics.median(ready) < 15, "< 15 s")
    print(
        f"  restarted: start -> /readyz 200 {spread(ready, '{:.1f}'.format)} s {ok}; "
        f"peak RSS then {spread(peaks, '{:.0f}'.format)} MiB"
    )


# -- (d) --------------------------------------------------------------------------------------------


def job(name: str, ns: str, pods: int, queue: str | None) -> dict[str, Any]:
    """An Indexed Job of `pods` 1-GPU trainers; through Kueue's `queue` (a gang) or straight to
    kube-scheduler."""
    template = {
        "metadata": {"annotations": {"gangplugin.io/preferred-topology": ULTRASERVER}} if queue else {},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"node.kubernetes.io/instance-type": GB200},
            "containers": [trainer_container(1)],
        },
    }
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return indexed_job(name, ns, pods, template, labels=labels, suspend=bool(queue))


def time_job(client: Client, ns: str, pods: int, queue: str | None) -> float:
    """Seconds from creating the Job to its last pod Running; the Job and its pods deleted after."""
    watch = _cluster.RunningPods(client, ns)
    t0 = time.monotonic()
    client.create(JOBS, job("train", ns, pods, queue))
    elapsed = watch.wait(pods, 600) - t0
    client.request("DELETE", JOBS.path(ns, "train"), body={"propagationPolicy": "Background"})
    while client.get_or_none(JOBS, "train", ns) is not None:
        time.sleep(0.2)
    _cluster.delete_pods(client, ns)
    return elapsed


def gang_queue(client: Client, mode: Mode, gpus: int) -> str:
    """A GangPolicy of `mode`'s bindMode, a gang check with it, a ClusterQueue with that check and
    room for `gpus`, and its LocalQueue in a namespace of the same name (returned)."""
    ns = f"start-{mode.name}"
    client.create(GANG_POLICIES, gang_policy(ns, readyTimeout="10m", bindMode=mode.bind_mode))
    client.create(ADMISSION_CHECKS, admission_check(ns, policy=ns))
    _cluster.namespace(client, ns)
    for res, obj in admission.queue_objects(ns, [ns], gangs=gpus // admission.GANG_SIZE):
        client.create(res, obj)
    wait_active(client, ns)
    return ns


def gang_start(cluster: LocalCluster, client: Client, args: argparse.Namespace) -> None:
    print("(d) one Job: submission -> all pods Running; a gang (Kueue, our check, bind mode) vs plain")
    queues = {mode.name: gang_queue(client, mode, max(args.gangs) * 2) for mode in args.modes}
    _cluster.namespace(client, "start-plain")
    for size in args.gangs:
        cluster.restart("kube-scheduler", extender=False)
        plain = [time_job(client, "start-plain", size, None) for _ in range(args.gang_reps)]
        print(f"  {size:>5} pods  plain     {spread(plain, '{:.1f}'.format)} s (kube-scheduler alone)")
        for mode in args.modes:
            cluster.restart("kube-scheduler", extender=mode.extender)
            ns = queues[mode.name]
            gang = [time_job(client, ns, size, ns) for _ in range(args.gang_reps)]
            ratio = statistics.median(gang) / statistics.median(plain)
            print(
                f"  {size:>5} pods  {mode.name:<9} {spread(gang, '{:.1f}'.format)} s, "
                f"{ratio:.2f}x plain" + (f" {target(ratio <= 1.5, '<= 1.5x')}" if size >= 1024 else "")
            )


def main() -> None:
    args = parse()
    for nodes in args.nodes:
        shape = _cluster.hyperpod_shape(nodes)
        t0 = time.monotonic()
        cluster = _cluster.start(STATE, shape, "admission,extender,ungater,webhook")
        up = time.monotonic() - t0
        client = Client.from_kubeconfig(cluster.kubeconfig)
        try:
            t0 = time.monotonic()
            total = _cluster.total_gpus(shape)
            # (a)'s one-GPU pods must all fit beside the running gangs (500 nodes: 2,200 GPUs)
            share = min(USED, max(0.0, 1 - 1.1 * args.pods / total)) if "a" in args.parts else USED
            used = _cluster.fill_running_gangs(client, shape, share)
            print(
                f"== {nodes} nodes ({total} GPUs): cluster up in {up:.0f} s; {used} GPUs "
                f"({used / total:.0%}) bound to running gangs in {time.monotonic() - t0:.0f} s"
                + ("" if share == USED else f" (not {USED:.0%}: room for (a)'s {args.pods} one-GPU pods)")
            )
            if "a" in args.parts:
                throughput(cluster, client, args, nodes)
            if nodes == args.nodes[-1]:
                if "b" in args.parts:
                    admission_runs(cluster, client, args)
                if "c" in args.parts:
                    resources(cluster, args)
                if "d" in args.parts:
                    gang_start(cluster, client, args)
                    print(f"  (c) after (d): {memory(cluster)}")
        finally:
            client.close()
            cluster.down(quiet=True)


if __name__ == "__main__":
    main()
