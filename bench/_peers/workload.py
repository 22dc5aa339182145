"""The bench's gangs, the same for every system: sizes drawn (seeded) from the Kalos trace's gangs
of 1-36 pods of 4 GPUs (its 8-GPU workers as two 4-GPU pods, as `gangctl simulate --pod-gpus 4`
splits them), each pod a whole GB200 node; up to 18 pods (one UltraServer) the gang requires one
UltraServer, above it is cut into equal slices of at most 18 pods, each required in one."""

from __future__ import annotations

import csv
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KALOS = REPO / "deploy" / "traces" / "acme-kalos-converted.csv"
POD_GPUS = 4
MAX_PODS = 36
PER_ULTRASERVER = 18


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang: `pods` pods of `gpus` GPUs each. `slice_size` 0: one UltraServer required for
    all of them (`required`), or, with `required` False, one preferred; else consecutive pod
    indexes in slices of that many, each slice required in one UltraServer."""

    name: str
    pods: int
    gpus: int = POD_GPUS
    required: bool = True
    slice_size: int = 0
    priority: str | None = None  # "low" or "high" (the bench's priority classes), None: default

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus

    def slices(self) -> list[range]:
        """The pod indexes of each domain the gang must be placed whole in (one UltraServer per
        range), or [] for a gang that only prefers one."""
        if self.slice_size:
            return [range(i, i + self.slice_size) for i in range(0, self.pods, self.slice_size)]
        return [range(self.pods)] if self.required else []


def slice_size(pods: int) -> int:
    """0 for a gang that fits one UltraServer; else the largest divisor of `pods` of at most 18
    (equal slices: 24 -> 12, 32 -> 16, 36 -> 18)."""
    if pods <= PER_ULTRASERVER:
        return 0
    return max(d for d in range(1, PER_ULTRASERVER + 1) if pods % d == 0)


def kalos_sizes(path: Path = KALOS) -> Counter[int]:
    """How many of the trace's jobs have each gang size, in 4-GPU pods, up to MAX_PODS."""
    sizes: Counter[int] = Counter()
    with path.open() as f:
        for row in csv.DictReader(f):
            workers, per = int(row["gpu_workers"]), float(row["gpu_per_worker"])
            pods = workers * max(1, int(per) // POD_GPUS)
            if pods <= MAX_PODS:
                sizes[pods] += 1
    return sizes


def gang(name: str, pods: int, priority: str | None = None) -> Gang:
    return Gang(name, pods, slice_size=slice_size(pods), priority=priority)


def burst(seed: int, nodes: int, fill: float = 1.05) -> list[Gang]:
    """Gangs drawn from the trace's sizes until they ask for `fill` times `nodes` whole nodes
    (a little more than the cluster: some must wait, which the quality figures need)."""
    sizes = kalos_sizes()
    rnd = random.Random(seed)
    population, weights = list(sizes), list(sizes.values())
    out: list[Gang] = []
    asked = 0
    while asked < fill * nodes:
        pods = rnd.choices(population, weights)[0]
        out.append(gang(f"b{len(out):04d}-{pods}", pods))
        asked += pods
    return out


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # seconds after the stream's start
    gang: Gang
    runtime: float  # seconds it runs once all its pods are Running, then it is deleted


def stream(seed: int, nodes: int, seconds: float, load: float = 0.7, runtime: float = 60.0) -> list[Arrival]:
    """Gangs arriving for `seconds` (Poisson), each running `runtime` seconds, at a rate that keeps
    `load` of the `nodes` busy (Little's law over the trace's mean gang size)."""
    sizes = kalos_sizes()
    rnd = random.Random(seed + 1)
    population, weights = list(sizes), list(sizes.values())
    mean = sum(p * w for p, w in sizes.items()) / sum(weights)
    rate = load * nodes / (mean * runtime)  # gangs per second
    out: list[Arrival] = []
    t = rnd.expovariate(rate)
    while t < seconds:
        pods = rnd.choices(population, weights)[0]
        out.append(Arrival(t, gang(f"s{len(out):04d}-{pods}", pods), runtime))
        t += rnd.expovariate(rate)
    return out
