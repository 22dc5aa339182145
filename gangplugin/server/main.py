"""The `gangplugin` command: `gangplugin serve` runs the controllers and servers."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from gangplugin import __version__
from gangplugin.kube.client import Client, observe_requests
from gangplugin.kube.config import ConfigError
from gangplugin.runtime import metrics
from gangplugin.runtime.components import Runtime
from gangplugin.server import logs
from gangplugin.server.health import serve_health, tls_context
from gangplugin.server.registry import DEFAULT_COMPONENTS, REGISTRY
from gangplugin.server.serving import ServeError, Server
from gangplugin.server.settings import ServeOptions, election_of, settings_of

COMPONENTS = tuple(REGISTRY)
__all__ = ["COMPONENTS", "DEFAULT_COMPONENTS", "cli", "main", "serve"]
#: A click option decorator.
Option = Callable[[Callable[..., None]], Callable[..., None]]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangplugin")
def cli() -> None:
    """gangplugin's server side."""


def _listener(name: str, bind: str, where: str, certificate: str) -> list[Option]:
    """An HTTPS (or gRPC) listener's address and serving certificate options."""
    return [
        click.option(f"--{name}-bind", default=bind, show_default=True, help=where),
        click.option(f"--{name}-tls-cert", default=None, help=certificate),
        click.option(f"--{name}-tls-key", default=None, help=f"Key of --{name}-tls-cert."),
    ]


def _shown(flag: str, default: object, text: str | None = None, **kw: Any) -> Option:
    """An option whose default --help shows."""
    return click.option(flag, default=default, show_default=True, help=text, **kw)


OPTIONS: list[Option] = [
    click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        default=None,
        help="Kubeconfig file(s), several joined with ':' and merged as kubectl does; in-cluster when unset.",
    ),
    _shown(
        "--components",
        ",".join(DEFAULT_COMPONENTS),
        f"Comma-separated components to run, of {', '.join(REGISTRY)}.",
    ),
    *_listener(
        "health",
        "0.0.0.0:8081",
        "Where /healthz, /readyz and /metrics are served.",
        "Certificate (PEM) for --health-bind; HTTP when unset.",
    ),
    _shown("--log-level", "INFO"),
    _shown(
        "--log-format",
        "json",
        "json: one object per line (ts, level, logger, msg, fields); text: for a terminal.",
        type=click.Choice(["json", "text"]),
    ),
    _shown(
        "--leader-elect/--no-leader-elect",
        True,
        "Run the controllers and the extender only while holding the Lease (for several replicas).",
    ),
    click.option(
        "--leader-election-namespace",
        default=None,
        help="Namespace of the Lease  [default: the pod's, else gangplugin-system]",
    ),
    _shown("--leader-election-id", "gangplugin", "Name of the Lease."),
    click.option(
        "--leader-election-identity",
        default=None,
        help="This replica's name in the Lease  [default: $POD_NAME, else hostname_uuid]",
    ),
    _shown("--leader-election-lease-duration", "15s"),
    _shown("--leader-election-renew-deadline", "10s"),
    _shown("--leader-election-retry-period", "2s"),
    *_listener(
        "grpc",
        "0.0.0.0:8090",
        "Where the gRPC API listens.",
        "gRPC serving certificate (PEM); plain text when unset.",
    ),
    click.option(
        "--grpc-mtls-bind",
        default=None,
        help="Also listen here for callers with a client certificate (kubectl's client-certificate users).",
    ),
    click.option(
        "--grpc-client-ca",
        default=None,
        help="CA of those client certificates: the API server's --client-ca-file.",
    ),
    *_listener(
        "extender", "0.0.0.0:8443", "Extender's address.", "Serving certificate (PEM); plain HTTP when unset."
    ),
    click.option(
        "--extender-client-ca",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="CA (PEM) of the only callers the extender answers: mutual TLS, a client without a "
        "certificate it signed is refused in the handshake. Give it a CA that signs only "
        "kube-scheduler's client certificate (its extender tlsConfig certFile/keyFile).",
    ),
    _shown(
        "--extender-barrier-timeout",
        60.0,
        "Seconds a gang may take to reach bind whole (cover the scheduler's pass over its backlog); "
        "keep below the scheduler's httpTimeout. The extender's and the ungater's plans expire after "
        "twice this.",
    ),
    _shown(
        "--extender-spares-per-ultraserver",
        0,
        "Spare nodes per UltraServer for gangs no GangPolicy governs (extender and ungater).",
        type=click.IntRange(0),
    ),
    *_listener(
        "webhook",
        "0.0.0.0:9443",
        "Admission webhook's address.",
        "Webhook serving certificate (PEM); the API server needs it.",
    ),
    *_listener(
        "console",
        "0.0.0.0:8444",
        "Where the web console listens (HTTPS).",
        "The console's serving certificate (PEM); required.",
    ),
    _shown(
        "--multikueue-namespace",
        "kueue-system",
        "Kueue's namespace on the manager, where its MultiKueueClusters' kubeconfig Secrets are.",
    ),
    _shown(
        "--multikueue-answer-timeout",
        "2m",
        "How long a nominated worker may take to admit or refuse a gang before the next is tried.",
    ),
    _shown(
        "--multikueue-refusal-ttl",
        "5m",
        "How long a worker that refused a gang is not asked about it again.",
    ),
]


def _options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(OPTIONS):  # --help lists them in this order
        command = option(command)
    return command


@cli.command()
@_options
def serve(**values: Any) -> None:
    """Run the chosen components in one process until SIGTERM."""
    options = ServeOptions(**values)
    logs.configure(options.log_level, options.log_format)
    wanted = _chosen(options.components)
    settings = settings_of(options, wanted)
    election = election_of(options)
    observe_requests(metrics.observe_api_request)
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
