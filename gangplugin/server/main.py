"""The `gangplugin` command: `gangplugin serve` runs the controllers and servers."""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

import click

from gangplugin import __version__
from gangplugin.kube.client import Client
from gangplugin.kube.config import ConfigError
from gangplugin.runtime.components import Runtime
from gangplugin.server import logs
from gangplugin.server.health import serve_health, tls_context
from gangplugin.server.registry import DEFAULT_COMPONENTS, REGISTRY
from gangplugin.server.serving import ServeError, Server
from gangplugin.server.settings import ServeOptions, election_of, settings_of

COMPONENTS = tuple(REGISTRY)
__all__ = ["COMPONENTS", "DEFAULT_COMPONENTS", "cli", "main", "serve"]


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
    help=f"Comma-separated components to run, of {', '.join(REGISTRY)}.",
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
def serve(**values: Any) -> None:
    """Run the chosen components in one process until SIGTERM."""
    options = ServeOptions(**values)
    logs.configure(options.log_level, options.log_format)
    wanted = _chosen(options.components)
    settings = settings_of(options, wanted)
    election = election_of(options)
    try:
        runtime = Runtime(Client.from_kubeconfig(options.kubeconfig))
    except ConfigError as err:
        raise click.ClickException(str(err)) from None
    server = Server(runtime, {name: REGISTRY[name](settings) for name in wanted}, election)
    tls = tls_context(options.health_tls_cert, options.health_tls_key)
    health = serve_health(options.health_bind, runtime.live, server.readiness, tls)

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


def _chosen(components: str) -> list[str]:
    """The --components asked for; click.BadParameter naming any unknown one."""
    wanted = [c.strip() for c in components.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in REGISTRY]
    if unknown or not wanted:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}; choose from {', '.join(REGISTRY)}",
            param_hint="--components",
        )
    return wanted


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
