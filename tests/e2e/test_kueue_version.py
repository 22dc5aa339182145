"""The session runs the Kueue it says it runs (the full suite on the newest supported version,
the compatibility set, `-m compat`, `make test`'s second session, on the oldest), and that Kueue
behaves as gangplugin's backoff assumes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gangplugin.kube.client import JOBS, WORKLOADS, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import ADMISSION_CHECKS
from tests.support.cluster import E2ECluster, e2e_kueue_version, e2e_local_cluster
from tests.support.gangs import epoch
from tests.support.kube import condition, unique, wait_for, workload_of
from tests.support.objects import GB200, admission_check, gpu_job, queue_objects


@pytest.mark.compat
def test_kueue_reports_the_version_the_session_runs(cluster: E2ECluster) -> None:
    assert cluster.local, "which Kueue runs is read from the local cluster's Kueue log (KUBECONFIG unset)"
    log = e2e_local_cluster().state_dir / "logs" / "kueue.log"
    # Kueue logs its build's version once, as it starts (cmd/kueue/main.go, "Initializing").
    started = [
        entry
        for line in log.read_text().splitlines()
        if line.startswith("{") and (entry := json.loads(line)).get("msg") == "Initializing"
    ]
    assert started, f"no 'Initializing' line in {log}"
    assert started[-1]["gitVersion"] == e2e_kueue_version(), started[-1]


PROBE = "e2e.gangplugin.io/probe"
RETRY_AFTER = 10  # seconds


def _check_state(client: Client, wl: dict[str, Any], check: str, state: str, **extra: Any) -> None:
    """The check's entry as its controller (this test) writes it."""
    meta = wl["metadata"]
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = {"name": check, "state": state, "message": f"set by the test: {state}", "lastTransitionTime": at}
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {"admissionChecks": [{**entry, **extra}]},
    }
    client.request(
        "PATCH",
        WORKLOADS.path(meta["namespace"], meta["name"]) + "/status",
        body=body,
        content_type="application/apply-patch+yaml",
        params={"fieldManager": PROBE, "force": "true"},
    )


@pytest.mark.compat
def test_kueue_evicts_on_a_retry_only_once_its_requeue_after_seconds_have_passed(
    cluster: E2ECluster, namespace: str
) -> None:
    """Why a backoff does not use a Retry's requeueAfterSeconds (docs/admission.md): Kueue turns
    it into requeueState.requeueAt at once and evicts only then, so the gang would keep its nodes
    and quota for the whole backoff. Should a Kueue evict at once, this fails, and the watchdog
    could leave the backoff to Kueue on that version."""
    client = cluster.client
    name = unique("probe")
    made: list[tuple[Resource, dict[str, Any]]] = [
        (ADMISSION_CHECKS, admission_check(name, controller=PROBE)),
        *queue_objects(name, namespace, 8, GB200, checks=[name]),
    ]
    try:
        for res, obj in made:
            client.create(res, obj)
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        active = {
            "type": "Active",
            "status": "True",
            "reason": "Probe",
            "message": "the test",
            "lastTransitionTime": at,
        }
        client.patch(ADMISSION_CHECKS, name, {"status": {"conditions": [active]}}, subresource="status")
        client.create(JOBS, gpu_job(name, namespace, name, 1, 4))
        wl = wait_for(
            lambda: (w := workload_of(client, namespace, name)) and is_true(w, "QuotaReserved") and w,
            60,
            "quota reserved for the probe Job",
        )
        _check_state(client, wl, name, "Ready")
        wait_for(
            lambda: is_true(workload_of(client, namespace, name) or {}, "Admitted"), 60, "the probe admitted"
        )
        _check_state(client, wl, name, "Retry", requeueAfterSeconds=RETRY_AFTER)

        def requeue_at(w: dict[str, Any]) -> str | None:
            return (w["status"].get("requeueState") or {}).get("requeueAt")

        def answered() -> dict[str, Any] | None:
            w = workload_of(client, namespace, name)
            return w if w and (requeue_at(w) or is_true(w, "Evicted")) else None

        wl = wait_for(answered, 60, "Kueue to take up the Retry")
        at = requeue_at(wl)
        assert at and not is_true(wl, "Evicted"), f"evicted at once: {wl['status']}"

        def evicted() -> dict[str, Any] | None:
            w = workload_of(client, namespace, name)
            return w if w and is_true(w, "Evicted") else None

        eviction = condition(wait_for(evicted, RETRY_AFTER + 60, "Kueue to evict on the Retry"), "Evicted")
        assert eviction is not None
        # Evicted at requeueAt, not at the Retry: Kueue waited the backoff out first.
        assert epoch(eviction["lastTransitionTime"]) >= epoch(at), (eviction, at)
    finally:
        client.delete(JOBS, name, namespace)
        for res, obj in reversed(made):
            if not res.namespaced:
                client.delete(res, obj["metadata"]["name"])
