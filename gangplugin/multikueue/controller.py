"""The dispatcher on a MultiKueue manager cluster (Kueue configured with `multiKueue.dispatcherName:
gangplugin.io/dispatcher`, its External mode): for every Workload whose MultiKueue check is
Pending with quota reserved on the manager, it names the one worker cluster Kueue copies it to
(`status.nominatedClusterNames`), chosen by `core.dispatch.dispatch`, and gives a worker up as
`core.dispatch.step` says.

What it reads: on the manager, the Workloads, the MultiKueue AdmissionChecks and their
MultiKueueConfigs (which workers a Workload may go to), the MultiKueueClusters (whether Kueue is
connected to each) and their kubeconfig Secrets in Kueue's namespace; in each worker, through
that kubeconfig, what `worker.WorkerView` reads. What it writes, on the manager only: the
Workload's `status.nominatedClusterNames` (server-side apply as field manager
`gangplugin-dispatcher`, conditional on the resourceVersion it decided on) and its
`gangplugin.io/dispatch` annotation (`core.dispatch.DispatchRecord`: the worker nominated and
since when, refusals, every worker's verdict), written first, so a restarted dispatcher resumes
from it. Kueue's MutatingAdmissionPolicy `clear-nominated-cluster-names` (shipped with Kueue
v0.19) empties the nomination when Kueue records the worker that admitted the gang or evicts it.

Work items (one WorkQueue, keys collapse): "workers" connects to (or drops) worker clusters as
MultiKueueClusters and their Secrets change; "pass" decides every waiting gang, in Kueue's
queue order (`core.admission.admission_queue`), on one snapshot per worker and level order:
nominations in flight are charged first, and the gangs Kueue recorded in a worker whose copy our
watch of it does not show admitted yet, so a burst never over-promises a worker.
"""

from __future__ import annotations

import base64
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from gangplugin.core.admission import admission_queue
from gangplugin.core.dispatch import (
    ANSWER_TIMEOUT,
    REFUSAL_TTL,
    Copy,
    CopyState,
    DispatchRecord,
    Fit,
    NominationAction,
    NominationStep,
    Refusal,
    Worker,
    commit,
    dispatch,
    hold,
    requests_of,
    step,
    taken,
)
from gangplugin.core.errors import InputError
from gangplugin.core.names import DISPATCH_ANNOTATION, MULTIKUEUE_CONTROLLER
from gangplugin.core.placement import Gang
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON, WORKLOADS, ApiError, Client
from gangplugin.kube.config import ConfigError
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, object_key
from gangplugin.kube.resources import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS, SECRETS
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.multikueue.connections import WorkerConnection, client_from_kubeconfig
from gangplugin.multikueue.worker import Target
from gangplugin.readmodel.gangs import gang_of
from gangplugin.readmodel.records import workload_record

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangplugin-dispatcher"
PASS, WORKERS = "pass", "workers"
SECRET_KEY = "kubeconfig"  # MultiKueue's key in a kubeconfig Secret


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    kueue_namespace: str = "kueue-system"  # where MultiKueue's kubeconfig Secrets are
    answer_timeout: float = ANSWER_TIMEOUT
    refusal_ttl: float = REFUSAL_TTL


