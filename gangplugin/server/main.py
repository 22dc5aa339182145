"""The `gangplugin` command: `gangplugin serve` runs the controllers and servers."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from types import FrameType

import click

from gangplugin import __version__
from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.leader import ElectionConfig
from gangplugin.kube.client import Client
from gangplugin.kube.config import ConfigError
from gangplugin.runtime.components import Runtime
from gangplugin.server import logs
from gangplugin.server.health import serve_health, tls_context
from gangplugin.server.serving import Election, ServeError, Server

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _default_namespace() -> str:
    """The pod's namespace in a cluster (downward API or the service account), else the one the
    manifests and the local cluster use."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return _SA_NAMESPACE.read_text().strip() or "gangplugin-system"
    except OSError:
        return "gangplugin-system"


def _default_identity() -> str:
    """The pod name (a container restarted in the same pod renews its own lease at once), else
    client-go's hostname_uuid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


# component name -> module with `setup(runtime)` (registers caches and handlers) and
# `start(runtime)` (starts its threads once the caches are synced); a module that sets
# `needs_leader = True` is started only while this replica holds the leader Lease.
COMPONENTS: dict[str, str] = {
    "admission": "gangplugin.admission.component",
    "extender": "gangplugin.extender.component",
    "ungater": "gangplugin.extender.ungater_component",
    "plans": "gangplugin.plans.component",
    "api": "gangplugin.api.component",
    "webhook": "gangplugin.webhook.component",
    "multikueue": "gangplugin.multikueue.component",
}
# What `serve` runs unless told: every component but the MultiKueue dispatcher, which only a
# manager cluster runs (it has no nodes; its gangs run in worker clusters).
DEFAULT_COMPONENTS = tuple(c for c in COMPONENTS if c != "multikueue")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangplugin")
def cli() -> None:
    """gangplugin's server side."""


