"""`gangplugin serve --components api`: the gRPC server (PlanService for now).

A later service is one more entry in `SERVICES`: a function that builds its servicer from the
runtime and registers it on the server. TLS and auth come with that later issue; until then the
server listens in plain text on --grpc-bind (keep it on a trusted network or localhost).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures

import grpc

from gangplugin.api.plans import PlanService
from gangplugin.api.proto import plans_pb2_grpc
from gangplugin.kube.client import NODES
from gangplugin.plans.controller import TRAINING_PLANS
from gangplugin.server.runtime import Runtime

log = logging.getLogger(__name__)

_settings = {"bind": "0.0.0.0:8090"}


def configure(bind: str) -> None:
    """Where the server listens (from `serve --grpc-bind`)."""
    _settings["bind"] = bind


def _plan_service(runtime: Runtime, server: grpc.Server) -> None:
    service = PlanService(runtime.client, runtime.informer(NODES), runtime.informer(TRAINING_PLANS))
    plans_pb2_grpc.add_PlanServiceServicer_to_server(service, server)


SERVICES: list[Callable[[Runtime, grpc.Server], None]] = [_plan_service]

_servers: dict[int, grpc.Server] = {}


def setup(runtime: Runtime) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="grpc"))
    for add in SERVICES:
        add(runtime, server)  # asks for its caches now, before they start
    _servers[id(runtime)] = server


def start(runtime: Runtime) -> None:
    server = _servers.pop(id(runtime))
    if server.add_insecure_port(_settings["bind"]) == 0:
        raise RuntimeError(f"--grpc-bind {_settings['bind']}: cannot listen there")
    server.start()
    log.info("gRPC API on %s", _settings["bind"])
    threading.Thread(
        target=lambda: (runtime.stop.wait(), server.stop(5)), name="grpc-stop", daemon=True
    ).start()
