"""No big gang waits forever (issue 33), on the real local cluster: a gang of one UltraServer's
worth of pods submitted behind a steady stream of 2-4 pod gangs (each a Job with a known
`activeDeadlineSeconds`) on a queue of 2 UltraServers.

Two queues run side by side, each on its own pair of UltraServers (a network layer-2 domain),
with the same stream: on the one whose GangPolicy reserves (`reservation.afterWaiting`), the
big gang gets an UltraServer reserved, runs once the gangs there end, and no gang after it that
would end after its expected start runs there meanwhile; gangplugin is killed and restarted
while the reservation is pending, and the reservation holds. Whether a short gang happens to
backfill the reserved UltraServer live depends on how fast this machine ends Jobs at their
deadlines (the expected start may pass before one is admitted), so the test asserts only what
must hold; the backfill itself is asserted in tests/unit/core/test_reservation.py and
tests/unit/api/test_reservation_explain.py. On the one that does not, the big gang is
still waiting when the stream ends. Neither ever has a gang's pods outside its one UltraServer.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gangplugin.core.names import RESERVATION_ANNOTATION
from gangplugin.kube.client import JOBS, NODES, PODS, WORKLOADS, Client
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.kube import unique, wait_for, wait_until
from tests.support.objects import GB200, gpu_job

US = "topology.k8s.aws/ultraserver-id"
LAYER2 = "topology.k8s.aws/network-node-layer-2"
BIG = 18  # one UltraServer's worth of nodes (no spares: the whole UltraServer)
JOB_NAME = "batch.kubernetes.io/job-name"
#: The stream: a gang every STEP seconds, 2-4 pods, most ending LONG seconds after they start,
#: every third SHORT ones (they may run in a reserved UltraServer meanwhile). It asks for more
#: than the 36 nodes hold (about 90 pods at once), so gangs queue up and every node freed is
#: taken at once by a gang waiting. LONG outlasts a restart of gangplugin on a busy machine: no
#: UltraServer empties while nothing is admitted.
STEP, LONG, SHORT = 1.0, 45, 3
#: Gangs before the big one (both UltraServers busy by then), and the stream's length in all.
BEFORE, STREAM = 12, 60


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def admitted_at(wl: dict[str, Any]) -> float | None:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c["type"] == "Admitted" and c["status"] == "True":
            return _epoch(c["lastTransitionTime"])
    return None


@dataclass
class Queue:
    """One queue's stream and what it saw: the gangs it submitted, in order (job -> pods,
    deadline), the big one among them, and the check messages its Workloads carried."""

    client: Client
    namespace: str
    name: str
    ultraservers: frozenset[str]
    jobs: dict[str, tuple[int, int]] = field(default_factory=dict)
    big: str = ""
    messages: dict[str, set[str]] = field(default_factory=dict)
    #: job -> (when it was admitted, its UltraServer), as first seen (a finished gang's Workload
    #: no longer says)
    admitted: dict[str, tuple[float, str | None]] = field(default_factory=dict)

    def submit(self, pods: int, deadline: int) -> str:
        name = unique("big" if pods == BIG else "s")
        meta = {"annotations": {"gangplugin.io/required-topology": US}}
        job = gpu_job(name, self.namespace, self.name, pods, 4, metadata=meta)
        job["spec"]["activeDeadlineSeconds"] = deadline
        self.client.create(JOBS, job)
        self.jobs[name] = (pods, deadline)
        return name

    def workloads(self, items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Job name -> its Workload, of this queue's jobs among `items`."""
        out = {}
        for wl in items:
            for owner in wl["metadata"].get("ownerReferences") or []:
                if owner["name"] in self.jobs:
                    out[owner["name"]] = wl
        return out

    def sample(
        self, seen: tuple[list[dict[str, Any]], list[dict[str, Any]]], us_of: dict[str, str]
    ) -> dict[str, dict[str, Any]]:
        """This queue's Workloads among `seen` (Workloads, pods: one look at the namespace),
        their messages and admissions kept; no gang has bound pods outside one UltraServer of
        this queue's pair."""
        items, pods = seen
        workloads = self.workloads(items)
        for job, wl in workloads.items():
            self.messages.setdefault(job, set()).add(message(wl))
            if job not in self.admitted and (at := admitted_at(wl)) is not None:
                self.admitted[job] = (at, domain(wl))
        by_gang: dict[str, set[str]] = {}
        for p in pods:
            node, job = p["spec"].get("nodeName"), p["metadata"].get("labels", {}).get(JOB_NAME)
            if node and job in self.jobs and not p["metadata"].get("deletionTimestamp"):
                by_gang.setdefault(job, set()).add(us_of[node])
        for job, uss in by_gang.items():
            assert len(uss) == 1 and uss <= self.ultraservers, f"gang {job} has pods in {uss}"
        return workloads