@cli.command()
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig file(s), several joined with ':' and merged as kubectl does; in-cluster when unset.",
)
@click.option(
    "--components",
    default=",".join(DEFAULT_COMPONENTS),
    show_default=True,
    help=f"Comma-separated components to run, of {', '.join(COMPONENTS)}.",
)
@click.option(
    "--health-bind",
    default="0.0.0.0:8081",
    show_default=True,
    help="Where /healthz, /readyz and /metrics are served.",
)
@click.option("--health-tls-cert", default=None, help="Certificate (PEM) for --health-bind; HTTP when unset.")
@click.option("--health-tls-key", default=None, help="Key of --health-tls-cert.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default="json",
    show_default=True,
    help="json: one object per line (ts, level, logger, msg, fields); text: for a terminal.",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Run the controllers and the extender only while holding the Lease (for several replicas).",
)
@click.option(
    "--leader-election-namespace",
    default=None,
    help="Namespace of the Lease  [default: the pod's, else gangplugin-system]",
)
@click.option("--leader-election-id", default="gangplugin", show_default=True, help="Name of the Lease.")
@click.option(
    "--leader-election-identity",
    default=None,
    help="This replica's name in the Lease  [default: $POD_NAME, else hostname_uuid]",
)
@click.option("--leader-election-lease-duration", default="15s", show_default=True)
@click.option("--leader-election-renew-deadline", default="10s", show_default=True)
@click.option("--leader-election-retry-period", default="2s", show_default=True)
@click.option("--grpc-bind", default="0.0.0.0:8090", show_default=True, help="Where the gRPC API listens.")
@click.option("--grpc-tls-cert", default=None, help="gRPC serving certificate (PEM); plain text when unset.")
@click.option("--grpc-tls-key", default=None, help="Key of --grpc-tls-cert.")
@click.option(
    "--grpc-mtls-bind",
    default=None,
    help="Also listen here for callers with a client certificate (kubectl's client-certificate users).",
)
@click.option(
    "--grpc-client-ca",
    default=None,
    help="CA of those client certificates: the API server's --client-ca-file.",
)
@click.option("--extender-bind", default="0.0.0.0:8443", show_default=True, help="Extender's address.")
@click.option("--extender-tls-cert", default=None, help="Serving certificate (PEM); plain HTTP when unset.")
@click.option("--extender-tls-key", default=None, help="Key of --extender-tls-cert.")
@click.option(
    "--extender-client-ca",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="CA (PEM) of the only callers the extender answers: mutual TLS, a client without a "
    "certificate it signed is refused in the handshake. Give it a CA that signs only "
    "kube-scheduler's client certificate (its extender tlsConfig certFile/keyFile).",
)
@click.option(
    "--extender-barrier-timeout",
    default=60.0,
    show_default=True,
    help="Seconds a gang may take to reach bind whole (cover the scheduler's pass over its backlog); "
    "keep below the scheduler's httpTimeout. The extender's and the ungater's plans expire after "
    "twice this.",
)
@click.option(
    "--extender-spares-per-ultraserver",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Spare nodes per UltraServer for gangs no GangPolicy governs (extender and ungater).",
)
@click.option(
    "--webhook-bind", default="0.0.0.0:9443", show_default=True, help="Admission webhook's address."
)
@click.option(
    "--webhook-tls-cert", default=None, help="Webhook serving certificate (PEM); the API server needs it."
)
@click.option("--webhook-tls-key", default=None, help="Key of --webhook-tls-cert.")
@click.option(
    "--multikueue-namespace",
    default="kueue-system",
    show_default=True,
    help="Kueue's namespace on the manager, where its MultiKueueClusters' kubeconfig Secrets are.",
)
@click.option(
    "--multikueue-answer-timeout",
    default="2m",
    show_default=True,
    help="How long a nominated worker may take to admit or refuse a gang before the next is tried.",
)
@click.option(
    "--multikueue-refusal-ttl",
    default="5m",
    show_default=True,
    help="How long a worker that refused a gang is not asked about it again.",
)
def serve(
    kubeconfig: str | None,
    components: str,
    health_bind: str,
    health_tls_cert: str | None,
    health_tls_key: str | None,
    log_level: str,
    log_format: str,
    leader_elect: bool,
    leader_election_namespace: str | None,
    leader_election_id: str,
    leader_election_identity: str | None,
    leader_election_lease_duration: str,
    leader_election_renew_deadline: str,
    leader_election_retry_period: str,
    grpc_bind: str,
    grpc_tls_cert: str | None,
    grpc_tls_key: str | None,
    grpc_mtls_bind: str | None,
    grpc_client_ca: str | None,
    extender_bind: str,
    extender_tls_cert: str | None,
    extender_tls_key: str | None,
    extender_client_ca: str | None,
    extender_barrier_timeout: float,
    extender_spares_per_ultraserver: int,
    webhook_bind: str,
    webhook_tls_cert: str | None,
    webhook_tls_key: str | None,
    multikueue_namespace: str,
    multikueue_answer_timeout: str,
    multikueue_refusal_ttl: str,
) -> None:
    """Run the chosen components in one process until SIGTERM."""
    logs.configure(log_level, log_format)
    wanted = [c.strip() for c in components.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in COMPONENTS]
    if unknown or not wanted:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}; choose from {', '.join(COMPONENTS) or '(none yet)'}",
            param_hint="--components",
        )
    for flag, cert, key in (
        ("health", health_tls_cert, health_tls_key),
        ("extender", extender_tls_cert, extender_tls_key),
        ("webhook", webhook_tls_cert, webhook_tls_key),
        ("grpc", grpc_tls_cert, grpc_tls_key),
    ):
        if (cert is None) != (key is None):
            raise click.BadParameter("give both or neither", param_hint=f"--{flag}-tls-cert/--{flag}-tls-key")
    if extender_client_ca and not extender_tls_cert:
        raise click.BadParameter(
            "needs --extender-tls-cert/--extender-tls-key: client certificates are checked in TLS",
            param_hint="--extender-client-ca",
        )
    election = None
    if leader_elect:
        try:
            config = ElectionConfig(
                parse_duration(leader_election_lease_duration, "--leader-election-lease-duration"),
                parse_duration(leader_election_renew_deadline, "--leader-election-renew-deadline"),
                parse_duration(leader_election_retry_period, "--leader-election-retry-period"),
            ).validate()
        except InputError as err:
            raise click.BadParameter(err.problem, param_hint=err.field) from None
        election = Election(
            leader_election_namespace or _default_namespace(),
            leader_election_id,
            leader_election_identity or _default_identity(),
            config,
            os.environ.get("POD_NAME") or None,
            kubeconfig,
        )
    try:
        runtime = Runtime(Client.from_kubeconfig(kubeconfig))
    except ConfigError as err:
        raise click.ClickException(str(err)) from None
    modules = {c: importlib.import_module(COMPONENTS[c]) for c in wanted}
    server = Server(runtime, modules, election)
    tls = tls_context(health_tls_cert, health_tls_key)
    health = serve_health(health_bind, runtime.live, server.readiness, tls)
    if {"extender", "ungater"} & set(wanted):
        from gangplugin.extender.shared import ReservationSettings
        from gangplugin.extender.shared import configure as configure_reservations

        configure_reservations(ReservationSettings(extender_spares_per_ultraserver, extender_barrier_timeout))
    if "extender" in wanted:
        from gangplugin.extender.component import ExtenderSettings, configure

        configure(
            ExtenderSettings(
                bind=extender_bind,
                tls_cert=extender_tls_cert,
                tls_key=extender_tls_key,
                client_ca=extender_client_ca,
                barrier_timeout=extender_barrier_timeout,
            )
        )
    if "webhook" in wanted:
        from gangplugin.webhook.component import WebhookSettings
        from gangplugin.webhook.component import configure as configure_webhook

        configure_webhook(WebhookSettings(webhook_bind, webhook_tls_cert, webhook_tls_key))
    if "api" in wanted:
        from gangplugin.api.component import configure as configure_api

        try:
            configure_api(grpc_bind, grpc_tls_cert, grpc_tls_key, grpc_mtls_bind, grpc_client_ca)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--grpc-mtls-bind") from None

    if "multikueue" in wanted:
        from gangplugin.multikueue.component import configure as configure_multikueue
        from gangplugin.multikueue.controller import DispatchSettings

        try:
            answer = parse_duration(multikueue_answer_timeout, "--multikueue-answer-timeout")
            ttl = parse_duration(multikueue_refusal_ttl, "--multikueue-refusal-ttl")
        except InputError as err:
            raise click.BadParameter(err.problem, param_hint=err.field) from None
        configure_multikueue(DispatchSettings(multikueue_namespace, answer, ttl))

    def _stop(signum: int, _frame: FrameType | None) -> None:
        runtime.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.start()
    except ServeError as err:
        raise click.ClickException(str(err)) from None
    status = server.wait()
    health.shutdown()
    if status:
        # At once, without waiting for worker threads: a replica that lost the Lease must not act.
        logging.shutdown()
        os._exit(status)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.ClickException as err:
        err.show()
        sys.exit(2)
    except click.exceptions.Abort:
        sys.exit(130)


if __name__ == "__main__":
    main()
