"""gangplugin side by side with its peers: Kueue's Topology Aware Scheduling, Volcano and KAI
Scheduler, each on a fresh local kwok cluster of the same HyperPod shape, running the same gangs
(the same seed), and one table with gangplugin's ratio to each.

Run: .venv/bin/python bench/peers.py [--nodes 500 --nodes 5000] [--reps 3]
         [--systems gangplugin,kueue-tas,noop-check,volcano,kai] [--parts burst,stream,big,...]
     .venv/bin/python bench/peers.py --nodes 500 --report   (the tables of what is saved)
(`--nodes 100 --reps 1` checks it in a few minutes a system; one cluster at a time, state in
.local/bench-peers-<system>, ports from GANGPLUGIN_PORT_BASE or 29000, and ALTERNATE_PORTS above
it for every second system).

The workload (bench/_peers/workload.py): gangs of 1-36 pods of 4 GPUs (whole GB200 nodes), sizes
drawn from the Kalos trace; up to 18 pods a gang requires one UltraServer, above that it is cut
into equal slices of at most 18, each required in one. Per repetition, on an empty namespace each:
- burst: gangs asking for 105% of the GB200 nodes, all submitted at once; pods bound per second
  (first submission to last bind), submission -> all Running p50/p95 per gang size, and once it
  settled (nothing created or bound for --settle s) the quality: gangs whole in their required
  domain, UltraServers fragmented (some GPUs used, some free), GPUs stranded (free in UltraServers
  too small for the first gang still waiting), the largest gang one UltraServer still takes;
  partial gangs (some pods bound, others not, for more than 5 s). On kueue-tas, also how often
  `gangctl simulate`'s best-fit puts a gang in the UltraServers Kueue TAS chose live;
- stream: Poisson arrivals for --stream s at 70% load, each gang deleted 60 s after it runs;
- big: one gang of 1,024 one-GPU pods preferring one UltraServer (fewer where they would not
  fit), submission -> all Running;
- recovery: a 32-pod gang in two slices of 16; the nodes of 1, then 3, of its pods fail
  (NotReady); the time until it runs whole again, none of its pods on a failed node;
- preemption: every UltraServer full of low-priority 2-pod gangs; a high-priority 18-pod gang
  requiring one UltraServer: the time until it runs, and the GPUs evicted;
- starvation (bench/_peers/starvation.py, not run unless asked): a stream of 2-4 pod gangs asking
  for a little more than the nodes hold, an 18-pod gang mid-stream: the time until it runs, and
  its UltraServer's idle GPU-hours meanwhile.
Every time runs from the submission of the gang's object, for every system alike. For the
Kueue systems (gangplugin, Kueue TAS, and `noop-check`: Kueue with a check that answers Ready at
once, the floor of Kueue's AdmissionCheck contract) also where each gang's time goes, hop by hop
(bench/_peers/hops.py), and the writes to its Workload.

Results are kept per system in .local/bench-peers/results-<nodes>.json as each part of each
repetition ends: an interrupted run goes on where it stopped, a run of some parts (--parts) adds
them to the repetitions saved, and --fresh forgets what the chosen systems had. --report prints
the tables of what is saved (medians, spreads, ratios, goals) without running anything.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.support

import _cluster
import yaml
from _peers import profile, queues, report, runs, starvation
from _peers.runs import Limits, Run
from _peers.systems import GB200, GPU, SYSTEMS, Capacity, System

from gangplugin.kube.client import Client
from gangplugin.kube.shape import INSTANCE_TYPE, nodes_from_shape
from gangplugin.localcluster.cluster import REPO, ClusterError, LocalCluster, Ports

STATE = REPO / ".local"
T0 = time.monotonic()
# Below the kernel's ephemeral ports (32768 on): a port of ours is never a connection's own.
DEFAULT_PORT_BASE = 29000
# Every second system's cluster this far above the base, so that the last one's ports are let go
# meanwhile: no port of one cluster is a port of the other (a unit test checks it). A cluster's
# ports span base..base+999 (the second replica's console and the real nodes' near the top).
ALTERNATE_PORTS = 1000


@dataclass(frozen=True)
class Part:
    """A part of a repetition: what runs it (on an empty namespace of the system's cluster, given
    the workload's seed; its figures), and its rows in the tables."""

    run: Callable[[Run, int], dict[str, Any]]
    rows: report.Rows


# The parts of a repetition, in run order; a new part is one more line.
PARTS: dict[str, Part] = {
    "burst": Part(runs.burst, report.burst_rows),
    "stream": Part(runs.stream, report.stream_rows),
    "big": Part(runs.big, report.big_rows),
    "recovery": Part(runs.recovery, report.recovery_rows),
    "preemption": Part(runs.preemption, report.preemption_rows),
    # not run unless asked; its table is its own (`starvation.render`)
    "starvation": Part(starvation.starvation, lambda _results: []),
}
#: The parts run unless --parts says otherwise.
DEFAULT_PARTS = tuple(p for p in PARTS if p != "starvation")


def log(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.0f}s] {message}", flush=True)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, action="append", help="cluster sizes (default 500 and 5000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per system and size (default 3)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, in run order")
    ap.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated: {','.join(PARTS)}")
    ap.add_argument("--seed", type=int, default=1, help="the workload's seed, the same for every system")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds without a bind: the burst settled")
    ap.add_argument("--stream", type=float, default=180.0, help="seconds of stream arrivals")
    ap.add_argument("--fresh", action="store_true", help="forget the chosen systems' saved results")
    ap.add_argument("--report", action="store_true", help="print the tables of the saved results only")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="sample `gangplugin serve` with py-spy during each part (.local/bench-peers/profile-*.txt)",
    )
    args = ap.parse_args()
    args.nodes = sorted(args.nodes or [500, 5000])
    args.systems = [s for s in args.systems.split(",") if s]
    args.parts = [p for p in args.parts.split(",") if p]
    if unknown := [s for s in args.systems if s not in SYSTEMS]:
        ap.error(f"--systems: unknown {', '.join(unknown)}; choose among {', '.join(SYSTEMS)}")
    if unknown := [p for p in args.parts if p not in PARTS]:
        ap.error(f"--parts: unknown {', '.join(unknown)}; choose among {', '.join(PARTS)}")
    return args


