"""MultiKueue on one machine: a manager control plane (Kueue v0.19 with MultiKueue, gangplugin's
dispatcher and API; no nodes) and two worker control planes (kwok nodes of 2 GB200 UltraServers
each: worker-a's of 4 instances, worker-b's of 6; Kueue, kube-scheduler, gangplugin with its gang
check), each a local cluster of its own, 1,000 ports apart above the session's base
(`gangplugin/localcluster/multikueue.py`). Jobs are submitted to the manager.

What is asserted is what the workers' API servers showed, watched from the start
(`tests/support/multikueue.py`): a gang is admitted in one worker at most, its pods bound in one at
most, and a worker that gangplugin's dispatcher did not nominate never gets a copy of the gang
(so no quota is ever reserved there).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gangplugin.core.names import DISPATCH_ANNOTATION
from gangplugin.kube.client import JOBS, NODES, WORKLOADS, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import MULTIKUEUE_CLUSTERS
from gangplugin.localcluster.cluster import REPO, ClusterError
from gangplugin.localcluster.multikueue import MultiKueueClusters
from tests.support.cluster import e2e_port_base
from tests.support.kube import job_pods, unique, wait_for, wait_until, workload_of
from tests.support.multikueue import Monitor
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import gpu_job

US = "topology.k8s.aws/ultraserver-id"
NS = "team-a"
GANGCTL = str(Path(sys.executable).parent / "gangctl")
ANSWER_TIMEOUT = 30  # the manager's --multikueue-answer-timeout, seconds
# Three control planes on a loaded 2-core machine: generous bounds on what must happen.
SLOW = 300


@dataclass
class MK:
    setup: MultiKueueClusters
    manager: Client
    workers: dict[str, Client]
    monitor: Monitor


@pytest.fixture(scope="module")
def mk() -> Iterator[MK]:
    base = e2e_port_base() + 1000
    setup = MultiKueueClusters(
        REPO / ".local" / f"e2e-multikueue-{base}",
        base,
        gangplugin_args=(f"--multikueue-answer-timeout={ANSWER_TIMEOUT}s", "--multikueue-refusal-ttl=5m"),
    )
    try:
        setup.up()
    except ClusterError as err:
        pytest.fail(f"the MultiKueue clusters could not be started: {err}", pytrace=False)
    manager = Client.from_kubeconfig(setup.manager.kubeconfig)
    workers = {name: Client.from_kubeconfig(c.kubeconfig) for name, c in setup.workers.items()}
    monitor = Monitor(workers, NS)
    monitor.start()
    try:
        yield MK(setup, manager, workers, monitor)
    finally:
        monitor.stop()
        for c in (manager, *workers.values()):
            c.close()
        setup.down()


@pytest.fixture
def jobs(mk: MK) -> Iterator[list[str]]:
    """The jobs a test submits on the manager; deleted afterwards, until no worker holds any of
    their Workloads or pods (the next test starts on empty workers)."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(Exception):
            mk.manager.delete(JOBS, name, NS)

    def gone() -> bool:
        return all(
            not job_pods(c, NS, n) and not c.list(WORKLOADS, NS)["items"]
            for c in mk.workers.values()
            for n in names
        )

    wait_for(gone, SLOW, "the workers to drop the test's Workloads and pods")


def submit(mk: MK, jobs: list[str], pods: int, prefix: str = "mk") -> str:
    name = unique(prefix)
    annotations = {"gangplugin.io/required-topology": US}
    mk.manager.create(JOBS, gpu_job(name, NS, "training", pods, 4, metadata={"annotations": annotations}))
    jobs.append(name)
    return name


def manager_workload(mk: MK, job: str) -> dict[str, Any]:
    return wait_for(lambda: workload_of(mk.manager, NS, job), SLOW, f"the manager's Workload of {job}")


def record(wl: dict[str, Any]) -> dict[str, Any]:
    raw = (wl["metadata"].get("annotations") or {}).get(DISPATCH_ANNOTATION)
    return json.loads(raw) if raw else {}


def state(mk: MK, job: str) -> str:
    """What a failure should show: the manager's Workload and every worker's copy."""
    wl = workload_of(mk.manager, NS, job) or {}
    name = wl.get("metadata", {}).get("name", "?")
    out = [f"manager {name}: status {json.dumps(wl.get('status', {}).get('admissionChecks'))}"]
    out.append(
        f"nominated {wl.get('status', {}).get('nominatedClusterNames')} record {record(wl) if wl else {}}"
    )
    for w, c in mk.workers.items():
        try:
            copies = c.list(WORKLOADS, NS)["items"]
        except httpx.HTTPError:
            out.append(f"{w}: its API server does not answer")
            continue
        copy = next((x for x in copies if x["metadata"]["name"] == name), None)
        if copy is not None:
            conds = {k["type"]: k["status"] for k in copy.get("status", {}).get("conditions", [])}
            out.append(f"{w}: {conds} {json.dumps(copy.get('status', {}).get('admissionChecks'))}")
        out.append(f"{w} pods: {len(job_pods(c, NS, job))}")
    return "; ".join(out)


