"""The `extender` component of `gangplugin serve`: watch caches of nodes and pods, the HTTPS
server kube-scheduler calls (on its own asyncio event loop thread), and the ungater that
releases bindMode Ungate and PodGroup gangs (`ungater.py`); both place gangs with one `ExtenderCache`, so
their reservations never overlap."""

from __future__ import annotations

import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gangplugin.core.gangplan import GangPlan, GangPod
from gangplugin.core.placement import PlacementPolicy
from gangplugin.extender.barrier import ApiBinder, Barrier, RefusedFn
from gangplugin.extender.cache import ExtenderCache, PolicyOf
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.server import AbandonFn, ExtenderHandlers, make_app
from gangplugin.extender.ungater import Ungater
from gangplugin.kube.client import NODES, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.discovery import served
from gangplugin.kube.events import record_event
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.kube.informer import identity
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, TOPOLOGIES
from gangplugin.kube.workqueue import start_workers
from gangplugin.runtime.asgi import App, serve_in_thread
from gangplugin.runtime.components import Runtime

log = logging.getLogger(__name__)

COMPONENT = "gangplugin-extender"
GIL_SWITCH_INTERVAL = 0.0005  # seconds
UNGATER_WORKERS = 4


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
    spares_per_ultraserver: int = 0


# Gang plans and the bind barrier live in memory: exactly one replica may take scheduler calls
# (it listens only while leading; in a cluster the extender Service selects the leader's pod).
needs_leader = True

_settings = ExtenderSettings()
_cache: ExtenderCache | None = None
_ungater: Ungater | None = None


def configure(settings: ExtenderSettings) -> None:
    """Called by `gangplugin serve` with its --extender-* options, before `setup`."""
    global _settings
    _settings = settings


def setup(runtime: Runtime) -> None:
    global _cache, _ungater
    _cache = ExtenderCache(
        PlacementPolicy(_settings.spares_per_ultraserver),
        plan_ttl=2 * _settings.barrier_timeout,
        policy_of=_policy_source(runtime),
        reject_ttl=_settings.barrier_timeout,
    )
    _ungater = Ungater(runtime.client, _cache)
    nodes = runtime.informer(NODES, identity)
    nodes.add_handler(_cache.on_node)
    nodes.add_handler(_ungater.on_node)  # after the cache's: it reads the node there
    pods = runtime.informer(PODS, gang_pod_from_k8s)
    pods.add_handler(_cache.on_pod)
    pods.add_handler(_ungater.on_pod)  # after the cache's: it plans on what the cache holds


def _policy_source(runtime: Runtime) -> PolicyOf | None:
    """Gangs admitted through Kueue are placed by their GangPolicy (spares, Topology levels);
    without Kueue's and gangplugin's APIs every gang gets the serve options' defaults."""
    wanted = (WORKLOADS.api_version, GANG_POLICIES.api_version)
    if not all(served(runtime.client, gv) for gv in wanted):
        log.info("Kueue or GangPolicy API not served: every gang is placed with the default policy")
        return None
    policies = GangPolicies(
        runtime.informer(WORKLOADS),
        runtime.informer(ADMISSION_CHECKS),
        runtime.informer(GANG_POLICIES),
        runtime.informer(TOPOLOGIES),
    )

    def policy_of(namespace: str, gang: str) -> tuple[PlacementPolicy, tuple[str, ...]] | None:
        found = policies.of_gang(namespace, gang)
        return None if found is None else (found[0].placement, found[1])

    return policy_of


def _abandoner(client: Client, cache: ExtenderCache, executor: ThreadPoolExecutor) -> AbandonFn:
    def abandon(plan: GangPlan) -> None:
        def run() -> None:
            for ns, name in plan.abandon:
                with cache.lock:
                    pod = cache.pods.get((ns, name))
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


def start(runtime: Runtime) -> None:
    cache, ungater = _cache, _ungater
    if cache is None or ungater is None:
        raise RuntimeError("extender: start() before setup()")
    # Gangs are released side by side: each one's plan is made and reserved under the cache's
    # lock, so only its pod patches overlap with another's.
    for thread in start_workers(ungater.queue, ungater.reconcile, "ungater", count=UNGATER_WORKERS):
        runtime.vital(thread)
    settings = _settings
    # kube-scheduler waits for each filter answer in its serial scheduling cycle; with Python's
    # default 5 ms GIL switch interval a watch thread busy with a burst of pod events delays the
    # HTTP thread by up to that much per call.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    # Calls to the API server that the event loop must not wait for: deletions, Events.
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="extender-api")
    handlers = ExtenderHandlers(cache, _abandoner(runtime.client, cache, executor))

    def app() -> App:  # on the server's loop: the barrier's futures belong to it
        barrier = Barrier(
            cache,
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
