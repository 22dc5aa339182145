"""Where a Kueue gang's time goes, hop by hop: what one watch of the bench namespace's Workloads
and Jobs saw (its own connection, its own clock, as the pod watch's), joined with the pod watch's
times. Each hop of a gang is the first time the watch saw it:

  Workload created   Kueue's job reconciler made the gang's Workload
  quota reserved     QuotaReserved=True (Kueue's scheduler)
  check listed       status.admissionChecks holds an entry (a ClusterQueue with checks only)
  check Ready        every entry Ready (the check's controller)
  Admitted           Admitted=True (Kueue's workload reconciler once every check is Ready)
  PodsReady written  a PodsReady condition, of any status (Kueue's job reconciler: with
                     waitForPodsReady on, as the shipped Configuration has it, a reconcile that
                     finds none writes PodsReady=False and ends there, so a Job whose Workload
                     was Admitted without it waits for that write and one more reconcile before
                     it is unsuspended; written before Admitted, its step is negative)
  unsuspended        the Job seen with spec.suspend false (Kueue's job reconciler)
  first/last pod created, last pod ungated, last pod bound, last pod Running (the pod watch)

It also counts the writes to each Workload until it was Admitted (every event the watch saw
changed it once), and names each write's writer by the field manager whose managedFields entry
changed with it, so a hop that costs writes says whose."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _peers.watch import PodWatch, follow
from gangplugin.kube.client import JOBS, WORKLOADS, Client

# In the order a gang goes through them; a system skips those it has not (no check).
WORKLOAD_HOPS = (
    "Workload created",
    "quota reserved",
    "check listed",
    "check Ready",
    "Admitted",
    "PodsReady written",
)
POD_HOPS = ("first pod created", "last pod created", "last pod ungated", "last pod bound", "last pod Running")
HOPS = ("submitted", *WORKLOAD_HOPS, "unsuspended", *POD_HOPS)
UNKNOWN_WRITER = "?"


@dataclass(slots=True)
class WorkloadSeen:
    """What the watch saw of one gang's Workload (the last made, should Kueue make it again)."""

    at: dict[str, float] = field(default_factory=dict)  # hop -> first seen
    admitted: bool = False  # Admitted as last seen (evicted, requeued: False again)
    writes: Counter[str] = field(default_factory=Counter)  # writer -> writes until Admitted
    after: Counter[str] = field(default_factory=Counter)  # writer -> writes since Admitted
    managers: dict[tuple[str, str], str] = field(default_factory=dict)  # (manager, operation) -> time


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conds)


