"""bindMode Ungate: kube-scheduler binds a gang alone, each pod on the node gangplugin planned.

The pod webhook creates every pod of an Ungate gang (label `gangplugin.io/bind-mode: Ungate`,
stamped by the gang check through podSetUpdates) behind the `gangplugin.io/placement`
scheduling gate, so kube-scheduler ignores it. Once every pod of the gang exists, the ungater
plans the whole gang with `GangReservations.pins` (the reservations it shares with the
extender; the same `plan_gang` the extender's filter runs, inside the domain the check
admitted it to) and, per pod, in one patch,
adds a `kubernetes.io/hostname` nodeSelector for its planned node and removes the gate (a gated
pod's nodeSelector may be narrowed: KEP-3838). kube-scheduler then binds each pod to its node
with no extender call, as Kueue's topology ungater does (pkg/controller/tas/topology_ungater.go).

bindMode PodGroup adds kube-scheduler's own bind barrier: the webhook also puts each pod in a
native PodGroup named after the gang (`spec.schedulingGroup.podGroupName`), and before it pins
the gang the ungater creates that PodGroup (scheduling.k8s.io/v1beta1, GenericWorkload) with a
gang `minCount` of the gang's size, owned by the gang's Kueue Workload (so it is reused when the
gang is requeued and goes away with the Workload). kube-scheduler's GangScheduling plugin then
holds every pod at Permit until all of them have a node. The ungater creates it, not the gang
check: only now does anything need it, the gang's pods (its size, namespace, PodGroup name) are
at hand, and a restarted ungater finds it there. Where the API server dropped the pods'
schedulingGroup or stopped serving PodGroups (the feature gate off), the gang is released as
Ungate, with a warning logged and a Warning Event on its Workload: never left gated for good.

All of it lives in the API: a pinned pod's node is its nodeSelector, so a restarted ungater
counts pinned pods as placed and plans only the gated rest, next to them. Until the pins, the
reservations hold the capacity the gang check promised the gang from its admission on, so the
extender's filter keeps plain pods off it; a gang that stays partly bound anyway (a kube-scheduler
without the extender bound a plain pod onto a pinned node) is requeued whole by the gang check's
`unscheduledTimeout`, never left half-bound for good.

A pin is final, so a pod pinned to a node that goes NotReady, is cordoned, tainted against it
or deleted before kube-scheduler binds it (`stranded_pin`) is deleted (uid precondition), when
a controller owns it: its controller makes it again behind the gate, and the ungater pins it
elsewhere next to its peers. A pod no controller owns waits for `unscheduledTimeout`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangKey, GangPod
from gangplugin.core.names import GANG_LABEL, PLACEMENT_GATE
from gangplugin.core.policy import POD_GROUP_BIND_MODE
from gangplugin.core.topology import HOSTNAME_LABEL
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import UNSEEN_ADMISSION, GangReservations
from gangplugin.kube.client import JSON, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.events import record_event
from gangplugin.kube.expectations import DeletionExpectations
from gangplugin.kube.resources import PODGROUPS
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.readmodel.records import NodeRecord
from gangplugin.runtime.metrics import UNGATED_PODS

log = logging.getLogger(__name__)

# A gang that does not fit now (a plain pod took its room) is planned again after this long.
RETRY_SECONDS = 5.0
# A gang some of whose pods are not made yet is looked at (again) within this long.
PARTIAL_LOOK_SECONDS = 1.0
EVENT_COMPONENT = "gangplugin-ungater"


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


def pod_group_object(namespace: str, name: str, min_count: int, workload: JSON) -> JSON:
    """The native PodGroup of a bindMode PodGroup gang: all or nothing (gang minCount = its
    size), owned by its Kueue Workload."""
    meta = workload["metadata"]
    owner = {
        "apiVersion": workload.get("apiVersion", WORKLOADS.api_version),
        "kind": "Workload",
        "name": meta["name"],
        "uid": meta["uid"],
    }
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {GANG_LABEL: name},
            "ownerReferences": [owner],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def pod_group_wanted(pods: list[GangPod]) -> tuple[str | None, bool]:
    """The PodGroup a gang's pods name (its gang), and whether the gang asked for one (bindMode
    PodGroup) that its pods do not name: the API server dropped their schedulingGroup."""
    if not any(p.bind_mode == POD_GROUP_BIND_MODE for p in pods):
        return None, False
    named = next((p.pod_group for p in pods if p.pod_group is not None and p.pod_group == p.gang), None)
    return named, named is None


# Pins written at once, over every gang. 32 at once bound a 500-node burst at 0.57x Kueue TAS's
# rate against 0.69x with 8, and pinned a 1,024-pod gang no sooner (docs/peers.md): on a busy
# API server more writes at once queue there instead.
PATCHERS = 8


def gang_key_of(key: str) -> GangKey:
    namespace, _, gang = key.partition("/")
    return namespace, gang


class Ungater:
    def __init__(
        self,
        client: Client,
        reservations: GangReservations,
        clock: Callable[[], float] = time.time,
        workers: int = PATCHERS,
    ) -> None:
        self.client = client
        self.reservations = reservations
        self.clock = clock
        self.queue = WorkQueue(base_delay=0.5, max_delay=30.0)
        # Pods of one gang are patched in parallel: a 1,024-pod gang in 128 round trips, not 1,024.
        self.patcher = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ungater-patch")
        self._waiting: dict[str, str] = {}  # gang key -> why it waits (logged when it changes)
        self._ungated_instead: set[str] = set()  # PodGroup gangs released as Ungate (warned once)
        self.deleted = DeletionExpectations()  # stranded pods deleted, until the watch shows it

    def on_pod(self, kind: str, old: GangPod | None, new: GangPod | None) -> None:
        """Runs after the reservations' handler, on their dispatcher: a gated pod's gang is looked
        at again, and so is a gang whose pod was just pinned (its node may have failed meanwhile)."""
        if new is None or new.gang is None or new.gang_key is None:
            return
        key = f"{new.namespace}/{new.gang}"
        if new.pinned is not None and new.node is None and (old is None or old.pinned != new.pinned):
            self.queue.add(key)
        elif new.gated:
            # While its pods are still being made, the gang is looked at once a second (to say why
            # it waits); the pod that makes it whole at once. Each look reads every member: one
            # per pod made kept a core busy while a 1,024-pod gang's pods were made.
            if new.size is not None and self.reservations.known(new.gang_key) < new.size:
                self.queue.add_after(key, PARTIAL_LOOK_SECONDS)
            else:
                self.queue.add(key)

    def on_workload(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        """Runs after the reservations' handler, on their dispatcher: a gang waiting for its
        admission to reach the reservations is looked at again at once, not after RETRY_SECONDS."""
        obj = new or old
        if obj is None:
            return
        meta = obj["metadata"]
        key = f"{meta.get('namespace', '')}/{gang_id(str(meta['name']))}"
        if self._waiting.get(key) == UNSEEN_ADMISSION:
            self.queue.add(key)

    def on_node(self, kind: str, old: NodeRecord | None, new: NodeRecord | None) -> None:
        """Runs after the reservations' handler, on their dispatcher: gangs with pods pinned to the
        node and not bound yet are looked at again (the node may no longer take them)."""
        some = new or old
        if some is not None and old != new:  # not a heartbeat
            for namespace, gang in self.reservations.pinned_to(some.name):
                self.queue.add(f"{namespace}/{gang}")

    def reconcile(self, key: str) -> float | None:
        gkey = gang_key_of(key)
        stranded = self.reservations.stranded(gkey)
        if stranded:
            now = self.clock()
            # a stranded pod is active by definition: one deleted here is hidden until it leaves
            for pod, why in self.deleted.visible(stranded, lambda s: s[0].uid, lambda _: True, now):
                self._replace(key, pod, why, now)
        try:
            pins, why = self.reservations.pins(gkey, self.clock())
        except InputError as err:
            self._wait(key, f"its pods cannot be used: {err}")
            return None  # a change to the pods enqueues it again
        if not pins:
            if why.startswith("no pod"):
                self._waiting.pop(key, None)
                self._ungated_instead.discard(key)
                return None
            self._wait(key, why)
            return RETRY_SECONDS
        try:
            held = self._pod_group(gkey, [pod for pod, _ in pins])
        except ApiError as err:
            held = f"its PodGroup cannot be read or written: {err}"
        if held:
            with self.reservations.lock:
                self.reservations.drop(gkey)  # planned again once its PodGroup can be there
            self._wait(key, held)
            return RETRY_SECONDS
        self._waiting.pop(key, None)
        began = time.monotonic()
        results = list(self.patcher.map(lambda pin: self._pin(*pin), pins))
        failed = [r for r in results if r]
        if failed:
            # Plan again from what the API says now; the pods pinned meanwhile hold their nodes.
            with self.reservations.lock:
                self.reservations.drop(gkey)
            raise RuntimeError(f"gang {key}: {len(failed)} of {len(pins)} pins failed: {failed[0]}")
        nodes = sorted({node for _, node in pins})
        log.info(
            "gang %s: pinned %d pod(s) to %d node(s) and removed the placement gate in %.1f s (%s)%s",
            key,
            len(pins),
            len(nodes),
            time.monotonic() - began,
            why,
            # a few pods (a replacement after a node failure): which went where
            "" if len(pins) > 4 else ": " + ", ".join(f"{p.name} -> {n}" for p, n in pins),
        )
        return None

    def _workload_of(self, namespace: str, gang: str) -> JSON | None:
        """The Kueue Workload whose gang this is: the one of that name, or (a name too long for a
        label value) the one whose `gang_id` it is."""
        found = self.client.get_or_none(WORKLOADS, gang, namespace)
        if found is not None:
            return found
        items = self.client.list(WORKLOADS, namespace)["items"]
        return next((w for w in items if gang_id(w["metadata"]["name"]) == gang), None)

    def _pod_group(self, gkey: GangKey, pods: list[GangPod]) -> str:
        """Make sure a bindMode PodGroup gang's PodGroup exists with minCount = its size before
        any pod leaves the gate; '' when the gang may be pinned now, else why it waits."""
        namespace, gang = gkey
        name, dropped = pod_group_wanted(pods)
        if name is None:
            if dropped:
                self._release_as_ungate(
                    gkey,
                    "its pods name no PodGroup of the gang (the API server dropped spec.schedulingGroup)",
                )
            return ""
        size = max(p.size or 0 for p in pods)  # every gang pod carries its gang's size
        workload = self._workload_of(namespace, gang)
        if workload is None:
            return f"no Kueue Workload {gang} to own its PodGroup"
        try:
            self.client.create(PODGROUPS, pod_group_object(namespace, name, size, workload), namespace)
            log.info("gang %s/%s: created PodGroup %s (gang minCount %d)", namespace, gang, name, size)
            return ""
        except ApiError as err:
            if err.status == 404:
                self._release_as_ungate(gkey, "the API server does not serve PodGroups")
                return ""
            if err.status != 409:
                return f"creating its PodGroup {name}: {err}"
        found = self.client.get(PODGROUPS, name, namespace)
        if found["metadata"].get("deletionTimestamp"):
            return f"its PodGroup {name} from before is being deleted"
        gang_policy = found["spec"]["schedulingPolicy"].get("gang")
        if gang_policy is None:
            return f"PodGroup {name} exists without a gang policy; delete it so gangplugin creates it"
        if gang_policy.get("minCount") != size:  # the gang was resized since (minCount is mutable)
            patch = {"spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}
            self.client.patch(PODGROUPS, name, patch, namespace)
        return ""

    def _release_as_ungate(self, gkey: GangKey, why: str) -> None:
        key = f"{gkey[0]}/{gkey[1]}"
        if key in self._ungated_instead:
            return
        self._ungated_instead.add(key)
        msg = (
            f"bindMode PodGroup: {why}; released as bindMode Ungate, with no native PodGroup. "
            "Turn on the GenericWorkload feature gate on kube-apiserver, kube-controller-manager "
            "and kube-scheduler, or set the GangPolicy's spec.bindMode to Ungate"
        )
        log.warning("gang %s: %s", key, msg)
        workload = self.client.get_or_none(WORKLOADS, gkey[1], gkey[0])
        if workload is not None:
            record_event(self.client, workload, "Warning", "PodGroupUnavailable", msg, EVENT_COMPONENT)

    def _replace(self, key: str, pod: GangPod, why: str, now: float) -> None:
        """Delete a pod whose pin can no longer be bound, for its controller to make it again."""
        if not pod.replaceable:  # logged once per story, as a gang that waits
            self._wait(key, f"{why}; no controller makes it again: left to unscheduledTimeout")
            return
        body = {"preconditions": {"uid": pod.uid}, "propagationPolicy": "Background"}
        try:
            self.client.request("DELETE", PODS.path(pod.namespace, pod.name), body=body)
        except ApiError as err:
            if err.status not in (404, 409):  # gone already, or another pod of that name now
                raise
            return
        self.deleted.expect(pod.uid, now)
        msg = f"{why}: deleted so that its controller makes it again, to be pinned elsewhere in its domain"
        log.warning("gang %s: %s", key, msg)
        workload = self._workload_of(pod.namespace, pod.gang or "")
        if workload is not None:
            record_event(self.client, workload, "Warning", "PinnedNodeLost", msg, EVENT_COMPONENT)

    def _pin(self, pod: GangPod, node: str) -> str:
        """'' when pinned, else why not."""
        try:
            raw = self.client.patch(PODS, pod.name, pin_patch(pod, node), pod.namespace, kind="strategic")
        except ApiError as err:
            return f"pinning {pod.namespace}/{pod.name} to {node}: {err}"
        UNGATED_PODS.inc()
        # The reservations take the pin at once, so the next look at the gang does not pin it again;
        # unless the watch was faster: the pod it has now (bound, or deleted) is newer than
        # this answer, which must neither unbind it nor bring it back.
        with self.reservations.lock:
            old = self.reservations.pods.get(pod.key)
            if old is not None and old.uid == pod.uid and old.gated:
                self.reservations.on_pod("MODIFIED", old, gang_pod_from_k8s(raw))
        return ""

    def _wait(self, key: str, why: str) -> None:
        kind = re.sub(r"\d+", "#", why)  # "3 of 32 pods exist" and "4 of 32" are one story
        if self._waiting.get(key) != kind:
            self._waiting[key] = kind
            log.info("gang %s stays gated: %s", key, why)
