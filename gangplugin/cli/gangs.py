"""`gangctl get gangs`, `gangctl explain`, `gangctl wait`: gangs as a running gangplugin sees
them, over its GangService (connection settings: `gangctl get gangs --help`)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from gangplugin.cli.connection import Connection, connection_options
from gangplugin.cli.main import cli
from gangplugin.cli.output import JSON, TABLE, YAML, age, emit, message_doc, output_option
from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.gangs import FINAL_PHASES, Phase
from gangplugin.core.table import table

_CONNECTION_HELP = """
\b
Connection (flag, else environment):
  --server HOST:PORT   GANGCTL_SERVER      default: the local cluster's (127.0.0.1:21613)
  --ca-file PEM        GANGCTL_CA_FILE     CA of the server certificate (local: .local/cluster/pki/ca.crt)
  --token TOKEN        GANGCTL_TOKEN       else --token-file / GANGCTL_TOKEN_FILE, else the kubeconfig's
  --plaintext          GANGCTL_PLAINTEXT   for a server run without TLS
The caller needs get/list/watch on workloads.kueue.x-k8s.io in the namespace.
"""


def gang_rows(gangs: list[Any], all_namespaces: bool) -> str:
    header = ["NAME", "QUEUE", "READY", "DOMAIN", "PHASE", "AGE"]
    rows = []
    for g in gangs:
        row = [
            g.name,
            g.local_queue or None,
            f"{g.pods_ready}/{g.pods_total}",
            g.domain_value or None,
            g.phase,
            age(g.age_seconds),
        ]
        rows.append([g.namespace, *row] if all_namespaces else row)
    return table(["NAMESPACE", *header] if all_namespaces else header, rows)


def _stub() -> Any:
    from gangplugin.api.proto import gangs_pb2_grpc

    return gangs_pb2_grpc.GangServiceStub


@cli.group("get")
def get() -> None:
    """Show objects of a running gangplugin (like kubectl get)."""


@get.command("gangs", epilog=_CONNECTION_HELP)
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@click.option("-A", "--all-namespaces", is_flag=True, help="gangs of every namespace")
@output_option(TABLE, JSON, YAML)
@connection_options
def get_gangs(namespace: str | None, all_namespaces: bool, output: str, conn: Connection) -> None:
    """List gangs: Kueue Workloads that pass the gangplugin.io/gang check, and plain pod gangs.

    \b
    READY is Ready pods / pods of the gang; DOMAIN the topology domain it was placed in;
    PHASE one of Queued, Pending, Admitted, Running, Evicted, Deactivated, Rejected, Finished.

    \b
    Examples:
      gangctl get gangs -n team-a
      gangctl get gangs -A -o yaml
    """
    from gangplugin.api.proto import gangs_pb2

    if all_namespaces and namespace:
        raise InputError("--all-namespaces", "give either -n or -A, not both")
    ns = "" if all_namespaces else namespace or conn.default_namespace()
    reply = conn.call(_stub(), "ListGangs", gangs_pb2.ListGangsRequest(namespace=ns))
    if output != TABLE:
        doc = message_doc(reply)
        doc.setdefault("gangs", [])
        emit(doc, output, str)
    elif not reply.gangs:
        click.echo("no gangs" + ("" if all_namespaces else f" in namespace {ns}"))
    else:
        click.echo(gang_rows(list(reply.gangs), all_namespaces))


def explain_text(e: Any) -> str:
    g = e.gang
    lines = [
        f"Gang:      {g.namespace}/{g.name} ({g.kind}, gang id {g.gang_id})",
        f"Queue:     {g.local_queue or '-'} -> ClusterQueue {g.cluster_queue or '-'}",
        f"Phase:     {g.phase}",
        f"Pods:      {g.pods_ready} Ready, {g.pods_bound} bound, of {g.pods_total}",
        f"Domain:    {f'{g.domain_level}={g.domain_value}' if g.domain_level else '-'}",
    ]
    if g.admission_check:
        lines.append(f"Check:     {g.admission_check} {g.check_state or '(no state yet)'}")
    if e.evaluated:
        where = f" in {e.level}={','.join(e.domains)}" if e.level and e.domains else ""
        lines.append(f"Now:       {'fits' + where if e.fits_now else 'does not fit'}: {e.reason}")
    lines += ["", e.summary]
    if e.pods:
        lines += ["", table(["POD", "NODE", "READY"], [[p.name, p.node, p.ready] for p in e.pods])]
    return "\n".join(lines)


@cli.command("explain", epilog=_CONNECTION_HELP)
@click.argument("workload")
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@output_option(TABLE, JSON, YAML)
@connection_options
def explain_cmd(workload: str, namespace: str | None, output: str, conn: Connection) -> None:
    """Why a gang waits, or where it runs.

    WORKLOAD is a Kueue Workload's name (`kubectl get workloads`), or a pod gang's
    gangplugin.io/gang label. For a gang whose check still waits, the answer includes what the
    placement engine says about the cluster now (the same decision the next admission pass makes,
    counting capacity promised to gangs admitted before it).

    \b
    Example:
      gangctl explain job-train-3f2a1 -n team-a
    """
    from gangplugin.api.proto import gangs_pb2

    ns = namespace or conn.default_namespace()
    reply = conn.call(_stub(), "ExplainGang", gangs_pb2.ExplainGangRequest(namespace=ns, name=workload))
    emit(message_doc(reply), output, lambda: explain_text(reply))


_CONDITIONS = {"ready": frozenset({Phase.RUNNING}), "admitted": frozenset({Phase.ADMITTED, Phase.RUNNING})}


@cli.command("wait", epilog=_CONNECTION_HELP)
@click.argument("workload")
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@click.option("--for", "for_", default="ready", show_default=True, help="ready (every pod Ready) or admitted")
@click.option("--timeout", default="5m", show_default=True, help="give up after this long (e.g. 90s, 10m)")
@output_option(TABLE, JSON, YAML)
@connection_options
def wait_cmd(
    workload: str, namespace: str | None, for_: str, timeout: str, output: str, conn: Connection
) -> None:
    """Wait until a gang is Ready (or admitted), printing its progress.

    Exits 0 when the condition is met; 1 on timeout, or when the gang reaches a phase it will
    not leave by itself (Deactivated, Rejected, Finished) or is deleted. A gang that does not
    exist yet is waited for (submit, then wait).

    \b
    Examples:
      kubectl apply -f train.yaml && gangctl wait job-train-3f2a1 -n team-a --for ready --timeout 10m
    """
    from gangplugin.api.proto import gangs_pb2

    if for_ not in _CONDITIONS:
        raise InputError("--for", f"{for_!r} is not one of {', '.join(_CONDITIONS)}")
    seconds = parse_duration(timeout, "--timeout")
    ns = namespace or conn.default_namespace()
    start = time.monotonic()
    progress = output == "table"
    last: Any = None
    if progress:
        click.echo(f"waiting for gang {ns}/{workload} to be {for_} (timeout {timeout})")
    events = conn.stream(
        _stub(), "WatchGangs", gangs_pb2.WatchGangsRequest(namespace=ns, name=workload), timeout=seconds
    )
    try:
        for event in events:
            g = event.gang
            if event.type == "DELETED":
                click.echo(f"error: gang {ns}/{workload} was deleted", err=True)
                raise SystemExit(1)
            line = (
                f"[{age(int(time.monotonic() - start))}] {g.phase:<11} "
                f"{g.pods_bound}/{g.pods_total} bound, {g.pods_ready}/{g.pods_total} Ready"
                + (f"  {g.domain_level}={g.domain_value}" if g.domain_level else "")
            )
            if progress and (last is None or line.split("] ", 1)[1] != last):
                click.echo(line)
                if g.message and g.check_state != "Ready":
                    click.echo(f"    {g.message}")
            last = line.split("] ", 1)[1]
            phase = Phase(g.phase)
            if phase in _CONDITIONS[for_]:
                if progress:
                    click.echo(f"gang {ns}/{workload} is {for_}: {g.pods_ready}/{g.pods_total} pods Ready")
                else:
                    emit(message_doc(g), output, str)
                return
            if phase in FINAL_PHASES:
                click.echo(
                    f"error: gang {ns}/{workload} is {g.phase}: {g.message or 'it will not get there'}",
                    err=True,
                )
                raise SystemExit(1)
    except TimeoutError:
        pass
    state = f"; last seen: {last}" if last else "; the gang never appeared"
    click.echo(
        f"error: timed out after {timeout} waiting for gang {ns}/{workload} to be {for_}{state}", err=True
    )
    sys.exit(1)
