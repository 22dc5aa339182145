"""`gangctl simulate`: replay a job trace on a cluster shape, offline, to plan capacity."""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from typing import Any

import click

from gangplugin.cli.files import load, read
from gangplugin.cli.main import cli
from gangplugin.cli.output import JSON, TABLE, YAML, emit, output_option
from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.names import API_VERSION
from gangplugin.core.optimal import MAX_NODES
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import WITHIN_CLUSTER_QUEUE, QueuePreemption
from gangplugin.core.simulate import GPU, NO_RESERVATION, POLICIES, Job, Replay, Settings, replay, scaled
from gangplugin.core.timeutil import parse_time
from gangplugin.core.topology import DEFAULT_LEVELS, INSTANCE_TYPE_LABEL, ULTRASERVER_LABEL, Node
from gangplugin.kube import records
from gangplugin.kube.kueue_records import cluster_queue_state, gang_policy_from_k8s
from gangplugin.kube.plan_records import training_plan_from_manifest
from gangplugin.kube.shape import nodes_from_shape
from gangplugin.sim import report
from gangplugin.sim.trace import read_trace, synthetic

_SWEEP = re.compile(r"ultraservers=(\d+)\.\.(\d+)")


def cluster_nodes(shape: Any, ultraservers: int | None = None) -> list[Node]:
    """The shape's nodes; with `ultraservers`, every UltraServer group holds that many."""
    if ultraservers is not None:
        shape = copy.deepcopy(shape)
        groups = (shape.get("spec") or {}).get("groups") or [] if isinstance(shape, dict) else []
        if not any(isinstance(g, dict) and "instancesPerUltraServer" in g for g in groups):
            raise InputError("--sweep", "the shape has no UltraServer group (instancesPerUltraServer)")
        for g in groups:
            if isinstance(g, dict) and "instancesPerUltraServer" in g:
                g["ultraServerCount"] = ultraservers
    nodes = records.nodes_from_k8s({"kind": "List", "items": nodes_from_shape(shape)})
    return [replace(n, ready=True) for n in nodes]  # kwok would report them Ready


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar of events replayed, on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    with tqdm(desc=label, unit=" events", file=sys.stderr, leave=False) as bar:

        def tick(n: int) -> None:
            bar.update(n)

        yield tick


def _replays(
    nodes: list[Node], jobs: list[Job], policies: tuple[str, ...], settings: Settings
) -> list[Replay]:
    """One replay per policy; by default every policy (`optimal` only on a small cluster, and
    where the `sim` extra installed its solver; ours without reservation only when the
    GangPolicy reserves)."""
    small = len(nodes) <= MAX_NODES
    solver = importlib.util.find_spec("scipy") is not None
    if not policies:
        policies = tuple(
            p
            for p in POLICIES
            if ((small and solver) or p != "optimal")
            and (settings.policy.reservation.on or p != NO_RESERVATION)
        )
        if small and not solver:
            _note_without_sim_extra()
    elif "optimal" in policies and not small:
        raise InputError("--policy", f"optimal solves an exact program: for at most {MAX_NODES} nodes")
    elif "optimal" in policies and not solver:
        raise InputError("--policy", f"optimal needs scipy: {SIM_EXTRA}")
    out = []
    for name in policies:
        with _progress(name) as tick:
            out.append(replay(nodes, jobs, name, settings, tick))
    return out


SIM_EXTRA = "pip install 'gangplugin[sim]'"


@cache
def _note_without_sim_extra() -> None:
    """Once per run (a sweep replays many times): what the default policies left out, and why."""
    click.echo(f"note: policy optimal left out: it and --plot need the sim extra ({SIM_EXTRA})", err=True)


def _jobs(trace: str | None, synthetic_count: int | None, seed: int) -> list[Job]:
    if (trace is None) == (synthetic_count is None):
        raise InputError("--trace", "give a trace file (--trace JOBS.csv) or --synthetic N, one of them")
    if trace is not None:
        return read_trace(trace)
    assert synthetic_count is not None
    if synthetic_count < 1:
        raise InputError("--synthetic", "must be at least 1")
    return synthetic(synthetic_count, seed)


