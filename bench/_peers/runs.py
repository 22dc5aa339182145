"""One repetition of the bench on one system's fresh cluster: the burst, the stream, the big gang,
recovery from failed nodes and preemption, in that order, each starting from an empty namespace.
Every time is from the submission of the gang's object (so gates, pins and pod-group creation are
inside it, for every system alike) to what the watch saw."""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from _peers import cpu, figures, hops, queues, workload
from _peers.figures import NodeView, PodView
from _peers.hops import KueueWatch
from _peers.systems import GB200, NS, Capacity, System
from _peers.watch import PodWatch, watching
from _peers.workload import Gang
from gangplugin.core.simulate import Job, Settings, replay
from gangplugin.kube import records
from gangplugin.kube.client import NODES, PODS, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.shape import INSTANCE_TYPE, ULTRASERVER
from gangplugin.localcluster.nodes import NOT_READY_LABEL
from tests.support.kube import wait_until
from tests.support.nodes import fail_nodes, heal_nodes

WRITERS = 16
Figures = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    settle: float = 30.0  # the burst has settled once nothing was created or bound for this long
    burst: float = 1800.0  # at most, for the burst to settle
    stream: float = 180.0  # seconds of arrivals
    recovery: float = 600.0  # at most, for a gang to run whole again after a node failure
    start: float = 900.0  # at most, for a gang to run (the big gang, the low-priority gangs)
    # at most, for the preemptor to run: a system that has not preempted in 5 minutes does not
    # (Volcano's waited out 900 s per repetition without evicting anything)
    preempt: float = 300.0
    big: int = 1024


