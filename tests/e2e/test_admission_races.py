"""Bursts and restarts against the gang check: no domain is ever promised more than it holds.

A burst of gangs reaches the check within about a second; Kueue's writes, our own writes
coming back through the watch, and a restart of gangplugin all interleave. After each burst:
the pods promised to admitted gangs in each UltraServer never exceed its usable nodes, and
every admitted gang runs whole in its domain.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from gangplugin.kube.client import JOBS, NODES, PODS, WORKLOADS, Client
from gangplugin.kube.kueue_records import is_true
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.gangs import US, check_of, submit
from tests.support.kube import job_pods, wait_for
from tests.support.objects import GB200
from tests.support.scrape import pass_seen, resource_version

GANG = 8  # pods of 4 GPUs: one GB200 node each, so an UltraServer of 18 holds two gangs


def usable_nodes(client: Client) -> Counter[str]:
    out: Counter[str] = Counter()
    for n in client.list(NODES)["items"]:
        labels = n["metadata"].get("labels") or {}
        if labels.get("node.kubernetes.io/instance-type") == GB200 and is_true(n, "Ready"):
            out[labels[US]] += 1
    return out


def _job_of(wl: dict[str, Any]) -> str:
    return next((o.get("name", "") for o in wl["metadata"].get("ownerReferences", [])), "")


def promised(workloads: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Job -> the UltraServer our check admitted it into (admitted jobs only)."""
    out = {}
    for wl in workloads.values():
        check = check_of(wl)
        if check.get("state") == "Ready":
            out[_job_of(wl)] = check["podSetUpdates"][0]["nodeSelector"][US]
    return out


def assert_never_overbooked(client: Client, namespace: str, jobs: list[str]) -> dict[str, str]:
    """Every write to the burst's Workloads, read from a watch, until the burst is decided (each
    has its quota and a completed pass of the check saw its last write); after each write no
    UltraServer is promised more pods than it has usable nodes. Returns the job -> domain."""
    capacity = usable_nodes(client)
    local = e2e_local_cluster()
    ours = set(jobs)

    def burst_of(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {wl["metadata"]["name"]: wl for wl in items if _job_of(wl) in ours}

    def check(workloads: dict[str, dict[str, Any]]) -> dict[str, str]:
        per_us = Counter(promised(workloads).values())
        over = {us: n * GANG for us, n in per_us.items() if n * GANG > capacity[us]}
        assert not over, f"UltraServers promised more pods than they hold: {over} (capacity {dict(capacity)})"
        return promised(workloads)

    def decided(workloads: dict[str, dict[str, Any]]) -> bool:
        """Every job has quota and a check state, the pass saw the newest of them, and nothing
        newer was written (a fresh list: the watch may be behind)."""
        fresh = burst_of(client.list(WORKLOADS, namespace)["items"])
        versions = {n: wl["metadata"]["resourceVersion"] for n, wl in fresh.items()}
        return (
            {_job_of(wl) for wl in fresh.values()} == ours
            and all(is_true(wl, "QuotaReserved") and check_of(wl).get("state") for wl in fresh.values())
            and versions == {n: wl["metadata"]["resourceVersion"] for n, wl in workloads.items()}
            and pass_seen(local) >= max(resource_version(wl) for wl in fresh.values())
        )

    listing = client.list(WORKLOADS, namespace)
    rv, workloads = listing["metadata"]["resourceVersion"], burst_of(listing["items"])
    check(workloads)
    deadline = time.monotonic() + 300
    while not decided(workloads):
        states = {_job_of(wl): check_of(wl).get("state") for wl in workloads.values()}
        assert time.monotonic() < deadline, (
            f"the burst not decided in 300s: {states}, pass at {pass_seen(local)}"
        )
        for event in client.watch(WORKLOADS, namespace, resource_version=rv, timeout_seconds=2):
            obj = event["object"]
            assert event["type"] != "ERROR", obj
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "BOOKMARK" or _job_of(obj) not in ours:
                continue
            if event["type"] == "DELETED":
                workloads.pop(obj["metadata"]["name"], None)
            else:
                workloads[obj["metadata"]["name"]] = obj
            check(workloads)
    return check(workloads)


def assert_admitted_gangs_run_whole(client: Client, namespace: str, domains: dict[str, str]) -> None:
    nodes_us = {n["metadata"]["name"]: n["metadata"]["labels"].get(US) for n in client.list(NODES)["items"]}
    for job, domain in domains.items():

        def whole(job: str = job) -> list[dict[str, Any]] | None:
            pods = [p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")]
            ok = len(pods) == GANG and all(is_true(p, "Ready") for p in pods)
            return pods if ok else None

        pods = wait_for(whole, 120, f"admitted gang {job} Running whole")
        assert {nodes_us[p["spec"]["nodeName"]] for p in pods} == {domain}, job


def clear(client: Client, namespace: str, jobs: list[str]) -> None:
    for job in jobs:
        client.request(
            "DELETE",
            JOBS.path(namespace, job),
            body={"propagationPolicy": "Background", "gracePeriodSeconds": 0},
        )
    wait_for(lambda: not client.list(PODS, namespace)["items"] or None, 120, "the burst's pods gone")


def burst(client: Client, namespace: str, queue: str, count: int) -> list[str]:
    return [submit(client, namespace, queue, GANG) for _ in range(count)]


def test_bursts_never_overbook_an_ultraserver(
    cluster: E2ECluster,
    namespace: str,
    gang_queue: Any,
) -> None:
    client = cluster.client
    queue = gang_queue(gpu_quota=20 * GANG * 4)
    for round_ in range(3):
        jobs = burst(client, namespace, queue, 12 + 4 * round_)
        domains = assert_never_overbooked(client, namespace, jobs)
        assert domains, "no gang of the burst was admitted"
        assert_admitted_gangs_run_whole(client, namespace, domains)
        clear(client, namespace, jobs)


def test_burst_with_a_restart_in_the_middle_never_overbooks(
    cluster: E2ECluster,
    namespace: str,
    gang_queue: Any,
) -> None:
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    queue = gang_queue(gpu_quota=16 * GANG * 4)
    for _ in range(2):
        jobs = burst(client, namespace, queue, 8)
        e2e_local_cluster().restart("gangplugin")  # SIGKILL while the burst is being admitted
        jobs += burst(client, namespace, queue, 8)
        domains = assert_never_overbooked(client, namespace, jobs)
        assert domains, "no gang of the burst was admitted"
        assert_admitted_gangs_run_whole(client, namespace, domains)
        clear(client, namespace, jobs)
