"""The bench's figures from plain data (what the watch saw, the nodes and pods at the end), the
same for every system: quality after the burst, partial gangs, gang start times, throughput."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from _peers.workload import PER_ULTRASERVER, Gang

#: A gang is partial when some of its pods are bound while others are not for longer than this.
PARTIAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    ultraserver: str | None
    gpus: int  # allocatable
    usable: bool = True  # Ready and schedulable


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod of a bench gang as it is at the end: its index in the gang and its node (None:
    not bound)."""

    gang: str
    index: int
    node: str | None
    gpus: int


@dataclass(frozen=True, slots=True)
class Quality:
    gangs_placed: int
    in_domain: int  # placed gangs whose every required domain holds its pods (must be all)
    fragmented_ultraservers: int  # some GPUs taken, some free
    stranded_gpus: int  # free, in UltraServers too small for `reference`
    reference: str  # the gang the stranded GPUs are counted for
    largest_whole: int  # pods of GPUs the next gang asks per pod that one UltraServer still takes

    @property
    def in_domain_share(self) -> float:
        return self.in_domain / self.gangs_placed if self.gangs_placed else 1.0


def free_gpus(nodes: Iterable[NodeView], pods: Iterable[PodView]) -> dict[str, int]:
    """Free GPUs per usable node: allocatable minus the bound pods' requests."""
    free = {n.name: n.gpus for n in nodes if n.usable}
    for p in pods:
        if p.node in free:
            free[p.node] -= p.gpus
    return free


def _by_ultraserver(nodes: Iterable[NodeView]) -> dict[str, list[NodeView]]:
    out: dict[str, list[NodeView]] = defaultdict(list)
    for n in nodes:
        if n.ultraserver is not None:
            out[n.ultraserver].append(n)
    return out


def quality(nodes: Sequence[NodeView], pods: Sequence[PodView], gangs: Sequence[Gang]) -> Quality:
    """The cluster after the burst settled. `gangs` in submission order: the first one not placed
    whole is the next waiting gang, the one stranded GPUs and the largest placeable gang are
    measured for (none waiting: an 18-pod gang, the largest that requires one UltraServer)."""
    us_of = {n.name: n.ultraserver for n in nodes}
    by_gang: dict[str, list[PodView]] = defaultdict(list)
    for p in pods:
        by_gang[p.gang].append(p)
    placed = in_domain = 0
    waiting: Gang | None = None
    for g in gangs:
        members = by_gang.get(g.name, [])
        if len(members) < g.pods or any(p.node is None for p in members):
            waiting = waiting or g
            continue
        placed += 1
        at = {p.index: us_of.get(p.node or "") for p in members}
        if all(len({at.get(i) for i in r}) == 1 and at.get(r[0]) is not None for r in g.slices()):
            in_domain += 1
    ref = waiting or Gang("an 18-pod gang", PER_ULTRASERVER)
    free = free_gpus(nodes, pods)
    need = ref.slice_size or ref.pods  # pods of one required domain
    fragmented = stranded = largest = 0
    for members in _by_ultraserver(nodes).values():
        total = sum(n.gpus for n in members if n.usable)
        left = sum(free.get(n.name, 0) for n in members)
        room = sum(free.get(n.name, 0) // ref.gpus for n in members)  # pods of ref's shape
        fragmented += 0 < left < total
        stranded += left if room < need else 0
        largest = max(largest, room)
    return Quality(placed, in_domain, fragmented, stranded, ref.name, largest)


def partial_gangs(
    sizes: Mapping[str, int], bound: Mapping[str, Mapping[int, float]], end: float
) -> dict[str, float]:
    """Gangs seen partial, each with how long: some of its pods bound (`bound`: gang -> pod index
    -> when it was bound) while others were not, for more than PARTIAL_SECONDS. A pod never
    bound (or never created) counts as unbound until `end`, when watching stopped."""
    out: dict[str, float] = {}
    for g, size in sizes.items():
        times = list(bound.get(g, {}).values())
        if not times:
            continue
        last = max(times) if len(times) >= size else end
        if last - min(times) > PARTIAL_SECONDS:
            out[g] = last - min(times)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def start_times(
    gangs: Sequence[Gang], submitted: Mapping[str, float], running: Mapping[str, Mapping[int, float]]
) -> dict[str, float]:
    """Submission to every pod Running, per gang that got there."""
    out = {}
    for g in gangs:
        seen = running.get(g.name, {})
        if len(seen) >= g.pods and g.name in submitted:
            out[g.name] = max(seen.values()) - submitted[g.name]
    return out


def by_size(gangs: Sequence[Gang], values: Mapping[str, float]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for g in gangs:
        if g.name in values:
            out[g.pods].append(values[g.name])
    return dict(sorted(out.items()))


def binding_rate(submitted: Iterable[float], bound: Iterable[float]) -> float:
    """Pods bound per second, from the first submission to the last bind."""
    binds = list(bound)
    first = min(submitted, default=math.nan)
    if not binds or not first < max(binds):
        return 0.0
    return len(binds) / (max(binds) - first)


def same_domains(live: Mapping[str, frozenset[str]], predicted: Mapping[str, frozenset[str]]) -> list[str]:
    """The gangs placed live in exactly the UltraServers predicted for them."""
    return sorted(g for g, us in live.items() if predicted.get(g) == us)


def spread(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the repetitions that measured something (nan: none did)."""
    seen = [s for s in samples if not math.isnan(s)]
    if not seen:
        return (math.nan, math.nan, math.nan)
    return (statistics.median(seen), min(seen), max(seen))
