"""The `gangplugin` command: `gangplugin serve` runs the controllers and servers."""

from __future__ import annotations

import importlib
import logging
import signal
import sys
from types import FrameType

import click

from gangplugin import __version__
from gangplugin.kube.client import Client
from gangplugin.kube.informer import wait_all_synced
from gangplugin.server.health import serve_health
from gangplugin.server.runtime import Runtime

# component name -> module with `setup(runtime, options)` (registers caches and handlers)
# and `start(runtime)` (starts its threads once the caches are synced).
COMPONENTS: dict[str, str] = {
    "admission": "gangplugin.admission.component",
    "extender": "gangplugin.extender.component",
    "plans": "gangplugin.plans.component",
    "api": "gangplugin.api.component",
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangplugin")
def cli() -> None:
    """gangplugin's server side."""


@cli.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig; in-cluster when unset.")
@click.option(
    "--components",
    default=",".join(COMPONENTS) or "",
    show_default=True,
    help="Comma-separated components to run.",
)
@click.option(
    "--health-bind", default="0.0.0.0:8081", show_default=True, help="Where /healthz and /readyz are served."
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--grpc-bind", default="0.0.0.0:8090", show_default=True, help="Where the gRPC API listens.")
@click.option("--extender-bind", default="0.0.0.0:8443", show_default=True, help="Extender's address.")
@click.option("--extender-tls-cert", default=None, help="Serving certificate (PEM); plain HTTP when unset.")
@click.option("--extender-tls-key", default=None, help="Key of --extender-tls-cert.")
@click.option(
    "--extender-barrier-timeout",
    default=20.0,
    show_default=True,
    help="Seconds a gang may take to reach bind whole; keep below the scheduler's httpTimeout.",
)
@click.option("--extender-spares-per-ultraserver", default=0, show_default=True, type=click.IntRange(0))
def serve(
    kubeconfig: str | None,
    components: str,
    health_bind: str,
    log_level: str,
    grpc_bind: str,
    extender_bind: str,
    extender_tls_cert: str | None,
    extender_tls_key: str | None,
    extender_barrier_timeout: float,
    extender_spares_per_ultraserver: int,
) -> None:
    """Run the chosen components in one process until SIGTERM."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    wanted = [c.strip() for c in components.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in COMPONENTS]
    if unknown or not wanted:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}; choose from {', '.join(COMPONENTS) or '(none yet)'}",
            param_hint="--components",
        )
    runtime = Runtime(Client.from_kubeconfig(kubeconfig))
    health = serve_health(health_bind)
    modules = [importlib.import_module(COMPONENTS[c]) for c in wanted]
    if "extender" in wanted:
        from gangplugin.extender.component import ExtenderSettings, configure

        configure(
            ExtenderSettings(
                extender_bind,
                extender_tls_cert,
                extender_tls_key,
                extender_barrier_timeout,
                extender_spares_per_ultraserver,
            )
        )
    if "api" in wanted:
        from gangplugin.api.component import configure as configure_api

        configure_api(grpc_bind)
    for mod in modules:
        mod.setup(runtime)
    runtime.start_informers()
    if not wait_all_synced(runtime.informers(), timeout=120):
        raise click.ClickException("watch caches did not sync within 120s; is the API server reachable?")
    for mod in modules:
        mod.start(runtime)
    health.ready.set()
    logging.getLogger("gangplugin").info("serving components %s", ",".join(wanted))

    def _stop(signum: int, _frame: FrameType | None) -> None:
        runtime.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runtime.stop.wait()
    health.shutdown()


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
