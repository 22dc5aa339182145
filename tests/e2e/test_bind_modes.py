"""The guarantees of a gang, in each `GangPolicy.spec.bindMode`, on the real local cluster.

Ungate (the default): pods are created behind the placement gate; gangplugin pins each to its
node and removes the gate; kube-scheduler binds it. Extender: the extender's filter and bind
barrier bind the gang. In both: the gang runs whole inside its domain; a gang left partly bound
is requeued whole after `unscheduledTimeout`; plain GPU pods racing it for the same nodes never
leave it half-bound for good; a restart of gangplugin in the middle of a release completes it.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from gangplugin.core.names import PLACEMENT_GATE, REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.policy import PINNED_BIND_MODES
from gangplugin.kube.client import EVENTS, JOBS, NAMESPACES, PODS, WORKLOADS, Client, Resource
from gangplugin.server.main import DEFAULT_COMPONENTS
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.gangs import (
    HOSTNAME,
    SESSION_BIND_MODES,
    US,
    assert_whole_in_domain,
    check_of,
    gates,
    node_us,
    requeued,
    retries,
    running_gang,
    submit,
    submit_one_per_zone,
    workload,
)
from tests.support.grpcauth import SERVICE_ACCOUNTS
from tests.support.kube import condition, job_pods, unique, wait_for, wait_until
from tests.support.nodes import fail_nodes, heal_nodes
from tests.support.objects import GB200, gpu_job, trainer_pod_spec


def _holds_node(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and not pod["metadata"].get("deletionTimestamp")


@pytest.mark.compat
@pytest.mark.parametrize("mode", SESSION_BIND_MODES)
def test_gang_runs_whole_in_its_domain(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(bindMode=mode), 8)
    assert_whole_in_domain(client, namespace, job, mode, running_gang(client, namespace, job, 8))


@pytest.mark.parametrize("mode", SESSION_BIND_MODES)
def test_a_gang_that_stays_partly_bound_is_requeued_whole(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    """A gang only one of whose pods can be bound (`submit_one_per_zone`): after
    unscheduledTimeout it is evicted whole: no pod of it stays bound, in either mode."""
    client = cluster.client
    queue = gang_queue(
        bindMode=mode, unscheduledTimeout="3s", readyTimeout="10m", requeue={"backoffBaseSeconds": 600}
    )
    name = submit_one_per_zone(client, namespace, queue, 2)
    (retry,) = retries(client, namespace, name, 1, 120)
    assert requeued(retry) and "after backoff 10m" in retry["message"], retry
    # 0/2 with the extender's bind barrier (all or nothing), 1/2 with kube-scheduler alone
    assert "/2 pods bound to nodes" in retry["message"] and "unscheduledTimeout 3s" in retry["message"]

    # Requeued whole, at once (not after the 10m backoff): the Job is suspended again, none of
    # its pods keeps a node, and the check holds it back for the backoff.
    def bound() -> list[str]:
        pods = job_pods(client, namespace, name)
        return [f"{p['metadata']['name']}@{p['spec']['nodeName']}" for p in pods if _holds_node(p)]

    def state() -> str:
        wl = workload(client, namespace, name)
        conditions = [(c["type"], c["status"], c.get("reason")) for c in wl["status"].get("conditions") or []]
        return f"still bound after the eviction: {bound()}; Workload conditions {conditions}"

    def suspended() -> bool:
        return client.get(JOBS, name, namespace)["spec"]["suspend"] is True

    # Far less than the 10m backoff: the eviction released the nodes, not the backoff's end. With
    # the extender's barrier no pod was ever bound: the Job suspended again is what shows it, and
    # Kueue writes it after the check's Retry, seconds later on a loaded machine.
    wait_until(lambda: not bound() and suspended(), 120, lambda: f"{state()}; Job suspended {suspended()}")
    wait_for(
        lambda: "backoff until" in check_of(workload(client, namespace, name)).get("message", ""),
        60,
        "the check to hold the gang back for its backoff",
    )
    assert client.get(JOBS, name, namespace)["spec"]["suspend"] is True


def _plain_pods(client: Client, namespace: str, count: int, domain: str | None = None) -> list[str]:
    """4-GPU pods with no gang, for any GB200 node (or only those of UltraServer `domain`), all
    created at once."""
    names = []
    for _ in range(count):
        name = unique("plain")
        spec = trainer_pod_spec(4)
        spec["nodeSelector"] = {"node.kubernetes.io/instance-type": GB200, **({US: domain} if domain else {})}
        client.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {PLAIN: "true"}},
                "spec": spec,
            },
        )
        names.append(name)
    return names


PLAIN = "e2e.gangplugin.io/plain"


class Watched:
    """Every version of the objects of one resource in a namespace since it was made, read from
    a watch: states that last only moments (a check's Retry, a pod's Unschedulable) included."""

    def __init__(self, client: Client, resource: Resource, namespace: str) -> None:
        listing = client.list(resource, namespace)
        self.versions: list[dict[str, Any]] = list(listing["items"])
        self._rv = str(listing["metadata"]["resourceVersion"])
        self._client, self._resource, self._namespace = client, resource, namespace
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for ev in self._client.watch(
                    self._resource, self._namespace, resource_version=self._rv, timeout_seconds=30
                ):
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"the watch of {self._resource.plural} failed: {ev['object']}")
                    self._rv = ev["object"]["metadata"].get("resourceVersion", self._rv)
                    if ev["type"] != "BOOKMARK":
                        self.versions.append(ev["object"])
                    if self._stop.is_set():
                        return
        except Exception as err:  # after `stop`, the client closing under an idle watch
            if not self._stop.is_set():
                self._error = err

    def stop(self) -> list[dict[str, Any]]:
        """What was seen; fails when the watch broke before (something may have been missed)."""
        self._stop.set()
        assert self._error is None, f"the watch of {self._resource.plural} broke: {self._error!r}"
        return list(self.versions)


def _unschedulable(pod: dict[str, Any]) -> str | None:
    """kube-scheduler's message when it found no node for the pod (not merely gated)."""
    c = condition(pod, "PodScheduled")
    if c is None or c.get("reason") != "Unschedulable":
        return None
    return str(c.get("message") or "Unschedulable")


