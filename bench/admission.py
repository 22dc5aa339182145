"""Admission throughput through Kueue with the gang check against Kueue without any check.

Run: .venv/bin/python bench/admission.py   (starts its own local cluster; GANGPLUGIN_PORT_BASE
moves its ports, default 30000). bench/scale.py runs the same comparison on a 5,000-node cluster.

One local cluster, 500 kwok nodes (25 UltraServers of 20 8-GPU instances), one run after the
other in the same cluster: 300 Workloads of 8 one-GPU pods each that prefer one UltraServer,
submitted to a ClusterQueue without admission checks, then 300 to one whose check a no-op
controller in this process sets Ready at once (what any admission check costs Kueue), then 300
to one whose gangs pass the gangplugin.io/gang check. Workloads are created directly (no Job), so no pods
run: what is measured is admission, not scheduling, and every gang admitted with the check
stays promised (its capacity counted for the gangs after it), the check's worst case.

Rate = 300 / (first create -> last Admitted). Check latency = when a watch saw the check Ready
minus when it saw QuotaReserved, per Workload (both observed by the same watch, so its delivery
delay cancels out).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.support

import _cluster
import httpx

from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, Client
from gangplugin.kube.resources import ADMISSION_CHECKS, RESOURCE_FLAVORS
from gangplugin.localcluster.cluster import REPO, LocalCluster
from tests.support import objects
from tests.support.kube import wait_active
from tests.support.objects import (
    admission_check,
    cluster_queue,
    local_queue,
    resource_flavor,
    trainer_container,
)

GPU = "nvidia.com/gpu"
US = "topology.k8s.aws/ultraserver-id"
GANGS, GANG_SIZE = 300, 8
INSTANCE_TYPE = "ml.bench.8gpu"
SHAPE = {
    "apiVersion": "gangplugin.io/v1alpha1",
    "kind": "LocalClusterShape",
    "spec": {
        "groups": [
            {
                "name": "bench",
                "instanceType": INSTANCE_TYPE,
                "ultraServerType": "ml.u-bench",
                "availabilityZone": "us-east-1a",
                "ultraServerCount": 25,
                "instancesPerUltraServer": 20,
                "instancesPerNetworkLayer": [500, 100, 20],
                "allocatable": {"cpu": "192", "memory": "1900Gi", "pods": "110", GPU: "8"},
            }
        ]
    },
}


def queue_objects(name: str, checks: list[str], gangs: int = GANGS) -> list[tuple[Any, dict[str, Any]]]:
    """A ClusterQueue of flavor `bench` with room for `gangs` gangs, requiring `checks`, and its
    LocalQueue in the namespace of the same name."""
    cq = cluster_queue(name, "bench", gangs * GANG_SIZE, cpu="100000", memory="1000000Gi", checks=checks)
    return [(CLUSTER_QUEUES, cq), (LOCAL_QUEUES, local_queue(name, name))]


def workload(name: str, namespace: str) -> dict[str, Any]:
    """A Workload of one gang of 8 one-GPU pods that prefer one UltraServer (no Job: nothing runs)."""
    template = {
        "metadata": {"annotations": {"gangplugin.io/preferred-topology": US}},
        "spec": {"restartPolicy": "Never", "containers": [trainer_container(1, limits=False)]},
    }
    main = {"name": "main", "count": GANG_SIZE, "template": template}
    return objects.workload(name, namespace, main, queue=namespace)


class Observer:
    """Watches a namespace's Workloads; records when each was first seen reserved, checked, admitted."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.reserved: dict[str, float] = {}
        self.synced: dict[str, float] = {}  # Kueue listed the check on the Workload
        self.checked: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.stop = threading.Event()
        rv = client.list(WORKLOADS, namespace)["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self.thread.start()

    def _run(self, rv: str) -> None:
        while not self.stop.is_set():
            try:
                rv = self._watch(rv)
            except httpx.HTTPError:  # the server closed the stream: watch again from rv
                continue

    def _watch(self, rv: str) -> str:
        for event in self.client.watch(WORKLOADS, self.namespace, resource_version=rv, timeout_seconds=5):
            now = time.monotonic()
            obj = event["object"]
            rv = obj.get("metadata", {}).get("resourceVersion", rv)
            if event["type"] not in ("ADDED", "MODIFIED"):
                continue
            name = obj["metadata"]["name"]
            conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
            checks = obj.get("status", {}).get("admissionChecks") or []
            if conds.get("QuotaReserved") == "True":
                self.reserved.setdefault(name, now)
            if conds.get("Admitted") == "True":
                self.admitted.setdefault(name, now)
            if checks:
                self.synced.setdefault(name, now)
            if any(c.get("state") == "Ready" for c in checks):
                self.checked.setdefault(name, now)
        return rv


NOOP_CHECK = "noop"


class NoopCheck:
    """The cheapest possible admission-check controller, in this process: sets its check Ready
    as soon as Kueue lists it. Kueue's cost of *any* admission check, to compare ours against."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.stop = threading.Event()
        self.done: set[str] = set()
        self.pool = ThreadPoolExecutor(8)
        rv = client.list(WORKLOADS, namespace)["metadata"]["resourceVersion"]
        threading.Thread(target=self._run, args=(rv,), daemon=True).start()

    def _run(self, rv: str) -> None:
        while not self.stop.is_set():
            try:
                for event in self.client.watch(
                    WORKLOADS, self.namespace, resource_version=rv, timeout_seconds=5
                ):
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    name = obj.get("metadata", {}).get("name")
                    checks = obj.get("status", {}).get("admissionChecks") or []
                    if name and name not in self.done and any(c.get("state") == "Pending" for c in checks):
                        self.done.add(name)
                        self.pool.submit(self._ready, name)
            except httpx.HTTPError:
                continue

    def _ready(self, name: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        entry = {"name": NOOP_CHECK, "state": "Ready", "message": "", "lastTransitionTime": now}
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": self.namespace},
            "status": {"admissionChecks": [entry]},
        }
        self.client.request(
            "PATCH",
            WORKLOADS.path(self.namespace, name) + "/status",
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "bench-noop-check", "force": "true"},
        )


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _active_condition() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"type": "Active", "status": "True", "reason": "Active", "message": "", "lastTransitionTime": now}


def run(
    client: Client,
    namespace: str,
    checks: list[str],
    gangs: int = GANGS,
    quiet: bool = False,
    timeout: float | None = None,
) -> tuple[float, list[float]]:
    """`gangs` Workloads submitted at once to a new ClusterQueue `namespace` with `checks`: the
    rate they are admitted at, and each one's quota reserved -> check Ready (the last check's).
    With a `timeout`, what was admitted by then counts (else 600 s is an error)."""
    _cluster.namespace(client, namespace)
    for res, obj in queue_objects(namespace, checks, gangs):
        client.create(res, obj)
    wait_active(client, namespace)
    obs = Observer(client, namespace)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.create(WORKLOADS, workload(f"g-{i:04d}", namespace)), range(gangs)))
    while len(obs.admitted) < gangs:
        if time.monotonic() - t0 > (timeout or 600):
            if timeout is None or not obs.admitted:
                raise RuntimeError(f"{namespace}: only {len(obs.admitted)} of {gangs} admitted in 600s")
            print(f"    {namespace}: {len(obs.admitted)} of {gangs} admitted in {timeout:.0f} s")
            break
        time.sleep(0.2)
    obs.stop.set()
    elapsed = max(obs.admitted.values()) - t0
    latencies = [obs.checked[n] - obs.reserved[n] for n in obs.checked if n in obs.reserved]
    if "gang" in checks and not quiet:  # where the time goes, p50 of each step
        steps = (
            ("quota reserved -> Kueue lists the check", obs.reserved, obs.synced),
            ("check listed -> check Ready (gangplugin)", obs.synced, obs.checked),
            ("check Ready -> Admitted (Kueue)", obs.checked, obs.admitted),
        )
        for label, start, end in steps:
            print(f"  {label:<42} p50 {_p50([end[n] - start[n] for n in end if n in start]) * 1000:>7.0f} ms")
    return len(obs.admitted) / elapsed, latencies


def setup(client: Client, cluster: LocalCluster, instance_type: str = INSTANCE_TYPE) -> None:
    """The gang check and GangPolicies, a flavor `bench` of the nodes of `instance_type`, and
    the no-op check (its controller is `NoopCheck`)."""
    cluster.apply_file(client, REPO / "deploy" / "admission" / "gangpolicies.yaml")
    cluster.apply_file(client, REPO / "deploy" / "admission" / "admission-check.yaml")
    client.create(RESOURCE_FLAVORS, resource_flavor("bench", instance_type))
    client.create(ADMISSION_CHECKS, admission_check(NOOP_CHECK, controller="bench.gangplugin.io/noop"))
    client.patch(
        ADMISSION_CHECKS,
        NOOP_CHECK,
        {"status": {"conditions": [_active_condition()]}},
        subresource="status",
    )


def noop_run(client: Client, namespace: str, gangs: int = GANGS) -> float:
    """`run` with the no-op check (its controller running meanwhile): the admission rate."""
    _cluster.namespace(client, namespace)
    noop = NoopCheck(client, namespace)
    rate, _ = run(client, namespace, [NOOP_CHECK], gangs)
    noop.stop.set()
    return rate


def main() -> None:
    cluster = _cluster.start("bench-admission", SHAPE, "admission")
    client = Client.from_kubeconfig(cluster.kubeconfig)
    try:
        setup(client, cluster)
        plain_rate, _ = run(client, "bench-plain", [])
        noop_rate = noop_run(client, "bench-noop")
        gang_rate, lat = run(client, "bench-gang", ["gang"])
    finally:
        client.close()
        log = cluster.log_dir / "gangplugin.log"
        if log.exists():  # kept for a look at the controller's side; `down` deletes the state
            (REPO / ".local" / "bench-admission-gangplugin.log").write_bytes(log.read_bytes())
        cluster.down(quiet=True)
    lat.sort()
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(f"500 kwok nodes, {GANGS} Workloads of {GANG_SIZE} pods each, one run after the other")
    print(f"{'queue':<28} {'admitted/s':>11}")
    print(f"{'Kueue, no admission check':<28} {plain_rate:>11.1f}")
    print(f"{'Kueue + a no-op check':<28} {noop_rate:>11.1f}")
    print(f"{'Kueue + gangplugin.io/gang':<28} {gang_rate:>11.1f}")
    print(
        f"ratio to no check {gang_rate / plain_rate:.2f} (target >= 0.8); "
        f"to a no-op check {gang_rate / noop_rate:.2f}"
    )
    print(
        f"quota reserved -> check Ready: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms ({len(lat)} gangs)"
    )


if __name__ == "__main__":
    main()
