"""Slices where the gang check admitted them: one placement of a gang in slices, shared.

The check admits a gang in slices into a domain wider than one slice (a network layer) and
counts each slice in one domain of the slice level (an UltraServer); the nodeSelector it gives
the gang names only the wide domain. Its promise (held by the check and by the ungater's
reservations) and the ungater's plan then placed the slices again on their own, in their own
order, and could put a slice on the room the check had counted for another gang: at 500 nodes
one such gang a burst stayed gated, its domain full of other gangs' slices. So the check records
the slice domains it chose (`gangplugin.io/slice-domains`, `recorded_slice_domains`), and
`place` puts each slice there first (`split`), falling back to placing them anew where they no
longer fit (a node failed, a pod took the room).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gangplugin.core.errors import InputError
from gangplugin.core.placement.model import Assignment, Gang, Placement, PodSet
from gangplugin.core.topology import Snapshot

#: Between a podset's name and its slice's number in `split`'s podsets: not in a Kueue podset
#: name (a DNS label), so never one of the gang's own.
_SEP = "/"


def slice_level(podset: PodSet) -> str | None:
    return podset.slice_required_topology or podset.slice_preferred_topology


def recorded_slice_domains(
    snapshot: Snapshot, gang: Gang, placement: Placement
) -> dict[str, tuple[str, ...]]:
    """Per podset in slices, the domain of each of its slices at its slice level in a feasible
    `placement` of `gang`, in slice order; a podset whose slices do not each sit in one domain
    of that level (a preferred slice level widened) is left out."""
    nodes: dict[str, dict[int, str]] = {}
    for a in placement.assignments:
        nodes.setdefault(a.pod_set, {})[a.index] = a.node
    out = {}
    for ps in gang.podsets:
        level, size = slice_level(ps), ps.slice_size
        if level is None or not size or ps.count % size or len(nodes.get(ps.name, {})) != ps.count:
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
            out[ps.name] = tuple(domains)
    return out


def parse_slice_domains(raw: object, field: str) -> tuple[str, ...]:
    """`gangplugin.io/slice-domains` ("us-3,us-7") as its values; InputError naming `field`."""
    values = tuple(v.strip() for v in str(raw).split(","))
    if not values or any(not v for v in values):
        raise InputError(
            field, f"{raw!r} is not a comma-separated list of domains; only the gang check sets it"
        )
    return values


def with_slice_domains(gang: Gang, domains: Mapping[str, tuple[str, ...]]) -> Gang:
    """The gang with the slice domains of the podsets named in `domains`."""
    podsets = []
    for ps in gang.podsets:
        podsets.append(dataclasses.replace(ps, slice_domains=domains[ps.name]) if ps.name in domains else ps)
    return Gang(tuple(podsets), gang.name)


def _recorded(podset: PodSet) -> bool:
    """Whether the podset's recorded slices still describe it (none of its pods bound since)."""
    size, domains = podset.slice_size, podset.slice_domains
    if size is None or not domains or slice_level(podset) is None:
        return False
    return size * len(domains) == podset.count


def split(gang: Gang) -> tuple[Gang, dict[str, tuple[str, int]]] | None:
    """The gang with each podset whose recorded slices describe it cut into one podset per
    slice, held in its slice's domain by nodeSelector; per new podset, the podset it came from
    and the index of its first pod. None when no podset has recorded slices."""
    if not any(_recorded(ps) for ps in gang.podsets):
        return None
    podsets: list[PodSet] = []
    origin: dict[str, tuple[str, int]] = {}
    for ps in gang.podsets:
        level, size = slice_level(ps), ps.slice_size
        if not _recorded(ps) or level is None or size is None:
            podsets.append(dataclasses.replace(ps, slice_domains=()))
            origin[ps.name] = (ps.name, 0)
            continue
        for i, domain in enumerate(ps.slice_domains):
            selector = dict(ps.constraints.node_selector)
            selector[level] = domain
            constraints = dataclasses.replace(ps.constraints, node_selector=tuple(sorted(selector.items())))
            name = f"{ps.name}{_SEP}{i}"
            podsets.append(dataclasses.replace(ps.unsliced(), name=name, count=size, constraints=constraints))
            origin[name] = (ps.name, i * size)
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