@dataclass
class Run:
    system: System
    client: Client
    kubeconfig: Path
    capacity: Capacity
    log: Callable[[str], None]
    limits: Limits
    metrics: Sequence[queues.Endpoint] = ()  # the components' /metrics, for where a part queued
    processes: Mapping[str, int] = field(default_factory=dict)  # name -> pid, for CPU

    def cpu(self) -> tuple[float, dict[str, float]]:
        """Now, and the CPU seconds each process has spent so far (`cpu_figures` takes it)."""
        return time.monotonic(), cpu.sample(self.processes)

    def cpu_figures(self, part: str, before: tuple[float, dict[str, float]]) -> Figures:
        """The CPU seconds each process spent since `before` (logged too)."""
        wall = time.monotonic() - before[0]
        spent = cpu.difference(before[1], cpu.sample(self.processes))
        self.log(f"  {part} CPU: " + cpu.line(spent, wall, os.cpu_count() or 1))
        return {f"{part} cpu s": spent, f"{part} wall s": wall}

    def watch(self) -> Any:
        return watching(self.kubeconfig, NS, self.system.index_of)

    def kueue_watch(self) -> contextlib.AbstractContextManager[KueueWatch | None]:
        """The hop watch of a Kueue system (None for the others)."""
        return hops.kueue_watching(self.kubeconfig, NS) if self.system.kueue else contextlib.nullcontext()

    def hop_figures(
        self, part: str, k: KueueWatch | None, w: PodWatch, gangs: Sequence[Gang], submitted: dict[str, float]
    ) -> Figures:
        """Where the gangs' time went, hop by hop, and the writes to their Workloads (logged too)."""
        if k is None:
            return {}
        summary = hops.summary(k.hops(w, submitted), {g.name: g.pods for g in gangs if g.name in submitted})
        writes = k.writes([g.name for g in gangs if g.name in submitted])
        after = k.writes([g.name for g in gangs if g.name in submitted], after=True)
        since, step = summary["since submission"], summary["step"]
        self.log(
            f"  {part} hops (median s from submission / from the hop before, {summary['gangs']} gangs "
            "that ran): " + "; ".join(f"{h} {v:.2f}/{step.get(h, 0.0):.2f}" for h, v in since.items())
        )
        self.log(
            f"  {part}: writes to a Workload until Admitted (median): "
            + ", ".join(f"{who} {n:g}" for who, n in writes.items())
            + "; since, until the part ended: "
            + ", ".join(f"{who} {n:g}" for who, n in after.items())
        )
        return {
            f"{part} hops": summary,
            f"{part} workload writes": writes,
            f"{part} workload writes after": after,
        }

    # -- submitting and clearing ----------------------------------------------------------------

    def thread_client(self) -> Client:
        """A client of this thread's own: writers in parallel share no connection (one shared
        by threads broke mid-record under load: SSL bad record MAC)."""
        client: Client | None = getattr(_local, "client", None)
        if client is None or getattr(_local, "kubeconfig", None) != self.kubeconfig:
            client = _local.client = Client.from_kubeconfig(self.kubeconfig)
            _local.kubeconfig = self.kubeconfig
        return client

    def submit_one(self, gang: Gang) -> None:
        """Create the gang's objects; a create answered 409 was made by an attempt before (the
        API server timed out answering it), anything else transient is asked again."""
        for res, obj in self.system.objects(gang):
            _again(lambda res=res, obj=obj: _created(self.thread_client(), res, obj), f"create {gang.name}")

    def delete_one(self, gang: Gang) -> None:
        for res, obj in reversed(self.system.objects(gang)):
            name = obj["metadata"]["name"]
            _again(lambda res=res, name=name: self.thread_client().delete(res, name, NS), f"delete {name}")

    def submit(self, gangs: Sequence[Gang]) -> dict[str, float]:
        """Submit every gang at once (WRITERS at a time); when each submission began."""
        at: dict[str, float] = {}

        def one(g: Gang) -> None:
            at[g.name] = time.monotonic()
            self.submit_one(g)

        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(one, gangs))
        return at

    def clear(self, gangs: Iterable[Gang]) -> None:
        """Delete the gangs and wait until none of their pods is left."""
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(self.delete_one, gangs))
        deadline = time.monotonic() + 600
        while pods := self.client.list(PODS, NS, label_selector="bench.gangplugin.io/gang")["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pods)} bench pods still there 600 s after their gangs were deleted")
            time.sleep(1)

    def clear_all(self) -> None:
        """Every gang object of the bench's namespace deleted, whatever part made it (after a
        part failed), and the failed nodes healed."""
        kinds = {
            res.path(NS): res for n in (1, 24) for res, _ in self.system.objects(workload.gang("any", n))
        }
        # Their pods with them: a collection DELETE of batch/v1 Jobs orphans them by default.
        body = {"propagationPolicy": "Background"}
        for res in kinds.values():  # every object of each kind a gang is made of
            _again(
                lambda res=res: self.client.request("DELETE", res.path(NS), body=body),
                f"delete {res.path(NS)}",
            )
        labelled = self.client.list(NODES, label_selector=NOT_READY_LABEL)["items"]
        failed = [n["metadata"]["name"] for n in labelled]
        if failed:
            heal_nodes(self.client, *failed, timeout=120)
        self.clear([])

    def nodes(self) -> list[NodeView]:
        """The GB200 nodes as they are now."""
        out = []
        for n in self.client.list(NODES, label_selector=f"{INSTANCE_TYPE}={GB200}")["items"]:
            labels = n["metadata"]["labels"]
            usable = is_true(n, "Ready") and not n["spec"].get("unschedulable")
            gpus = int(n["status"]["allocatable"].get("nvidia.com/gpu", 0))
            out.append(NodeView(n["metadata"]["name"], labels.get(ULTRASERVER), gpus, usable))
        return out


_local = threading.local()


# The lifecycle's taints: a node that carries one takes no gang pod (theirs or ours).
LIFECYCLE_TAINTS = frozenset(f"node.kubernetes.io/{t}" for t in ("not-ready", "unreachable", "unschedulable"))


def usable(node: dict[str, Any]) -> bool:
    taints = node["spec"].get("taints") or []
    return is_true(node, "Ready") and not any(t.get("key") in LIFECYCLE_TAINTS for t in taints)