def _job_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")


def _requeues(workloads: list[dict[str, Any]]) -> list[str]:
    return [
        f"{c['state']}: {c.get('message')}"
        for wl in workloads
        if requeued(c := check_of(wl)) or c.get("state") == "Rejected"
    ]


def _failed_pins(pods: list[dict[str, Any]], job: str) -> list[str]:
    """Members of `job` kube-scheduler could not bind once pinned: each left the gang partly bound."""
    return sorted(
        {f"{p['metadata']['name']}: {why}" for p in pods if _job_of(p) == job and (why := _unschedulable(p))}
    )


def _whole_free_nodes(client: Client, domain: str) -> list[str]:
    """The nodes of UltraServer `domain` that no pod holds a GPU of (every GB200 node has 4)."""
    held = {
        p["spec"]["nodeName"]
        for p in client.list(PODS)["items"]
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    }
    return sorted(n for n, us in node_us(client).items() if us == domain and n not in held)


def _admitted_domain(client: Client, namespace: str, job: str) -> str:
    """The UltraServer the gang check admitted `job` to, as soon as it is admitted."""

    def domain() -> str | None:
        updates = check_of(workload(client, namespace, job)).get("podSetUpdates") or []
        return next((u["nodeSelector"][US] for u in updates if US in (u.get("nodeSelector") or {})), None)

    return wait_for(domain, 60, f"the admission of {job}", interval=0.02)