#: The flags of `gangctl simulate` (`_Flags` holds them), in the order --help lists them.
_OPTIONS = (
    click.option(
        "--cluster", "cluster_path", required=True, help="A cluster shape (deploy/local/cluster-shape.yaml)."
    ),
    click.option("--trace", "trace_path", help="Job trace CSV (deploy/traces/acme-kalos-converted.csv)."),
    click.option("--synthetic", "synthetic_count", type=int, help="Instead of --trace: N generated jobs."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --synthetic generator."),
    click.option(
        "--policy", "policies", multiple=True, help=f"Placement to compare: {', '.join(POLICIES)} (all)."
    ),
    click.option(
        "--gang-policy", "gang_policy_path", help="A GangPolicy (spares, Sequential, timeouts, backoff)."
    ),
    click.option(
        "--plan", "plan_paths", multiple=True, help="A TrainingPlan giving the queue's quota over time."
    ),
    click.option("--topology", "topology_path", help="A Kueue Topology giving the level order."),
    click.option(
        "--cluster-queue",
        "cluster_queue_path",
        help="A Kueue ClusterQueue whose spec.preemption the replay follows (default: Never).",
    ),
    click.option("--start", help="RFC 3339 instant of trace time 0 (default: the first plan block's start)."),
    click.option("--startup", default="0s", show_default=True, help="Admission to all pods Ready, e.g. 2m."),
    click.option(
        "--preferred-topology",
        default=ULTRASERVER_LABEL,
        show_default=True,
        help="Node label a job without a topology column prefers ('' for none).",
    ),
    click.option(
        "--required-max-pods",
        type=int,
        default=0,
        show_default=True,
        help="Jobs of at most this many pods require the --preferred-topology level (18: one UltraServer).",
    ),
    click.option("--pod-gpus", type=int, help="Split pods asking for more GPUs into pods of this many."),
    click.option(
        "--arrival-scale",
        type=float,
        default=1.0,
        show_default=True,
        help="Multiply arrival times (0.5: twice the load).",
    ),
    click.option(
        "--offerings",
        "offerings_path",
        help="The -o json of `gangctl plans search`: replay on each offering's capacity and name the one "
        "that runs every job with the least reserved capacity left idle.",
    ),
    click.option("--plot", "plot_dir", help="Write utilization.png, wait-cdf.png and queue.png here."),
    click.option("--sweep", help="ultraservers=A..B: replay once per UltraServer count."),
    click.option("--max-p95-wait", help="With --sweep: the p95 wait to stay under, e.g. 1h."),
)


def _options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


@cli.command("simulate")
@_options
@output_option(TABLE, JSON, YAML)
def simulate_command(**options: Any) -> None:
    """Replay a job trace over virtual time and compare placement policies.

    Every decision of policy gangplugin is the controllers' own code: admission order,
    Sequential mode, placement with spares and topology levels, readiness timeouts and
    backoff, plan quota over time and draining before block ends. best-fit is Kueue-like
    (no spares, no climbing above the preferred level); first-fit ignores topology;
    optimal (clusters of at most 128 nodes) admits the exact packing optimum at each pass.

    \b
    Example: the Kalos trace on GB200 UltraServers (8-GPU workers as two 4-GPU pods),
    and the smallest cluster with a p95 wait under 1h:
      gangctl simulate --cluster deploy/local/cluster-shape.yaml \\
        --trace deploy/traces/acme-kalos-converted.csv --pod-gpus 4 --plot out/
      gangctl simulate --cluster shape.yaml --trace jobs.csv \\
        --sweep ultraservers=2..16 --max-p95-wait 1h
    Which training plan offering to buy for the trace:
      gangctl plans search ... -o json > offerings.json
      gangctl simulate --cluster shape.yaml --trace jobs.csv --offerings offerings.json

    Exits 0 when the replay ran, 2 for bad input (one line names the field or column).
    """
    flags = _Flags(**options)
    # Everything the flags can get wrong is refused before the first replay, not after it.
    chosen = _check_flags(flags)
    shape = load(flags.cluster_path, "--cluster")
    settings = _settings(flags)
    jobs = _prepared_jobs(flags, settings.levels)
    settings = replace(settings, preemption=_preemption(flags.cluster_queue_path))
    if flags.sweep is not None:
        _run_sweep(flags, shape, jobs, chosen, settings)
    elif flags.max_p95_wait is not None:
        raise InputError("--max-p95-wait", "goes with --sweep")
    elif flags.offerings_path is not None:
        _run_offerings(flags, shape, jobs, settings)
    else:
        _run_policies(flags, shape, jobs, chosen, settings)


@dataclass(frozen=True, slots=True)
class _Flags:
    """The flags of `gangctl simulate`, as click parses them."""

    cluster_path: str
    trace_path: str | None
    synthetic_count: int | None
    seed: int
    policies: tuple[str, ...]
    gang_policy_path: str | None
    plan_paths: tuple[str, ...]
    topology_path: str | None
    cluster_queue_path: str | None
    start: str | None
    startup: str
    preferred_topology: str
    required_max_pods: int
    pod_gpus: int | None
    arrival_scale: float
    offerings_path: str | None
    plot_dir: str | None
    sweep: str | None
    max_p95_wait: str | None
    output: str


def _check_flags(flags: _Flags) -> tuple[str, ...]:
    """The flags that go together, and the policies to compare (ours always among them)."""
    for name in flags.policies:
        if name not in POLICIES:
            raise InputError("--policy", f"{name!r} is not one of {', '.join(POLICIES)}")
    if flags.required_max_pods < 0:
        raise InputError(
            "--required-max-pods", f"{flags.required_max_pods} is not a pod count >= 0 (0: none)"
        )
    for flag, value in (("--plot", flags.plot_dir), ("--offerings", flags.offerings_path)):
        if value is not None and flags.sweep is not None:
            raise InputError(flag, "does not go with --sweep (one replay per UltraServer count)")
    if flags.plot_dir is not None:
        if flags.offerings_path is not None:
            raise InputError("--plot", "does not go with --offerings (one replay per offering)")
        _check_plot_dir(flags.plot_dir)
    chosen = tuple(dict.fromkeys(flags.policies))
    if chosen and "gangplugin" not in chosen:
        chosen = ("gangplugin", *chosen)  # the contract: ours is always there
    return chosen


def _settings(flags: _Flags) -> Settings:
    """The replay's GangPolicy, plans, level order, start and startup (no preemption yet)."""
    gang_policy = (
        read(flags.gang_policy_path, "--gang-policy", gang_policy_from_k8s)
        if flags.gang_policy_path
        else GangPolicy()
    )
    plans: list[TrainingPlan] = [read(p, "--plan", training_plan_from_manifest) for p in flags.plan_paths]
    if len({p.cluster_queue for p in plans}) > 1:
        raise InputError("--plan", "the plans feed different ClusterQueues; the replay has one queue")
    levels = DEFAULT_LEVELS
    if flags.topology_path:
        levels = read(flags.topology_path, "--topology", records.levels_from_topology)
    if flags.start is not None:
        origin = parse_time(flags.start, "--start")
    elif plans:
        origin = min(b.start for p in plans for b in p.blocks)
    else:
        origin = datetime(2026, 1, 1, tzinfo=UTC)
    startup_s = parse_duration(flags.startup, "--startup")
    if startup_s >= gang_policy.ready_timeout and gang_policy.requeue.backoff_limit_count is None:
        raise InputError("--startup", "is not shorter than readyTimeout: every gang would time out forever")
    return Settings(
        policy=gang_policy, plans=tuple(plans), start=origin, startup_seconds=startup_s, levels=levels
    )


def _prepared_jobs(flags: _Flags, levels: tuple[str, ...]) -> list[Job]:
    """The trace's jobs as the flags scale them: pods split, topology asked, arrivals denser."""
    jobs = _jobs(flags.trace_path, flags.synthetic_count, flags.seed)
    if flags.pod_gpus is not None:
        if flags.pod_gpus < 1:
            raise InputError("--pod-gpus", "must be at least 1")
        jobs = scaled(jobs, flags.pod_gpus)
    if flags.preferred_topology:
        if flags.preferred_topology not in levels:
            raise InputError("--preferred-topology", f"{flags.preferred_topology!r} is not one of the levels")
        jobs = [_with_topology(j, flags.preferred_topology, flags.required_max_pods) for j in jobs]
    elif flags.required_max_pods:
        raise InputError("--required-max-pods", "needs a --preferred-topology level")
    scale = flags.arrival_scale
    if not 0 < scale < math.inf:
        raise InputError("--arrival-scale", f"{scale} is not a number above 0 (0.5: twice the load)")
    if scale != 1.0:
        jobs = [replace(j, arrival=j.arrival * scale) for j in jobs]
    return jobs


def _preemption(cluster_queue_path: str | None) -> QueuePreemption:
    """The ClusterQueue's Kueue `spec.preemption` the replay follows (Kueue's default: never)."""
    if not cluster_queue_path:
        return QueuePreemption()
    preemption = read(cluster_queue_path, "--cluster-queue", cluster_queue_state).preemption
    if preemption.within_cluster_queue not in WITHIN_CLUSTER_QUEUE:
        raise InputError(
            "--cluster-queue",
            f"spec.preemption.withinClusterQueue {preemption.within_cluster_queue!r} is not one of "
            f"{', '.join(WITHIN_CLUSTER_QUEUE)}",
        )
    return preemption


def _run_sweep(
    flags: _Flags, shape: Any, jobs: list[Job], chosen: tuple[str, ...], settings: Settings
) -> None:
    assert flags.sweep is not None
    m = _SWEEP.fullmatch(flags.sweep.strip())
    if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise InputError("--sweep", f"{flags.sweep!r} is not like ultraservers=2..16")
    limit = None if flags.max_p95_wait is None else parse_duration(flags.max_p95_wait, "--max-p95-wait")
    points = []
    for count in range(int(m.group(1)), int(m.group(2)) + 1):
        nodes = _cluster(shape, flags.cluster_path, count)
        points.append((count, _replays(nodes, jobs, chosen, settings)))
    emit(report.sweep_doc(points, limit), flags.output, lambda: report.sweep_table(points, limit))


def _run_offerings(flags: _Flags, shape: Any, jobs: list[Job], settings: Settings) -> None:
    assert flags.offerings_path is not None
    if settings.plans:
        raise InputError("--offerings", "replaces --plan: each offering is replayed as the plan")
    nodes = _cluster(shape, flags.cluster_path, None)
    results = []
    for oid, plan in _offering_plans(load(flags.offerings_path, "--offerings"), flags.offerings_path, nodes):
        first = min(b.start for b in plan.blocks)
        at = settings if flags.start is not None else replace(settings, start=first)
        with _progress(oid) as tick:
            results.append((oid, replay(nodes, jobs, "gangplugin", replace(at, plans=(plan,)), tick)))
    emit(report.offerings_doc(results), flags.output, lambda: report.offerings_table(results))


def _run_policies(
    flags: _Flags, shape: Any, jobs: list[Job], chosen: tuple[str, ...], settings: Settings
) -> None:
    nodes = _cluster(shape, flags.cluster_path, None)
    replays = _replays(nodes, jobs, chosen, settings)
    if flags.plot_dir:
        title = _plot_title(flags.cluster_path, nodes, _source(flags), len(jobs), _changed_flags(flags))
        for path in report.plot(replays, flags.plot_dir, title):
            click.echo(f"wrote {path}", err=True)
    emit(
        report.summary_doc(len(jobs), replays),
        flags.output,
        lambda: report.summary_table(len(jobs), replays),
    )


def _source(flags: _Flags) -> str:
    if flags.trace_path:
        return os.path.basename(flags.trace_path)
    return f"{flags.synthetic_count} synthetic jobs, seed {flags.seed}"


def _changed_flags(flags: _Flags) -> dict[str, Any]:
    """The flags that changed what the plots show, as the plots' title names them."""
    return {
        "--gang-policy": flags.gang_policy_path and os.path.basename(flags.gang_policy_path),
        "--plan": ",".join(os.path.basename(p) for p in flags.plan_paths),
        "--pod-gpus": flags.pod_gpus,
        "--arrival-scale": flags.arrival_scale if flags.arrival_scale != 1.0 else None,
        "--required-max-pods": flags.required_max_pods or None,
        "--preferred-topology": (
            flags.preferred_topology if flags.preferred_topology != ULTRASERVER_LABEL else None
        ),
        "--startup": flags.startup if parse_duration(flags.startup, "--startup") else None,
    }


def _plot_title(cluster_path: str, nodes: list[Node], source: str, jobs: int, flags: dict[str, Any]) -> str:
    """What the plots replayed: the cluster, the trace and the flags that changed either."""
    gpus = sum(n.allocatable.get(GPU, 0) for n in nodes)
    given = " ".join(f"{k} {v}" for k, v in flags.items() if v not in (None, ""))
    cluster = f"{os.path.basename(cluster_path)} ({len(nodes)} nodes, {gpus} GPUs)"
    return f"{cluster}, {source} ({jobs} jobs) {given}".strip()


def _check_plot_dir(path: str) -> None:
    """The --plot directory can take the PNGs (created if missing), and matplotlib is there."""
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("--plot", "needs matplotlib: pip install 'gangplugin[sim]'")
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError("--plot", f"{path} is a file; give a directory for the PNGs")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise InputError("--plot", f"cannot create {path}: {err.strerror or err}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError("--plot", f"cannot write into {path}")


def _offering_plans(doc: Any, path: str, nodes: list[Node]) -> list[tuple[str, TrainingPlan]]:
    """Each offering of a `gangctl plans search -o json` document as the TrainingPlan buying it
    would be, its capacity in GPUs per instance of the cluster's nodes of that instance type."""
    offerings = doc.get("offerings") if isinstance(doc, dict) else None
    if not isinstance(offerings, list) or not offerings:
        raise InputError(f"{path}: offerings", "needs the -o json output of `gangctl plans search`")
    gpus = {n.labels.get(INSTANCE_TYPE_LABEL): n.allocatable.get(GPU, 0) for n in nodes}
    out = []
    for i, offering in enumerate(offerings):
        field = f"{path}: offerings[{i}]"
        if not isinstance(offering, dict):
            raise InputError(field, "must be an offering object")
        blocks = offering.get("reservedCapacityOfferings")
        if not isinstance(blocks, list) or not blocks:
            raise InputError(f"{field}.reservedCapacityOfferings", "must list the offering's blocks")
        types = {b.get("instanceType") for b in blocks if isinstance(b, dict)}
        missing = sorted(str(t) for t in types if not gpus.get(t))
        if missing:
            raise InputError(
                f"{field}.reservedCapacityOfferings", f"no GPU node of type {missing[0]} in the shape"
            )
        targets = offering.get("targetResources") or ["training-job"]
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "TrainingPlan",
            "metadata": {"name": str(offering.get("trainingPlanOfferingId") or f"offering-{i}")},
            "spec": {
                "targetResource": targets[0] if isinstance(targets, list) else targets,
                "clusterQueue": "simulated",
                "flavor": "simulated",
                "resourcesPerInstance": {GPU: str(gpus[next(iter(types))])},
                "reservedCapacity": [
                    {k: v for k, v in b.items() if k not in ("durationHours", "durationMinutes")}
                    for b in blocks
                ],
            },
        }
        try:
            plan = training_plan_from_manifest(manifest)
        except InputError as err:
            raise InputError(f"{field}: {err.field}", err.problem) from err
        out.append((plan.name, plan))
    return out


def _cluster(shape: Any, path: str, ultraservers: int | None) -> list[Node]:
    try:
        return cluster_nodes(shape, ultraservers)
    except InputError as err:
        if err.field == "--sweep":
            raise
        raise InputError(f"{path}: {err.field}", err.problem) from err


def _with_topology(job: Job, label: str, required_max_pods: int) -> Job:
    """A job without topology columns asks for `label`: required up to `required_max_pods`
    pods (after --pod-gpus splits them), preferred above."""
    if job.required_topology or job.preferred_topology:
        return job
    if job.pods <= required_max_pods:
        return replace(job, required_topology=label)
    return replace(job, preferred_topology=label)
