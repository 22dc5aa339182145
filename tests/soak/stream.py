"""The soak's workload: a seeded stream of gangs (Kueue batch/v1 Jobs) and plain GPU pods.

Gang sizes follow the Kalos trace (deploy/traces/): each job's GPUs as 4-GPU pods, 1 to 256 of
them, mapped onto 1-36 pods on a log scale, so the trace's shape (many single pods, many very
large gangs) is kept on a cluster of four 18-node UltraServers. Each gang goes to one team's
queue of one bind mode (or to the P5 plan's queue), at a priority, asking for its UltraServer
(required or preferred), for slices of one UltraServer each inside one network-node-layer-2, or
for nothing; it runs for a while once Running and is then deleted, as a finished job is. Some
gangs are raced: plain 4-GPU pods pinned to their UltraServer are created the moment they are
admitted (the race of issue 21), and bursts of plain pods come and go on their own.

`draw` is pure (the same seed gives the same stream); `Stream` submits it against the API.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gangplugin.kube.client import JOBS, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.localcluster.cluster import REPO
from gangplugin.sim.trace import read_trace
from tests.soak.observer import Observer
from tests.soak.queues import POLICIES, PRIORITIES, TEAMS, queue_name
from tests.support.objects import trainer_pod_spec

TRACE = REPO / "deploy" / "traces" / "acme-kalos-converted.csv"
US = "topology.k8s.aws/ultraserver-id"
LAYER2 = "topology.k8s.aws/network-node-layer-2"
LAYER3 = "topology.k8s.aws/network-node-layer-3"
GB200 = "ml.p6e-gb200.36xlarge"
PER_ULTRASERVER = 18  # deploy/local/cluster-shape.yaml
MAX_PODS = 36
RACE_BURST = (1, 4)


def kalos_sizes() -> list[int]:
    """Every job of the Kalos trace as 4-GPU pods, mapped log-linearly onto 1..MAX_PODS."""
    pods = [math.ceil(j.pods * j.gpus_per_pod / 4) for j in read_trace(str(TRACE))]
    top = max(pods)
    return [max(1, min(MAX_PODS, round(MAX_PODS ** (math.log(p) / math.log(top))))) for p in pods]


@dataclass(frozen=True, slots=True)
class GangSpec:
    name: str  # the Job's
    at: float  # seconds after the stream starts
    team: str
    mode: str  # Ungate, Extender, PodGroup, or Plan (the P5 plan's queue)
    size: int
    gpus: int  # per pod
    priority: str
    annotations: tuple[tuple[str, str], ...]
    lifetime: float  # seconds it runs before the stream deletes it
    race: int  # plain pods pinned to its UltraServer the moment it is admitted


@dataclass(frozen=True, slots=True)
class PlainBurst:
    at: float
    count: int
    lifetime: float


def _topology(rng: random.Random, size: int, cap: int) -> tuple[int, dict[str, str]]:
    """A size that can fit (one UltraServer holds `cap` gang pods) and the annotations asking
    where it goes."""
    r = rng.random()
    if size <= cap:
        if r < 0.45:
            return size, {"gangplugin.io/required-topology": US}
        if r < 0.7:
            return size, {"gangplugin.io/preferred-topology": US}
        if r < 0.85 and size >= 4 and size % 2 == 0:
            return size, _sliced(size)
        return size, {}
    size = min(size, 2 * cap)
    size -= size % 2
    return size, (_sliced(size) if r < 0.6 else {"gangplugin.io/preferred-topology": US})


def _sliced(size: int) -> dict[str, str]:
    return {
        "gangplugin.io/required-topology": LAYER2,
        "gangplugin.io/slice-size": str(size // 2),
        "gangplugin.io/slice-required-topology": US,
    }


def draw(seed: int, seconds: float, mean_gap: float = 8.0) -> tuple[list[GangSpec], list[PlainBurst]]:
    """The gangs and plain-pod bursts of a stream of `seconds`, from `seed`."""
    rng = random.Random(seed)
    sizes = kalos_sizes()
    gangs: list[GangSpec] = []
    t = rng.uniform(0, 3)
    while t < seconds:
        i = len(gangs)
        team = rng.choice(TEAMS)
        priority = rng.choices(PRIORITIES, (50, 35, 15))[0]
        lifetime = rng.uniform(20, 60)
        if rng.random() < 0.15:
            annotations: dict[str, str] = {}
            if rng.random() < 0.5:
                annotations["gangplugin.io/required-topology"] = LAYER3
            runtime = rng.choice(("1h", "40s", None))
            if runtime:
                annotations["gangplugin.io/max-runtime"] = runtime
                if runtime == "40s":
                    lifetime = min(lifetime, 35)
            gangs.append(
                GangSpec(
                    f"g{i:04d}",
                    t,
                    team,
                    "Plan",
                    rng.randint(1, 4),
                    8,
                    priority,
                    tuple(annotations.items()),
                    lifetime,
                    0,
                )
            )
        else:
            mode = rng.choice(("Ungate", "Extender", "PodGroup"))
            cap = PER_ULTRASERVER - POLICIES[mode].spares
            size, annotations = _topology(rng, rng.choice(sizes), cap)
            one_us = annotations.get("gangplugin.io/required-topology") == US or (
                annotations.get("gangplugin.io/preferred-topology") == US and size <= cap
            )
            race = rng.randint(*RACE_BURST) if one_us and rng.random() < 0.3 else 0
            gangs.append(
                GangSpec(
                    f"g{i:04d}",
                    t,
                    team,
                    mode,
                    size,
                    4,
                    priority,
                    tuple(sorted(annotations.items())),
                    lifetime,
                    race,
                )
            )
        t += rng.expovariate(1 / mean_gap)
    bursts = []
    t = rng.uniform(5, 20)
    while t < seconds:
        bursts.append(PlainBurst(t, rng.randint(1, 4), rng.uniform(20, 60)))
        t += rng.expovariate(1 / 20)
    return gangs, bursts


def job_manifest(spec: GangSpec) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.name,
            "namespace": spec.team,
            "labels": {
                "kueue.x-k8s.io/queue-name": queue_name(spec.mode),
                "kueue.x-k8s.io/priority-class": spec.priority,
            },
        },
        "spec": {
            "parallelism": spec.size,
            "completions": spec.size,
            "completionMode": "Indexed",
            "suspend": True,
            # pods the soak deletes (and kwok fails) must not fail the Job
            "backoffLimit": 1000,
            "template": {
                "metadata": {"annotations": dict(spec.annotations)},
                "spec": trainer_pod_spec(spec.gpus),
            },
        },
    }


def plain_pod(name: str, namespace: str, ultraserver: str | None) -> dict[str, Any]:
    spec = trainer_pod_spec(4)
    spec["nodeSelector"] = {
        "node.kubernetes.io/instance-type": GB200,
        **({US: ultraserver} if ultraserver else {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"soak.gangplugin.io/plain": "true"}},
        "spec": spec,
    }


def _check(wl: dict[str, Any]) -> dict[str, Any]:
    return next(iter((wl.get("status") or {}).get("admissionChecks") or []), {})


def _job_of(wl: dict[str, Any]) -> str | None:
    return next(
        (o["name"] for o in wl["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), None
    )


class Stream(threading.Thread):
    """Submits the drawn gangs and plain pods, deletes each once it has run its lifetime, and
    races plain pods against admitted gangs. Tolerates the API going away (faults)."""

    def __init__(
        self,
        client: Client,
        gangs: list[GangSpec],
        bursts: list[PlainBurst],
        observer: Observer,
        seed: int,
        log: Callable[[str], None],
    ) -> None:
        super().__init__(name="soak-stream", daemon=True)
        self.client, self.observer, self.log = client, observer, log
        self.gangs = sorted(gangs, key=lambda g: g.at)
        self.bursts = sorted(bursts, key=lambda b: b.at)
        self.rng = random.Random(seed ^ 0x5EED)
        self.start_at = time.time()
        self.submitting = threading.Event()
        self.submitting.set()
        self.stop = threading.Event()
        self.drain_lifetime: float | None = None  # draining: gangs run at most this long...
        self.reaping = threading.Event()  # ...and are deleted only while this is set
        self.reaping.set()
        self.lock = threading.Lock()
        self.submitted: dict[str, GangSpec] = {}  # namespace/job -> spec
        self.running_since: dict[str, float] = {}  # namespace/job -> first seen Running
        self.running: dict[str, list[dict[str, Any]]] = {}  # namespace/job -> its pods, while Running
        self.raced: set[tuple[str, str]] = set()  # (namespace/job, admission time)
        self.plain: dict[str, float] = {}  # namespace/pod -> delete at
        self.deleted = 0
        self.plain_created = 0
        self.errors: dict[str, int] = {}
        self._next_gang = 0
        self._next_burst = 0
        self._last_pods = 0.0

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._step(time.time())
            except (ApiError, httpx.HTTPError, OSError) as err:
                self.errors[type(err).__name__] = self.errors.get(type(err).__name__, 0) + 1
            self.stop.wait(0.5)

    def _step(self, now: float) -> None:
        elapsed = now - self.start_at
        while (
            self.submitting.is_set()
            and self._next_gang < len(self.gangs)
            and self.gangs[self._next_gang].at <= elapsed
        ):
            self._submit(self.gangs[self._next_gang], now)
            self._next_gang += 1
        while (
            self.submitting.is_set()
            and self._next_burst < len(self.bursts)
            and self.bursts[self._next_burst].at <= elapsed
        ):
            burst = self.bursts[self._next_burst]
            for _ in range(burst.count):
                self._plain(None, burst.lifetime, now)
            self._next_burst += 1
        workloads = [wl for team in TEAMS for wl in self.client.list(WORKLOADS, team)["items"]]
        if self.submitting.is_set():
            self._race(workloads, now)
        if now - self._last_pods >= 2.0:
            self._last_pods = now
            self._reap(workloads, now)
        for key, at in sorted(self.plain.items()):
            if at <= now or not self.submitting.is_set():
                ns, name = key.split("/", 1)
                self.client.delete(PODS, name, ns)
                del self.plain[key]

    def _submit(self, spec: GangSpec, now: float) -> None:
        try:
            self.client.create(JOBS, job_manifest(spec))
        except ApiError as err:
            if err.status != 409:  # 409: created by the try a fault cut short
                raise
        key = f"{spec.team}/{spec.name}"
        with self.lock:
            self.submitted[key] = spec
        self.observer.submission(spec.team, spec.name, now)

    def _plain(self, ultraserver: str | None, lifetime: float, now: float) -> None:
        name = f"plain-{self.plain_created:04d}"
        ns = self.rng.choice(TEAMS)
        self.plain_created += 1
        with contextlib.suppress(ApiError):
            self.client.create(PODS, plain_pod(name, ns, ultraserver))
            self.plain[f"{ns}/{name}"] = now + lifetime

    def _race(self, workloads: list[dict[str, Any]], now: float) -> None:
        """Plain pods pinned to an UltraServer the moment a raced gang is admitted there."""
        for wl in workloads:
            job = _job_of(wl)
            spec = self.submitted.get(f"{wl['metadata']['namespace']}/{job}") if job else None
            check = _check(wl)
            if spec is None or not spec.race or check.get("state") != "Ready":
                continue
            key = (f"{spec.team}/{spec.name}", str(check.get("lastTransitionTime")))
            us = next(
                (
                    u.get("nodeSelector", {}).get(US)
                    for u in check.get("podSetUpdates") or []
                    if u.get("nodeSelector")
                ),
                None,
            )
            if key in self.raced or not us:
                continue
            self.raced.add(key)
            for _ in range(spec.race):
                self._plain(us, self.rng.uniform(20, 60), now)

    def _reap(self, workloads: list[dict[str, Any]], now: float) -> None:
        """Which gangs run (every pod Ready), and delete those past their lifetime."""
        pods: dict[str, list[dict[str, Any]]] = {}
        for team in TEAMS:
            for p in self.client.list(PODS, team, label_selector="batch.kubernetes.io/job-name")["items"]:
                if not p["metadata"].get("deletionTimestamp"):
                    job = p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
                    pods.setdefault(f"{team}/{job}", []).append(p)
        running: dict[str, list[dict[str, Any]]] = {}
        admitted = {
            f"{wl['metadata']['namespace']}/{_job_of(wl)}"
            for wl in workloads
            if _check(wl).get("state") == "Ready"
        }
        with self.lock:
            specs = dict(self.submitted)
        for key, spec in specs.items():
            members = pods.get(key, [])
            ready = [p for p in members if is_true(p, "Ready")]
            if key in admitted and len(ready) >= spec.size:
                running[key] = members
                self.running_since.setdefault(key, now)
            else:
                self.running_since.pop(key, None)
        with self.lock:
            self.running = running
        for key, since in sorted(self.running_since.items()) if self.reaping.is_set() else ():
            spec = specs[key]
            lifetime = (
                spec.lifetime if self.drain_lifetime is None else min(spec.lifetime, self.drain_lifetime)
            )
            if now - since >= lifetime:
                self.delete(key)

    def delete(self, key: str) -> None:
        ns, name = key.split("/", 1)
        self.client.delete(JOBS, name, ns)
        with self.lock:
            self.submitted.pop(key, None)
            self.running.pop(key, None)
        self.running_since.pop(key, None)
        self.deleted += 1

    # -- what others ask ---------------------------------------------------------------------------

    def running_gangs(self) -> dict[str, list[dict[str, Any]]]:
        with self.lock:
            return dict(self.running)

    def pending(self) -> int:
        """Gangs drawn but not submitted yet."""
        return len(self.gangs) - self._next_gang

    def delete_all(self) -> None:
        with self.lock:
            keys = sorted(self.submitted)
        for key in keys:
            self.delete(key)
        for team in TEAMS:
            for job in self.client.list(JOBS, team)["items"]:
                self.client.delete(JOBS, job["metadata"]["name"], team)
            for pod in self.client.list(PODS, team, label_selector="soak.gangplugin.io/plain")["items"]:
                self.client.delete(PODS, pod["metadata"]["name"], team)
        self.plain.clear()
