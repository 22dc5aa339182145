"""`gangplugin serve --components admission`: the gang admission-check controller."""

from __future__ import annotations

from gangplugin import readmodel
from gangplugin.admission.controller import PASS, GangAdmission
from gangplugin.kube.workqueue import start_workers
from gangplugin.runtime import admissions
from gangplugin.runtime.admissions import AdmissionsInFlight
from gangplugin.runtime.components import LeaderController, Runtime


class Admission(LeaderController[GangAdmission]):
    """Only the leader writes check states: two writers would race on the same Workloads."""

    name = "admission"

    def build(self, runtime: Runtime) -> GangAdmission:
        in_flight = runtime.shared(admissions.NAME, AdmissionsInFlight)
        return GangAdmission(runtime.client, readmodel.of(runtime), in_flight=in_flight)

    def run(self, runtime: Runtime, ctl: GangAdmission) -> None:
        for ac in ctl.model.admission_checks.items():
            ctl.queue.add(f"check/{ac['metadata']['name']}")
        ctl.queue.add(PASS)
        # One worker: the admission pass and the watchdogs write the same check entries, and one
        # pass must see the decisions of the one before it (promised capacity, sequential gate).
        start_workers(ctl.queue, ctl.reconcile, "admission", count=1)