def wait_nodes_usable(client: Client, log: Callable[[str], None], timeout: float = 900.0) -> None:
    """Until every node is Ready and free of the lifecycle's taints. kwok makes thousands of
    nodes Ready over minutes: at 5,000 nodes on 2 cores 3,121 were still not Ready two minutes
    after the cluster was up, and a burst begun then measured that ramp, not the system."""
    t0 = time.monotonic()
    left: list[int] = []

    def all_usable() -> bool:
        nodes = client.list(NODES)["items"]
        left[:] = [sum(1 for n in nodes if not usable(n))]
        return left[0] == 0

    what = lambda: f"every node Ready and untainted ({left[0]} not yet)"  # noqa: E731
    wait_until(all_usable, timeout, what, interval=5.0)
    log(f"  every node Ready and untainted after {time.monotonic() - t0:.1f}s")


def _created(client: Client, res: Resource, obj: dict[str, Any]) -> None:
    try:
        client.create(res, obj)
    except ApiError as err:
        if err.status != 409:
            raise


def _again(call: Callable[[], object], what: str, attempts: int = 6) -> None:
    """`call`, asked again after a timeout, a broken connection, 429 or a 5xx."""
    for i in range(attempts):
        try:
            call()
            return
        except (httpx.TransportError, ApiError) as err:
            if isinstance(err, ApiError) and err.status != 429 and err.status < 500:
                raise
            if i == attempts - 1:
                raise RuntimeError(f"{what}: {err}") from err
            time.sleep(1 + i)


def pod_views(w: PodWatch) -> list[PodView]:
    return [
        PodView(s.gang, s.index, s.node if s.bound is not None else None, s.gpus)
        for s in w.snapshot().values()
        if s.deleted is None
    ]


def domains(w: PodWatch, us_of: dict[str, str | None]) -> dict[str, frozenset[str]]:
    """The UltraServers each gang's bound pods are in."""
    out: dict[str, set[str]] = {}
    for s in w.snapshot().values():
        if s.deleted is None and s.node is not None and (us := us_of.get(s.node)) is not None:
            out.setdefault(s.gang, set()).add(us)
    return {g: frozenset(v) for g, v in out.items()}


def phases(w: PodWatch, submitted: dict[str, float]) -> dict[str, float]:
    """Median seconds of each step a pod goes through, from its gang's submission: created,
    ungated (no scheduling gate left), bound, Running; where a system's time goes."""
    steps: dict[str, list[float]] = {"created": [], "ungated": [], "bound": [], "running": []}
    for s in w.snapshot().values():
        if s.gang not in submitted:
            continue
        for step, at in (
            ("created", s.created),
            ("ungated", s.ungated),
            ("bound", s.bound),
            ("running", s.running),
        ):
            if at is not None:
                steps[step].append(at - submitted[s.gang])
    return {k: statistics.median(v) for k, v in steps.items() if v}


def all_running(w: PodWatch, gangs: Sequence[Gang]) -> bool:
    running = w.by_gang("running")
    return all(len(running.get(g.name, {})) >= g.pods for g in gangs)


# -- (1) the burst --------------------------------------------------------------------------------


