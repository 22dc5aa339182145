"""What the MultiKueue e2e tests watch in every worker: each copy of a gang's Workload and each
pod of its job, as the worker's API server reports them (watches, not polls: a state held for a
moment is still seen), kept per gang and worker for the invariants the tests assert."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gangplugin.kube.client import PODS, WORKLOADS, Client
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, wait_all_synced
from gangplugin.kube.kueue_records import is_true

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _gang_check_ready(wl: Mapping[str, Any]) -> bool:
    return any(s.get("state") == "Ready" for s in (wl.get("status") or {}).get("admissionChecks") or [])


@dataclass
class Seen:
    """What one worker ever showed of one gang."""

    copy: bool = False
    quota_reserved: bool = False
    admitted: bool = False  # Kueue's Admitted, or the gang check Ready
    bound_pods: set[str] = field(default_factory=set)


class Monitor:
    """Every worker's Workloads and pods in `namespace`, from the moment it starts."""

    def __init__(self, workers: Mapping[str, Client], namespace: str) -> None:
        self._lock = threading.Lock()
        self.seen: dict[str, dict[str, Seen]] = defaultdict(dict)  # gang (Workload name) -> worker -> Seen
        self.by_job: dict[str, dict[str, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )  # job -> worker -> pods
        self._dispatcher = Dispatcher("e2e-monitor")
        self._informers: list[Informer[Any]] = []
        for name, client in workers.items():
            wls: Informer[Any] = Informer(
                client, WORKLOADS, lambda o: o, namespace=namespace, name=f"mon-{name}-wl"
            )
            pods: Informer[Any] = Informer(
                client, PODS, lambda o: o, namespace=namespace, name=f"mon-{name}-pods"
            )
            wls.add_handler(partial(self._workload, name), self._dispatcher)
            pods.add_handler(partial(self._pod, name), self._dispatcher)
            self._informers += [wls, pods]

    def start(self) -> None:
        self._dispatcher.start()
        for inf in self._informers:
            inf.start()
        assert wait_all_synced(self._informers, 120), "the monitor's watches did not sync"

    def stop(self) -> None:
        for inf in self._informers:
            inf.stop()
        self._dispatcher.stop()

    def caught_up(self) -> None:
        assert self._dispatcher.caught_up(60)

    def _workload(self, worker: str, _kind: str, _old: object, wl: Mapping[str, Any] | None) -> None:
        if wl is None:
            return
        with self._lock:
            s = self.seen[wl["metadata"]["name"]].setdefault(worker, Seen())
            s.copy = True
            s.quota_reserved |= is_true(wl, "QuotaReserved")
            s.admitted |= is_true(wl, "Admitted") or (is_true(wl, "QuotaReserved") and _gang_check_ready(wl))

    def _pod(self, worker: str, _kind: str, _old: object, pod: Mapping[str, Any] | None) -> None:
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            return
        job = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
        if job:
            with self._lock:
                self.by_job[job][worker].add(pod["metadata"]["name"])

    def of(self, gang: str) -> dict[str, Seen]:
        with self._lock:
            return dict(self.seen.get(gang, {}))

    def workers_with_pods(self, job: str) -> set[str]:
        with self._lock:
            return {w for w, pods in self.by_job.get(job, {}).items() if pods}

    def admitted_in(self, gang: str) -> set[str]:
        return {w for w, s in self.of(gang).items() if s.admitted}

    def copies_in(self, gang: str) -> set[str]:
        return {w for w, s in self.of(gang).items() if s.copy}

    def quota_in(self, gang: str) -> set[str]:
        return {w for w, s in self.of(gang).items() if s.quota_reserved}
