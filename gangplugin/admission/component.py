"""`gangplugin serve --components admission`: the gang admission-check controller."""

from __future__ import annotations

from gangplugin import readmodel
from gangplugin.admission.controller import PASS, GangAdmission
from gangplugin.kube.workqueue import start_workers
from gangplugin.runtime import admissions
from gangplugin.runtime.admissions import AdmissionsInFlight
from gangplugin.runtime.components import Runtime


class Admission:
    # Only the leader writes check states: two writers would race on the same Workloads.
    needs_leader: bool = True

    def __init__(self) -> None:
        self._controller: GangAdmission | None = None

    def setup(self, runtime: Runtime) -> None:
        self._controller = GangAdmission(
            runtime.client,
            readmodel.of(runtime),
            in_flight=runtime.shared(admissions.NAME, AdmissionsInFlight),
        )

    def start(self, runtime: Runtime) -> None:
        ctl = self._controller
        if ctl is None:
            raise RuntimeError("admission: start() before setup()")
        for ac in ctl.model.admission_checks.items():
            ctl.queue.add(f"check/{ac['metadata']['name']}")
        ctl.queue.add(PASS)
        # One worker: the admission pass and the watchdogs write the same check entries, and one
        # pass must see the decisions of the one before it (promised capacity, sequential gate).
        start_workers(ctl.queue, ctl.reconcile, "admission", count=1)
