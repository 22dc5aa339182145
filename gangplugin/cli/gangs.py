"""`gangctl get gangs` and `gangctl explain`: gangs as a running gangplugin sees them, over its
GangService (connection settings: `gangctl get gangs --help`). A gang is named as kubectl names
objects: its Workload's name, or `KIND/NAME` of the job that owns it (`job/train-1`, `lws/x`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from gangplugin.cli.connection import Connection, connection_options
from gangplugin.cli.main import cli
from gangplugin.cli.output import (
    DOCUMENTS,
    JSON,
    NAME,
    TABLE,
    WIDE,
    YAML,
    age,
    document,
    emit,
    message_doc,
    output_option,
)
from gangplugin.core.errors import InputError
from gangplugin.core.table import column_widths, table
from gangplugin.kube.job_records import JOB_KINDS, WORKLOAD, closest_kind, kind_named

CONNECTION_HELP = """
\b
Connection (flag, else environment, else the kubeconfig):
  --server HOST:PORT   GANGCTL_SERVER      else the kubeconfig cluster's gangplugin.io/grpc extension
  --ca-file PEM        GANGCTL_CA_FILE     CA of the server certificate (else the extension's)
  --token TOKEN        GANGCTL_TOKEN       else --token-file / GANGCTL_TOKEN_FILE, else the kubeconfig's
  --plaintext          GANGCTL_PLAINTEXT   for a server run without TLS
The caller needs get/list/watch on workloads.kueue.x-k8s.io in the namespace.
"""

GANG_HELP = (
    "GANG is a Kueue Workload's name (`kubectl get workloads`), a pod gang's gangplugin.io/gang "
    "label, or KIND/NAME of the job that owns the Workload: "
    + ", ".join(f"{k.kind.lower()}/NAME" for k in JOB_KINDS)
    + " (kubectl's plural and short names too: jobs.batch/x, lws/x).\n"
)


@dataclass(frozen=True, slots=True)
class Target:
    """What a user typed for a gang: a Workload (or pod gang) name, or the job that owns it."""

    text: str
    name: str = ""
    kind: str = ""
    group: str = ""

    def owner(self) -> Any:
        from gangplugin.api.proto import gangs_pb2

        return gangs_pb2.Owner(group=self.group, kind=self.kind, name=self.name) if self.kind else None

    def request_fields(self) -> dict[str, Any]:
        """The name-or-owner fields of a Get/Explain/WatchGangs request."""
        return {"owner": self.owner()} if self.kind else {"name": self.name}


def target(text: str, field: str = "GANG") -> Target:
    """`text` as a Target; InputError naming the argument for a kind gangctl does not know."""
    kind_text, slash, name = text.rpartition("/")
    if not slash:
        return Target(text, name=text)
    if not name or not kind_text:
        raise InputError(field, f"{text!r} is not KIND/NAME (e.g. job/train-1)")
    kind = kind_named(kind_text)
    if kind is None:
        known = ", ".join(k.kind.lower() for k in (*JOB_KINDS, WORKLOAD))
        close = closest_kind(kind_text)
        hint = f"; did you mean {close}/{name}?" if close else ""
        raise InputError(field, f"{kind_text!r} in {text!r} is not one of {known}{hint}")
    if kind is WORKLOAD:
        return Target(text, name=name)
    return Target(text, name=name, kind=kind.kind, group=kind.group)


def stub() -> Any:
    from gangplugin.api.proto import gangs_pb2_grpc

    return gangs_pb2_grpc.GangServiceStub


def gang_name(g: Any) -> str:
    """kubectl's `-o name`, with the namespace: gang/<namespace>/<name>."""
    return f"gang/{g.namespace}/{g.name}"


def owner_text(g: Any) -> str | None:
    return f"{g.owner.kind.lower()}/{g.owner.name}" if g.HasField("owner") else None


# -- the table ------------------------------------------------------------------------------------

_COLUMNS = ["NAME", "QUEUE", "READY", "DOMAIN", "PHASE", "AGE"]
_WIDE = ["LEVEL", "BOUND", "BIND MODE", "CHECK", "RETRIES", "CLUSTER QUEUE", "OWNER"]


def header(output: str, all_namespaces: bool) -> list[str]:
    columns = _COLUMNS + (_WIDE if output == WIDE else [])
    return ["NAMESPACE", *columns] if all_namespaces else columns


def gang_row(g: Any, output: str, all_namespaces: bool) -> list[object]:
    row: list[object] = [
        g.name,
        g.local_queue or None,
        f"{g.pods_ready}/{g.pods_total}",
        g.domain_value or None,
        g.phase,
        age(g.age_seconds),
    ]
    if output == WIDE:
        row += [
            g.domain_level or None,
            f"{g.pods_bound}/{g.pods_total}",
            g.bind_mode or None,
            g.check_state or None,
            g.retry_count,
            g.cluster_queue or None,
            owner_text(g),
        ]
    return [g.namespace, *row] if all_namespaces else row


def gangs_text(gangs: list[Any], output: str, all_namespaces: bool, where: str) -> str:
    if output == NAME:
        return "\n".join(gang_name(g) for g in gangs)
    if not gangs:
        return f"no gangs{where}"
    return table(header(output, all_namespaces), [gang_row(g, output, all_namespaces) for g in gangs])


# -- get gangs --------------------------------------------------------------------------------------


@cli.group("get")
def get() -> None:
    """Show objects of a running gangplugin (like kubectl get)."""


@get.command("gangs", epilog=GANG_HELP + CONNECTION_HELP)
@click.argument("gangs", nargs=-1, metavar="[GANG]...")
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@click.option("-A", "--all-namespaces", is_flag=True, help="gangs of every namespace")
@click.option("-w", "--watch", is_flag=True, help="after the list, print each change (until Ctrl-C)")
@output_option(TABLE, WIDE, JSON, YAML, NAME)
@connection_options
def get_gangs(
    gangs: tuple[str, ...],
    namespace: str | None,
    all_namespaces: bool,
    watch: bool,
    output: str,
    conn: Connection,
) -> None:
    """List gangs: Kueue Workloads that pass the gangplugin.io/gang check, and plain pod gangs.

    \b
    READY is Ready pods / pods of the gang; DOMAIN the topology domain it was placed in;
    PHASE one of Queued, Pending, Admitted, Running, Evicted, Deactivated, Rejected, Finished.
    -o wide adds the domain's LEVEL, pods BOUND, the BIND MODE, the CHECK state, RETRIES, the
    CLUSTER QUEUE and the OWNER job; -o name prints gang/<namespace>/<name>.

    \b
    Examples:
      gangctl get gangs -n team-a
      gangctl get gangs job/train-1 pytorchjob/llama -o wide
      gangctl get gangs -A -w
    """
    from gangplugin.api.proto import gangs_pb2

    if all_namespaces and namespace:
        raise InputError("--all-namespaces", "give either -n or -A, not both")
    if all_namespaces and gangs:
        raise InputError("--all-namespaces", "a gang is named in one namespace: give -n with GANG")
    if watch and len(gangs) > 1:
        raise InputError("--watch", "watches every gang of the namespace, or one GANG")
    targets = [target(text) for text in gangs]
    ns = "" if all_namespaces else namespace or conn.default_namespace()
    where = "" if all_namespaces else f" in namespace {ns}"
    if watch:
        _watch(conn, ns, targets[0] if targets else None, output, all_namespaces)
        return
    if targets:
        found = [
            conn.call(stub(), "GetGang", gangs_pb2.GetGangRequest(namespace=ns, **t.request_fields()))
            for t in targets
        ]
        reply = gangs_pb2.ListGangsResponse(gangs=found)
    else:
        reply = conn.call(stub(), "ListGangs", gangs_pb2.ListGangsRequest(namespace=ns))
    doc = message_doc(reply)
    doc.setdefault("gangs", [])
    emit(doc, output, lambda: gangs_text(list(reply.gangs), output, all_namespaces, where))


def _watch(conn: Connection, ns: str, one: Target | None, output: str, all_namespaces: bool) -> None:
    """kubectl's `get -w`: the gangs now, then a line (or document) per change, as WatchGangs
    streams them. Table columns are as wide as the namespace's gangs need when it starts."""
    from gangplugin.api.proto import gangs_pb2

    cols = header(output, all_namespaces)
    widths = None
    if output in (TABLE, WIDE):
        now = conn.call(stub(), "ListGangs", gangs_pb2.ListGangsRequest(namespace=ns)).gangs
        widths = column_widths(cols, [gang_row(g, output, all_namespaces) for g in now])
    request = gangs_pb2.WatchGangsRequest(namespace=ns, **(one.request_fields() if one else {}))
    first = True
    for event in conn.stream(stub(), "WatchGangs", request, timeout=None):
        g = event.gang
        if output == NAME:
            click.echo(gang_name(g))
        elif output in DOCUMENTS:
            doc = {"type": event.type, "gang": message_doc(g)}
            click.echo(("" if first or output == JSON else "---\n") + document(doc, output))
        else:
            assert widths is not None
            click.echo(table(cols, [gang_row(g, output, all_namespaces)], widths, show_header=first))
        first = False


# -- explain ----------------------------------------------------------------------------------------


def explain_text(e: Any) -> str:
    g = e.gang
    owner = owner_text(g)
    lines = [
        f"Gang:      {g.namespace}/{g.name} ({g.kind}, gang id {g.gang_id})",
        *([f"Owner:     {owner}"] if owner else []),
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


@cli.command("explain", epilog=GANG_HELP + CONNECTION_HELP)
@click.argument("gang", metavar="GANG")
@click.option("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
@output_option(TABLE, JSON, YAML)
@connection_options
def explain_cmd(gang: str, namespace: str | None, output: str, conn: Connection) -> None:
    """Why a gang waits, or where it runs.

    For a gang whose check still waits, the answer includes what the placement engine says
    about the cluster now (the same decision the next admission pass makes, counting capacity
    promised to gangs admitted before it).

    \b
    Examples:
      gangctl explain job/train-1 -n team-a
      gangctl explain job-train-3f2a1 -n team-a -o yaml
    """
    from gangplugin.api.proto import gangs_pb2

    t = target(gang)
    ns = namespace or conn.default_namespace()
    reply = conn.call(stub(), "ExplainGang", gangs_pb2.ExplainGangRequest(namespace=ns, **t.request_fields()))
    emit(message_doc(reply), output, lambda: explain_text(reply))


get.add_command(get_gangs, "gang")  # kubectl takes the singular too
