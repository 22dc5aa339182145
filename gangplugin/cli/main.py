"""`gangctl` entry point: one click group, each subcommand in its own module."""

from __future__ import annotations

import sys

import click

from gangplugin import __version__
from gangplugin.core.errors import InputError
from gangplugin.kube.config import ConfigError, MalformedKubeconfig


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangctl")
def cli() -> None:
    """gangctl inspects gangs, explains placements and searches training plans.

    Offline commands read the files `kubectl get ... -o yaml` writes, so they work
    without a cluster. Exit status: 0 when the question was answered (feasible or
    not), 2 for bad input (one line on stderr names the field).
    """


def _register() -> None:
    # Subcommands live in their own modules; importing one adds it to `cli`.
    import importlib

    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(f"gangplugin.cli.{name}")


_SUBCOMMAND_MODULES: tuple[str, ...] = ("place", "plans", "gangs", "wait", "simulate")


def main(prog_name: str = "gangctl") -> None:
    _register()
    try:
        cli.main(prog_name=prog_name, standalone_mode=False)
    except (InputError, MalformedKubeconfig) as err:  # bad input: one line naming the field
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    except ConfigError as err:  # the kubeconfig's exec plugin, an absent file, the gRPC extension
        click.echo(f"error: {err}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as err:  # a command group alone: its help
        click.echo(err.format_message(), err=True)
        sys.exit(2)
    except click.ClickException as err:  # a flag click checks (a missing one, not a number): one line too
        click.echo(f"error: {err.format_message()}", err=True)
        sys.exit(2 if err.exit_code in (1, 2) else err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)


def kubectl_plugin() -> None:
    """`kubectl gang ...`: kubectl runs `kubectl-gang` from PATH; usage and help say `kubectl gang`."""
    main("kubectl gang")
