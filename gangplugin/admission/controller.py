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
  "wl/<ns>/<name>" watchdog of one admitted gang; wakes itself at its next deadline (its pods'
                   changes ask for one look within POD_LOOK_SECONDS).
  "check/<name>"   the AdmissionCheck's Active condition.
  "policy/<name>"  the GangPolicy's Valid condition.

Where TrainingPlans feed a Workload's ClusterQueue flavor, `core.drain` also decides: a gang that
would outlive the plan capacity is not admitted from the termination start on, an admitted one
is requeued (check Retry) at that instant, and pods carry the block end to checkpoint before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gangplugin.admission.admit import AdmissionPass
from gangplugin.admission.status import ConfigStatus
from gangplugin.admission.watchdog import Watchdog
from gangplugin.admission.writes import CheckWriter
from gangplugin.kube.client import Client
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.readmodel.model import Config, Follower, ReadModel
from gangplugin.readmodel.records import NodeRecord, PodRecord, WorkloadRecord
from gangplugin.runtime import metrics
from gangplugin.runtime.admissions import AdmissionsInFlight

PASS = "pass"
#: A gang's watchdog looks at its pods once for all their changes within this long: a 1,024-pod
#: gang's pods change thousands of times as they are made, pinned, bound and started, and each
#: look reads every pod (one look per change kept one core busy for the whole of it).
POD_LOOK_SECONDS = 1.0
#: The check's own objects, whose status it keeps (work item prefix).
_ITS_STATUS = {Config.ADMISSION_CHECK: "check", Config.GANG_POLICY: "policy"}


class GangAdmission(Follower):
    """The check's parts over the read model, fed by one WorkQueue (see the module doc). It
    follows the model: its hooks run after the model holds each change, so a pass enqueued for
    an event sees the capacity that event changed."""

    def __init__(
        self,
        client: Client,
        model: ReadModel,
        clock: Callable[[], float] = time.time,
        in_flight: AdmissionsInFlight | None = None,
    ) -> None:
        self.model = model
        writer = CheckWriter(client, clock)
        # a write refused or failed: its gangs are decided again
        self.admission = AdmissionPass(
            model, writer, client, clock, in_flight, rerun=lambda after: self.queue.add_after(PASS, after)
        )
        self.watchdog = Watchdog(model, writer, clock)
        self.status = ConfigStatus(model, writer)
        # The pass first: a burst's pod events queue one watchdog item per gang ahead of it.
        self.queue = WorkQueue(first=frozenset({PASS}))
        model.follow(self)

    # -- the model's hooks: only enqueue ---------------------------------------------------------

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        self.queue.add(PASS)
        some = new or old
        if some is not None:
            self.queue.add("wl/" + some.key)

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        some = new or old
        assert some is not None
        if some.gang:
            owner = self.model.workload_of_gang(some.namespace, some.gang)
            if owner:
                self.queue.add_after("wl/" + owner, POD_LOOK_SECONDS)
        # A pod group's pod marked with its Workload: a group waiting for its pods may go now.
        if new is not None and new.pod_group and (old is None or old.pod_group != new.pod_group):
            self.queue.add(PASS)
        # A gang's pod left (it is being deleted or finished), or the capacity it held came
        # free (a deleted pod holds its node until it is gone: on a real node, its grace
        # period): a waiting gang may fit now.
        if old is not None and (
            (old.placed_on and (new is None or not new.placed_on))
            or (old.bound is not None and (new is None or new.bound is None))
        ):
            self.queue.add(PASS)

    def node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        self._recheck_admitted()

    def config(self, kind: Config, name: str, present: bool) -> None:
        if kind is Config.LOCAL_QUEUE:
            return  # the check reads the ClusterQueue a Workload's quota is in, not its LocalQueue
        if kind is Config.TRAINING_PLAN:
            self._recheck_admitted()  # a block's end may drain admitted gangs
            return
        if (status := _ITS_STATUS.get(kind)) is not None:
            if present:
                self.queue.add(f"{status}/{name}")
            if kind is Config.GANG_POLICY:
                for ac in self.model.admission_checks.items():
                    self.queue.add(f"check/{ac['metadata']['name']}")
        self.queue.add(PASS)

    def _recheck_admitted(self) -> None:
        self.queue.add(PASS)
        for wl in self.model.workloads.items():
            record = self.model.record(wl)
            if record.admitted:
                self.queue.add("wl/" + record.key)

    def reconcile(self, key: str) -> float | None:
        if key == PASS:
            seen = metrics.newest_resource_version(self.model.workloads.items())
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
