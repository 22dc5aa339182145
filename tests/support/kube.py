"""Unique names, waiting on conditions, reading state, and gang queues made for a test."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from gangplugin.core.resources import canonical
from gangplugin.kube.client import CLUSTER_QUEUES, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.kueue_records import conditions, is_true
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from gangplugin.localcluster.probes import Deadline
from tests.support.objects import GB200, admission_check, gang_policy, queue_objects

T = TypeVar("T")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    describe_state: Callable[[], str],
    interval: float = 0.3,
) -> T:
    """Poll `condition` until it returns something truthy and return that; past `timeout`, fail
    with `describe_state()` (what was awaited and what is seen now) and the condition's last answer.
    The timeout only bounds a wait for something that must happen: no verdict rests on it. It is
    in seconds of an idle machine: on a loaded one they pass slower (`probes.Deadline`), so the
    bound holds whatever else runs beside the tests."""
    deadline, began = Deadline(timeout), time.monotonic()
    while True:
        last = condition()
        if last:
            return last
        if deadline.passed():
            raise AssertionError(
                f"timed out after {timeout:g}s of an idle machine ({time.monotonic() - began:.0f}s of wall "
                f"time): {describe_state()} (last answer: {last!r})"
            )
        time.sleep(interval)


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
    """`wait_until` for a check whose last answer is all there is to show."""
    return wait_until(check, timeout, lambda: f"waiting for {what}", interval)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return conditions(obj).get(kind)


def workload_of(client: Client, namespace: str, job_name: str) -> dict[str, Any] | None:
    items: list[dict[str, Any]] = client.list(WORKLOADS, namespace)["items"]
    for wl in items:
        if any(o.get("name") == job_name for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def job_pods(client: Client, namespace: str, job_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.list(
        PODS, namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}"
    )["items"]
    return items


def wait_active(client: Client, cluster_queue: str, timeout: float = 60) -> None:
    wait_for(
        lambda: is_true(client.get(CLUSTER_QUEUES, cluster_queue), "Active"),
        timeout,
        f"ClusterQueue {cluster_queue} Active",
    )


@contextlib.contextmanager
def gang_queues(client: Client, namespace: str) -> Iterator[Callable[..., str]]:
    """Yields `make(gpu_quota=288, node_labels=None, **policy_spec)` -> the name of a new
    GangPolicy, its AdmissionCheck, and a GB200 ResourceFlavor (its nodes those with
    `node_labels` too), ClusterQueue (Active, requiring the check) and LocalQueue; deletes the
    cluster-scoped ones afterwards."""
    made: list[tuple[Any, str]] = []

    def make(gpu_quota: int = 288, node_labels: Mapping[str, str] | None = None, **spec: Any) -> str:
        name = unique("gq")
        for res, obj in [
            (GANG_POLICIES, gang_policy(name, **spec)),
            (ADMISSION_CHECKS, admission_check(name, policy=name)),
            *queue_objects(name, namespace, gpu_quota, GB200, checks=[name], node_labels=node_labels),
        ]:
            client.create(res, obj)
            if not res.namespaced:
                made.append((res, name))
        wait_active(client, name)
        return name

    try:
        yield make
    finally:
        for res, name in reversed(made):
            with contextlib.suppress(ApiError):
                client.delete(res, name)


def flavor_quota(client: Client, cq: str) -> dict[str, int]:
    """The flavor's nominalQuota in canonical units (Kueue rewrites "10000" as "10k")."""
    obj = client.get(CLUSTER_QUEUES, cq)
    flavor = obj["spec"]["resourceGroups"][0]["flavors"][0]
    return {r["name"]: canonical(r["name"], r["nominalQuota"], r["name"]) for r in flavor["resources"]}