def _managers(obj: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """Each field manager's entry, by (manager, operation, subresource), as its time and fields."""
    out = {}
    for m in obj["metadata"].get("managedFields") or []:
        key = (str(m.get("manager", "")), f"{m.get('operation', '')}/{m.get('subresource', '')}")
        out[key] = f"{m.get('time', '')} {m.get('fieldsV1', '')}"
    return out


def writer(before: Mapping[tuple[str, str], str], after: Mapping[tuple[str, str], str]) -> str:
    """The field manager whose entry a write changed (several: joined; none: UNKNOWN_WRITER: a
    write within the same second that changed no field set of its writer)."""
    changed = sorted({m for m, v in after.items() if before.get(m) != v})
    return "+".join(dict.fromkeys(m for m, _ in changed)) or UNKNOWN_WRITER


def see_workload(seen: WorkloadSeen, obj: Mapping[str, Any], now: float) -> None:
    """Record a Workload event (the object after it) at `now`."""
    at = seen.at
    at.setdefault("Workload created", now)
    managers = _managers(obj)
    (seen.after if "Admitted" in at else seen.writes)[writer(seen.managers, managers)] += 1
    seen.managers = managers
    status = obj.get("status") or {}
    if _true(obj, "QuotaReserved"):
        at.setdefault("quota reserved", now)
    checks = status.get("admissionChecks") or []
    if checks:
        at.setdefault("check listed", now)
        if all(c.get("state") == "Ready" for c in checks):
            at.setdefault("check Ready", now)
    seen.admitted = _true(obj, "Admitted")
    if seen.admitted:
        at.setdefault("Admitted", now)
    if any(c.get("type") == "PodsReady" for c in status.get("conditions") or []):
        at.setdefault("PodsReady written", now)


def admitted_without_pods(workloads: Mapping[str, WorkloadSeen], created: Collection[str]) -> list[str]:
    """The gangs Admitted now that have no pod yet (`created`: the gangs that have one): Kueue's
    job reconciler still owes them a pass, however long nothing else moved."""
    return sorted(g for g, s in workloads.items() if s.admitted and g not in created)


def _owner_job(obj: Mapping[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return str(ref["name"])
    return None


class KueueWatch:
    """Watches the namespace's Workloads and Jobs (a gang is its Job: the Job's name)."""

    def __init__(self, kubeconfig: Path, ns: str) -> None:
        self.workloads: dict[str, WorkloadSeen] = {}  # by gang
        self.unsuspended: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._clients = [Client.from_kubeconfig(kubeconfig) for _ in range(2)]
        self._threads = [
            threading.Thread(
                target=follow, args=(c, res, ns, fn, self._stop), daemon=True, name=f"hops-{res.plural}"
            )
            for c, res, fn in zip(
                self._clients, (WORKLOADS, JOBS), (self._see_workload, self._see_job), strict=True
            )
        ]
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        for c in self._clients:
            c.close()

    def _see_workload(self, kind: str, obj: dict[str, Any]) -> None:
        gang = _owner_job(obj)
        if gang is None or kind == "DELETED":
            return
        now = time.monotonic()
        with self._lock:
            see_workload(self.workloads.setdefault(gang, WorkloadSeen()), obj, now)

    def _see_job(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED" and not (obj.get("spec") or {}).get("suspend"):
            now = time.monotonic()
            with self._lock:
                self.unsuspended.setdefault(obj["metadata"]["name"], now)

    def admitted_without_pods(self, created: Collection[str]) -> list[str]:
        with self._lock:
            return admitted_without_pods(self.workloads, created)

    def hops(self, pods: PodWatch, submitted: Mapping[str, float]) -> dict[str, dict[str, float]]:
        """Per gang submitted, when it passed each hop (monotonic), the pods' included."""
        with self._lock:
            workloads = {g: dict(s.at) for g, s in self.workloads.items()}
            unsuspended = dict(self.unsuspended)
        per_pod = {what: pods.by_gang(what) for what in ("created", "ungated", "bound", "running")}
        out: dict[str, dict[str, float]] = {}
        for gang, t0 in submitted.items():
            at = {"submitted": t0, **workloads.get(gang, {})}
            if gang in unsuspended:
                at["unsuspended"] = unsuspended[gang]
            for hop, what, pick in (
                ("first pod created", "created", min),
                ("last pod created", "created", max),
                ("last pod ungated", "ungated", max),
                ("last pod bound", "bound", max),
                ("last pod Running", "running", max),
            ):
                if times := per_pod[what].get(gang):
                    at[hop] = pick(times.values())
            out[gang] = at
        return out

    def writes(self, gangs: Sequence[str], after: bool = False) -> dict[str, float]:
        """The median number of writes to a gang's Workload until it was Admitted (`after`: since,
        until the part ended) (`median_writes`)."""
        with self._lock:
            return median_writes(self.workloads, gangs, after)


def median_writes(
    workloads: Mapping[str, WorkloadSeen], gangs: Sequence[str], after: bool = False
) -> dict[str, float]:
    """The median number of writes to a gang's Workload until it was Admitted (`after`: since it
    was, until the part ended: Kueue's job reconciler is woken by each), in all and per writer,
    over the `gangs` admitted (a gang whose Workload was not seen, not yet made when the part
    ended, is not one of them)."""
    counts = [
        seen.after if after else seen.writes
        for g in gangs
        if (seen := workloads.get(g)) is not None and "Admitted" in seen.at
    ]
    if not counts:
        return {}
    writers = sorted({w for c in counts for w in c})
    out = {"all": statistics.median(sum(c.values()) for c in counts)}
    out.update({w: statistics.median(c.get(w, 0) for c in counts) for w in writers})
    return out


@contextlib.contextmanager
def kueue_watching(kubeconfig: Path, ns: str) -> Iterator[KueueWatch]:
    w = KueueWatch(kubeconfig, ns)
    try:
        yield w
    finally:
        w.close()


def summary(hops: Mapping[str, Mapping[str, float]], sizes: Mapping[str, int]) -> dict[str, Any]:
    """Over the gangs that ran (every pod Running): per hop, the median seconds from submission
    and the median seconds from the hop before it (the one before it the gang passed), and the
    gangs counted; also per gang size, for the hops from submission."""
    ran = {g: at for g, at in hops.items() if "last pod Running" in at}
    since: dict[str, list[float]] = {}
    step: dict[str, list[float]] = {}
    for at in ran.values():
        prev = None
        for hop in HOPS:
            if hop not in at:
                continue
            since.setdefault(hop, []).append(at[hop] - at["submitted"])
            if prev is not None:
                step.setdefault(hop, []).append(at[hop] - at[prev])
            prev = hop
    by_size: dict[str, dict[str, float]] = {}
    for size in sorted({sizes[g] for g in ran}):
        of = [at for g, at in ran.items() if sizes[g] == size]
        by_size[str(size)] = {
            hop: statistics.median(at[hop] - at["submitted"] for at in of)
            for hop in HOPS
            if all(hop in at for at in of)
        }
    return {
        "gangs": len(ran),
        "since submission": {h: statistics.median(v) for h, v in since.items()},
        "step": {h: statistics.median(v) for h, v in step.items()},
        "by size": by_size,
    }
