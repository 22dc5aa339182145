"""Gangs as the e2e tests submit them to a gang queue, and what they read back: the Workload, our
check on it, its Events, its pods Ready, the watchdog's requeues and the domain it runs in.

Pods that must never become Ready carry `NEVER_READY` (kwok's pod-ready stage skips them,
deploy/kwok/stages.yaml).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gangplugin.core.names import BIND_MODE_LABEL, REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.policy import PINNED_BIND_MODES
from gangplugin.kube.client import EVENTS, JOBS, NODES, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.kueue_records import is_true
from tests.support.kube import job_pods, unique, wait_for, workload_of
from tests.support.objects import gpu_job

US = "topology.k8s.aws/ultraserver-id"
HOSTNAME = "kubernetes.io/hostname"
NEVER_READY = "e2e.gangplugin.io/never-ready"
# The bind modes the session cluster runs (PodGroup needs a GenericWorkload cluster of its own).
SESSION_BIND_MODES = ["Ungate", "Extender"]


def submit(
    client: Client,
    namespace: str,
    queue: str,
    pods: int,
    *,
    labels: dict[str, str] | None = None,
    name: str | None = None,
    affinity: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """A Job of `pods` 4-GPU pods in `queue`, named `name` (else a new job-... name), its pod
    template annotated `annotations` (by default: required in one UltraServer); its name."""
    name = name or unique("job")
    if annotations is None:
        annotations = {REQUIRED_TOPOLOGY_ANNOTATION: US}
    job = gpu_job(
        name, namespace, queue, pods, 4, metadata={"annotations": annotations, "labels": labels or {}}
    )
    if affinity is not None:
        job["spec"]["template"]["spec"]["affinity"] = affinity
    client.create(JOBS, job)
    return name


def submit_one_per_zone(client: Client, namespace: str, queue: str, pods: int) -> str:
    """A Job whose pods must each be in another zone, required in one UltraServer (one zone):
    placement does not model inter-pod anti-affinity, so it is admitted, yet only one of its
    pods can be bound."""
    name = unique("job")
    apart = {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "topology.kubernetes.io/zone"}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}
    return submit(client, namespace, queue, pods, labels={"app": name}, name=name, affinity=affinity)


def check_of(wl: dict[str, Any]) -> dict[str, Any]:
    return next(iter(wl.get("status", {}).get("admissionChecks") or []), {})


def workload(client: Client, namespace: str, job: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(lambda: workload_of(client, namespace, job), timeout, f"the Workload of {job}")


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def events_of(client: Client, namespace: str, name: str) -> list[dict[str, Any]]:
    items = client.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")["items"]
    return [e for e in items if e.get("source", {}).get("component") == "gangplugin-admission"]


def node_us(client: Client) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(US, "") for n in client.list(NODES)["items"]}


def running_gang(client: Client, namespace: str, job: str, pods: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        items = [p for p in job_pods(client, namespace, job) if not p["metadata"].get("deletionTimestamp")]
        ok = len(items) == pods and all(is_true(p, "Ready") for p in items)
        return items if ok else None

    return wait_for(ready, 120, f"{pods} Ready pods of {job}")


def rejected(
    client: Client, namespace: str, job: str, timeout: float = 60
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's Workload once Kueue deactivated it, and the one GangRejected Event our check gave it."""

    def deactivated() -> dict[str, Any] | None:
        wl = workload_of(client, namespace, job)
        return wl if wl is not None and wl["spec"].get("active") is False else None

    wl = wait_for(deactivated, timeout, f"the Workload of {job} deactivated")
    (event,) = [
        e for e in events_of(client, namespace, wl["metadata"]["name"]) if e["reason"] == "GangRejected"
    ]
    return wl, event


def domain_of(client: Client, namespace: str, job: str) -> str:
    check = check_of(workload(client, namespace, job))
    return str(check["podSetUpdates"][0]["nodeSelector"][US])


