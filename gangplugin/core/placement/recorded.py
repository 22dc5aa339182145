"""Where the gang check counted a gang's pods inside a wide domain: one placement, shared.

The check admits a gang into a domain wider than an UltraServer (a network layer) and counts its
pods in particular UltraServers there; the nodeSelector it gives the gang names only the wide
domain. Its promise (held by the check and by the ungater's reservations) and the ungater's plan
then placed the pods again on their own, and could put them on the room the check had counted for
another gang admitted meanwhile, which then stayed gated: at 500 nodes, a gang in slices next to
another's slices, and one next to a wide gang the ungater pinned into other UltraServers of its
layer than the check had counted. So the check records where it counted them
(`gangplugin.io/slice-domains`, `recorded_slice_domains`): for a podset in slices, the domain of
each slice at its slice level; for any other podset admitted wider than an UltraServer, the
domain of its pods at the narrowest level above hostname, as slices of one pod (`us-3*18,us-4*6`:
18 pods in us-3, 6 in us-4). `place` puts them there first (`split`), falling back to placing
them anew where they no longer fit (a node failed, a pod took the room) or once pods are bound.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping

from gangplugin.core.errors import InputError
from gangplugin.core.placement.model import Assignment, Gang, Placement, PodSet
from gangplugin.core.topology import HOSTNAME_LABEL, Snapshot

#: Between a podset's name and its slice's number in `split`'s podsets: not in a Kueue podset
#: name (a DNS label), so never one of the gang's own.
_SEP = "/"
#: A podset not in slices is recorded only over this many domains at most: a wider spread (most
#: of the cluster) would make every placement of its promise one of as many podsets.
MAX_RECORDED_DOMAINS = 16


def unit_level(levels: tuple[str, ...]) -> str | None:
    """The level at which the pods of a podset not in slices are recorded: the narrowest above
    hostname (the UltraServer in an EKS topology)."""
    above = [label for label in levels if label != HOSTNAME_LABEL]
    return above[-1] if above else None


def slice_level(podset: PodSet) -> str | None:
    return podset.slice_required_topology or podset.slice_preferred_topology


def recorded_slice_domains(
    snapshot: Snapshot, gang: Gang, placement: Placement
) -> dict[str, tuple[str, ...]]:
    """Per podset, where a feasible `placement` of `gang` counted it: for a podset in slices the
    domain of each slice at its slice level, in slice order (left out when a slice does not sit in
    one domain of that level: a preferred slice level widened); for another podset, when the
    placement is wider than its narrowest level, the domain of each pod at that level, grouped
    by domain (its pods are alike) and over MAX_RECORDED_DOMAINS domains at most."""
    nodes: dict[str, dict[int, str]] = {}
    for a in placement.assignments:
        nodes.setdefault(a.pod_set, {})[a.index] = a.node
    narrowest = unit_level(snapshot.levels)
    out = {}
    for ps in gang.podsets:
        level, size = slice_level(ps), ps.slice_size
        if level is None or not size:
            if narrowest is None or not _wider(snapshot.levels, placement.level, narrowest):
                continue  # in one domain of the narrowest level: its nodeSelector says it all
            level, size = narrowest, 1
        if ps.count % size or len(nodes.get(ps.name, {})) != ps.count:
            continue
        domains = []
        for first in range(0, ps.count, size):
            values = set()
            for index in range(first, first + size):
                node = snapshot.node(nodes[ps.name][index])
                values.add(node.labels.get(level) if node is not None else None)
            if len(values) != 1 or None in values:
                break
            domains.append(str(values.pop()))
        else:
            if size == 1:  # alike pods: grouped by domain, in the order the domains come
                counts = Counter(domains)
                if len(counts) > MAX_RECORDED_DOMAINS:
                    continue
                domains = [d for d, n in counts.items() for _ in range(n)]
            out[ps.name] = tuple(domains)
    return out


def _wider(levels: tuple[str, ...], level: str | None, than: str) -> bool:
    """Whether a placement at `level` (None: spread, no one domain) spans more than a domain of
    `than`."""
    return level is None or (level in levels and levels.index(level) < levels.index(than))


def format_slice_domains(domains: tuple[str, ...]) -> str:
    """`gangplugin.io/slice-domains` of `domains`: a run of one domain as `domain*n`."""
    runs = ((domain, len(list(run))) for domain, run in itertools.groupby(domains))
    return ",".join(domain if n == 1 else f"{domain}*{n}" for domain, n in runs)


def describe_records(records: Iterable[tuple[str, tuple[str, ...]]]) -> str:
    """Records per podset, for people: `main: us-3*18,us-4*6; workers: us-1,us-2`."""
    return "; ".join(f"{name}: {format_slice_domains(domains)}" for name, domains in records)


def parse_slice_domains(raw: object, field: str) -> tuple[str, ...]:
    """`gangplugin.io/slice-domains` ("us-3,us-7", "us-3*18,us-4*6") as one domain a slice;
    InputError naming `field`."""
    out: list[str] = []
    for item in str(raw).split(","):
        domain, star, times = item.strip().partition("*")
        count = int(times) if times.strip().isdigit() else 0
        if not domain.strip() or (star and count < 1):
            raise InputError(
                field,
                f"{raw!r} is not a comma-separated list of domains (each optionally as domain*count); "
                "only the gang check sets it",
            )
        out += [domain.strip()] * (count if star else 1)
    return tuple(out)


def with_slice_domains(gang: Gang, domains: Mapping[str, tuple[str, ...]]) -> Gang:
    """The gang with the slice domains of the podsets named in `domains`."""
    podsets = []
    for ps in gang.podsets:
        podsets.append(dataclasses.replace(ps, slice_domains=domains[ps.name]) if ps.name in domains else ps)
    return Gang(tuple(podsets), gang.name)


def record_level(podset: PodSet, levels: tuple[str, ...]) -> tuple[str, int] | None:
    """The level the podset's record names domains at, and the pods each recorded domain stands
    for (its slice size; 1 for a podset not in slices); None without a record."""
    if not podset.slice_domains:
        return None
    level, size = slice_level(podset), podset.slice_size
    if level is None or not size:
        level, size = unit_level(levels), 1
    return None if level is None else (level, size)


def _level(podset: PodSet, levels: tuple[str, ...]) -> tuple[str, int] | None:
    """`record_level`, if the record still describes the podset (one entry per slice)."""
    recorded = record_level(podset, levels)
    if recorded is None or recorded[1] * len(podset.slice_domains) != podset.count:
        return None
    return recorded


def rest_of_record(podset: PodSet, levels: tuple[str, ...], placed: Iterable[str | None]) -> tuple[str, ...]:
    """The record of the podset's pods not placed yet, `placed` being the domains (at its record's
    level: `record_level`) its placed pods are in: the record less a whole slice (a pod, when
    not in slices) per `size` placed pods in a domain. () when the placed pods are not whole
    recorded slices (some sit elsewhere, or part of a slice): the rest is placed anew. While a
    gang is pinned pod by pod the check promises its rest where the ungater pins it, not where
    best fit would: room counted for another gang there would be taken twice."""
    recorded = record_level(podset, levels)
    if recorded is None:
        return ()
    size, left = recorded[1], Counter(podset.slice_domains)
    for domain, pods in Counter(placed).items():
        if domain is None or pods % size or left[domain] < pods // size:
            return ()
        left[domain] -= pods // size
    rest = []
    for domain in podset.slice_domains:  # in the record's order: slice order
        if left[domain] > 0:
            rest.append(domain)
            left[domain] -= 1
    return tuple(rest)


def split(gang: Gang, levels: tuple[str, ...]) -> tuple[Gang, dict[str, tuple[str, int]]] | None:
    """The gang with each podset whose record still describes it cut into one podset per
    recorded slice (a podset not in slices: per recorded domain), held in its domain by
    nodeSelector (`levels`: the snapshot's); per new podset, the podset it came from and the
    index of its first pod. None when no podset has a record that describes it."""
    if not any(_level(ps, levels) for ps in gang.podsets):
        return None
    podsets: list[PodSet] = []
    origin: dict[str, tuple[str, int]] = {}
    for ps in gang.podsets:
        recorded = _level(ps, levels)
        if recorded is None:
            podsets.append(dataclasses.replace(ps, slice_domains=()))
            origin[ps.name] = (ps.name, 0)
            continue
        level, size = recorded
        if size == 1:  # alike pods: one podset per domain
            parts = list(Counter(ps.slice_domains).items())
        else:
            parts = [(domain, size) for domain in ps.slice_domains]
        first = 0
        for i, (domain, count) in enumerate(parts):
            selector = dict(ps.constraints.node_selector)
            selector[level] = domain
            constraints = dataclasses.replace(ps.constraints, node_selector=tuple(sorted(selector.items())))
            name = f"{ps.name}{_SEP}{i}"
            podsets.append(
                dataclasses.replace(ps.unsliced(), name=name, count=count, constraints=constraints)
            )
            origin[name] = (ps.name, first)
            first += count
    return Gang(tuple(podsets), gang.name), origin


def joined(gang: Gang, origin: Mapping[str, tuple[str, int]], placement: Placement) -> Placement:
    """A placement of `split`'s gang as one of `gang`: each pod under its own podset and index,
    in podset order, then index order."""
    order = {ps.name: i for i, ps in enumerate(gang.podsets)}
    assignments = []
    for a in placement.assignments:
        name, first = origin[a.pod_set]
        assignments.append(Assignment(name, first + a.index, a.node))
    assignments.sort(key=lambda a: (order[a.pod_set], a.index))
    return dataclasses.replace(placement, assignments=tuple(assignments))


def anew(placement: Placement, gang: Gang) -> Placement:
    """`placement`, made of `gang` without its record (which no longer fits): its reason says so
    and names the record, so a gang pinned away from where the check counted it (where another
    gang counted may then be held back) shows in the ungater's log line and in explain."""
    where = describe_records((ps.name, ps.slice_domains) for ps in gang.podsets if ps.slice_domains)
    said = f"the check's record ({where}) no longer fits; " + ("placed anew: " if placement.feasible else "")
    return dataclasses.replace(
        placement,
        reason=said + placement.reason,
        summary=said + placement.summary if placement.summary else "",
    )