def reachable_pods(client: Client, job: str) -> list[dict[str, Any]]:
    """The job's pods in a worker; none while its API server is away (no pod binds there then)."""
    try:
        return job_pods(client, NS, job)
    except httpx.HTTPError:
        return []


def running_in(mk: MK, job: str, pods: int) -> str:
    """Until all `pods` of the job are Ready in one worker; that worker."""

    def where() -> str | None:
        for w, c in mk.workers.items():
            ready = [p for p in reachable_pods(c, job) if is_true(p, "Ready")]
            if len(ready) == pods:
                return w
        return None

    return wait_until(where, SLOW, lambda: f"{job} running whole in a worker: {state(mk, job)}")


def assert_one_worker(mk: MK, job: str, gang: str) -> None:
    mk.monitor.caught_up()
    assert len(mk.monitor.admitted_in(gang)) <= 1, (mk.monitor.of(gang), state(mk, job))
    assert len(mk.monitor.workers_with_pods(job)) <= 1, (mk.monitor.by_job.get(job), state(mk, job))


def explain(mk: MK, job: str) -> dict[str, Any]:
    done = subprocess.run(
        [GANGCTL, "explain", f"job/{job}", "-n", NS, "-o", "json"],
        env={**os.environ, "KUBECONFIG": str(mk.setup.manager.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_a_gang_that_fits_only_in_b_goes_to_b_with_no_quota_ever_reserved_in_a(
    mk: MK, jobs: list[str]
) -> None:
    job = submit(mk, jobs, 6)  # 6 whole nodes in one UltraServer: only worker-b's have 6
    assert running_in(mk, job, 6) == "worker-b"
    gang = manager_workload(mk, job)["metadata"]["name"]
    assert_one_worker(mk, job, gang)
    assert mk.monitor.copies_in(gang) == {"worker-b"}, mk.monitor.of(gang)
    e = explain(mk, job)
    workers = {w["name"]: w for w in e["workers"]}
    assert workers["worker-b"]["chosen"] and workers["worker-b"]["level"] == US
    assert not workers["worker-a"].get("fits") and workers["worker-a"]["reason"].startswith(
        "gang does not fit now:"
    )
    assert e["worker"] == "worker-b"


def test_a_burst_spreads_so_that_no_worker_is_over_promised(mk: MK, jobs: list[str]) -> None:
    # Room for 4 gangs of 4 whole nodes: one per UltraServer (a's of 4, b's of 6). A fifth waits
    # on the manager, nominated nowhere, until one of them ends.
    burst = [submit(mk, jobs, 4, "burst") for _ in range(5)]
    gangs = {job: manager_workload(mk, job)["metadata"]["name"] for job in burst}

    def settled() -> dict[str, str | None] | None:
        where: dict[str, str | None] = {}
        for job in burst:
            wl = workload_of(mk.manager, NS, job) or {}
            where[job] = wl.get("status", {}).get("clusterName")
        placed = [w for w in where.values() if w]
        return where if len(placed) == 4 else None

    where = wait_until(settled, SLOW, lambda: "; ".join(state(mk, j) for j in burst))
    (waiting,) = [j for j, w in where.items() if w is None]
    assert sorted(w for w in where.values() if w) == ["worker-a", "worker-a", "worker-b", "worker-b"]
    for job, w in where.items():
        if w is not None:
            assert running_in(mk, job, 4) == w
    for job in burst:
        assert_one_worker(mk, job, gangs[job])
        # no worker ever held a gang it did not run: nothing was reserved in a losing worker
        assert mk.monitor.copies_in(gangs[job]) <= ({where[job]} if where[job] else set()), mk.monitor.of(
            gangs[job]
        )
    # each UltraServer runs one gang (4 pods on distinct nodes of one UltraServer)
    us_of = {
        n["metadata"]["name"]: n["metadata"]["labels"][US]
        for c in mk.workers.values()
        for n in c.list(NODES)["items"]
    }
    domains = [
        {us_of[p["spec"]["nodeName"]] for p in job_pods(mk.workers[w], NS, j)} for j, w in where.items() if w
    ]
    assert all(len(d) == 1 for d in domains) and len({next(iter(d)) for d in domains}) == 4, domains
    wl = manager_workload(mk, waiting)
    assert not wl["status"].get("nominatedClusterNames"), state(mk, waiting)
    assert record(wl)["summary"].startswith("fits in no worker now:"), record(wl)
    # One ends: the waiting gang goes where it freed room.
    done = next(j for j, w in where.items() if w == "worker-a")
    mk.manager.delete(JOBS, done, NS)
    assert running_in(mk, waiting, 4) == "worker-a"
    assert_one_worker(mk, waiting, gangs[waiting])
    assert mk.monitor.copies_in(gangs[waiting]) == {"worker-a"}


def test_a_worker_gangplugin_killed_mid_admission_never_leaves_the_gang_in_two_workers(
    mk: MK, jobs: list[str]
) -> None:
    a = mk.setup.workers["worker-a"]
    a.stop_process("gangplugin")
    try:
        job = submit(mk, jobs, 4)  # the tightest fit is one of worker-a's UltraServers of 4
        gang = manager_workload(mk, job)["metadata"]["name"]
        # worker-a reserved quota for its copy; its gang check, dead, cannot decide it
        wait_until(lambda: "worker-a" in mk.monitor.quota_in(gang), SLOW, lambda: state(mk, job))
    finally:
        a.restart("gangplugin")
    # Restarted at once, it may admit the copy before the dispatcher's answer timeout, or the
    # dispatcher gives worker-a up and worker-b gets it: the gang runs whole in one of them.
    w = running_in(mk, job, 4)
    assert_one_worker(mk, job, gang)
    assert mk.monitor.admitted_in(gang) == {w}
    if w == "worker-b":
        refusals = record(manager_workload(mk, job)).get("refusals", [])
        assert [r["worker"] for r in refusals] == ["worker-a"], refusals


def test_a_dead_worker_gangplugin_is_given_up_after_the_answer_timeout(mk: MK, jobs: list[str]) -> None:
    a = mk.setup.workers["worker-a"]
    a.stop_process("gangplugin")
    try:
        job = submit(mk, jobs, 4)
        assert running_in(mk, job, 4) == "worker-b"
        gang = manager_workload(mk, job)["metadata"]["name"]
        assert_one_worker(mk, job, gang)
        assert mk.monitor.quota_in(gang) == {"worker-a", "worker-b"}  # a held it, then gave it back
        refusals = record(manager_workload(mk, job))["refusals"]
        assert [(r["worker"], r["reason"]) for r in refusals] == [
            ("worker-a", f"no answer within {ANSWER_TIMEOUT}s")
        ]
    finally:
        a.restart("gangplugin")
    # worker-a's restarted gang check finds no copy to admit: it was deleted before b got one
    mk.monitor.caught_up()
    assert mk.monitor.admitted_in(gang) == {"worker-b"}


def test_a_node_failure_in_b_recovers_in_b(mk: MK, jobs: list[str]) -> None:
    job = submit(mk, jobs, 5)  # 5 of an UltraServer of 6: only worker-b; one node left to replace with
    assert running_in(mk, job, 5) == "worker-b"
    gang = manager_workload(mk, job)["metadata"]["name"]
    b = mk.workers["worker-b"]
    victim = sorted(p["spec"]["nodeName"] for p in job_pods(b, NS, job))[0]
    fail_nodes(b, victim)
    try:

        def whole_again() -> bool:
            pods = [p for p in job_pods(b, NS, job) if not p["metadata"].get("deletionTimestamp")]
            ok = [p for p in pods if is_true(p, "Ready") and p["spec"].get("nodeName") != victim]
            return len(ok) == 5

        wait_until(whole_again, SLOW, lambda: state(mk, job))
    finally:
        heal_nodes(b, victim)
    assert_one_worker(mk, job, gang)
    assert mk.monitor.copies_in(gang) == {"worker-b"}
    assert manager_workload(mk, job)["status"].get("clusterName") == "worker-b"


def test_a_worker_that_goes_away_is_skipped(mk: MK, jobs: list[str]) -> None:
    a = mk.setup.workers["worker-a"]
    a.stop_process("kube-apiserver")
    try:
        wait_until(
            lambda: not is_true(mk.manager.get(MULTIKUEUE_CLUSTERS, "worker-a"), "Active"),
            SLOW,
            lambda: f"worker-a inactive on the manager: {mk.manager.get(MULTIKUEUE_CLUSTERS, 'worker-a')}",
        )
        job = submit(mk, jobs, 4)  # worker-a's UltraServers of 4 would be the tighter fit
        assert running_in(mk, job, 4) == "worker-b"
        e = explain(mk, job)
        reasons = {w["name"]: w["reason"] for w in e["workers"]}
        assert reasons["worker-a"].startswith("Kueue is not connected to it"), reasons
    finally:
        a.restart("kube-apiserver")
        wait_until(
            lambda: is_true(mk.manager.get(MULTIKUEUE_CLUSTERS, "worker-a"), "Active"),
            SLOW,
            lambda: "worker-a active again on the manager",
        )
    gang = manager_workload(mk, job)["metadata"]["name"]
    assert_one_worker(mk, job, gang)