def _decided(client: Client, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """The pods named, once kube-scheduler has either bound each or found it no node."""

    def all_decided() -> list[dict[str, Any]] | None:
        pods = [p for p in client.list(PODS, namespace)["items"] if p["metadata"]["name"] in names]
        done = [p for p in pods if p["spec"].get("nodeName") or _unschedulable(p)]
        return pods if len(done) == len(names) else None

    return wait_for(all_decided, 60, f"kube-scheduler to decide {len(names)} plain pods")


@pytest.mark.parametrize("mode", SESSION_BIND_MODES)
def test_plain_gpu_pods_racing_a_gang_never_take_its_capacity(
    cluster: E2ECluster, namespace: str, gang_queue: Any, mode: str
) -> None:
    """30 plain GPU pods created the moment a 16-pod gang is admitted: the extender keeps them
    off the capacity promised to the gang, so it runs whole in its domain, is never requeued and
    (Ungate) no pinned member is ever left without its node."""
    client = cluster.client
    queue = gang_queue(bindMode=mode, unscheduledTimeout="10s", requeue={"backoffBaseSeconds": 600})
    size = 16
    workloads, pods = Watched(client, WORKLOADS, namespace), Watched(client, PODS, namespace)
    job = submit(client, namespace, queue, size)
    _admitted_domain(client, namespace, job)
    _plain_pods(client, namespace, 30)  # racing for the GB200 nodes while the gang is placed
    running = running_gang(client, namespace, job, size)
    assert not _requeues(workloads.stop())
    if mode in PINNED_BIND_MODES:
        assert not _failed_pins(pods.stop(), job)
    else:
        pods.stop()
    assert_whole_in_domain(client, namespace, job, mode, running)


def test_plain_pods_made_as_an_ungate_gang_is_admitted_are_kept_off_its_promised_capacity(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """Issue 21's race, made certain: plain 4-GPU pods pinned to the UltraServer an 8-pod Ungate
    gang was just admitted to, created the moment it is admitted, and decided by kube-scheduler
    before the pins: the gang's pods cannot be created (their ServiceAccount does not exist yet)
    until every plain pod is bound or found no node. There are 4 more plain pods than the
    domain has free nodes beside the gang's 8: the extender keeps them off what the gang was
    promised, and the gang is then pinned and bound whole there, first time. (Before, nothing
    held that capacity between the admission and the pins: the plain pods all bound, and the
    gang no longer fitted, or was left partly bound when its plan raced their bindings.)"""
    client = cluster.client

    # A bound pod of an earlier test that is being deleted, or whose namespace is (the namespace
    # controller deletes its pods a while later), holds a node now and frees it mid-test (a plain
    # pod could then take it): wait until none is left. Unbound ones hold nothing, nor do terminal
    # ones (kube-scheduler's informer drops Succeeded and Failed pods, and so do we), which a
    # finalizer can keep for good: Kueue's stays on a pod-group member whose Workload the
    # namespace's deletion removed first.
    def leaving() -> list[str]:
        ending = {
            n["metadata"]["name"]
            for n in client.list(NAMESPACES)["items"]
            if n["metadata"].get("deletionTimestamp")
        }
        return [
            f"{p['metadata']['namespace']}/{p['metadata']['name']} on {p['spec']['nodeName']} "
            f"({p['status'].get('phase')}, finalizers {p['metadata'].get('finalizers')})"
            for p in client.list(PODS)["items"]
            if (p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in ending)
            and p["spec"].get("nodeName")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    wait_until(
        lambda: not leaving(),
        180,
        lambda: f"a quiet cluster: bound pods of earlier tests still being deleted: {leaving()}",
    )
    queue = gang_queue(bindMode="Ungate", requeue={"backoffBaseSeconds": 600})
    size, extra, account = 8, 4, unique("held")
    workloads, pods = Watched(client, WORKLOADS, namespace), Watched(client, PODS, namespace)
    name = unique("job")
    job = gpu_job(
        name, namespace, queue, size, 4, metadata={"annotations": {REQUIRED_TOPOLOGY_ANNOTATION: US}}
    )
    job["spec"]["template"]["spec"].update(serviceAccountName=account, automountServiceAccountToken=False)
    client.create(JOBS, job)
    domain = _admitted_domain(client, namespace, name)
    free = _whole_free_nodes(client, domain)
    plain = _plain_pods(client, namespace, len(free) - size + extra, domain)
    decided = _decided(client, namespace, plain)
    refused = [p["metadata"]["name"] for p in decided if not p["spec"].get("nodeName")]
    assert len(refused) >= extra, f"plain pods took the gang's promised nodes: refused only {refused}"
    left = _whole_free_nodes(client, domain)
    assert len(left) >= size, f"{domain} keeps {left} for the gang, {size} promised"
    assert not job_pods(client, namespace, name), "the gang's pods were to be held back until now"
    client.create(SERVICE_ACCOUNTS, {"metadata": {"name": account, "namespace": namespace}})
    running = running_gang(client, namespace, name, size)
    assert not _requeues(workloads.stop())
    assert not _failed_pins(pods.stop(), name)
    assert_whole_in_domain(client, namespace, name, "Ungate", running)


def test_ungate_needs_neither_the_extender_nor_a_scheduler_configured_with_it(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """gangplugin without the extender component (nothing listens on its port) and
    kube-scheduler without the extender: an Ungate gang is still pinned and bound whole in its
    domain, by the ungater component alone."""
    assert cluster.local, "this test restarts gangplugin and kube-scheduler (KUBECONFIG unset)"
    local = e2e_local_cluster()
    without = ",".join(c for c in DEFAULT_COMPONENTS if c != "extender")
    local.restart("kube-scheduler", extender=False)
    local.restart("gangplugin", args=(f"--components={without}",))
    try:
        with pytest.raises(ConnectionRefusedError):  # nothing listens where the extender would
            socket.create_connection(("127.0.0.1", local.ports.gangplugin_extender), timeout=5).close()
        client = cluster.client
        job = submit(client, namespace, gang_queue(bindMode="Ungate"), 8)
        assert_whole_in_domain(client, namespace, job, "Ungate", running_gang(client, namespace, job, 8))
    finally:
        local.restart("gangplugin")
        local.restart("kube-scheduler")


def test_gangplugin_killed_while_releasing_an_ungate_gang_completes_it(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """gangplugin is SIGKILLed as soon as the first pod of a 32-pod gang is pinned (most of the
    gang is then still gated); the restarted ungater pins the rest next to the pinned ones."""
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    queue = gang_queue(bindMode="Ungate")
    size = 32
    name = unique("job")
    client.create(
        JOBS,
        gpu_job(
            name, namespace, queue, size, 2, metadata={"annotations": {"gangplugin.io/required-topology": US}}
        ),
    )

    def released_in_part() -> list[dict[str, Any]] | None:
        pods = job_pods(client, namespace, name)
        pinned = [p for p in pods if not gates(p)]
        return pods if len(pods) == size and pinned else None

    pods = wait_for(released_in_part, 120, f"the first pin of {name}", interval=0.02)
    gated_at_kill = sum(1 for p in pods if PLACEMENT_GATE in gates(p))
    e2e_local_cluster().restart("gangplugin")
    print(f"gangplugin killed with {gated_at_kill} of {size} pods still gated")
    pods = running_gang(client, namespace, name, size)
    check = check_of(workload(client, namespace, name))
    domain = check["podSetUpdates"][0]["nodeSelector"][US]
    us = node_us(client)
    assert {us[p["spec"]["nodeName"]] for p in pods} == {domain}
    for p in pods:
        assert p["spec"]["nodeSelector"][HOSTNAME] == p["spec"]["nodeName"] and not gates(p)


def test_a_pod_pinned_to_a_node_that_fails_before_it_is_bound_is_made_again_and_pinned_elsewhere(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """A pin is final, so with kube-scheduler down while an 8-pod Ungate gang is pinned, one
    pinned node failing strands its pod. gangplugin deletes it, the Job makes it again behind
    the gate, and it is pinned elsewhere in the gang's UltraServer; with kube-scheduler back the
    gang runs whole there, off the failed node."""
    assert cluster.local, "this test stops kube-scheduler, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    local = e2e_local_cluster()
    queue = gang_queue(bindMode="Ungate")
    local.stop_process("kube-scheduler")
    failed: str | None = None
    try:
        job = submit(client, namespace, queue, 8)

        def pinned(avoid: str | None, gone: str | None) -> list[dict[str, Any]] | None:
            pods = [p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")]
            pins = [p["spec"].get("nodeSelector", {}).get(HOSTNAME) for p in pods]
            names = {p["metadata"]["name"] for p in pods}
            whole = len(pods) == 8 and all(pins) and not any(gates(p) for p in pods)
            return pods if whole and avoid not in pins and gone not in names else None

        pods = wait_for(lambda: pinned(None, None), 120, "8 pods pinned")
        assert not any(p["spec"].get("nodeName") for p in pods), "kube-scheduler is down: nothing bound"
        stranded = min(pods, key=lambda p: p["metadata"]["name"])
        failed = stranded["spec"]["nodeSelector"][HOSTNAME]
        fail_nodes(client, failed)
        pods = wait_for(
            lambda: pinned(failed, stranded["metadata"]["name"]), 90, f"a pod pinned again off {failed}"
        )
        wl = workload(client, namespace, job)["metadata"]["name"]
        events = client.list(EVENTS, namespace, field_selector=f"involvedObject.name={wl}")["items"]
        lost = [e["message"] for e in events if e["reason"] == "PinnedNodeLost"]
        assert len(lost) == 1 and f"pinned to {failed}, which is NotReady" in lost[0], lost
    finally:
        local.restart("kube-scheduler")
        if failed is not None:
            heal_nodes(client, failed)
    pods = running_gang(client, namespace, job, 8)
    assert_whole_in_domain(client, namespace, job, "Ungate", pods)
    assert failed not in {p["spec"]["nodeName"] for p in pods}
