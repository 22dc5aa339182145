"""Real nodes: a real distributed job as a gang, timed, and what a real node costs.

Run: .venv/bin/python bench/real_nodes.py [--reps 3] [--losses 2]   (starts a local cluster of its
own with the real-node pool, as tests/e2e/test_real_nodes.py does: state .local/bench-real-nodes,
ports GANGPLUGIN_PORT_BASE or 22000; gangplugin installed by its Helm chart; stopped at the end)

1. Submission to every rank's first step for a PyTorchJob of 8 ranks (one GPU each) of the rank
   program, through Kueue and gangplugin's check (one UltraServer, its spare kept), against the
   same job submitted without a queue (the training-operator's pods scheduled by kube-scheduler
   alone) in the same run: median (min-max) of --reps each, and the ratio.
2. Recovery from a node lost (powered off: its kubelet, runtime and containers) under a running
   8-rank gang with nodeFailure ReplaceFromSpare: from the loss to the first step all 8 ranks
   take after it, next to the part of it that is only the control plane noticing (the Node
   NotReady, kube-controller-manager's 50 s grace), --losses times.
3. Memory of a real node: the resident memory of its own processes (runner with the device
   plugin, containerd, kubelet, the containerd shims) and its pods' cgroup, idle and with the
   8-rank gang running, over the pool's nodes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gangplugin.kube.client import NAMESPACES, Client
from gangplugin.localcluster.components.real_nodes import pool_of, power_off, power_on
from gangplugin.localcluster.realnodes import cgroups
from gangplugin.localcluster.realnodes.images import WORKER
from gangplugin.localcluster.realnodes.pool import Pool
from gangplugin.localcluster.upstream import kueue_versions
from tests.support import realnodes as rn
from tests.support.kube import gang_queues, unique, wait_for

RANKS = 8
WAIT = 600.0


def spread(values: Iterable[float]) -> str:
    v = sorted(values)
    return f"{statistics.median(v):.1f} ({v[0]:.1f}-{v[-1]:.1f})"


def run_job(local: Any, client: Client, job: dict[str, Any], after: float = 0.0) -> tuple[float, rn.Met]:
    """Submit `job`, wait until every rank stepped; seconds from submission to the last rank's
    first step, and what they printed; the job is deleted and its pods gone afterwards."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    t0 = time.time()
    with rn.submitted(client, job):
        met = wait_for(lambda: rn.all_met(local, client, ns, name, RANKS), WAIT, f"{name}'s ranks")
    return max(e["t"] for e in met.first_step.values()) - t0, met


def node_memory(pool: Pool) -> dict[str, tuple[float, float]]:
    """Per node: MiB resident in its own processes, and MiB its pods' cgroup holds (rss)."""
    out = {}
    for node in pool.nodes:
        own = 0
        for pid in cgroups.pids(f"{node.cgroup}/{cgroups.RUNTIME}"):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            own += next(
                (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0
            )
        stat = cgroups.ROOT / "memory" / node.cgroup.strip("/") / "kubepods" / "memory.stat"
        rss = 0
        if stat.exists():
            fields = dict(line.split() for line in stat.read_text().splitlines())
            rss = int(fields.get("total_rss", "0"))
        out[node.name] = (own / 1024, rss / 2**20)
    return out


def print_memory(label: str, mem: dict[str, tuple[float, float]]) -> None:
    own = [v[0] for v in mem.values()]
    pods = [v[1] for v in mem.values()]
    total = [a + b for a, b in mem.values()]
    print(
        f"  {label}: node processes {spread(own)} MiB, pods {spread(pods)} MiB, together {spread(total)} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--losses", type=int, default=2)
    args = ap.parse_args()
    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "22000"))
    local = rn.real_node_cluster(base, kueue_versions()[-1], log=lambda _m: None, name="bench-real-nodes")
    t0 = time.monotonic()
    local.up()
    client = Client.from_kubeconfig(local.kubeconfig)
    try:
        print(f"cluster with {len(pool_of(local).nodes)} real nodes up in {time.monotonic() - t0:.0f}s")
        rn.helm_install(local, rn.chart_values(local), Path(tempfile.mkdtemp()))
        wait_for(lambda: len([p for p in rn.gangplugin_pods(client) if rn.ready(p)]) == 2, WAIT, "gangplugin")
        bench(local, client, args.reps, args.losses)
    finally:
        client.close()
        local.down(quiet=True)


def bench(local: Any, client: Client, reps: int, losses: int) -> None:
    pool = pool_of(local)
    worker = rn.images(local).named(WORKER)
    ns = unique("bench")
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    print_memory("memory per node, idle (CoreDNS, gangplugin and its scheduler on some)", node_memory(pool))
    with gang_queues(client, ns) as make_queue:
        queue = make_queue(
            gpu_quota=48, sparesPerUltraServer=1, nodeFailure="ReplaceFromSpare", recoveryTimeout="10m"
        )
        gang, plain = [], []
        for _ in range(reps):
            plain_job = rn.pytorchjob(unique("plain"), ns, queue, RANKS, worker)
            del plain_job["metadata"]["labels"]  # no queue: Kueue leaves it alone
            plain.append(run_job(local, client, plain_job)[0])
            gang.append(run_job(local, client, rn.pytorchjob(unique("gang"), ns, queue, RANKS, worker))[0])
        print(f"1. {RANKS}-rank PyTorchJob, submission to every rank's first step ({reps} reps):")
        print(f"  as a gang (Kueue, gangplugin's check, one UltraServer) {spread(gang)} s")
        print(f"  without a queue (kube-scheduler alone)                  {spread(plain)} s")
        ratios = [g / p for g, p in zip(gang, plain, strict=True)]
        print(f"  ratio gang / plain {spread(ratios)}")
        recovery, notready = [], []
        for _ in range(losses):
            r, n = lose_a_node(local, client, pool, ns, queue, worker)
            recovery.append(r)
            notready.append(n)
        print(
            f"2. node lost under a running {RANKS}-rank gang, to the first step of all ranks after it "
            f"({losses} losses):"
        )
        print(f"  recovery {spread(recovery)} s; of it, until the Node was NotReady {spread(notready)} s")
        print(f"  ratio recovery / NotReady {spread(r / n for r, n in zip(recovery, notready, strict=True))}")


def lose_a_node(
    local: Any, client: Client, pool: Pool, ns: str, queue: str, worker: str
) -> tuple[float, float]:
    job = rn.pytorchjob(unique("lose"), ns, queue, RANKS, worker)
    name = job["metadata"]["name"]
    with rn.submitted(client, job):
        before = wait_for(lambda: rn.all_met(local, client, ns, name, RANKS), WAIT, f"{name}'s ranks")
        print_memory(f"memory per node with the {RANKS}-rank gang running", node_memory(pool))
        master = before.pods[0]["spec"]["nodeName"]
        lost = next(p["spec"]["nodeName"] for p in before.pods.values() if p["spec"]["nodeName"] != master)
        t_lost = time.time()
        power_off(local, lost)
        notready = wait_for(
            lambda: not rn.node_ready(client, lost) and time.time(), WAIT, f"{lost} NotReady", interval=0.2
        )
        after = wait_for(
            lambda: rn.all_met(local, client, ns, name, RANKS, after=t_lost), WAIT, "the ranks again"
        )
        first = min(e["t"] for e in after.first_step.values())
    power_on(local, lost)
    wait_for(lambda: rn.node_ready(client, lost), WAIT, f"{lost} Ready again")
    return first - t_lost, notready - t_lost


if __name__ == "__main__":
    sys.exit(main())
