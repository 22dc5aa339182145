"""One soak, from an empty local cluster to its report: install the queues, start the observer,
the stream and the fault injector; after the stream's time, stop faults and submissions, drain
(every gang left runs, nothing waits), check what the drain must leave clean, delete everything,
check again, and report.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gangplugin.kube.client import CLUSTER_QUEUES, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.resources import PODGROUPS, TRAINING_PLANS
from gangplugin.localcluster.cluster import LocalCluster, Ports
from tests.soak import queues
from tests.soak.apiwatch import Eyes
from tests.soak.faults import KINDS, Injector, plan_faults
from tests.soak.observer import Observer, Violation, workload_brief
from tests.soak.slowproxy import PORT_OFFSET, SlowProxy
from tests.soak.stream import Stream, draw

DRAIN_LIFETIME = 10.0  # while draining, a gang runs this long before it is deleted
SETTLE = 15.0  # drained, then this quiet before the leftovers are judged
DRAIN_STALL = 300.0  # draining, no waiting gang came to run for this long: stuck


@dataclass(frozen=True, slots=True)
class SoakConfig:
    minutes: float
    seed: int
    faults: int  # at least this many (at least one of each kind)
    kinds: tuple[str, ...] = KINDS
    drain_minutes: float = 30.0  # at most; a drain fails sooner when it stops progressing
    # seconds between gang submissions, on average: about 80% of the GB200 fleet's GPU-time
    mean_gap: float = 12.0


@contextlib.contextmanager
def soak_cluster(
    state_dir: Path, base: int, seed: int, log: Callable[[str], None] = print, keep: bool = False
) -> Iterator[tuple[LocalCluster, SlowProxy]]:
    """The soak's local cluster (the GenericWorkload gate on, so every bind mode runs; two
    gangplugin replicas, as always), its `gangplugin serve` replicas talking to kube-apiserver
    through the slow proxy (off until its fault); stopped afterwards unless `keep` (then they
    talk to kube-apiserver directly again: the proxy goes with this process)."""
    ports = Ports(base)
    proxy = SlowProxy(ports.at(PORT_OFFSET), ports.apiserver, seed)
    proxy.start()
    cluster = LocalCluster(state_dir, ports, log=log, generic_workload=True)
    try:
        cluster.up()
        via = proxy.kubeconfig(cluster.kubeconfig, state_dir / "gangplugin-via-proxy.kubeconfig")
        cluster = LocalCluster(state_dir, ports, log=log, gangplugin_args=(f"--kubeconfig={via}",))
        cluster.restart("gangplugin")  # every replica, with the proxy's kubeconfig from now on
        yield cluster, proxy
    finally:
        if keep:
            LocalCluster(state_dir, ports, log=log, gangplugin_args=()).restart("gangplugin")
        else:
            cluster.down(quiet=True)
        proxy.close()


def run_soak(
    cluster: LocalCluster, proxy: SlowProxy, config: SoakConfig, log: Callable[[str], None] = print
) -> dict[str, Any]:
    seconds = config.minutes * 60
    client = Client.from_kubeconfig(cluster.kubeconfig)
    queues.install(client, seconds + config.drain_minutes * 60)
    observer = Observer(namespaces=queues.TEAMS)
    eyes = Eyes(cluster.kubeconfig, observer)
    eyes.start()
    gangs, bursts = draw(config.seed, seconds, config.mean_gap)
    plan = plan_faults(config.seed, seconds, config.faults, config.kinds)
    log(f"soak: {config.minutes:g} min, seed {config.seed}: {len(gangs)} gangs, {len(plan)} faults planned")
    stream = Stream(client, gangs, bursts, observer, config.seed, log)
    injector = Injector(cluster, client, observer, stream, plan, log, proxy)
    t0 = time.time()
    stream.start_at = injector.start_at = t0
    stream.start()
    injector.start()
    try:
        seen = 0
        while (left := t0 + seconds - time.time()) > 0:
            time.sleep(min(30.0, left))
            log(f"  {time.time() - t0:.0f}s: {_progress(observer, stream, injector)}")
            for v in observer.violations[seen:]:
                log(f"  VIOLATION [{v.check}] {v.message}")
            seen = len(observer.violations)
        stream.submitting.clear()
        log("soak: stream stopped; healing every fault")
        injector.heal_all()
        _drain(client, observer, stream, config.drain_minutes * 60, log)
    finally:
        stream.stop.set()
        stream.join(timeout=30)
        injector.stop.set()
    _clean(client, observer, stream, eyes, log)
    injector.close()
    observer.finish(time.time())
    eyes.close()
    client.close()
    summary = observer.summary()
    summary["gangs"]["drawn"] = len(gangs)
    return {
        "minutes": config.minutes,
        "seed": config.seed,
        "faults": dict(sorted(injector.injected.items())),
        "faultsSkipped": dict(sorted(injector.skipped.items())),
        "faultsPlanned": len(plan),
        "gangs": summary["gangs"],
        "plainPods": stream.plain_created,
        "violations": [v.to_json() for v in observer.violations],
        "p50RunningSeconds": summary["p50RunningSeconds"],
        "p95RunningSeconds": summary["p95RunningSeconds"],
        "releaseSeconds": summary["releaseSeconds"],
        "rss": summary["rss"],
        "processExits": dict(sorted(injector.exits.items())),
        "faultLog": injector.records,
        "observerFeed": {f.kind: {"relists": f.relists, "errors": f.errors} for f in eyes.feeds},
        "streamErrors": stream.errors,
    }


def _progress(observer: Observer, stream: Stream, injector: Injector) -> str:
    s = observer.summary()["gangs"]
    return (
        f"{len(stream.submitted)} gangs live, {s['run']} ran, {s['requeues']} requeues, "
        f"{len(observer.waiting())} not running; {sum(injector.injected.values())} faults; "
        f"{len(observer.violations)} violations"
    )


def _drain(
    client: Client, observer: Observer, stream: Stream, budget: float, log: Callable[[str], None]
) -> None:
    """Until nothing waits (gangs run `DRAIN_LIFETIME` and go while some gang waits), quiet for
    `SETTLE`: then what is left is judged. A drain in which no waiting gang gets to run for
    `DRAIN_STALL` seconds (or that outlasts `budget`) is a violation: the cluster empties, so
    every gang must come to run."""
    stream.drain_lifetime = DRAIN_LIFETIME
    started = time.time()
    quiet_since: float | None = None
    progress_at, said = started, started
    before = set(observer.waiting())
    while True:
        waiting = observer.waiting()
        now = time.time()
        if set(before) - set(waiting):
            progress_at = now
        before = set(waiting)
        # running gangs make room only while some gang waits; the last ones stay to be judged
        (stream.reaping.set if waiting else stream.reaping.clear)()
        quiet_since = (quiet_since or now) if not waiting else None
        if quiet_since is not None and now - quiet_since >= SETTLE:
            observer.check_drained(now)
            log(f"soak: drained in {now - started:.0f}s ({len(stream.running_gangs())} gangs running)")
            return
        stalled, late = now - progress_at >= DRAIN_STALL, now - started >= budget
        if stalled or late:
            break
        if now - said >= 30:
            said = now
            log(f"  draining: {len(waiting)} gangs not running, {len(stream.running_gangs())} running")
        time.sleep(1)
    briefs = [workload_brief(observer.workloads[k]) for k in waiting if k in observer.workloads]
    why = f"none of them came to run for {DRAIN_STALL:.0f}s" if stalled else f"the drain took {budget:.0f}s"
    observer.report(
        Violation(
            "not-drained",
            time.time(),
            f"{len(waiting)} gangs",
            f"{len(waiting)} gangs still not running {now - started:.0f}s after the stream stopped ({why}), "
            f"on a cluster whose running gangs are deleted {DRAIN_LIFETIME:.0f}s after they start: "
            f"{', '.join(waiting[:10])}",
            tuple(briefs[:10]),
        )
    )


def _clean(
    client: Client, observer: Observer, stream: Stream, eyes: Eyes, log: Callable[[str], None]
) -> None:
    """Delete every gang, pod and the plan; then nothing of them may be left."""
    for _ in range(5):
        with contextlib.suppress(ApiError, httpx.HTTPError):
            stream.delete_all()
            queues.remove_plan(client)
            break
        time.sleep(2)
    deadline = time.time() + 180
    while time.time() < deadline:
        with contextlib.suppress(ApiError, httpx.HTTPError):
            left = [p for team in queues.TEAMS for p in client.list(PODS, team)["items"]]
            left += [w for team in queues.TEAMS for w in client.list(WORKLOADS, team)["items"]]
            cq = client.get(CLUSTER_QUEUES, queues.PLAN)
            fed = (cq["metadata"].get("annotations") or {}).get("gangplugin.io/plan-quota", "{}") != "{}"
            if not left and not fed:
                break
        time.sleep(1)
    time.sleep(5)  # the observer's watches show the same
    podgroups = (
        [pg for team in queues.TEAMS for pg in client.list(PODGROUPS, team)["items"]]
        if _serves_podgroups(client)
        else []
    )
    observer.check_cleaned(
        time.time(),
        podgroups=podgroups,
        cluster_queues=client.list(CLUSTER_QUEUES)["items"],
        plans=client.list(TRAINING_PLANS)["items"],
    )
    log("soak: cleaned up")


def _serves_podgroups(client: Client) -> bool:
    try:
        client.request("GET", "/apis/scheduling.k8s.io/v1beta1")
        return True
    except ApiError:
        return False


def text_report(report: dict[str, Any]) -> str:
    """The report as a person reads it: faults, gangs, figures, then every violation with its
    evidence, one object a line."""
    g = report["gangs"]
    lines = [
        f"soak {report['minutes']:g} min, seed {report['seed']}",
        "faults injected: "
        + ", ".join(f"{k} {v}" for k, v in report["faults"].items())
        + f" ({sum(report['faults'].values())} of {report['faultsPlanned']} planned"
        + (f"; skipped {report['faultsSkipped']}" if report["faultsSkipped"] else "")
        + ")",
        f"gangs: {g['submitted']} submitted, {g['run']} ran, {g['requeued']} requeued "
        f"({g['requeues']} requeues), "
        f"{g['rejected']} rejected, {g['neverRan']} never ran; evictions {g['evictions']}; "
        f"{report['plainPods']} plain pods",
        f"submission -> Running: p50 {report['p50RunningSeconds']} s, p95 {report['p95RunningSeconds']} s; "
        f"first pod bound -> last: {report['releaseSeconds']}",
        "gangplugin serve RSS: "
        + "; ".join(
            f"{name} {f.get('firstMiB')} -> peak {f.get('peakMiB')} MiB over {f.get('seconds')} s"
            for name, f in report["rss"].items()
        ),
        "processes that exited and were started again: "
        + (", ".join(f"{k} {v}" for k, v in report["processExits"].items()) or "none"),
        f"violations: {len(report['violations'])}",
    ]
    for v in report["violations"]:
        lines.append(f"- [{v['check']}] {v['at']} {v['message']}")
        lines.extend(f"    {json.dumps(e, sort_keys=True)}" for e in v["evidence"])
    return "\n".join(lines)
