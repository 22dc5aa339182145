"""`gangctl place`: where would this gang go on this cluster, offline, from kubectl YAML files."""

from __future__ import annotations

from typing import Any

import click
import orjson
import yaml

from gangplugin.cli.main import cli
from gangplugin.core.errors import InputError
from gangplugin.core.placement import Placement, PlacementPolicy, place
from gangplugin.core.topology import DEFAULT_LEVELS, build_snapshot
from gangplugin.kube import records

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: str) -> Any:
    """One YAML (or JSON) document from a file; InputError naming the file if it is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_Loader)  # a safe loader (libyaml when present)
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(path, f"not a YAML document ({first})") from err


def _in_file(path: str, err: InputError) -> InputError:
    return InputError(f"{path}: {err.field}", err.problem)


def _read(path: str, parse: Any) -> Any:
    doc = _load(path)
    try:
        return parse(doc)
    except InputError as err:
        raise _in_file(path, err) from err


def _table(result: Placement) -> str:
    lines = [
        f"feasible: {'yes' if result.feasible else 'no'}",
        f"level:    {result.level or '-'}",
        f"domains:  {', '.join(result.domains) or '-'}",
        f"reason:   {result.reason}",
    ]
    if result.assignments:
        width = max(6, *(len(a.pod_set) for a in result.assignments))
        lines.append("")
        lines.append(f"{'PODSET':<{width}}  {'INDEX':>5}  NODE")
        lines += [f"{a.pod_set:<{width}}  {a.index:>5}  {a.node}" for a in result.assignments]
    return "\n".join(lines)


@cli.command("place")
@click.option("--nodes", "nodes_path", required=True, help="`kubectl get nodes -o yaml` output.")
@click.option("--pods", "pods_path", help="`kubectl get pods -A -o yaml` output (pods already bound).")
@click.option("--workload", "workload_path", required=True, help="A Kueue Workload or a batch/v1 Job.")
@click.option("--policy", "policy_path", help="A GangPolicy (sparesPerUltraServer, topologyName).")
@click.option("--topology", "topology_path", help="A Kueue Topology giving the level order.")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True
)
def place_command(
    nodes_path: str,
    pods_path: str | None,
    workload_path: str,
    policy_path: str | None,
    topology_path: str | None,
    output: str,
) -> None:
    """Decide where every pod of a gang would go, or explain why it cannot run now.

    All or nothing: every pod gets a node or none does. A pod template annotated
    gangplugin.io/required-topology: <node label> must fit in one domain of that
    level; gangplugin.io/preferred-topology: <node label> tries that level first.
    gangplugin.io/slice-size: N with gangplugin.io/slice-required-topology: <node
    label> puts each consecutive N pods in one domain of that level.

    \b
    Example, from a live cluster:
      kubectl get nodes -o yaml > nodes.yaml
      kubectl get pods -A -o yaml > pods.yaml
      kubectl get workload -n team-a job-train-1a2b3 -o yaml > wl.yaml
      gangctl place --nodes nodes.yaml --pods pods.yaml --workload wl.yaml -o json

    Exits 0 when the question is answered (feasible or not), 2 for bad input.
    """
    nodes = _read(nodes_path, records.nodes_from_k8s)
    pods = _read(pods_path, records.bound_pods_from_k8s) if pods_path else []
    workload = _load(workload_path)
    try:
        gang = records.gang_from_k8s(workload)
    except InputError as err:
        raise _in_file(workload_path, err) from err
    policy, topology_name = PlacementPolicy(), None
    if policy_path:
        policy, topology_name = _read(policy_path, records.policy_from_k8s)
    levels: tuple[str, ...] = DEFAULT_LEVELS
    if topology_path:
        doc = _load(topology_path)
        try:
            levels = records.levels_from_topology(doc)
        except InputError as err:
            raise _in_file(topology_path, err) from err
        name = records.topology_name(doc)
        if topology_name and name and topology_name != name:
            raise InputError(
                f"{policy_path}: spec.topologyName",
                f"names Topology {topology_name!r} but --topology is {name!r}",
            )
    try:
        snapshot = build_snapshot(nodes, pods, levels)
    except InputError as err:
        raise _in_file(nodes_path, err) from err
    try:
        result = place(snapshot, gang, policy)
    except InputError as err:
        field = err.field
        if field.startswith("podSets["):
            field = "spec." + field
            if isinstance(workload, dict) and workload.get("kind") == "Job":
                field = "spec.template" + field.split(".template", 1)[1]
        raise InputError(f"{workload_path}: {field}", err.problem) from err
    if output == "json":
        click.echo(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode())
    elif output == "yaml":
        click.echo(yaml.safe_dump(result.to_dict(), sort_keys=False), nl=False)
    else:
        click.echo(_table(result))
