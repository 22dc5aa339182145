"""`gangplugin serve --components api`: the gRPC server.

Services: GangService and PlanService (each an entry in `SERVICES`: a function that builds its
servicer from the runtime and registers it), the standard health service (grpc.health.v1) and
server reflection. With --grpc-tls-cert/--grpc-tls-key it serves TLS, re-reading the files when
they change (cert-manager rotates them in place); without, plain text with a warning. With
--grpc-mtls-bind and --grpc-client-ca it also listens there for callers that present a client
certificate signed by that CA (kubectl users of a client-certificate kubeconfig): gRPC's Python
server cannot ask for a certificate optionally, so token callers and certificate callers get a
port each. Every call but health and reflection needs a caller the API server authenticates and
authorizes (`api.auth`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gangplugin import readmodel
from gangplugin.api.auth import AuthInterceptor, Authorizer
from gangplugin.api.gangs import MAX_WATCHES, GangService
from gangplugin.api.plans import PlanService
from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc, plans_pb2, plans_pb2_grpc
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.runtime.components import Runtime

log = logging.getLogger(__name__)

#: The services a client may look up by reflection or ask the health service about.
SERVICE_NAMES = (
    gangs_pb2.DESCRIPTOR.services_by_name["GangService"].full_name,
    plans_pb2.DESCRIPTOR.services_by_name["PlanService"].full_name,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiSettings:
    """Where the server listens and its certificates (from `serve --grpc-*`); ValueError, naming
    the options, for a half-given pair."""

    bind: str = "0.0.0.0:8090"
    tls_cert: str | None = None
    tls_key: str | None = None
    mtls_bind: str | None = None
    client_ca: str | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--grpc-tls-cert and --grpc-tls-key go together")
        if (self.mtls_bind is None) != (self.client_ca is None):
            raise ValueError("--grpc-mtls-bind and --grpc-client-ca go together")
        if self.mtls_bind and not self.tls_cert:
            raise ValueError(
                "--grpc-mtls-bind needs --grpc-tls-cert and --grpc-tls-key (its serving certificate)"
            )


def _plan_service(runtime: Runtime, server: grpc.Server) -> None:
    service = PlanService(runtime.client, readmodel.of(runtime).nodes, runtime.informer(TRAINING_PLANS))
    plans_pb2_grpc.add_PlanServiceServicer_to_server(service, server)


def _gang_service(runtime: Runtime, server: grpc.Server) -> None:
    service = GangService(readmodel.of(runtime), runtime.stop)
    gangs_pb2_grpc.add_GangServiceServicer_to_server(service, server)


SERVICES: list[Callable[[Runtime, grpc.Server], None]] = [_gang_service, _plan_service]


def new_server(authorizer: Authorizer | None) -> tuple[grpc.Server, health.HealthServicer]:
    """A server with health and reflection; `authorizer` None serves without auth (tests only)."""
    interceptors: list[grpc.ServerInterceptor[Any, Any]] = (
        [AuthInterceptor(authorizer)] if authorizer is not None else []
    )
    server = grpc.server(
        # Each open WatchGangs holds a thread; the rest serve unary calls.
        futures.ThreadPoolExecutor(max_workers=MAX_WATCHES + 8, thread_name_prefix="grpc"),
        interceptors=interceptors,
    )
    health_service = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server, health_service


def _credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """TLS with cert/key; with `client_ca`, a client certificate signed by it is required."""
    files = (cert, key, *((client_ca,) if client_ca else ()))

    def load() -> tuple[Any, tuple[float, ...]]:
        with open(key, "rb") as k, open(cert, "rb") as c:
            pair = (k.read(), c.read())
        roots = open(client_ca, "rb").read() if client_ca else None  # noqa: SIM115
        return grpc.ssl_server_certificate_configuration([pair], roots), tuple(
            os.stat(f).st_mtime for f in files
        )

    config, stamp = load()
    seen = {"stamp": stamp}

    def fetch() -> Any:  # called per handshake: cheap unless the files changed
        try:
            now = tuple(os.stat(f).st_mtime for f in files)
            if now == seen["stamp"]:
                return None
            fresh, seen["stamp"] = load()
            log.info("gRPC TLS certificate reloaded from %s", cert)
            return fresh
        except (OSError, ValueError) as err:
            log.warning("gRPC TLS certificate not reloaded: %s", err)
            return None

    return grpc.dynamic_ssl_server_credentials(config, fetch, require_client_authentication=bool(client_ca))


def listen(server: grpc.Server, settings: ApiSettings) -> int:
    if settings.tls_cert and settings.tls_key:
        port = server.add_secure_port(settings.bind, _credentials(settings.tls_cert, settings.tls_key))
    else:
        log.warning("gRPC API without TLS on %s: tokens cross the network in clear text", settings.bind)
        port = server.add_insecure_port(settings.bind)
    if port == 0:
        raise RuntimeError(f"--grpc-bind {settings.bind}: cannot listen there")
    if settings.mtls_bind and settings.tls_cert and settings.tls_key and settings.client_ca:
        creds = _credentials(settings.tls_cert, settings.tls_key, settings.client_ca)
        if server.add_secure_port(settings.mtls_bind, creds) == 0:
            raise RuntimeError(f"--grpc-mtls-bind {settings.mtls_bind}: cannot listen there")
    return port


class Api:
    # Every replica answers: it only reads (the read model) and asks the API server who may.
    needs_leader: bool = False

    def __init__(self, settings: ApiSettings) -> None:
        self.settings = settings
        self._server: tuple[grpc.Server, health.HealthServicer] | None = None

    def setup(self, runtime: Runtime) -> None:
        server, health_service = new_server(Authorizer(runtime.client))
        for add in SERVICES:
            add(runtime, server)  # asks for its caches now, before they start
        self._server = (server, health_service)

    def start(self, runtime: Runtime) -> None:
        if self._server is None:
            raise RuntimeError("api: start() before setup()")
        server, health_service = self._server
        settings = self.settings
        listen(server, settings)
        server.start()
        for name in ("", *SERVICE_NAMES):
            health_service.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC API on %s (%s)", settings.bind, "TLS" if settings.tls_cert else "plain text")
        if settings.mtls_bind:
            log.info("gRPC API for client certificates on %s (CA %s)", settings.mtls_bind, settings.client_ca)

        def stop() -> None:
            runtime.stop.wait()
            health_service.enter_graceful_shutdown()
            server.stop(5)

        threading.Thread(target=stop, name="grpc-stop", daemon=True).start()