def look(client: Client, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The namespace's Workloads and pods, now."""
    return client.list(WORKLOADS, namespace)["items"], client.list(PODS, namespace)["items"]


def domain(wl: dict[str, Any]) -> str | None:
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            if US in (update.get("nodeSelector") or {}):
                return str(update["nodeSelector"][US])
    return None


def message(wl: dict[str, Any]) -> str:
    return str(next(iter((wl.get("status") or {}).get("admissionChecks") or []), {}).get("message", ""))


def pairs(client: Client) -> tuple[dict[str, str], list[tuple[str, frozenset[str]]]]:
    """Node -> UltraServer, and the GB200 layer-2 domains with their UltraServers."""
    us_of: dict[str, str] = {}
    by_layer: dict[str, set[str]] = {}
    for n in client.list(NODES)["items"]:
        labels = n["metadata"]["labels"]
        us_of[n["metadata"]["name"]] = labels.get(US, "")
        if labels.get("node.kubernetes.io/instance-type") == GB200:
            by_layer.setdefault(labels[LAYER2], set()).add(labels[US])
    return us_of, sorted((k, frozenset(v)) for k, v in by_layer.items())


def test_a_reservation_gets_the_big_gang_in_and_without_one_it_waits_out_the_stream(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    us_of, layers = pairs(client)
    assert len(layers) >= 2, layers
    quota = 10_000  # quota is never what a gang waits for here: the UltraServers are
    on = Queue(
        client,
        namespace,
        gang_queue(quota, {LAYER2: layers[0][0]}, reservation={"afterWaiting": "3s"}),
        layers[0][1],
    )
    off = Queue(client, namespace, gang_queue(quota, {LAYER2: layers[1][0]}), layers[1][1])
    sizes = itertools.cycle((2, 3, 4))
    reserved: dict[str, Any] | None = None
    recorded: list[Any] = []  # the reservation on the big gang's Workload, each time looked at
    started = time.monotonic()
    for i in range(STREAM):
        pods, deadline = next(sizes), SHORT if i % 3 == 2 else LONG
        for q in (on, off):
            q.submit(pods, deadline)
            if i == BEFORE:
                q.big = q.submit(BIG, 600)  # it runs on past the test's end
        seen = look(client, namespace)
        big = on.sample(seen, us_of).get(on.big)
        off.sample(seen, us_of)
        if big is not None and admitted_at(big) is None:
            recorded.append((big["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION))
        if (
            big is not None
            and reserved is None
            and RESERVATION_ANNOTATION in (big["metadata"].get("annotations") or {})
        ):
            reserved = json.loads(big["metadata"]["annotations"][RESERVATION_ANNOTATION])
            e2e_local_cluster().restart("gangplugin")  # SIGKILL while the reservation is pending
        time.sleep(max(0.0, started + (i + 1) * STEP - time.monotonic()))
    # The stream has ended: without reservation the big gang is still waiting, told why...
    off_big = off.workloads(look(client, namespace)[0])[off.big]
    assert admitted_at(off_big) is None, message(off_big)
    assert message(off_big).startswith("gang does not fit now:")
    # ...with it, an UltraServer was reserved for it, the restart kept it, and it ran there
    assert reserved is not None, f"no UltraServer reserved for the big gang: {on.messages[on.big]}"

    def big_admitted() -> dict[str, Any] | None:
        wl = on.sample(look(client, namespace), us_of)[on.big]
        return wl if admitted_at(wl) is not None else None

    # A bound, not a verdict: on a busy machine the Job controller ends Jobs minutes after their
    # deadlines, and the stream's backlog drains through the other UltraServer meanwhile.
    big = wait_until(
        big_admitted,
        900,
        lambda: f"waiting for the big gang admitted; its messages: {sorted(on.messages[on.big])[-3:]}",
    )
    start = admitted_at(big)
    # the reservation held, across the restart, until the gang ran there
    taken = [json.loads(r) for r in recorded if r is not None]
    assert {(r["domain"], r["at"]) for r in taken} == {(reserved["domain"], reserved["at"])}, taken
    assert start is not None and domain(big) == reserved["domain"]
    told = [m for m in on.messages[on.big] if f"{US}={reserved['domain']} reserved for this gang since" in m]
    assert told and all("expected start" in m for m in told), on.messages[on.big]
    # The gangs after it were kept off that UltraServer meanwhile, told so, except those that
    # end before its expected start, as their deadlines declare (backfill).
    order = list(on.jobs)
    younger = order[order.index(on.big) + 1 :]
    blocked = [
        m
        for job in younger
        for m in on.messages.get(job, ())
        if f"{US}={reserved['domain']}, reserved for {namespace}/" in m
    ]
    assert blocked, "no gang was told of the reservation"
    for job in younger:
        at, where = on.admitted.get(job, (None, None))
        if at is not None and where == reserved["domain"] and reserved["at"] < at < start:
            assert on.jobs[job][1] == SHORT, f"{job} {on.jobs[job]} ran in the reserved UltraServer"

    # The big gang runs whole in its UltraServer
    def bound() -> list[dict[str, Any]] | None:
        pods = client.list(PODS, namespace, label_selector=f"{JOB_NAME}={on.big}")["items"]
        pods = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(pods) == BIG else None

    pods = wait_for(bound, 900, "the big gang bound (the Job controller creates its pods)")
    assert {us_of[p["spec"]["nodeName"]] for p in pods} == {reserved["domain"]}