def burst(run: Run, seed: int) -> Figures:
    gangs = workload.burst(seed, run.capacity.nodes)
    pods = sum(g.pods for g in gangs)
    run.log(f"  burst: {len(gangs)} gangs, {pods} pods for {run.capacity.nodes} GB200 nodes")
    with run.watch() as w, run.kueue_watch() as kw:
        before = queues.sample(list(run.metrics))
        began = run.cpu()
        submitted = run.submit(gangs)
        last = max(submitted.values())

        def settled() -> bool:
            quiet = time.monotonic() - max(w.last_change(), last) > run.limits.settle
            # At 5,000 nodes Kueue's job reconciler left admitted gangs without pods for over a
            # minute while nothing else moved: quiet is not settled while one is owed its pods.
            owed = kw is not None and kw.admitted_without_pods(w.by_gang("created"))
            return (quiet and not owed) or all_running(w, gangs)

        end = w.wait(settled, run.limits.burst, "the burst to settle", poll=1.0)
        bound, running = w.by_gang("bound"), w.by_gang("running")
        nodes = run.nodes()
        quality = figures.quality(nodes, pod_views(w), gangs)
        live = domains(w, {n.name: n.ultraserver for n in nodes})
        steps = phases(w, submitted)
        w_created = w.by_gang("created")
        hop = run.hop_figures("burst", kw, w, gangs, submitted)
        queued = queues.difference(before, queues.sample(list(run.metrics)))
        spent = run.cpu_figures("burst", began)
    if queued:
        run.log("  burst queues (mean per item): " + queues.line(queued))
    starts = figures.start_times(gangs, submitted, running)
    partial = figures.partial_gangs({g.name: g.pods for g in gangs}, bound, end)
    rate = figures.binding_rate(submitted.values(), [t for per in bound.values() for t in per.values()])
    out: Figures = {
        "burst pods/s": rate,
        "burst gangs placed": quality.gangs_placed,
        "burst gangs": len(gangs),
        "in domain %": 100 * quality.in_domain_share,
        "fragmented UltraServers": quality.fragmented_ultraservers,
        "stranded GPUs": quality.stranded_gpus,
        "stranded for": quality.reference,
        "largest whole gang": quality.largest_whole,
        "burst partial gangs": len(partial),
        "burst start s": {str(k): v for k, v in figures.by_size(gangs, starts).items()},
        "burst pod steps s": steps,
        # per gang: submission -> its first pod created (the hop the Kueue systems differ in)
        "burst first pod created s": sorted(
            min(t.values()) - submitted[g] for g, t in w_created.items() if g in submitted
        ),
        **hop,
        "burst queues": queued,
        **spent,
    }
    run.log(
        f"  burst: {rate:.1f} pods/s, {quality.gangs_placed}/{len(gangs)} gangs placed, "
        f"{out['in domain %']:.0f}% in domain, {quality.fragmented_ultraservers} UltraServers "
        f"fragmented, {quality.stranded_gpus} GPUs stranded, {len(partial)} partial; a pod's median "
        "seconds from submission: " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
    )
    if run.system.name == "kueue-tas":
        created = {g: min(t.values()) for g, t in w_created.items()}
        out.update(simulator_agreement(run, gangs, submitted, created, live))
    run.clear(gangs)
    return out


def simulator_agreement(
    run: Run,
    gangs: Sequence[Gang],
    submitted: dict[str, float],
    started: dict[str, float],
    live: dict[str, frozenset[str]],
) -> Figures:
    """`gangctl simulate`'s best-fit baseline on the same nodes and the same burst: the gangs it
    puts in the same UltraServers as Kueue TAS did live (among gangs both placed). Replayed
    twice: in submission order, and in the order Kueue admitted them (`started`: when each
    gang's first pod was created; Kueue orders a queue by creation time, to the second, so
    gangs submitted within one second are taken in an order the submission does not say)."""
    nodes = [
        n for n in records.nodes_from_k8s(run.client.list(NODES)) if n.labels.get(INSTANCE_TYPE) == GB200
    ]
    nodes = [replace(n, ready=True) for n in nodes]
    t0 = min(submitted.values())
    by_submission = {g.name: submitted[g.name] - t0 for g in gangs}
    order = sorted(gangs, key=lambda g: (started.get(g.name, math.inf), submitted[g.name]))
    by_admission = {g.name: float(i) for i, g in enumerate(order)}
    out: Figures = {}
    for label, arrival in (("submission", by_submission), ("admission", by_admission)):
        jobs = [
            Job(
                g.name,
                arrival[g.name],
                g.pods,
                g.gpus,
                1e9,  # nothing ends during the burst
                required_topology=ULTRASERVER if g.required and not g.slice_size else None,
                preferred_topology=None if g.required or g.slice_size else ULTRASERVER,
                slice_size=g.slice_size or None,
                slice_required_topology=ULTRASERVER if g.slice_size else None,
            )
            for g in gangs
        ]
        sim = replay(nodes, jobs, "best-fit", Settings())
        predicted = {o.key: frozenset(o.domains) for o in sim.outcomes if o.wait is not None}
        both = {g: us for g, us in live.items() if g in predicted}
        same = figures.same_domains(both, predicted)
        differ = sorted(set(both) - set(same))
        run.log(
            f"  simulator best-fit in {label} order: {len(same)}/{len(both)} gangs in the same "
            "UltraServers as Kueue TAS live"
        )
        out[f"simulator {label} order"] = {
            "same": len(same),
            "compared": len(both),
            "simulator placed only": sorted(set(predicted) - set(live)),
            "live placed only": sorted(set(live) - set(predicted)),
            "differs": [f"{g}: live {sorted(both[g])}, simulated {sorted(predicted[g])}" for g in differ],
        }
    return out


