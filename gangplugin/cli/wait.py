"""`gangctl wait`: until a gang is Ready (or admitted), printing its progress, as `kubectl wait`.
Typed right after `kubectl apply`, with the job's KIND/NAME, it waits for Kueue to make the
Workload too."""

from __future__ import annotations

import time
from typing import Any

import click

from gangplugin.cli.connection import Connection, connection_options
from gangplugin.cli.gangs import CONNECTION_HELP, GANG_HELP, Target, gang_name, stub, target
from gangplugin.cli.main import cli
from gangplugin.cli.output import JSON, NAME, TABLE, YAML, age, emit, message_doc, output_option
from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import FINAL_PHASES, Phase

_CONDITIONS = {"ready": frozenset({Phase.RUNNING}), "admitted": frozenset({Phase.ADMITTED, Phase.RUNNING})}


class _Stop(Exception):
    """The wait is over without the condition: exit 1 with this message."""


def _subject(t: Target, ns: str) -> str:
    return f"the gang of {t.text} in namespace {ns}" if t.kind else f"gang {ns}/{t.name}"


@cli.command("wait", epilog=GANG_HELP + CONNECTION_HELP)
@click.argument("gang", metavar="GANG")
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@click.option("--for", "for_", default="ready", show_default=True, help="ready (every pod Ready) or admitted")
@click.option("--timeout", default="5m", show_default=True, help="give up after this long (e.g. 90s, 10m)")
@output_option(TABLE, JSON, YAML, NAME)
@connection_options
def wait_cmd(
    gang: str, namespace: str | None, for_: str, timeout: str, output: str, conn: Connection
) -> None:
    """Wait until a gang is Ready (or admitted), printing its progress.

    Exits 0 when the condition is met; 1 on timeout, or when the gang reaches a phase it will
    not leave by itself (Deactivated, Rejected, Finished) or is deleted. A gang that does not
    exist yet is waited for (submit, then wait). A job that owns several gangs (a
    LeaderWorkerSet of several groups) is done when every gang of it seen is. -o json|yaml
    prints the gang at the end, -o name gang/<namespace>/<name>.

    \b
    Example:
      kubectl apply -f train.yaml && gangctl wait job/train-1 -n team-a --for ready --timeout 10m
    """
    from gangplugin.api.proto import gangs_pb2

    if for_ not in _CONDITIONS:
        raise InputError("--for", f"{for_!r} is not one of {', '.join(_CONDITIONS)}")
    seconds = parse_duration(timeout, "--timeout")
    if seconds <= 0:
        raise InputError("--timeout", f"{timeout!r} is not a duration above 0 (e.g. 90s, 10m)")
    t = target(gang)
    ns = namespace or conn.default_namespace()
    subject = _subject(t, ns)
    progress = output == TABLE
    if progress:
        click.echo(f"waiting for {subject} to be {for_} (timeout {timeout})")
    request = gangs_pb2.WatchGangsRequest(namespace=ns, **t.request_fields())
    start = time.monotonic()
    last: dict[str, str] = {}  # each gang's last progress line
    done: dict[str, Any] = {}
    try:
        for event in conn.stream(stub(), "WatchGangs", request, timeout=seconds):
            g = event.gang
            if event.type == "DELETED":
                raise _Stop(f"gang {g.namespace}/{g.name} was deleted")
            state = (
                f"{g.phase:<11} {g.pods_bound}/{g.pods_total} bound, {g.pods_ready}/{g.pods_total} Ready"
                + (f"  {g.domain_level}={g.domain_value}" if g.domain_level else "")
            )
            if progress and last.get(g.name) != state:
                named = f"{g.name}: " if t.kind else ""
                click.echo(f"[{age(int(time.monotonic() - start))}] {named}{state}")
                if g.message and g.check_state != "Ready":
                    click.echo(f"    {g.message}")
            last[g.name] = state
            phase = Phase(g.phase)
            if phase in FINAL_PHASES:
                raise _Stop(
                    f"gang {g.namespace}/{g.name} is {g.phase}: {g.message or 'it will not get there'}"
                )
            if phase in _CONDITIONS[for_]:
                done[g.name] = g
            else:
                done.pop(g.name, None)
            if done and len(done) == len(last):
                for met in done.values():
                    _report(met, for_, output)
                return
    except TimeoutError:
        pass
    except _Stop as stop:
        click.echo(f"error: {stop}", err=True)
        raise SystemExit(1) from None
    if last:
        seen = "; last seen: " + "; ".join(f"{n} {s}" if t.kind else s for n, s in last.items())
    elif t.kind:
        seen = f"; Kueue made no Workload of {t.text} (does it carry the kueue.x-k8s.io/queue-name label?)"
    else:
        seen = "; the gang never appeared"
    click.echo(f"error: timed out after {timeout} waiting for {subject} to be {for_}{seen}", err=True)
    raise SystemExit(1)


def _report(g: Any, for_: str, output: str) -> None:
    if output == TABLE:
        click.echo(f"gang {g.namespace}/{g.name} is {for_}: {g.pods_ready}/{g.pods_total} pods Ready")
    else:
        emit(message_doc(g), output, lambda: gang_name(g))
