"""Speed of `gangctl simulate`: 10,000 gangs replayed on 5,000 nodes, and the growth from 1,000.

Run: .venv/bin/python bench/simulate.py [--profile]

The cluster: 250 GB200 UltraServers of 18 four-GPU instances plus 500 eight-GPU P5 instances
(5,000 nodes, 22,000 GPUs). The jobs: the seeded synthetic generator (Kalos-like gang sizes,
4-GPU pods preferring one UltraServer, mean run 2h, one arrival a minute: ~80% load). One replay
with policy gangplugin per size; the target is under 60 s for 10,000 gangs on 2 cores.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from dataclasses import replace

from gangplugin.cli.simulate import cluster_nodes
from gangplugin.core.simulate import Settings, replay
from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.sim.report import policy_doc
from gangplugin.sim.trace import synthetic

SHAPE = {
    "spec": {
        "groups": [
            {
                "name": "gb200",
                "instanceType": "ml.p6e-gb200.36xlarge",
                "availabilityZone": "us-east-1a",
                "ultraServerCount": 250,
                "instancesPerUltraServer": 18,
                "instancesPerNetworkLayer": [1800, 360, 36],
                "allocatable": {"cpu": "144", "memory": "1700Gi", "pods": "110", "nvidia.com/gpu": "4"},
            },
            {
                "name": "p5",
                "instanceType": "ml.p5.48xlarge",
                "availabilityZone": "us-east-1b",
                "instanceCount": 500,
                "instancesPerNetworkLayer": [500, 100, 20],
                "allocatable": {"cpu": "192", "memory": "1900Gi", "pods": "110", "nvidia.com/gpu": "8"},
            },
        ]
    }
}


def run(count: int) -> tuple[float, float, dict[str, object]]:
    """(wall seconds, CPU seconds, summary) of one replay: CPU time is the figure that does not
    depend on what else the shared machine runs."""
    nodes = cluster_nodes(SHAPE)
    jobs = [
        replace(j, preferred_topology=ULTRASERVER_LABEL)
        for j in synthetic(count, seed=1, gpus_per_pod=4, mean_interarrival=60.0)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    result = replay(nodes, jobs, "gangplugin", Settings())
    return time.perf_counter() - started, time.process_time() - cpu, policy_doc(result)


def main() -> None:
    if "--profile" in sys.argv:
        cProfile.run("run(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 2000)", "/tmp/simulate.prof")
        pstats.Stats("/tmp/simulate.prof").sort_stats("cumulative").print_stats(30)
        return
    print(
        f"{'GANGS':>6}  {'NODES':>5}  {'WALL S':>6}  {'CPU S':>6}  {'CPU/GANG':>9}  {'GROWTH':>6}  "
        "GPU UTIL  P95 WAIT"
    )
    base: float | None = None
    for count in (1000, 2500, 5000, 10000):
        wall, cpu, doc = run(count)
        growth = "" if base is None else f"x{cpu / base:.1f}"
        base = base or cpu
        waits = doc["waitSeconds"]
        assert isinstance(waits, dict)
        print(
            f"{count:>6}  {5000:>5}  {wall:>6.1f}  {cpu:>6.1f}  {cpu / count * 1000:>7.2f}ms  {growth:>6}  "
            f"{doc['gpuUtilization']:.1%}     {waits['p95'] / 60:.0f}m"
        )
    if cpu > 60:
        sys.exit(f"10,000 gangs took {cpu:.0f} CPU seconds, over the 60s target")


if __name__ == "__main__":
    main()