@dataclass
class _Pass:
    """One pass's working state: snapshots per (worker, levels), built on first use and charged
    as gangs are nominated, and the quota taken per (worker, ClusterQueue)."""

    snapshots: dict[tuple[str, tuple[str, ...]], Snapshot] = field(default_factory=dict)
    taken: dict[tuple[str, str], Counter[tuple[str, str]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A manager Workload the pass decides: its MultiKueue check's workers and what to do."""

    wl: JSON
    workers: tuple[str, ...]
    record: DispatchRecord
    copies: Mapping[str, Copy]
    step_: NominationStep


Connect = Callable[[str, bytes, Callable[[], None]], WorkerConnection]


def connect(name: str, kubeconfig: bytes, on_change: Callable[[], None]) -> WorkerConnection:
    conn = WorkerConnection(name, client_from_kubeconfig(kubeconfig), on_change)
    conn.start()
    return conn


class MultiKueueDispatcher:
    def __init__(
        self,
        client: Client,
        informer: Callable[..., Informer[Any]],
        dispatcher: Dispatcher,
        settings: DispatchSettings | None = None,
        clock: Callable[[], float] = time.time,
        connector: Connect = connect,
    ) -> None:
        self.client = client
        self.settings = settings or DispatchSettings()
        self.clock = clock
        self.connector = connector
        self.workloads = informer(WORKLOADS)
        self.checks = informer(ADMISSION_CHECKS)
        self.configs = informer(MULTIKUEUE_CONFIGS)
        self.clusters = informer(MULTIKUEUE_CLUSTERS)
        self.secrets = informer(SECRETS, namespace=self.settings.kueue_namespace)
        self.queue = WorkQueue()
        self.connections: dict[str, WorkerConnection] = {}
        self._sources: dict[str, tuple[str, bytes]] = {}  # worker -> (Secret, kubeconfig) it uses
        self._problems: dict[str, str] = {}  # worker -> why there is no connection to it
        # Workload key -> (the versions its last write replaced, the Workload as written): what
        # this dispatcher wrote and its cache does not show yet. A pass on a cache that lags
        # would not see its own nomination, charge nothing for it and nominate the same capacity
        # again (as kube-scheduler assumes a pod it is binding).
        self._written: dict[str, tuple[set[str], JSON]] = {}
        self.workloads.add_handler(lambda _k, _o, _n: self.queue.add(PASS), dispatcher)
        for inf in (self.checks, self.configs, self.clusters, self.secrets):
            inf.add_handler(lambda _k, _o, _n: self._changed_workers(), dispatcher)

    def _changed_workers(self) -> None:
        self.queue.add(WORKERS)
        self.queue.add(PASS)

    def reconcile(self, key: str) -> float | None:
        if key == WORKERS:
            self.sync_workers()
            return None
        return self.run()

    def stop(self) -> None:
        for conn in self.connections.values():
            conn.stop()
        self.connections.clear()

    # -- worker connections --------------------------------------------------------------------------

    def _worker_names(self) -> set[str]:
        return {w for workers in self.multikueue_checks().values() for w in workers}

    def sync_workers(self) -> None:
        """Connect to every worker a MultiKueue check may send gangs to, through its
        MultiKueueCluster's kubeconfig Secret; reconnect when the Secret changes."""
        wanted = self._worker_names()
        for name in sorted(set(self.connections) - wanted):
            self.connections.pop(name).stop()
            self._sources.pop(name, None)
        for name in sorted(wanted):
            source, problem = self._kubeconfig(name)
            if source is None:
                self._problems[name] = problem
                if name in self.connections:
                    self.connections.pop(name).stop()
                    self._sources.pop(name, None)
                continue
            if self._sources.get(name) == source and name in self.connections:
                continue
            if name in self.connections:
                self.connections.pop(name).stop()
            try:
                self.connections[name] = self.connector(name, source[1], lambda: self.queue.add(PASS))
            except ConfigError as err:
                self._problems[name] = f"its kubeconfig Secret {source[0]} cannot be used: {err}"
                continue
            self._sources[name] = source
            self._problems.pop(name, None)
            log.info("connected to worker %s (kubeconfig Secret %s)", name, source[0])

    def _kubeconfig(self, name: str) -> tuple[tuple[str, bytes] | None, str]:
        cluster = self.clusters.get(name)
        if cluster is None:
            return None, f"no MultiKueueCluster {name}"
        kc = ((cluster.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        if not kc:
            return None, "its MultiKueueCluster has no kubeConfig (only kubeconfig Secrets are read)"
        if kc.get("locationType", "Secret") != "Secret":
            return None, "its kubeconfig is a path in Kueue's pod (only kubeconfig Secrets are read)"
        ns = self.settings.kueue_namespace
        secret = self.secrets.get(f"{ns}/{kc.get('location')}")
        if secret is None:
            return None, f"no Secret {ns}/{kc.get('location')} (its kubeconfig)"
        raw = (secret.get("data") or {}).get(SECRET_KEY)
        if not raw:
            return None, f"Secret {ns}/{kc.get('location')} has no {SECRET_KEY!r} key"
        try:
            data = base64.b64decode(raw)
        except ValueError:
            return None, f"Secret {ns}/{kc.get('location')}: {SECRET_KEY!r} is not base64"
        return (f"{ns}/{kc.get('location')}", data), ""

    def connected(self, name: str) -> str | None:
        """None when the worker can be asked about gangs now, else why not."""
        known, why = self._readiness(name)
        return None if known and not why else why or "not connected yet"

    def _readiness(self, name: str) -> tuple[bool, str]:
        """(whether its state is known, why it cannot take gangs: "" when it can). Not known:
        its connection is being made or its caches have not synced, as after a restart; a pass
        then waits rather than give up the gangs nominated to it."""
        if name in self._problems:
            return True, self._problems[name]
        active = rec.conditions(self.clusters.get(name) or {}).get("Active") or {}
        if active.get("status") == "False":
            why = active.get("message") or active.get("reason") or "no reason given"
            return True, f"Kueue is not connected to it ({why})"
        conn = self.connections.get(name)
        if conn is None or not conn.synced():
            return False, "its caches are not synced yet"
        if active.get("status") != "True":
            return False, "Kueue has not connected to it yet"
        return True, ""

    def settling(self) -> list[str]:
        """The workers whose state is not known yet (see `_readiness`)."""
        return sorted(w for w in self._worker_names() if not self._readiness(w)[0])

    # -- which Workloads are ours -------------------------------------------------------------------

    def multikueue_checks(self) -> dict[str, tuple[str, ...]]:
        """MultiKueue AdmissionCheck name -> the workers of its MultiKueueConfig."""
        out: dict[str, tuple[str, ...]] = {}
        for ac in self.checks.items():
            spec = ac.get("spec") or {}
            if spec.get("controllerName") != MULTIKUEUE_CONTROLLER:
                continue
            params = spec.get("parameters") or {}
            config = (
                self.configs.get(str(params.get("name", "")))
                if params.get("kind") == "MultiKueueConfig"
                else None
            )
            clusters = ((config or {}).get("spec") or {}).get("clusters") or []
            out[str(ac["metadata"]["name"])] = tuple(str(c) for c in clusters)
        return out

    # -- the pass -------------------------------------------------------------------------------------

    def run(self) -> float | None:
        now = self.clock()
        checks = self.multikueue_checks()
        if not checks:
            return None
        if self.settling():
            return 0.5  # decided on half a picture, a restart would give up sound nominations
        entries: dict[str, tuple[JSON, str]] = {}
        queued = []
        seen = set()
        landed: list[tuple[JSON, str]] = []  # gangs Kueue recorded in a worker, and which
        for cached in self.workloads.items():
            wl = self._latest(cached)
            parsed = workload_record(wl)
            seen.add(parsed.key)
            entry = parsed.check(checks)
            if entry is None:
                continue
            entries[parsed.key] = (wl, entry.name)
            queued.append(parsed.queued(entry.state))
            cluster = (wl.get("status") or {}).get("clusterName")
            if cluster and not parsed.finished:
                landed.append((wl, str(cluster)))
        for gone in set(self._written) - seen:
            del self._written[gone]
        waiting: list[_Waiting] = []
        for q in admission_queue(queued).candidates:
            wl, check = entries[q.key]
            status = wl.get("status") or {}
            if status.get("clusterName") or not _others_ready(wl, check):
                continue  # Kueue records the worker, or waits for the manager's other checks
            workers = checks[check]
            record = DispatchRecord.from_dict(_annotation(wl))
            copies = {w: self.connections[w].view.copy(q.key) for w in workers if self.connected(w) is None}
            nominated = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
            since = (
                record.nominated_at
                if record.nominated_at is not None and nominated[:1] == (record.nominated,)
                else q.quota_reserved_at
            )
            s = step(nominated, copies, set(copies), since, now, self.settings.answer_timeout)
            waiting.append(_Waiting(wl, workers, record, copies, s))
        ps = _Pass()
        wake: list[float] = []
        # Kueue records a gang's worker once its copy is admitted there, as its own watch of the
        # worker shows it; ours may not show it yet, and the worker's capacity would not count it.
        for wl, cluster in landed:
            if self.connected(cluster) is None:
                key = object_key(wl)
                if self.connections[cluster].view.copy(key).state is not CopyState.ADMITTED:
                    self._hold(ps, wl, cluster, now)
        # Nominations in flight next: the gangs decided after them must see their capacity.
        for w in waiting:
            s = w.step_
            there = w.copies.get(s.worker or "", Copy(CopyState.ABSENT)).state
            if s.action is NominationAction.KEEP and s.worker is not None and there is not CopyState.ADMITTED:
                self._hold(ps, w.wl, s.worker, now)
            if s.wake_at is not None:
                wake.append(s.wake_at)
        rerun = False
        for w in waiting:
            try:
                again = self._act(ps, w, now)
            except ApiError as err:
                log.warning("dispatch of %s not written: %s", object_key(w.wl), err)
                rerun = True
                continue
            if again is not None:
                wake.append(again)
        if rerun:
            return 0.5
        return max(0.05, min(wake) - now) if wake else None

    def _act(self, ps: _Pass, w: _Waiting, now: float) -> float | None:
        s, record, wl = w.step_, w.record, w.wl
        ttl = self.settings.refusal_ttl
        if s.action is NominationAction.ADOPT:
            adopted = replace(
                record, nominated=s.worker, nominated_at=now, summary=f"adopted {s.worker}: {s.reason}"
            )
            self._nominate(wl, adopted, [s.worker])
        elif s.action is NominationAction.WITHDRAW:
            refusals = record.counting(now, ttl) + ((Refusal(s.worker, now, s.reason),) if s.worker else ())
            summary = f"gave {s.worker} up: {s.reason}" if s.worker else f"withdrew: {s.reason}"
            self._nominate(
                wl, replace(record, nominated=None, nominated_at=None, refusals=refusals, summary=summary), []
            )
        elif s.action is NominationAction.CHOOSE:
            return self._choose(ps, w, now)
        return None

    def _choose(self, ps: _Pass, w: _Waiting, now: float) -> float | None:
        wl, record = w.wl, w.record
        key = object_key(wl)
        refusals = record.counting(now, self.settings.refusal_ttl)
        try:
            gang, max_runtime = gang_of(wl), rec.max_runtime(wl)
        except InputError as err:
            self._write(wl, replace(record, summary=f"the Workload cannot be used: {err}", verdicts=()))
            return None
        workers = [self._worker(ps, name, wl, gang) for name in w.workers]
        d = dispatch(
            gang, workers, now, refusals, max_runtime=max_runtime, refusal_ttl=self.settings.refusal_ttl
        )
        decided = DispatchRecord(d.chosen, now if d.chosen else None, refusals, d.verdicts, d.summary)
        if d.chosen is None or d.fit is None:
            self._write(wl, decided)
            expiring = [r.at + self.settings.refusal_ttl for r in refusals]
            return min(expiring) if expiring else None
        chosen = next(x for x in workers if x.name == d.chosen)
        commit(chosen, d.fit, str(wl["metadata"]["namespace"]))
        self._charge(ps, chosen, d.fit)
        self._nominate(wl, decided, [d.chosen])
        log.info("dispatch %s: %s", key, d.summary)
        return None

    # -- capacity of a pass ---------------------------------------------------------------------------

    def _target(self, name: str, wl: Mapping[str, Any], gang: Gang) -> Target | str:
        reason = self.connected(name)
        if reason is not None:
            return reason
        spec = wl.get("spec") or {}
        return self.connections[name].view.target(
            str(wl["metadata"].get("namespace", "")), str(spec.get("queueName") or ""), requests_of(gang)
        )

    def _worker(self, ps: _Pass, name: str, wl: Mapping[str, Any], gang: Gang) -> Worker:
        target = self._target(name, wl, gang)
        if isinstance(target, str):
            return Worker(name, unusable=target)
        snap = ps.snapshots.get((name, target.levels))
        if snap is None:
            snap = ps.snapshots[(name, target.levels)] = self.connections[name].view.snapshot(target.levels)
        gone = ps.taken.get((name, target.cluster_queue), Counter())
        return self.connections[name].view.worker(target, snap).less(gone)

    def _charge(self, ps: _Pass, worker: Worker, fit: Fit) -> None:
        """The quota a gang nominated to the worker takes, for the rest of the pass."""
        ps.taken.setdefault((worker.name, worker.cluster_queue), Counter()).update(taken(fit))

    def _hold(self, ps: _Pass, wl: JSON, name: str, now: float) -> None:
        """Charge a nomination in flight to its worker (quota too, unless its copy's Kueue has
        reserved it there already)."""
        try:
            gang, max_runtime = gang_of(wl), rec.max_runtime(wl)
        except InputError:
            return
        reserved = self.connections[name].view.holds_quota(object_key(wl))
        worker = self._worker(ps, name, wl, gang)
        fit = hold(gang, worker, str(wl["metadata"]["namespace"]), now, max_runtime, quota=not reserved)
        if fit is not None and not reserved:
            self._charge(ps, worker, fit)

    # -- writes ---------------------------------------------------------------------------------------

    def _latest(self, cached: JSON) -> JSON:
        """The cached Workload, or what this dispatcher wrote of it while the cache shows a
        version that write replaced."""
        key = object_key(cached)
        written = self._written.get(key)
        if written is None:
            return cached
        if cached["metadata"].get("resourceVersion") in written[0]:
            return written[1]
        del self._written[key]  # the cache has caught up (with the write, or something newer)
        return cached

    def _remember(self, before: JSON, after: JSON, *also: JSON) -> None:
        replaced = {str(o["metadata"].get("resourceVersion")) for o in (before, *also)}
        self._written[object_key(after)] = (replaced, after)

    def _write(self, wl: JSON, record: DispatchRecord) -> JSON:
        """The record as the Workload's annotation (not written when it says nothing new);
        conditional on the resourceVersion decided on. Returns the Workload as written."""
        doc = record.to_dict()
        if _annotation(wl) == doc:
            return wl
        meta = wl["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {DISPATCH_ANNOTATION: orjson.dumps(doc).decode()},
            }
        }
        written = self.client.patch(WORKLOADS, meta["name"], patch, meta["namespace"])
        self._remember(wl, written)
        return written

    def _nominate(self, wl: JSON, record: DispatchRecord, workers: Sequence[str | None]) -> None:
        """The record first (what a restarted dispatcher resumes from), then the nomination."""
        annotated = self._write(wl, record)
        meta = annotated["metadata"]
        body = {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": meta["resourceVersion"],
            },
            "status": {"nominatedClusterNames": [w for w in workers if w]},
        }
        nominated = self.client.request(
            "PATCH",
            WORKLOADS.path(meta["namespace"], meta["name"]) + "/status",
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        self._remember(wl, nominated, annotated)


def _annotation(wl: Mapping[str, Any]) -> Any:
    raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(DISPATCH_ANNOTATION)
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _others_ready(wl: Mapping[str, Any], check: str) -> bool:
    """Kueue nominates only once the manager's other admission checks are Ready."""
    return all(
        s.get("state") == CheckState.READY
        for s in (wl.get("status") or {}).get("admissionChecks") or []
        if s.get("name") != check
    )