def results_file(nodes: int) -> Path:
    return STATE / "bench-peers" / f"results-{nodes}.json"


def load(nodes: int) -> dict[str, list[dict[str, Any]]]:
    path = results_file(nodes)
    return json.loads(path.read_text()) if path.exists() else {}


def save(nodes: int, results: dict[str, list[dict[str, Any]]]) -> None:
    path = results_file(nodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    tmp.replace(path)


def capacity(shape: dict[str, Any]) -> Capacity:
    gb200 = [n for n in nodes_from_shape(shape) if n["metadata"]["labels"][INSTANCE_TYPE] == GB200]
    alloc = gb200[0]["status"]["allocatable"]
    return Capacity(
        len(gb200),
        sum(int(n["status"]["allocatable"][GPU]) for n in gb200),
        len(gb200) * int(alloc["cpu"]),
        len(gb200) * int(alloc["memory"].removesuffix("Gi")),
    )


def start(system: System, shape: dict[str, Any], base: int) -> LocalCluster:
    """A fresh local cluster of `shape` running what `system` needs, on ports from `base`."""
    path = Path(tempfile.mkdtemp()) / "shape.yaml"
    path.write_text(yaml.safe_dump(shape))
    if system.gangplugin_components:
        os.environ["GANGPLUGIN_COMPONENTS"] = system.gangplugin_components
    cluster = LocalCluster(
        STATE / f"bench-peers-{system.name}",
        Ports(base),
        log=lambda m: log(f"  {m.strip()}"),
        components=system.components,
        shape=path,
    )
    cluster.down(quiet=True)  # what an interrupted run left
    deadline = time.monotonic() + 120
    while True:
        try:
            cluster.up()
            break
        except ClusterError as err:  # the last cluster's processes may still be letting go of ports
            if "port in use" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(2)
    if "gangplugin" in system.components:
        # Ungate: kube-scheduler binds the pinned pods alone, no extender call
        cluster.restart("kube-scheduler", extender=False)
    return cluster


def todo(system: System, done: list[dict[str, Any]], args: argparse.Namespace) -> list[tuple[int, str]]:
    """(repetition, part) still to run: the parts asked for that say something of the system,
    in each of the first --reps repetitions, that its saved repetitions lack."""
    parts = [p for p in args.parts if system.parts is None or p in system.parts]
    return [
        (rep, part)
        for rep in range(args.reps)
        for part in parts
        if rep >= len(done) or part not in done[rep].get(PARTS_DONE, ())
    ]


PARTS_DONE = "parts done"


def provenance() -> dict[str, Any]:
    """When, on what, at what load a repetition was measured (the docs say so of each figure)."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "cpus": os.cpu_count(),
        "load": [round(x, 1) for x in os.getloadavg()],
    }


def profiled(
    cluster: LocalCluster, args: argparse.Namespace, name: str
) -> tuple[contextlib.AbstractContextManager[None], Path | None]:
    """With --profile on a cluster running `gangplugin serve`: py-spy sampling it, and the file."""
    pid = cluster.running_processes().get("gangplugin")
    if not args.profile or pid is None:
        return contextlib.nullcontext(), None
    out = STATE / "bench-peers" / f"profile-{name}.txt"
    return profile.sampling(pid, out), out


def run_system(
    system: System, nodes: int, base: int, args: argparse.Namespace, results: dict[str, Any]
) -> None:
    done: list[dict[str, Any]] = results.setdefault(system.name, [])
    left = todo(system, done, args)
    if not left:
        log(f"{system.name} at {nodes} nodes: every part asked for is saved, skipped")
        return
    shape = _cluster.hyperpod_shape(nodes)
    cap = capacity(shape)
    log(f"{system.name} at {nodes} nodes ({cap.nodes} GB200 nodes, {cap.gpus} GPUs): starting its cluster")
    cluster = start(system, shape, base)
    client = Client.from_kubeconfig(cluster.kubeconfig)
    try:
        with system.controller(cluster.kubeconfig) if system.controller else contextlib.nullcontext():
            # the nodes first, so that each system's set-up and readiness see them as they will be
            runs.wait_nodes_usable(client, log)
            system.setup(client, cap)
            system.ready(client)
            limits = Limits(settle=args.settle, stream=args.stream)
            ports = {"apiserver": cluster.ports.apiserver, "kcm": cluster.ports.controller_manager}
            if system.kueue:
                ports["kueue"] = cluster.ports.kueue_metrics
            metrics = queues.endpoints(client, cluster.pki_dir, ports)
            processes = cluster.running_processes()
            run = Run(system, client, cluster.kubeconfig, cap, log, limits, metrics, processes)
            for rep, part in left:
                while len(done) <= rep:
                    done.append({PARTS_DONE: []})
                log(f"{system.name} at {nodes} nodes: repetition {rep + 1}/{args.reps}, {part}")
                figures = done[rep]
                sampled = profiled(cluster, args, f"{nodes}-{rep + 1}-{part}")
                try:
                    with sampled[0]:
                        figures.update(PARTS[part].run(run, args.seed))
                    figures.pop(f"{part} error", None)
                except Exception as err:  # one part's failure costs its figures, not the run's
                    log(f"  {part} failed: {type(err).__name__}: {err}")
                    figures[f"{part} error"] = f"{type(err).__name__}: {err}"
                    run.clear_all()
                if sampled[1] is not None:
                    log(profile.top(sampled[1]))
                figures.setdefault("provenance", {})[part] = provenance()
                figures[PARTS_DONE] = [*figures.get(PARTS_DONE, []), part]
                save(nodes, results)
    finally:
        client.close()
        cluster.down(quiet=True)


def one_run_at_a_time() -> None:
    """Holds this checkout's bench lock for the process's life: a second run would start its
    clusters on the same ports and state directories, and write the same results file."""
    path = STATE / "bench-peers" / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another bench/peers.py runs in this checkout ({path} is held); wait for it to end")
    _held.append(lock)


_held: list[Any] = []


def main() -> None:
    args = parse()
    if not args.report:
        one_run_at_a_time()
    for nodes in args.nodes:
        results = load(nodes)
        if args.fresh and not args.report:
            for s in args.systems:
                results.pop(s, None)
            save(nodes, results)
        if not args.report:
            base = int(os.environ.get("GANGPLUGIN_PORT_BASE", str(DEFAULT_PORT_BASE)))
            for i, name in enumerate(args.systems):
                run_system(SYSTEMS[name], nodes, base + ALTERNATE_PORTS * (i % 2), args, results)
        print(f"\n== {nodes} nodes ({results_file(nodes)}), seed {args.seed}")
        print(report.full(results, [p.rows for p in PARTS.values()]))
        if starved := starvation.render(results):
            print(starved)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
