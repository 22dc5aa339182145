"""The `gangplugin.io/gang` admission-check controller.

Shaped like Kueue's pkg/controller/admissionchecks/provisioning: it only reads Workload status
(plus the nodes and pods it needs to judge capacity and readiness) and writes its own check's
state. Everything it decides comes from the core (`core.admission`, `core.watchdog`,
`core.policy`) over what the watch caches hold, so a restarted controller reaches the same
decisions: nothing is remembered in memory that the API server does not also hold.

Work items (one WorkQueue, keys collapse):
  "pass"           admit: every Workload whose check is Pending with quota reserved, in queue
                   order, against one snapshot that already counts capacity promised to admitted
                   gangs; run again whenever capacity or check states change (never on a poll).
  "wl/<ns>/<name>" watchdog of one admitted gang; wakes itself at its next deadline.
  "check/<name>"   the AdmissionCheck's Active condition.
  "policy/<name>"  the GangPolicy's Valid condition.

Where TrainingPlans feed a Workload's ClusterQueue flavor, `core.drain` also decides: a gang that
would outlive the plan capacity is not admitted from the termination start on, an admitted one
is requeued (check Retry) at that instant, and pods carry the block end to checkpoint before it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from gangplugin.admission.admit import AdmissionPass
from gangplugin.admission.status import ConfigStatus
from gangplugin.admission.view import AdmissionView, pod_active, pod_group_of, workload_key
from gangplugin.admission.watchdog import Watchdog
from gangplugin.admission.writes import CheckWriter
from gangplugin.core.names import GANG_LABEL
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON, Client
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.runtime import metrics
from gangplugin.runtime.admissions import AdmissionsInFlight

log = logging.getLogger(__name__)

PASS = "pass"


class GangAdmission:
    """The check's parts over one `AdmissionView`, fed by one WorkQueue (see the module doc)."""

    def __init__(
        self,
        client: Client,
        informer: Callable[..., Informer[Any]],
        dispatcher: Dispatcher,
        clock: Callable[[], float] = time.time,
        in_flight: AdmissionsInFlight | None = None,
    ) -> None:
        # The view's handlers and these run on one dispatcher, the view's first: a pass enqueued
        # for an event sees the capacity that event changed.
        self.view = view = AdmissionView(informer, dispatcher)
        writer = CheckWriter(client, clock)
        self.admission = AdmissionPass(view, writer, client, clock, in_flight)
        self.watchdog = Watchdog(view, writer, clock)
        self.status = ConfigStatus(view, writer)
        self.queue = WorkQueue()
        view.workloads.add_handler(self._on_workload, dispatcher)
        view.pods.add_handler(self._on_pod, dispatcher)
        view.nodes.add_handler(self._on_node, dispatcher)
        view.checks.add_handler(lambda _t, _o, n: self._on_config("check", n), dispatcher)
        view.policies.add_handler(lambda _t, _o, n: self._on_config("policy", n), dispatcher)
        view.topologies.add_handler(lambda _t, _o, _n: self.queue.add(PASS), dispatcher)
        view.flavors.add_handler(lambda _t, _o, _n: self.queue.add(PASS), dispatcher)
        # preemption rules
        view.cluster_queues.add_handler(lambda _t, _o, _n: self.queue.add(PASS), dispatcher)
        view.plans.add_handler(lambda _t, _o, _n: self._recheck_admitted(), dispatcher)

    # -- event handlers: only enqueue ----------------------------------------------------------

    def _on_workload(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        self.queue.add(PASS)
        obj = new or old
        if obj is not None:
            self.queue.add("wl/" + workload_key(obj))

    def _on_pod(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj.get("metadata", {})
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang:
            owner = self.view.lookup.workload_of_gang(meta.get("namespace", ""), gang)
            if owner:
                self.queue.add("wl/" + owner)
        # A pod group's pod marked with its Workload: a group waiting for its pods may go now.
        group = pod_group_of(obj)
        if new is not None and group and (old is None or pod_group_of(old) != group):
            self.queue.add(PASS)
        # Capacity came free: a waiting gang may fit now.
        if (
            (new is None or not pod_active(new))
            and old is not None
            and (old.get("spec") or {}).get("nodeName")
        ):
            self.queue.add(PASS)

    def _on_node(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        if old is not None and new is not None and _node_view(old) == _node_view(new):
            return  # a heartbeat: nothing placement or the watchdog reads changed
        self._recheck_admitted()

    def _recheck_admitted(self) -> None:
        self.queue.add(PASS)
        for wl in self.view.workloads.items():
            if rec.is_true(wl, "Admitted"):
                self.queue.add("wl/" + workload_key(wl))

    def _on_config(self, kind: str, obj: JSON | None) -> None:
        if obj is not None:
            self.queue.add(f"{kind}/{obj['metadata']['name']}")
        if kind == "policy":
            for ac in self.view.checks.items():
                self.queue.add(f"check/{ac['metadata']['name']}")
        self.queue.add(PASS)

    def reconcile(self, key: str) -> float | None:
        if key == PASS:
            seen = metrics.newest_resource_version(self.view.workloads.items())
            wake = self.admission.run()
            metrics.ADMISSION_PASS_SEEN.set(seen)
            return wake
        kind, _, rest = key.partition("/")
        if kind == "wl":
            return self.watchdog.run(rest)
        if kind == "check":
            self.status.sync_check(rest)
        elif kind == "policy":
            self.status.sync_policy(rest)
        return None


def _node_view(obj: JSON) -> tuple[Any, ...]:
    """What of a Node the controller reads (so heartbeats can be told apart from changes)."""
    status = obj.get("status") or {}
    ready = rec.conditions(obj).get("Ready") or {}
    return (
        obj.get("metadata", {}).get("labels"),
        (obj.get("spec") or {}).get("unschedulable"),
        (obj.get("spec") or {}).get("taints"),
        status.get("allocatable"),
        ready.get("status"),
    )
