"""The soak's fault injector: a seeded plan of faults at random moments, and the thread that
carries it out on the local cluster.

Each fault is recorded with the observer as a `Window` (what it stopped, from when to when the
injector saw it healed), so the observer's clocks do not blame a gang for a component that was
down. Bad input is checked here, where it is sent: it must be refused with a message naming the
field, or (what only a controller can see) be reported on the object within a deadline.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from gangplugin.core.timeutil import format_time
from gangplugin.kube.client import EVENTS, JOBS, JSON, NODES, PODS, WORKLOADS, ApiError, Client, Resource
from gangplugin.kube.kueue_records import conditions
from gangplugin.kube.lease import LEASES
from gangplugin.kube.resources import GANG_POLICIES, TRAINING_PLANS
from gangplugin.localcluster.cluster import GANGPLUGIN_NAMESPACE, ClusterError, LocalCluster
from gangplugin.localcluster.probes import Deadline
from tests.soak import observer as obs
from tests.soak.observer import Observer, Violation, Window
from tests.soak.queues import MODES, PLAN, TEAMS, queue_name
from tests.soak.slowproxy import SlowProxy
from tests.soak.stream import GB200, US, GangSpec, Stream, job_manifest
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import capacity_block, gang_policy, training_plan

KINDS = (
    "kill-leader",
    "kill-follower",
    "sigstop-leader",
    "restart-apiserver",
    "slow-apiserver",
    "restart-etcd",
    "restart-scheduler",
    "restart-kueue",
    "node-notready",
    "cordon",
    "taint",
    "delete-pods",
    "bad-policy",
    "bad-annotation",
    "bad-plan",
)
SCOPES = {
    "kill-leader": obs.ALL,
    "kill-follower": obs.CONTROL,
    "sigstop-leader": obs.ALL,
    "restart-apiserver": obs.ALL,
    "slow-apiserver": obs.ALL,
    "restart-etcd": obs.ALL,
    "restart-scheduler": obs.BINDING,
    "restart-kueue": obs.CONTROL,
    "node-notready": obs.NODES,
    "cordon": obs.NODES,
    "taint": obs.NODES,
    "delete-pods": obs.GANG,
    "bad-policy": obs.NONE,
    "bad-annotation": obs.NONE,
    "bad-plan": obs.NONE,
    "process-exited": obs.ALL,
}
FAULT_TAINT = "soak.gangplugin.io/fault"
REPLY_DEADLINE = 120.0  # a controller's answer to bad input (the check's message, a plan's condition)


@dataclass(frozen=True, slots=True)
class PlannedFault:
    at: float  # seconds after the soak starts
    kind: str
    seed: int


def plan_faults(seed: int, seconds: float, count: int, kinds: tuple[str, ...] = KINDS) -> list[PlannedFault]:
    """`count` faults (at least one of each kind, in a seeded order) spread over the soak, each
    at a random moment of its share of the time."""
    rng = random.Random(seed ^ 0xFA017)
    order = list(kinds)
    rng.shuffle(order)
    while len(order) < count:
        order.append(rng.choice(kinds))
    span = max(1.0, seconds - 30.0)
    share = span / len(order)
    return [
        PlannedFault(15.0 + share * i + rng.uniform(0, share * 0.6), kind, rng.randrange(2**31))
        for i, kind in enumerate(order)
    ]


class Injector(threading.Thread):
    def __init__(
        self,
        cluster: LocalCluster,
        client: Client,
        observer: Observer,
        stream: Stream,
        plan: list[PlannedFault],
        log: Callable[[str], None],
        proxy: SlowProxy,
    ) -> None:
        super().__init__(name="soak-injector", daemon=True)
        self.cluster, self.client, self.observer, self.stream = cluster, client, observer, stream
        self.plan, self.log, self.proxy = plan, log, proxy
        self.start_at = time.time()
        self.stop = threading.Event()
        self.injected: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.records: list[dict[str, Any]] = []
        self._ids = 0
        self._lock = threading.Lock()
        self._faulted_nodes: set[str] = set()
        self._heals: list[tuple[threading.Timer, _Once]] = []
        self._checks: list[threading.Thread] = []
        self._bad = 0
        # Held while a process is killed and started again: the exit watcher keeps its hands off.
        self._processes = threading.Lock()
        self._seen: dict[str, tuple[int, float]] = {}  # name -> (pid, when last seen running)
        self.exits: Counter[str] = Counter()
        self._supervising = threading.Event()
        self._supervisor = threading.Thread(target=self._watch_exits, name="soak-exits", daemon=True)

    # -- the plan -------------------------------------------------------------------------------

    def run(self) -> None:
        self._supervising.set()
        self._supervisor.start()
        for fault in self.plan:
            if self.stop.wait(max(0.0, self.start_at + fault.at - time.time())):
                return
            rng = random.Random(fault.seed)
            try:
                done = getattr(self, "_" + fault.kind.replace("-", "_"))(rng)
            except (ApiError, httpx.HTTPError, OSError, RuntimeError) as err:
                self.log(f"  fault {fault.kind} failed: {err}")
                done = False
            (self.injected if done else self.skipped)[fault.kind] += 1

    def _window(self, kind: str, start: float | None = None, **where: Any) -> Window:
        with self._lock:
            self._ids += 1
            w = Window(self._ids, kind, SCOPES[kind], start or time.time(), **where)
        self.observer.fault(w)
        return w

    def _end(self, w: Window, **detail: Any) -> None:
        end = time.time()
        self.observer.fault(replace(w, end=end))
        seconds = round(end - w.start, 1)
        self.records.append(
            {"fault": w.kind, "at": round(w.start - self.start_at, 1), "seconds": seconds, **detail}
        )
        self.log(f"  fault {w.kind} {detail or ''} ({seconds:.1f}s)")

    # -- processes ------------------------------------------------------------------------------

    def _leader(self) -> str | None:
        """The process name of the replica holding the Lease (`local-gangplugin-<n>`)."""
        lease = self.client.get_or_none(LEASES, "gangplugin", GANGPLUGIN_NAMESPACE) or {}
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        n = holder.removeprefix("local-gangplugin-")
        if not n.isdigit():
            return None
        return "gangplugin" if n == "1" else f"gangplugin-{n}"

    def _leading(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.cluster.pki_dir / "ca.crt"))
        for n in (1, 2):
            port = self.cluster.ports.gangplugin_replica(n)[0]
            with contextlib.suppress(httpx.HTTPError, OSError):
                r = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=ctx, timeout=3.0)
                if r.status_code == 200 and r.text.startswith("leader"):
                    return True
        return False

    def _await_leader(self) -> None:
        deadline = Deadline(120)
        while not self._leading():
            if deadline.passed():
                raise RuntimeError("no gangplugin replica leads 120s (of an idle machine) after a restart")
            time.sleep(0.5)

    def _kill(self, kind: str, name: str, rng: random.Random, wait_leader: bool) -> bool:
        with self._processes:
            w = self._window(kind)
            try:
                self.cluster.stop_process(name, signal.SIGKILL)
                time.sleep(rng.uniform(1, 8))  # dead for a while, as a crashed pod before its restart
                self.cluster.restart(name, lead=False)
                if wait_leader:
                    self._await_leader()
            finally:  # a window never left open: it would excuse everything after it
                self._seen.clear()  # what the fault changed is no exit
                self._end(w, process=name)
        return True

    def _watch_exits(self) -> None:
        """The cluster's keeper starts again what exits, as kubelet restarts a pod's container
        (`gangplugin serve` exits by design when, leading, it cannot renew its Lease within the
        renew deadline: after kube-apiserver or etcd was down for longer, or the process was
        stopped). Each exit is a window from when the process was last seen running until it
        runs again (and a gangplugin replica leads): nothing may be blamed on that time."""
        while self._supervising.is_set():
            with self._processes:
                running = self.cluster.running_processes()
                for name in self.cluster.recorded_processes():
                    pid, last = running.get(name), self._seen.get(name)
                    if last is not None and pid != last[0]:
                        self._healed(name, last[1])
                        pid = self.cluster.running_processes().get(name)
                    if pid is not None:
                        self._seen[name] = (pid, time.time())
            time.sleep(1)

    def _healed(self, name: str, since: float) -> None:
        w = self._window("process-exited", start=since)
        try:
            deadline = Deadline(600)  # the keeper's backoff reaches 5 minutes
            while name not in self.cluster.running_processes():
                if deadline.passed():
                    raise RuntimeError(f"the keeper did not start {name} again in 600s")
                time.sleep(0.5)
            if name.startswith("gangplugin"):
                self._await_leader()
        except (ClusterError, RuntimeError, OSError) as err:
            self.log(f"  exits: {name} did not come back: {err}")
        finally:
            self.exits[name] += 1
            self._end(w, process=name)

    def _kill_leader(self, rng: random.Random) -> bool:
        leader = self._leader()
        return leader is not None and self._kill("kill-leader", leader, rng, wait_leader=True)

    def _kill_follower(self, rng: random.Random) -> bool:
        leader = self._leader()
        if leader is None:
            return False
        follower = "gangplugin-2" if leader == "gangplugin" else "gangplugin"
        return self._kill("kill-follower", follower, rng, wait_leader=False)

    def _restart(self, kind: str, name: str) -> bool:
        with self._processes:
            w = self._window(kind)
            try:
                self.cluster.restart(name)
            finally:
                self._seen.clear()
                self._end(w, process=name)
        return True

    def _restart_apiserver(self, rng: random.Random) -> bool:
        return self._restart("restart-apiserver", "kube-apiserver")

    def _restart_etcd(self, rng: random.Random) -> bool:
        return self._restart("restart-etcd", "etcd")

    def _restart_scheduler(self, rng: random.Random) -> bool:
        return self._restart("restart-scheduler", "kube-scheduler")

    def _restart_kueue(self, rng: random.Random) -> bool:
        return self._restart("restart-kueue", "kueue")

    def _sigstop_leader(self, rng: random.Random) -> bool:
        """The leader's processes stopped (SIGSTOP to its group, as a CPU-starved container)
        for longer than the renew deadline, then continued: the follower takes the Lease once it
        expires, and the old leader must stop acting before that (it exits when it sees it could
        not renew; the keeper starts it again)."""
        leader = self._leader()
        pid = self.cluster.running_processes().get(leader or "")
        if leader is None or pid is None:
            return False
        with self._processes:
            w = self._window("sigstop-leader")
            try:
                os.killpg(pid, signal.SIGSTOP)
                time.sleep(rng.uniform(11, 20))  # past the renew deadline, 10 s
                os.killpg(pid, signal.SIGCONT)
                self._await_leader()
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGCONT)  # never left stopped
                self._end(w, process=leader)
        return True

    def _slow_apiserver(self, rng: random.Random) -> bool:
        """Every call gangplugin makes held 1-3 s by the proxy its kubeconfig names, for 30-60 s
        (healed by a timer, as node faults are: the plan goes on meanwhile)."""
        if self.proxy.slow.is_set():
            return False
        w = self._window("slow-apiserver")
        self.proxy.slow.set()

        def healed() -> None:
            self.proxy.slow.clear()
            self._end(w)

        self._later(rng.uniform(30, 60), healed)
        return True

    def _later(self, seconds: float, heal: Callable[[], None]) -> None:
        """`heal` after `seconds`, or at once when `heal_all` comes first; exactly once."""
        heal_once = _Once(heal)
        timer = threading.Timer(seconds, heal_once)
        timer.daemon = True
        with self._lock:
            self._heals.append((timer, heal_once))
        timer.start()

    # -- nodes ----------------------------------------------------------------------------------

    def _pick_nodes(self, rng: random.Random, count: int) -> list[str]:
        """GB200 nodes not under a fault already; half the time ones running gang pods."""
        nodes = [
            n["metadata"]["name"]
            for n in self.client.list(NODES, label_selector=f"node.kubernetes.io/instance-type={GB200}")[
                "items"
            ]
        ]
        with self._lock:
            free = sorted(set(nodes) - self._faulted_nodes)
        busy = sorted(
            {
                p["spec"]["nodeName"]
                for pods in self.stream.running_gangs().values()
                for p in pods
                if p["spec"].get("nodeName")
            }
            & set(free)
        )
        pool = busy if busy and rng.random() < 0.5 else free
        chosen = rng.sample(pool, min(count, len(pool)))
        with self._lock:
            self._faulted_nodes.update(chosen)
        return chosen

    def _node_fault(
        self,
        kind: str,
        rng: random.Random,
        count: int,
        hurt: Callable[[str], None],
        heal: Callable[[str], None],
    ) -> bool:
        nodes = self._pick_nodes(rng, count)
        if not nodes:
            return False
        w = self._window(kind, nodes=tuple(nodes))
        for n in nodes:
            hurt(n)

        def healed() -> None:
            deadline = Deadline(180)
            try:
                for n in nodes:
                    while True:  # the API may be down (another fault): keep trying
                        try:
                            heal(n)
                            break
                        except (ApiError, httpx.HTTPError, OSError, RuntimeError, AssertionError):
                            if deadline.passed():
                                raise  # left as it is: the clean-up check reports the node
                            time.sleep(1)
            finally:
                with self._lock:
                    self._faulted_nodes.difference_update(nodes)
                self._end(w, nodes=nodes)

        self._later(rng.uniform(15, 45), healed)
        return True

    def _node_notready(self, rng: random.Random) -> bool:
        def fail(name: str) -> None:
            fail_nodes(
                self.client, name, reason="SoakNodeDown", message="made NotReady by the soak's fault injector"
            )

        return self._node_fault(
            "node-notready", rng, rng.randint(1, 3), fail, lambda n: heal_nodes(self.client, n, timeout=90)
        )

    def _cordon(self, rng: random.Random) -> bool:
        def cordon(n: str, on: bool) -> None:
            self.client.patch(NODES, n, {"spec": {"unschedulable": on}})

        return self._node_fault(
            "cordon", rng, rng.randint(1, 2), lambda n: cordon(n, True), lambda n: cordon(n, False)
        )

    def _taint(self, rng: random.Random) -> bool:
        def set_taint(n: str, on: bool) -> None:
            node = self.client.get(NODES, n)
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != FAULT_TAINT]
            if on:
                taints.append({"key": FAULT_TAINT, "value": "true", "effect": "NoSchedule"})
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": taints},
            }
            self.client.patch(NODES, n, patch)

        return self._node_fault(
            "taint", rng, rng.randint(1, 2), lambda n: set_taint(n, True), lambda n: set_taint(n, False)
        )

    def _delete_pods(self, rng: random.Random) -> bool:
        deadline = time.monotonic() + 60
        while not (running := self.stream.running_gangs()):
            if time.monotonic() > deadline or self.stop.is_set():
                return False
            time.sleep(1)
        job = rng.choice(sorted(running))
        pods = rng.sample(running[job], min(len(running[job]), rng.randint(1, 2)))
        wl = next(
            (
                w["metadata"]["name"]
                for w in self.client.list(WORKLOADS, job.split("/")[0])["items"]
                if any(o.get("name") == job.split("/")[1] for o in w["metadata"].get("ownerReferences") or [])
            ),
            None,
        )
        ns = job.split("/")[0]
        w = self._window("delete-pods", nodes=tuple(p["spec"]["nodeName"] for p in pods), gang=f"{ns}/{wl}")
        for p in pods:
            self.client.delete(PODS, p["metadata"]["name"], ns)
        self._end(w, gang=job, pods=[p["metadata"]["name"] for p in pods])
        return True

    # -- bad input ------------------------------------------------------------------------------

    def _refused(self, kind: str, what: str, create: Callable[[], Any], field: str) -> bool | None:
        """Send bad input: True if refused naming `field`, None if accepted, a violation if
        refused without naming it (a webhook that is down refuses for that reason: fine)."""
        w = self._window(kind)
        try:
            create()
        except ApiError as err:
            text = str(err)
            named = field in text or "failed calling webhook" in text
            if not named:
                self.observer.report(
                    Violation(
                        "bad-input", time.time(), what, f"{what} refused without naming {field}: {text}"
                    )
                )
            self._end(w, input=what, refused=text[:200])
            return True
        self._end(w, input=what, refused=None)
        return None

    def _bad_policy(self, rng: random.Random) -> bool:
        self._bad += 1
        name = f"soak-bad-{self._bad:03d}"
        variants = [
            ({"readyTimeout": "-5m"}, "readyTimeout"),
            ({"bindMode": "Sometimes"}, "bindMode"),
            ({"requeue": {"backoffBaseSeconds": 60, "backoffMaxSeconds": 1}}, "backoffMaxSeconds"),
            ({"topologyName": "no-such-topology"}, "topologyName"),
        ]
        spec, field = rng.choice(variants)
        body = gang_policy(name, **spec)
        return self._bad_object(
            "bad-policy", f"GangPolicy {name} {spec}", GANG_POLICIES, body, field, "Valid"
        )

    def _bad_plan(self, rng: random.Random) -> bool:
        self._bad += 1
        name = f"soak-bad-{self._bad:03d}"
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
        block = capacity_block(start, start + timedelta(minutes=10))
        variants = [
            ({"instanceCount": 3}, {}, "instanceCount"),
            ({"endTime": format_time(start - timedelta(minutes=1))}, {}, "endTime"),
            ({}, {"clusterQueue": "no-such-queue"}, "no-such-queue"),
        ]
        block_change, spec_change, field = rng.choice(variants)
        body = training_plan(name, PLAN, [{**block, **block_change}], flavor="p5", lead="15s", **spec_change)
        what = f"TrainingPlan {name} {block_change or spec_change}"
        return self._bad_object("bad-plan", what, TRAINING_PLANS, body, field, "Accepted")

    def _bad_object(
        self, kind: str, what: str, res: Resource, body: JSON, field: str, condition: str
    ) -> bool:
        """Create the bad object `body`: refused naming `field`, or let in (only what needs another
        object may get in while no webhook answers) with its `condition` False, naming it."""
        name = body["metadata"]["name"]
        if self._refused(kind, what, lambda: self.client.create(res, body), field) is None:
            self._expect(
                what,
                lambda: _refusal_naming(self.client.get_or_none(res, name), condition, field),
                f"the condition {condition}=False naming {field}",
                cleanup=lambda: self.client.delete(res, name),
            )
        return True

    def _bad_annotation(self, rng: random.Random) -> bool:
        self._bad += 1
        variants = [
            ({"gangplugin.io/requried-topology": US}, "gangplugin.io/requried-topology"),
            ({"gangplugin.io/required-topology": "topology.k8s.aws/no-such-level"}, "no-such-level"),
            ({"gangplugin.io/max-runtime": "soon"}, "gangplugin.io/max-runtime"),
            ({"gangplugin.io/slice-size": "3", "gangplugin.io/slice-required-topology": US}, "slice-size"),
        ]
        annotations, field = rng.choice(variants)
        team, mode = rng.choice(TEAMS), rng.choice(MODES)
        name = f"bad{self._bad:03d}"
        manifest = job_manifest(
            GangSpec(name, 0, team, mode, 1, 4, "experimentation-priority", tuple(annotations.items()), 0, 0)
        )
        manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue_name("Bad")
        w = self._window("bad-annotation")
        self.client.create(JOBS, manifest)
        self._end(w, input=f"Job {team}/{name} {annotations}")

        def workload() -> dict[str, Any] | None:
            return next(
                (
                    wl
                    for wl in self.client.list(WORKLOADS, team)["items"]
                    if any(o.get("name") == name for o in wl["metadata"].get("ownerReferences") or [])
                ),
                None,
            )

        def said() -> bool:
            """The check holds it (Pending) or rejected it, naming the field: on the Workload, or,
            once Kueue has deactivated a rejected one and reset its check, in the check's Event."""
            wl = workload()
            if wl is None:
                return False
            checks = (wl.get("status") or {}).get("admissionChecks") or []
            if any(field in (c.get("message") or "") and c.get("state") != "Ready" for c in checks):
                return True
            events = self.client.list(
                EVENTS, team, field_selector=f"involvedObject.name={wl['metadata']['name']}"
            )["items"]
            return any(
                e.get("reason") in ("GangRejected", "GangWaiting") and field in (e.get("message") or "")
                for e in events
            )

        self._expect(
            f"Job {team}/{name} {annotations}",
            said,
            f"its gang check holding or rejecting it naming {field}",
            cleanup=lambda: self.client.delete(JOBS, name, team),
            evidence=lambda: [obs.workload_brief(wl)] if (wl := workload()) else [],
        )
        return True

    def _expect(
        self,
        what: str,
        holds: Callable[[], bool],
        wanted: str,
        cleanup: Callable[[], Any],
        evidence: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        """In the background: `holds` within REPLY_DEADLINE (not counting time a component was
        down), else a violation; then clean up."""

        def wait() -> None:
            waited, last = 0.0, time.time()
            try:
                while waited < REPLY_DEADLINE:
                    with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                        if holds():
                            return
                    time.sleep(1)
                    now = time.time()
                    if not self.observer.stalled(now):
                        waited += now - last
                    last = now
                self.observer.report(
                    Violation(
                        "bad-input",
                        time.time(),
                        what,
                        f"{what} was accepted, and {wanted} was not seen within {REPLY_DEADLINE:.0f}s",
                        tuple(_quietly(evidence)),
                    )
                )
            finally:
                with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                    cleanup()

        t = threading.Thread(target=wait, name="soak-bad-input", daemon=True)
        self._checks.append(t)
        t.start()

    # -- the end --------------------------------------------------------------------------------

    def heal_all(self) -> None:
        """Stop the plan; heal every faulted node now, and wait for the bad-input checks."""
        self.stop.set()
        self.join(timeout=300)
        with self._lock:
            heals = list(self._heals)
        for timer, heal in heals:
            timer.cancel()
            heal()
            heal.done.wait(240)
        for t in self._checks:
            t.join(timeout=REPLY_DEADLINE + 60)

    def close(self) -> None:
        """The end: no more supervision."""
        self._supervising.clear()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout=150)


class _Once:
    """A heal run by its timer or by `heal_all`, whichever comes first, exactly once."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.lock = threading.Lock()
        self.started = False
        self.done = threading.Event()

    def __call__(self) -> None:
        with self.lock:
            if self.started:
                return
            self.started = True
        try:
            self.fn()
        finally:
            self.done.set()


def _quietly(evidence: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    try:
        return evidence()
    except (ApiError, httpx.HTTPError, OSError):
        return []


def _refusal_naming(obj: dict[str, Any] | None, kind: str, field: str) -> bool:
    """Whether the object's `kind` condition is False with a message naming `field`."""
    c = conditions(obj or {}).get(kind) or {}
    return c.get("status") == "False" and field in c.get("message", "")
