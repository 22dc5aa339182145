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

import math
from collections.abc import Sequence

from gangplugin.core.placement import Assignment, Gang, Placement
from gangplugin.core.resources import PODS
from gangplugin.core.topology import Snapshot, pods_fitting

#: Beyond these the program is not "small": the simulator refuses, it does not wait for hours.
MAX_NODES = 128
MAX_GANGS = 8


def optimal_admissions(snapshot: Snapshot, gangs: Sequence[Gang], spares: frozenset[int]) -> list[Placement]:
    """Per gang (in queue order), its placement when the optimum admits it, else infeasible."""
    if not gangs:
        return []
    nodes = [i for i in snapshot.live_node_ids() if snapshot.usable[i] and i not in spares]
    if len(nodes) > MAX_NODES:
        raise ValueError(f"the packing optimum is for clusters of at most {MAX_NODES} nodes")
    if any(len(one.podsets) != 1 for one in gangs):
        raise ValueError("the optimum handles gangs of one podset")
    return _Program(snapshot, gangs, nodes).solve()


Column = tuple[str, int, int]  # ("y", gang, 0) | ("x", gang, node's position) | ("z", gang, domain)


class _Program:
    """The integer program of the module docstring over `gangs` and `nodes` (snapshot ids)."""

    def __init__(self, snapshot: Snapshot, gangs: Sequence[Gang], nodes: list[int]) -> None:
        self.snapshot, self.gangs, self.nodes = snapshot, gangs, nodes
        self.reqs = [
            tuple(sorted((r, q) for r, q in g.podsets[0].requests.items() if q > 0 and r != PODS))
            for g in gangs
        ]
        # variable layout: y (k), x (k*m), then z per gang with a required level
        cols: list[Column] = [("y", g, 0) for g in range(len(gangs))]
        cols += [("x", g, j) for g in range(len(gangs)) for j in range(len(nodes))]
        self.zdomains: list[list[int]] = []
        for g, gang in enumerate(gangs):
            level = self._level(gang)
            doms = sorted({snapshot.path[n][level] for n in nodes}) if level is not None else []
            doms = [d for d in doms if snapshot.domains[d].value is not None]
            self.zdomains.append(doms)
            cols += [("z", g, d) for d in doms]
        self.index = {c: i for i, c in enumerate(cols)}
        self.rows: list[dict[int, float]] = []
        self.bounds: list[tuple[float, float]] = []

    def _level(self, gang: Gang) -> int | None:
        label = gang.podsets[0].required_topology
        return self.snapshot.level_index(label) if label else None

    def row(self, coef: dict[int, float], low: float, high: float) -> None:
        self.rows.append(coef)
        self.bounds.append((low, high))

    def _gang_rows(self, g: int, gang: Gang) -> None:
        """Its pods all placed when admitted; with a required level, in one domain of it."""
        pods, m = gang.podsets[0].count, len(self.nodes)
        coef = {self.index[("x", g, j)]: 1.0 for j in range(m)}
        coef[self.index[("y", g, 0)]] = -float(pods)
        self.row(coef, 0, 0)
        if not gang.podsets[0].required_topology:
            return
        level = self._level(gang)
        for j, n in enumerate(self.nodes):
            d = self.snapshot.path[n][level] if level is not None else -1
            c = {self.index[("x", g, j)]: 1.0}
            if ("z", g, d) in self.index:
                c[self.index[("z", g, d)]] = -float(pods)
            self.row(c, -math.inf, 0)
        c = {self.index[("z", g, d)]: 1.0 for d in self.zdomains[g]}
        c[self.index[("y", g, 0)]] = -1.0
        self.row(c, 0, 0)

    def _node_rows(self) -> None:
        """No node gives more than it has free, of any resource or pods."""
        resources = sorted({r for req in self.reqs for r, _ in req})
        for j, n in enumerate(self.nodes):
            free = self.snapshot.free[n]
            for r in resources:
                x = self.index
                coef = {
                    x[("x", g, j)]: float(q) for g, req in enumerate(self.reqs) for rr, q in req if rr == r
                }
                self.row(coef, -math.inf, free.get(r, 0))
            if PODS in free:
                self.row(
                    {self.index[("x", g, j)]: 1.0 for g in range(len(self.gangs))}, -math.inf, free[PODS]
                )

    def solve(self) -> list[Placement]:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        k, width = len(self.gangs), len(self.index)
        lower, upper = np.zeros(width), np.ones(width)
        for g, gang in enumerate(self.gangs):
            pods = gang.podsets[0].count
            for j, n in enumerate(self.nodes):
                upper[self.index[("x", g, j)]] = min(pods, pods_fitting(self.snapshot.free[n], self.reqs[g]))
            self._gang_rows(g, gang)
        self._node_rows()
        matrix = np.zeros((len(self.rows), width))
        for i, coef in enumerate(self.rows):
            for c, v in coef.items():
                matrix[i, c] += v
        objective = np.zeros(width)
        for g in range(k):
            gpus = sum(q for _, q in self.reqs[g]) * self.gangs[g].podsets[0].count
            objective[self.index[("y", g, 0)]] = -(gpus * (k + 1) + (k - g))  # GPUs first, then queue order
        result = milp(
            objective,
            constraints=LinearConstraint(
                matrix, np.array([b[0] for b in self.bounds]), np.array([b[1] for b in self.bounds])
            ),
            integrality=np.ones(width),
            bounds=Bounds(lower, upper),
        )
        if result.x is None:  # pragma: no cover - y = 0 everywhere is always feasible
            raise RuntimeError(f"the packing program failed: {result.message}")
        return [self._placement(g, gang, result.x) for g, gang in enumerate(self.gangs)]

    def _placement(self, g: int, gang: Gang, x: Sequence[float]) -> Placement:
        ps = gang.podsets[0]
        if round(x[self.index[("y", g, 0)]]) != 1:
            return Placement(
                False, None, (), (), "not admitted by the packing optimum (no room, or others pack more)"
            )
        assignments: list[Assignment] = []
        for j, n in enumerate(self.nodes):
            node = self.snapshot.nodes[n]
            assert node is not None
            taken = round(x[self.index[("x", g, j)]])
            assignments += [Assignment(ps.name, len(assignments) + i, node.name) for i in range(taken)]
        return Placement(True, None, (), tuple(assignments), "packing optimum")
