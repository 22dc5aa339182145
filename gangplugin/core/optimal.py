"""The packing optimum of one admission pass, for small clusters: which of the waiting gangs to
admit now, and on which nodes, so that the most GPUs start. An exact integer program (HiGHS
through scipy), where greedy placement (`placement.place`, one gang after the other in queue
order) is what the controllers do; the capacity simulator compares the two.

The program, for gangs g (one podset each) and usable nodes n that are not spares:
  y_g in {0, 1}: g is admitted;  x_gn in 0..pods_g: pods of g on n;
  z_gd in {0, 1}: g sits in domain d of its required level (gangs with a required level only);
  sum_n x_gn = pods_g * y_g;   sum_g x_gn * request_g[r] <= free_n[r] for every resource;
  x_gn <= pods_g * z_g,domain(n);   sum_d z_gd = y_g;
maximize the GPUs admitted, ties going to gangs earlier in the queue. A preferred level is a
wish, so the program may spread such a gang anywhere: the optimum is a bound no placement beats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gangplugin.core.placement import Assignment, Gang, Placement
from gangplugin.core.resources import PODS
from gangplugin.core.topology import Requests, Snapshot, pods_fitting

#: Beyond these the program is not "small": the simulator refuses, it does not wait for hours.
MAX_NODES = 128
MAX_GANGS = 8
#: A column of the program: (variable, gang, node or domain).
_Col = tuple[str, int, int]


@dataclass(slots=True)
class _Program:
    """The integer program's rows as they are built: one column per variable (`index`)."""

    index: dict[_Col, int]
    rows: list[Any] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)

    def row(self, coef: dict[int, float], low: float, high: float) -> None:
        import numpy as np

        r = np.zeros(len(self.index))
        for i, v in coef.items():
            r[i] += v
        self.rows.append(r)
        self.lo.append(low)
        self.hi.append(high)


def _columns(
    snapshot: Snapshot, gangs: Sequence[Gang], nodes: list[int]
) -> tuple[list[_Col], list[list[int]]]:
    """The variables: y (per gang), x (per gang and node), then z per gang with a required
    level and domain of it; and per gang the domains of its z."""
    cols: list[_Col] = [("y", g, 0) for g in range(len(gangs))]
    cols += [("x", g, j) for g in range(len(gangs)) for j in range(len(nodes))]
    zdomains: list[list[int]] = []
    for g, gang in enumerate(gangs):
        label = gang.podsets[0].required_topology
        level = snapshot.level_index(label) if label else None
        doms = sorted({snapshot.path[n][level] for n in nodes}) if level is not None else []
        doms = [d for d in doms if snapshot.domains[d].value is not None]
        zdomains.append(doms)
        cols += [("z", g, d) for d in doms]
    return cols, zdomains


def _gang_rows(
    program: _Program, snapshot: Snapshot, gangs: Sequence[Gang], nodes: list[int], zdomains: list[list[int]]
) -> None:
    """Each gang all or nothing, and a gang with a required level in one domain of it."""
    index, m = program.index, len(nodes)
    for g, gang in enumerate(gangs):
        pods = gang.podsets[0].count
        coef = {index[("x", g, j)]: 1.0 for j in range(m)}
        coef[index[("y", g, 0)]] = -float(pods)
        program.row(coef, 0, 0)
        label = gang.podsets[0].required_topology
        if label:
            level = snapshot.level_index(label)
            for j, n in enumerate(nodes):
                d = snapshot.path[n][level] if level is not None else -1
                c = {index[("x", g, j)]: 1.0}
                if ("z", g, d) in index:
                    c[index[("z", g, d)]] = -float(pods)
                program.row(c, -float("inf"), 0)
            c = {index[("z", g, d)]: 1.0 for d in zdomains[g]}
            c[index[("y", g, 0)]] = -1.0
            program.row(c, 0, 0)


def _node_rows(program: _Program, snapshot: Snapshot, reqs: list[Requests], nodes: list[int]) -> None:
    """No node given more than it has free, of each resource and of pod slots."""
    index, k = program.index, len(reqs)
    resources = sorted({r for req in reqs for r, _ in req})
    for j, n in enumerate(nodes):
        free = snapshot.free[n]
        for r in resources:
            coef = {index[("x", g, j)]: float(q) for g, req in enumerate(reqs) for rr, q in req if rr == r}
            program.row(coef, -float("inf"), free.get(r, 0))
        if PODS in free:
            program.row({index[("x", g, j)]: 1.0 for g in range(k)}, -float("inf"), free[PODS])


def optimal_admissions(snapshot: Snapshot, gangs: Sequence[Gang], spares: frozenset[int]) -> list[Placement]:
    """Per gang (in queue order), its placement when the optimum admits it, else infeasible."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    if not gangs:
        return []
    nodes = [i for i in snapshot.live_node_ids() if snapshot.usable[i] and i not in spares]
    if len(nodes) > MAX_NODES:
        raise ValueError(f"the packing optimum is for clusters of at most {MAX_NODES} nodes")
    reqs = []
    for one in gangs:
        if len(one.podsets) != 1:
            raise ValueError("the optimum handles gangs of one podset")
        ps = one.podsets[0]
        reqs.append(tuple(sorted((r, q) for r, q in ps.requests.items() if q > 0 and r != PODS)))
    k = len(gangs)
    cols, zdomains = _columns(snapshot, gangs, nodes)
    program = _Program({c: i for i, c in enumerate(cols)})
    index = program.index
    lower, upper = np.zeros(len(cols)), np.ones(len(cols))
    for g, gang in enumerate(gangs):
        pods = gang.podsets[0].count
        for j, n in enumerate(nodes):
            upper[index[("x", g, j)]] = min(pods, pods_fitting(snapshot.free[n], reqs[g]))
    _gang_rows(program, snapshot, gangs, nodes, zdomains)
    _node_rows(program, snapshot, reqs, nodes)
    gpus = [sum(q for _, q in reqs[g]) * gangs[g].podsets[0].count for g in range(k)]
    objective = np.zeros(len(cols))
    for g in range(k):
        objective[index[("y", g, 0)]] = -(gpus[g] * (k + 1) + (k - g))  # GPUs first, then queue order
    result = milp(
        objective,
        constraints=LinearConstraint(np.array(program.rows), np.array(program.lo), np.array(program.hi)),
        integrality=np.ones(len(cols)),
        bounds=Bounds(lower, upper),
    )
    if result.x is None:  # pragma: no cover - y = 0 everywhere is always feasible
        raise RuntimeError(f"the packing program failed: {result.message}")
    return [_placement(snapshot, gang, g, nodes, index, result.x) for g, gang in enumerate(gangs)]


def _placement(
    snapshot: Snapshot, gang: Gang, g: int, nodes: list[int], index: dict[_Col, int], x: Any
) -> Placement:
    """Gang `g`'s placement in the solution `x`."""
    ps = gang.podsets[0]
    if round(x[index[("y", g, 0)]]) != 1:
        return Placement(
            False, None, (), (), "not admitted by the packing optimum (no room, or others pack more)"
        )
    assignments: list[Assignment] = []
    for j, n in enumerate(nodes):
        node = snapshot.nodes[n]
        assert node is not None
        taken = round(x[index[("x", g, j)]])
        assignments += [Assignment(ps.name, len(assignments) + i, node.name) for i in range(taken)]
    return Placement(True, None, (), tuple(assignments), "packing optimum")
