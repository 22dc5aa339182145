"""bindMode Ungate: kube-scheduler binds a gang alone, each pod on the node gangplugin planned.

The pod webhook creates every pod of an Ungate gang (label `gangplugin.io/bind-mode: Ungate`,
stamped by the gang check through podSetUpdates) behind the `gangplugin.io/placement`
scheduling gate, so kube-scheduler ignores it. Once every pod of the gang exists, the ungater
plans the whole gang with the extender's `ExtenderCache.pins` (the same `plan_gang` the
extender's filter runs, inside the domain the check admitted it to) and, per pod, in one patch,
adds a `kubernetes.io/hostname` nodeSelector for its planned node and removes the gate (a gated
pod's nodeSelector may be narrowed: KEP-3838). kube-scheduler then binds each pod to its node
with no extender call, as Kueue's topology ungater does (pkg/controller/tas/topology_ungater.go).

All of it lives in the API: a pinned pod's node is its nodeSelector, so a restarted ungater
counts pinned pods as placed and plans only the gated rest, next to them. A gang that stays
partly bound (a plain pod took a pinned node first) is requeued whole by the gang check's
`unscheduledTimeout`, never left half-bound for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangKey, GangPod
from gangplugin.core.names import PLACEMENT_GATE
from gangplugin.core.topology import HOSTNAME_LABEL
from gangplugin.extender.cache import ExtenderCache
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.kube.client import PODS, ApiError, Client
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.runtime.metrics import UNGATED_PODS

log = logging.getLogger(__name__)

# A gang that does not fit now (a plain pod took its room) is planned again after this long.
RETRY_SECONDS = 5.0


def pin_patch(pod: GangPod, node: str) -> dict[str, object]:
    """The strategic merge patch that pins `pod` to `node` and removes the placement gate, in
    one write; the uid precondition keeps it off a newer pod of the same name."""
    return {
        "metadata": {"uid": pod.uid},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: node},
            "schedulingGates": [{"$patch": "delete", "name": PLACEMENT_GATE}],
        },
    }


def gang_key_of(key: str) -> GangKey:
    namespace, _, gang = key.partition("/")
    return namespace, gang


class Ungater:
    def __init__(
        self,
        client: Client,
        cache: ExtenderCache,
        clock: Callable[[], float] = time.time,
        workers: int = 8,
    ) -> None:
        self.client = client
        self.cache = cache
        self.clock = clock
        self.queue = WorkQueue(base_delay=0.5, max_delay=30.0)
        # Pods of one gang are patched in parallel: a 1,024-pod gang is released in a few round trips.
        self.patcher = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ungater-patch")
        self._waiting: dict[str, str] = {}  # gang key -> why it waits (logged when it changes)

    def on_pod(self, kind: str, old: GangPod | None, new: GangPod | None) -> None:
        """Registered after the cache's handler: a gated pod's gang is looked at again."""
        if new is not None and new.gated and new.gang is not None:
            self.queue.add(f"{new.namespace}/{new.gang}")

    def reconcile(self, key: str) -> float | None:
        gkey = gang_key_of(key)
        try:
            pins, why = self.cache.pins(gkey, self.clock())
        except InputError as err:
            self._wait(key, f"its pods cannot be used: {err}")
            return None  # a change to the pods enqueues it again
        if not pins:
            if why.startswith("no pod"):
                self._waiting.pop(key, None)
                return None
            self._wait(key, why)
            return RETRY_SECONDS
        self._waiting.pop(key, None)
        results = list(self.patcher.map(lambda pin: self._pin(*pin), pins))
        failed = [r for r in results if r]
        if failed:
            # Plan again from what the API says now; the pods pinned meanwhile hold their nodes.
            with self.cache.lock:
                self.cache.drop(gkey)
            raise RuntimeError(f"gang {key}: {len(failed)} of {len(pins)} pins failed: {failed[0]}")
        nodes = sorted({node for _, node in pins})
        log.info(
            "gang %s: pinned %d pod(s) to %d node(s) and removed the placement gate (%s)",
            key,
            len(pins),
            len(nodes),
            why,
        )
        return None

    def _pin(self, pod: GangPod, node: str) -> str:
        """'' when pinned, else why not."""
        try:
            raw = self.client.patch(PODS, pod.name, pin_patch(pod, node), pod.namespace, kind="strategic")
        except ApiError as err:
            return f"pinning {pod.namespace}/{pod.name} to {node}: {err}"
        UNGATED_PODS.inc()
        # The cache takes the pin at once, so the next look at the gang does not pin it again.
        with self.cache.lock:
            old = self.cache.pods.get(pod.key)
            self.cache.on_pod("MODIFIED", old, gang_pod_from_k8s(raw))
        return ""

    def _wait(self, key: str, why: str) -> None:
        if self._waiting.get(key) != why:
            self._waiting[key] = why
            log.info("gang %s stays gated: %s", key, why)