def pinned_ultraserver(wl: Mapping[str, Any]) -> str | None:
    """The UltraServer a Workload's admission checks pinned it to (a podSetUpdate's nodeSelector),
    None while none has."""
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            if US in (update.get("nodeSelector") or {}):
                return str(update["nodeSelector"][US])
    return None


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def assert_whole_in_domain(
    client: Client, namespace: str, job: str, mode: str, pods: list[dict[str, Any]]
) -> str:
    check = check_of(workload(client, namespace, job))
    (update,) = check["podSetUpdates"]
    domain: str = update["nodeSelector"][US]
    assert update["labels"][BIND_MODE_LABEL] == mode
    us = node_us(client)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert {us[n] for n in nodes} == {domain}, nodes
    assert len(set(nodes)) == len(nodes)  # one 4-GPU pod per 4-GPU node
    for p in pods:
        assert not gates(p), p["spec"]
        pin = p["spec"]["nodeSelector"].get(HOSTNAME)
        pinned = mode in PINNED_BIND_MODES
        assert pin == (p["spec"]["nodeName"] if pinned else None), p["spec"]["nodeSelector"]
        if pinned:  # `kubectl get --show-managed-fields` (and the audit log) names who pinned it
            assert pinned_by(p) == {"gangplugin"}, p["metadata"].get("managedFields")
    return domain


def pinned_by(pod: dict[str, Any]) -> set[str]:
    """The field managers of the pod's nodeSelector (an atomic map: its last writer owns it whole)."""
    fields = ((m["manager"], m.get("fieldsV1", {})) for m in pod["metadata"].get("managedFields") or [])
    return {who for who, f in fields if "f:nodeSelector" in f.get("f:spec", {})}


def clear(client: Client, namespace: str) -> None:
    """Delete every Job of the namespace at once and wait until their pods are gone."""
    for job in client.list(JOBS, namespace)["items"]:
        with contextlib.suppress(ApiError):
            client.request(
                "DELETE",
                JOBS.path(namespace, job["metadata"]["name"]),
                body={"propagationPolicy": "Background", "gracePeriodSeconds": 0},
            )
    wait_for(lambda: not client.list(PODS, namespace)["items"] or None, 120, "the test's pods gone")


def requeued(check: dict[str, Any]) -> bool:
    """Whether a check entry is the watchdog sending its gang back whole: a Retry (no backoff:
    Kueue evicts and requeues it), or, for a requeue with a backoff, which the watchdog evicts
    itself (`watchdog._back_off`), the check back to Pending saying the backoff and its end."""
    message = str(check.get("message", ""))
    return check.get("state") == "Retry" or (
        check.get("state") == "Pending" and "after backoff" in message and "backoff until" in message
    )


def retries(client: Client, namespace: str, job: str, want: int, timeout: float) -> list[dict[str, Any]]:
    """The check each time the watchdog requeued (`requeued`) or rejected the gang, until `want`
    of them were seen.

    Read from a watch, not by polling: Kueue resets the check to Pending as soon as it has
    evicted (Retry) or deactivated (Rejected) the Workload, so either state lasts only moments,
    and the next admission pass rewrites a backoff's Pending message once it has quota again."""
    seen: list[dict[str, Any]] = []
    last = None
    deadline = time.monotonic() + timeout
    listing = client.list(WORKLOADS, namespace)
    rv = listing["metadata"]["resourceVersion"]
    objects = list(listing["items"])
    while len(seen) < want:
        for wl in objects:
            owners = wl.get("metadata", {}).get("ownerReferences", [])
            c = check_of(wl)
            key = (c.get("state"), c.get("lastTransitionTime"))
            if (
                any(o.get("name") == job for o in owners)
                and (requeued(c) or c.get("state") == "Rejected")
                and key != last
            ):
                seen.append({**c, "_wl": wl})
                last = key
        left = int(deadline - time.monotonic())
        if len(seen) >= want or left <= 0:
            break
        # A watch from the listed resourceVersion on: every write, however short-lived.
        objects = []
        for event in client.watch(WORKLOADS, namespace, resource_version=rv, timeout_seconds=min(left, 5)):
            rv = event["object"].get("metadata", {}).get("resourceVersion", rv)
            if event["type"] in ("ADDED", "MODIFIED"):
                objects.append(event["object"])
    assert len(seen) >= want, (
        f"saw {len(seen)} of {want} timeouts: {[(c['state'], c['message']) for c in seen]}"
    )
    return seen
