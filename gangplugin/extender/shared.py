"""The one `GangReservations` the extender and ungater components of a process share.

Each component's `setup` asks the runtime for it (`Runtime.shared`); whichever asks first makes
it and registers its watch handlers (nodes, pods and, where Kueue is served, Workloads) on the
`gang-reservations` dispatcher. The ungater registers its own handlers on that dispatcher after
them, so they read reservations that already hold the event. Neither component imports the
other; both run on the leader, in one process, or the plans of one could overlap the other's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gangplugin import readmodel
from gangplugin.core.errors import InputError
from gangplugin.core.placement import PlacementPolicy
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.promises import AdmittedGang
from gangplugin.extender.reservations import AdmittedOf, GangReservations, PolicyOf
from gangplugin.kube.client import JSON, NODES, PODS, WORKLOADS
from gangplugin.kube.discovery import served
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS
from gangplugin.readmodel.model import ReadModel
from gangplugin.readmodel.records import node_record
from gangplugin.runtime import admissions
from gangplugin.runtime.admissions import AdmissionsInFlight, Subscriber
from gangplugin.runtime.components import Runtime

log = logging.getLogger(__name__)

NAME = "gang-reservations"
_LOGGED_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ReservationSettings:
    """From `serve`'s --extender-spares-per-ultraserver and --extender-barrier-timeout."""

    spares_per_ultraserver: int = 0  # for gangs no GangPolicy governs (plain pod gangs)
    # A plan lives twice this long unless its pods bind; a node kube-scheduler refused is left
    # out of that pod shape's plans this long.
    barrier_timeout: float = 60.0


def dispatcher(runtime: Runtime) -> Dispatcher:
    """Where the reservations' handlers run, and those that must run after them."""
    return runtime.dispatcher(NAME)


def gang_reservations(runtime: Runtime, settings: ReservationSettings) -> GangReservations:
    """The process's one gang reservations (made by whichever component asks first: both are
    given the same settings)."""
    return runtime.shared(NAME, lambda: _make(runtime, settings))


def _make(runtime: Runtime, settings: ReservationSettings) -> GangReservations:
    model = _read_model(runtime)
    reservations = GangReservations(
        PlacementPolicy(settings.spares_per_ultraserver),
        plan_ttl=2 * settings.barrier_timeout,
        policy_of=None if model is None else policy_of(model),
        reject_ttl=settings.barrier_timeout,
        admitted_of=None if model is None else admitted_of(model),
    )
    on = dispatcher(runtime)
    runtime.informer(NODES, node_record).add_handler(reservations.on_node, on)
    runtime.informer(PODS, gang_pod_from_k8s).add_handler(reservations.on_pod, on)
    if model is not None:
        workloads = runtime.informer(WORKLOADS)
        workloads.add_handler(reservations.on_workload, on)

        def recheck(kind: str, old: JSON | None, new: JSON | None) -> None:
            reservations.recheck(workloads.items())

        for res in (ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS):
            runtime.informer(res).add_handler(recheck, on)
        # The admission pass of this process announces each admission before writing it.
        in_flight = runtime.shared(admissions.NAME, AdmissionsInFlight)
        in_flight.subscribe(Subscriber(reservations.on_admitting, reservations.on_withdrawn))
    return reservations


def _read_model(runtime: Runtime) -> ReadModel | None:
    """Gangs admitted through Kueue are placed by their GangPolicy (spares, Topology levels) and
    promised capacity from their admission, as the read model says; without Kueue's and
    gangplugin's APIs every gang gets the serve options' defaults, and nothing is promised."""
    wanted = (WORKLOADS.api_version, GANG_POLICIES.api_version)
    if not all(served(runtime.client, gv) for gv in wanted):
        log.info("Kueue or GangPolicy API not served: every gang is placed with the default policy")
        return None
    return readmodel.of(runtime)


def policy_of(model: ReadModel) -> PolicyOf:
    """A gang's placement policy and topology levels, from its Workload's GangPolicy."""

    def of(namespace: str, gang: str) -> tuple[PlacementPolicy, tuple[str, ...]] | None:
        found = model.policy_of_gang(namespace, gang)
        return None if found is None else (found[0].placement, found[1])

    return of


def admitted_of(model: ReadModel) -> AdmittedOf:
    """What the gang check promised a Workload's gang (`ReadModel.promised_gang`)."""

    # Each Workload's error is logged once: every AdmissionCheck, GangPolicy and ResourceFlavor
    # event reads every Workload again (`recheck`), and one deleted GangPolicy had an admitted
    # Workload logged 470 times in one test session.
    logged: dict[str, str] = {}  # Workload uid -> the error last logged for it

    def of(wl: JSON) -> AdmittedGang | None:
        meta = wl["metadata"]
        key = str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}")
        try:
            promised = model.promised_gang(wl)
        except InputError as err:  # the gang check reports it; nothing can be promised
            if logged.get(key) != str(err):
                if len(logged) >= _LOGGED_MAX:  # Workloads deleted while in error
                    logged.clear()
                logged[key] = str(err)
                log.warning("admitted workload %s: promised capacity not held: %s", meta["name"], err)
            return None
        logged.pop(key, None)
        return None if promised is None else AdmittedGang(promised[0], promised[1].placement)

    return of
