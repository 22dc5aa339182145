"""gangplugin's /metrics as Prometheus reads them, and the waits built on them: the events that
prove a component had its chance (a pass decided on a Workload write, the barrier holds N members)
before a test asserts that nothing happened."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gangplugin.localcluster.cluster import LocalCluster
from tests.support.kube import wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

PASS_SEEN = "gangplugin_admission_pass_seen_resource_version"
BARRIER_WAITING = "gangplugin_extender_barrier_waiting_pods"


def https(local: LocalCluster) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(local.pki_dir / "ca.crt"))


def get(local: LocalCluster, replica: int, path: str) -> httpx.Response:
    """GET `path` from replica `replica`'s health listener (HTTPS, the local cluster's CA)."""
    port = local.ports.gangplugin_replica(replica)[0]
    return httpx.get(f"https://127.0.0.1:{port}{path}", verify=https(local), timeout=5.0)


def leader(local: LocalCluster) -> int:
    """The replica that leads now (its /readyz says so); replica 1 while none answers so."""
    for n in range(1, len(local.gangplugin_replicas()) + 1):
        try:
            if get(local, n, "/readyz").text.startswith("leader"):
                return n
        except httpx.HTTPError:
            continue
    return 1


def samples(local: LocalCluster, replica: int | None = None) -> Samples:
    """The metrics of `replica`, else of the one that leads (the leader-only series are there)."""
    text = get(local, leader(local) if replica is None else replica, "/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def _samples_or_error(local: LocalCluster, replica: int | None) -> Samples | None:
    """None while the replica does not answer (being restarted)."""
    try:
        return samples(local, replica)
    except httpx.HTTPError:
        return None


def resource_version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def pass_seen(local: LocalCluster, replica: int | None = None) -> float:
    """The Workload resourceVersion the leader's last completed admission pass began with (-1
    while /metrics does not answer: being restarted)."""
    found = _samples_or_error(local, replica)
    return -1.0 if found is None else value(found, PASS_SEEN)


def wait_decided(
    local: LocalCluster, *workloads: dict[str, Any], replica: int | None = None, timeout: float = 60
) -> None:
    """Until an admission pass of the leader (`replica`, else the one leading) that began with each
    of `workloads` (as read, or newer) in its cache has completed and written its decisions: after
    this, a Workload the check did not admit is one it chose not to admit."""
    want = max(resource_version(wl) for wl in workloads)
    seen: list[float] = []

    def decided() -> bool:
        seen.append(pass_seen(local, replica))
        return seen[-1] >= want

    wait_until(
        decided,
        timeout,
        lambda: (
            f"waiting for an admission pass that saw Workload resourceVersion {want}: "
            f"the last completed pass began at {seen[-1]:.0f} (-1: /metrics did not answer)"
        ),
    )


def barrier_waiting(local: LocalCluster, namespace: str, gang: str, replica: int | None = None) -> int:
    """Members of the gang waiting at the extender's bind barrier now (0 also while restarting)."""
    found = _samples_or_error(local, replica)
    return 0 if found is None else int(value(found, BARRIER_WAITING, namespace=namespace, gang=gang))
