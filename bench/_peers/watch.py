"""What happens to the bench's pods, seen by one watch (its own connection): for every pod of a
bench gang, when it was first seen, bound and Running, and where it is now. The times are the
watch's, so polling adds nothing; the same for every system."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gangplugin.kube.client import PODS, ApiError, Client, Resource

GANG_LABEL = "bench.gangplugin.io/gang"


@dataclass(slots=True)
class Seen:
    gang: str
    index: int
    gpus: int
    created: float
    node: str | None = None
    ungated: float | None = None  # first seen without scheduling gates
    bound: float | None = None
    running: float | None = None
    phase: str = "Pending"
    deleted: float | None = None  # when first seen with a deletionTimestamp, or gone


@dataclass
class PodWatch:
    """Watches namespace `ns` from its creation on; `index_of` reads a pod's index in its gang
    (each system's job controller writes its own label or annotation)."""

    kubeconfig: Path
    ns: str
    index_of: Callable[[dict[str, Any]], int]
    pods: dict[str, Seen] = field(default_factory=dict)  # by pod UID
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._client = Client.from_kubeconfig(self.kubeconfig)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{self.ns}")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.close()

    def _run(self) -> None:
        follow(self._client, PODS, self.ns, self._see, self._stop, GANG_LABEL)

    def _see(self, kind: str, obj: dict[str, Any]) -> None:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang is None:
            return
        now = time.monotonic()
        # by UID: a pod made again may take the name of the one it replaces (a Volcano Job's do)
        key = meta.get("uid") or meta["name"]
        with self._lock:
            seen = self.pods.get(key)
            if seen is None:
                gpus = sum(
                    int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
                    for c in spec.get("containers") or []
                )
                seen = self.pods[key] = Seen(gang, self.index_of(obj), gpus, now)
            if seen.ungated is None and not spec.get("schedulingGates"):
                seen.ungated = now
            node = spec.get("nodeName")
            if node and seen.bound is None:
                seen.bound = now
            seen.node = node or seen.node
            seen.phase = status.get("phase") or seen.phase
            if seen.phase == "Running" and seen.running is None:
                seen.running = now
            if seen.deleted is None and (kind == "DELETED" or meta.get("deletionTimestamp")):
                seen.deleted = now

    # -- what was seen ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Seen]:
        with self._lock:
            return {k: Seen(**{f: getattr(v, f) for f in Seen.__slots__}) for k, v in self.pods.items()}

    def by_gang(self, what: str) -> dict[str, dict[int, float]]:
        """Per gang, per pod index, when its first pod of that index was `what` ("bound" or
        "running")."""
        out: dict[str, dict[int, float]] = defaultdict(dict)
        for s in self.snapshot().values():
            t = getattr(s, what)
            if t is not None:
                prev = out[s.gang].get(s.index)
                out[s.gang][s.index] = t if prev is None else min(prev, t)
        return out

    def live(self, gang: str) -> list[Seen]:
        """The gang's pods not deleted."""
        return [s for s in self.snapshot().values() if s.gang == gang and s.deleted is None]

    def last_change(self) -> float:
        """When a pod was last created or bound (the burst has settled once this is old)."""
        with self._lock:
            return max((max(s.created, s.bound or 0.0) for s in self.pods.values()), default=0.0)

    def wait(self, cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> float:
        """Until `cond()` holds; when (monotonic). A timeout raises, naming `what`."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(poll)
        return time.monotonic()

    def forget(self, gang: str) -> None:
        with self._lock:
            for name in [n for n, s in self.pods.items() if s.gang == gang]:
                del self.pods[name]


def follow(
    client: Client,
    res: Resource,
    ns: str,
    see: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
    label_selector: str | None = None,
) -> None:
    """List `res` in `ns`, then watch it, calling `see(event type, object)` for every object and
    change, until `stop` is set; an expired watch lists again."""
    rv = None
    while not stop.is_set():
        try:
            if rv is None:
                listed = client.list(res, ns, label_selector=label_selector)
                for obj in listed["items"]:
                    see("ADDED", obj)
                rv = listed["metadata"]["resourceVersion"]
            for event in client.watch(
                res, ns, resource_version=rv, timeout_seconds=30, label_selector=label_selector
            ):
                if stop.is_set():
                    return
                obj = event["object"]
                if event["type"] == "ERROR":
                    rv = None  # expired (410): list again
                    break
                rv = obj["metadata"].get("resourceVersion", rv)
                if event["type"] != "BOOKMARK":
                    see(event["type"], obj)
        except (httpx.HTTPError, ApiError):
            time.sleep(0.5)


@contextlib.contextmanager
def watching(kubeconfig: Path, ns: str, index_of: Callable[[dict[str, Any]], int]) -> Any:
    w = PodWatch(kubeconfig, ns, index_of)
    try:
        yield w
    finally:
        w.close()