# -- (2) the stream -------------------------------------------------------------------------------


def stream(run: Run, seed: int) -> Figures:
    arrivals = workload.stream(seed, run.capacity.nodes, run.limits.stream)
    run.log(f"  stream: {len(arrivals)} gangs over {run.limits.stream:.0f} s, each running 60 s")
    gangs = [a.gang for a in arrivals]
    runtime = {a.gang.name: a.runtime for a in arrivals}
    submitted: dict[str, float] = {}
    deleted: set[str] = set()
    with run.watch() as w, run.kueue_watch() as kw, ThreadPoolExecutor(WRITERS) as pool:
        t0 = time.monotonic()
        due = [(t0 + a.at, i) for i, a in enumerate(arrivals)]
        heapq.heapify(due)
        ends: list[tuple[float, str]] = []
        ending: set[str] = set()
        deadline = t0 + run.limits.stream + run.limits.start
        while (due or len(deleted) < len(submitted)) and time.monotonic() < deadline:
            now = time.monotonic()
            while due and due[0][0] <= now:
                g = arrivals[heapq.heappop(due)[1]].gang
                submitted[g.name] = time.monotonic()
                pool.submit(run.submit_one, g)
            running = w.by_gang("running")
            for g in gangs:
                seen = running.get(g.name, {})
                if g.name in submitted and g.name not in ending and len(seen) >= g.pods:
                    ending.add(g.name)
                    heapq.heappush(ends, (max(seen.values()) + runtime[g.name], g.name))
            while ends and ends[0][0] <= now:
                name = heapq.heappop(ends)[1]
                deleted.add(name)
                pool.submit(run.delete_one, next(g for g in gangs if g.name == name))
            time.sleep(0.2)
        end = time.monotonic()
        bound, running = w.by_gang("bound"), w.by_gang("running")
        hop = run.hop_figures("stream", kw, w, gangs, submitted)
    starts = figures.start_times(gangs, submitted, running)
    partial = figures.partial_gangs({g.name: g.pods for g in gangs if g.name in submitted}, bound, end)
    run.clear(gangs)
    run.log(f"  stream: {len(starts)}/{len(gangs)} gangs ran, {len(partial)} partial")
    return {
        "stream gangs ran": len(starts),
        "stream gangs": len(gangs),
        "stream partial gangs": len(partial),
        "stream start s": {str(k): v for k, v in figures.by_size(gangs, starts).items()},
        **hop,
    }


# -- (3) the big gang -----------------------------------------------------------------------------


