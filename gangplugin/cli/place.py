"""`gangctl place`: where would this gang go on this cluster, offline, from kubectl YAML files."""

from __future__ import annotations

from dataclasses import replace

import click

from gangplugin.cli.files import in_file, load, one_object, read
from gangplugin.cli.main import cli
from gangplugin.cli.output import JSON, TABLE, YAML, emit, output_option
from gangplugin.core.errors import InputError
from gangplugin.core.placement import Placement, PlacementPolicy, never_whole, place
from gangplugin.core.table import table
from gangplugin.core.topology import DEFAULT_LEVELS, Snapshot, build_snapshot
from gangplugin.kube import job_records, records


def _text(result: Placement) -> str:
    lines = [
        f"feasible: {'yes' if result.feasible else 'no'}",
        f"level:    {result.level or '-'}",
        f"domains:  {', '.join(result.domains) or '-'}",
        f"reason:   {result.reason}",
    ]
    if result.assignments:
        rows = [[a.pod_set, a.index, a.node] for a in result.assignments]
        lines += ["", table(["PODSET", "INDEX", "NODE"], rows)]
    return "\n".join(lines)


@cli.command("place")
@click.option("--nodes", "nodes_path", required=True, help="`kubectl get nodes -o yaml` output.")
@click.option("--pods", "pods_path", help="`kubectl get pods -A -o yaml` output (pods already bound).")
@click.option(
    "--workload",
    "workload_path",
    required=True,
    help="A Kueue Workload, or a job of a kind Kueue integrates: Job, JobSet, PyTorchJob, TrainJob, "
    "LeaderWorkerSet (one group), RayJob, RayCluster.",
)
@click.option(
    "--runtime",
    "runtime_path",
    help="With a TrainJob: the ClusterTrainingRuntime or TrainingRuntime its runtimeRef names.",
)
@click.option("--policy", "policy_path", help="A GangPolicy (sparesPerUltraServer, topologyName).")
@click.option("--topology", "topology_path", help="A Kueue Topology giving the level order.")
@output_option(TABLE, JSON, YAML)
def place_command(
    nodes_path: str,
    pods_path: str | None,
    workload_path: str,
    runtime_path: str | None,
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

    The podsets of a job are the ones Kueue makes its Workload of (names, counts, pod
    templates and their annotations); a TrainJob's come from its runtime (--runtime).

    \b
    Example, from a live cluster:
      kubectl get nodes -o yaml > nodes.yaml
      kubectl get pods -A -o yaml > pods.yaml
      kubectl get workload -n team-a job-train-1a2b3 -o yaml > wl.yaml
      gangctl place --nodes nodes.yaml --pods pods.yaml --workload wl.yaml -o json
    Before submitting it:
      gangctl place --nodes nodes.yaml --workload pytorchjob.yaml
      gangctl place --nodes nodes.yaml --workload trainjob.yaml \\
        --runtime <(kubectl get clustertrainingruntime torch-distributed -o yaml)

    Exits 0 when the question is answered (feasible or not), 2 for bad input.
    """
    nodes = read(nodes_path, "--nodes", records.nodes_from_k8s)
    pods = read(pods_path, "--pods", records.bound_pods_from_k8s) if pods_path else []
    runtime = read(runtime_path, "--runtime", one_object) if runtime_path else None
    job = job_records.gang_of(
        read(workload_path, "--workload", one_object),
        where=f"{workload_path}: ",
        runtime=runtime,
        runtime_where=f"{runtime_path}: ",
    )
    for i, key in job.gang.unknown_keys()[:1]:  # as the gang check, which holds such a gang
        raise InputError(job.field(f"podSets[{i}].template.{key.field}"), str(key))
    policy, topology_name = PlacementPolicy(), None
    if policy_path:
        policy, topology_name = read(policy_path, "--policy", records.policy_from_k8s)
    levels = _levels(topology_path, policy_path, topology_name)
    try:
        snapshot = build_snapshot(nodes, pods, levels)
    except InputError as err:
        raise in_file(nodes_path, err) from err
    result = _placed(snapshot, job, policy)
    emit(result.to_dict(), output, lambda: _text(result))


def _levels(topology_path: str | None, policy_path: str | None, topology_name: str | None) -> tuple[str, ...]:
    """The level order: the --topology file's (which must be the one the policy names)."""
    if not topology_path:
        return DEFAULT_LEVELS
    doc = load(topology_path, "--topology")
    try:
        levels = records.levels_from_topology(doc)
    except InputError as err:
        raise in_file(topology_path, err) from err
    name = records.topology_name(doc)
    if topology_name and name and topology_name != name:
        raise InputError(
            f"{policy_path}: spec.topologyName",
            f"names Topology {topology_name!r} but --topology is {name!r}",
        )
    return levels


def _placed(snapshot: Snapshot, job: job_records.JobGang, policy: PlacementPolicy) -> Placement:
    """Where the gang goes, or why not: that it can never start whole on these nodes, when so
    (as the gang check says it), else why it does not fit now."""
    try:
        result = place(snapshot, job.gang, policy)
        never = None if result.feasible else never_whole(snapshot, job.gang, policy)
    except InputError as err:
        raise InputError(job.field(err.field), err.problem) from err
    return result if never is None else replace(result, reason=never.message)
