"""The `extender` component of `gangplugin serve`: the HTTPS server kube-scheduler calls (on its
own asyncio event loop thread) over the gang reservations it shares with the `ungater` component
(`shared.py`), so the plans of the two never overlap."""

from __future__ import annotations

import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gangplugin.core.gangplan import GangPlan, GangPod
from gangplugin.extender.barrier import ApiBinder, Barrier, RefusedFn
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.server import AbandonFn, ExtenderHandlers, make_app
from gangplugin.extender.shared import ReservationSettings, gang_reservations
from gangplugin.kube.client import PODS, ApiError, Client
from gangplugin.kube.events import record_event
from gangplugin.runtime.asgi import App, serve_in_thread
from gangplugin.runtime.components import LeaderController, Runtime

log = logging.getLogger(__name__)

COMPONENT = "gangplugin-extender"
GIL_SWITCH_INTERVAL = 0.0005  # seconds


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    bind: str = "0.0.0.0:8443"
    tls_cert: str | None = None
    tls_key: str | None = None
    # Only clients with a certificate this CA signed get past the TLS handshake (kube-scheduler).
    client_ca: str | None = None
    # Must stay below the scheduler's extender httpTimeout, and cover the time the scheduler takes
    # to reach every member: its queue does not keep a gang together (a backlog comes in any order).
    barrier_timeout: float = 60.0


def _abandoner(client: Client, reservations: GangReservations, executor: ThreadPoolExecutor) -> AbandonFn:
    def abandon(plan: GangPlan) -> None:
        def run() -> None:
            for ns, name in plan.abandon:
                with reservations.lock:
                    pod = reservations.pods.get((ns, name))
                meta = {"name": name, "namespace": ns, "uid": pod.uid if pod is not None else ""}
                msg = f"deleted so its controller recreates it and the gang starts whole: {plan.reason}"
                obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
                record_event(client, obj, "Warning", "GangIncomplete", msg, COMPONENT)
                try:
                    client.delete(PODS, name, ns)
                    log.warning("abandoned %s/%s of partial gang %s", ns, name, plan.gang[1])
                except ApiError as err:
                    log.warning("could not abandon %s/%s: %s", ns, name, err)

        executor.submit(run)

    return abandon


def _refusal_reporter(client: Client, executor: ThreadPoolExecutor) -> RefusedFn:
    def refused(pod: GangPod, why: str) -> None:
        meta = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
        executor.submit(record_event, client, obj, "Warning", "BindRefused", why, COMPONENT)

    return refused


class Extender(LeaderController[GangReservations]):
    """Gang plans and the bind barrier live in memory: exactly one replica may take scheduler calls
    (it listens only while leading; in a cluster the extender Service selects the leader's pod)."""

    name = "extender"

    def __init__(self, settings: ExtenderSettings, reservations: ReservationSettings) -> None:
        super().__init__()
        self.settings, self.reservation_settings = settings, reservations

    def build(self, runtime: Runtime) -> GangReservations:
        return gang_reservations(runtime, self.reservation_settings)

    def run(self, runtime: Runtime, reservations: GangReservations) -> None:
        settings = self.settings
        # kube-scheduler waits for each filter answer in its serial scheduling cycle; with Python's
        # default 5 ms GIL switch interval a watch or dispatch thread busy with a burst of pod events
        # delays the HTTP thread by up to that much per call.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        # Calls to the API server that the event loop must not wait for: deletions, Events.
        executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="extender-api")
        handlers = ExtenderHandlers(reservations, _abandoner(runtime.client, reservations, executor))

        def app() -> App:  # on the server's loop: the barrier's futures belong to it
            barrier = Barrier(
                reservations,
                ApiBinder(runtime.client),
                settings.barrier_timeout,
                _refusal_reporter(runtime.client, executor),
            )
            return make_app(handlers, barrier)

        serve_in_thread(
            "extender",
            settings.bind,
            settings.tls_cert,
            settings.tls_key,
            app,
            runtime.fail,
            client_ca=settings.client_ca,
        )