def big(run: Run, _seed: int) -> Figures:
    """One gang of one-GPU pods (1,024, or three quarters of the GPUs on a cluster too small for
    it), preferring one UltraServer: submission to all Running."""
    pods = min(run.limits.big, run.capacity.gpus * 3 // 4)
    gang = Gang(f"big-{pods}", pods, gpus=1, required=False)
    with run.watch() as w, run.kueue_watch() as kw:
        began = run.cpu()
        submitted = run.submit([gang])
        t0 = submitted[gang.name]
        end = w.wait(lambda: all_running(w, [gang]), run.limits.start, f"the {pods}-pod gang to run")
        spent = run.cpu_figures("big", began)
        bound = w.by_gang("bound")
        hop = run.hop_figures("big", kw, w, [gang], submitted)
    run.clear([gang])
    spread = max(bound[gang.name].values()) - min(bound[gang.name].values())
    run.log(f"  big gang: {pods} pods Running {end - t0:.1f} s after submission")
    return {"big pods": pods, "big gang s": end - t0, "big bind spread s": spread, **hop, **spent}


# -- (4) recovery ---------------------------------------------------------------------------------


def recovery(run: Run, _seed: int) -> Figures:
    """From 1 failed node, then from 3 (see `recover`)."""
    return {**recover(run, 1), **recover(run, 3)}


def recover(run: Run, failed: int) -> Figures:
    """A 32-pod gang in two slices of 16 (each in one UltraServer) runs; the nodes of `failed` of
    its pods fail (indexes 0, 16, 1: with 3, two of one slice and one of the other); the time
    until its 32 pods run again, none on a failed node."""
    gang = workload.gang(f"rec{failed}", 32)
    with run.watch() as w:
        run.submit([gang])
        w.wait(lambda: all_running(w, [gang]), run.limits.start, "the 32-pod gang to run")
        at = {s.index: s.node for s in w.live(gang.name)}
        victims = sorted({n for i in (0, 16, 1)[:failed] if (n := at.get(i)) is not None})
        fail_nodes(run.client, *victims, reason="BenchNodeDown", message="made NotReady by bench/peers.py")
        t0 = time.monotonic()

        def whole() -> bool:
            pods = [s for s in w.live(gang.name) if s.running is not None and s.node not in victims]
            return len({s.index for s in pods}) >= gang.pods

        try:
            took = (
                w.wait(whole, run.limits.recovery, f"the gang to run whole after {failed} node(s) failed")
                - t0
            )
        except TimeoutError:
            took = math.nan
        moved = sum(1 for s in w.snapshot().values() if s.gang == gang.name and s.deleted is not None)
    heal_nodes(run.client, *victims, timeout=120)
    run.clear([gang])
    run.log(f"  recovery from {failed} failed node(s): {took:.1f} s, {moved} pods made again")
    return {f"recovery {failed} s": took, f"recovery {failed} pods moved": moved}


# -- (5) preemption -------------------------------------------------------------------------------


def preemption(run: Run, _seed: int) -> Figures:
    """Every UltraServer runs low-priority gangs of 2 pods (each required in one); a high-priority
    18-pod gang that requires one is submitted: the time until it runs, the GPUs evicted."""
    per_us = workload.PER_ULTRASERVER // 2
    us_count = len({n.ultraserver for n in run.nodes()})
    low = [replace(workload.gang(f"low{i:04d}", 2), priority="low") for i in range(per_us * us_count)]
    high = replace(workload.gang("high", workload.PER_ULTRASERVER), priority="high")
    with run.watch() as w:
        run.submit(low)
        try:
            w.wait(lambda: all_running(w, low), run.limits.start, f"{len(low)} low-priority gangs to run")
        except TimeoutError:
            ran = sum(1 for g, p in w.by_gang("running").items() if len(p) >= 2)
            run.log(f"  preemption: only {ran}/{len(low)} low-priority gangs ran: UltraServers left free")
        t0 = run.submit([high])["high"]
        try:
            took = (
                w.wait(lambda: all_running(w, [high]), run.limits.preempt, "the high-priority gang to run")
                - t0
            )
        except TimeoutError:
            took = math.nan
        evicted = sum(
            s.gpus
            for s in w.snapshot().values()
            if s.gang != "high" and s.deleted is not None and s.deleted >= t0
        )
    run.clear([*low, high])
    run.log(f"  preemption: high-priority gang Running after {took:.1f} s, {evicted} GPUs evicted")
    return {"preemption s": took, "preemption GPUs evicted": evicted}
