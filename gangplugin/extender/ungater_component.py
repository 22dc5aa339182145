"""The `ungater` component of `gangplugin serve`: releases bindMode Ungate and PodGroup gangs
(`ungater.py`), pinning each pod to the node the gang reservations it shares with the `extender`
component (`shared.py`) planned for it. Needs no extender listener and no kube-scheduler
configured with one: kube-scheduler binds the pinned pods alone."""

from __future__ import annotations

from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.shared import ReservationSettings, dispatcher, gang_reservations
from gangplugin.extender.ungater import Ungater
from gangplugin.kube.client import NODES, PODS, WORKLOADS
from gangplugin.kube.workqueue import start_workers
from gangplugin.readmodel.records import node_record
from gangplugin.runtime.components import LeaderController, Runtime

# Gangs are released side by side: each one's plan is made and reserved under the reservations'
# lock, so only its pod patches overlap with another's.
WORKERS = 4


class UngaterComponent(LeaderController[Ungater]):
    """Its plans live in the reservations, in memory: one replica pins (the leader), as one plans."""

    name = "ungater"

    def __init__(self, reservations: ReservationSettings) -> None:
        super().__init__()
        self.reservation_settings = reservations

    def build(self, runtime: Runtime) -> Ungater:
        ungater = Ungater(runtime.client, gang_reservations(runtime, self.reservation_settings))
        # After the reservations' handlers, on their dispatcher: it reads what they hold.
        on = dispatcher(runtime)
        runtime.informer(NODES, node_record).add_handler(ungater.on_node, on)
        runtime.informer(PODS, gang_pod_from_k8s).add_handler(ungater.on_pod, on)
        if ungater.reservations.admitted_of is not None:  # Kueue served: its Workloads watched
            runtime.informer(WORKLOADS).add_handler(ungater.on_workload, on)
        return ungater

    def run(self, runtime: Runtime, ungater: Ungater) -> None:
        for thread in start_workers(ungater.queue, ungater.reconcile, "ungater", count=WORKERS):
            runtime.vital(thread)
