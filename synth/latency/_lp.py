"""Column generation over depth-bounded spanning out-trees (the AllGather side of every tree collective).

Master LP (one unit of data per root; ``b_a`` link capacity in GB/s):

    minimise U   s.t.   sum_{T of r} y_T = 1            for every root r        (dual pi_r)
                        sum_T load_a(T) y_T <= b_a U     for every live link a   (dual w_a >= 0)
                        y >= 0

over trees ``T`` of depth at most ``D`` whose every edge is a switch path between GPUs; its optimum
is ``U*_D`` and ``algbw*_D = N / U*_D``. Pricing looks for a tree with ``sum_a w_a load_a(T) < pi_r``
(:mod:`synth.latency._pricing`, greedy). The bound: for any ``w >= 0`` scaled to ``sum_a w_a b_a = 1``
and any feasible ``(y, U)``, ``sum_r min_T cost_w(T) <= sum_a w_a load_a(y) <= U``; a lower bound on
each ``min_T`` therefore gives a certified lower bound on ``U*_D`` (Lagrangian / Farley bound), and so
does the unbounded optimum ``U*_inf``. Column generation stops when the master's ``U`` is within
``gap_tol`` of the best lower bound, or when pricing finds no improving tree (the gap that remains
is then reported, never hidden).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.sparse import csc_matrix

from synth import _deadline
from synth._types import NodeId
from synth.errors import SolverError
from synth.latency._graph import LinkGraph
from synth.latency._pricing import greedy_trees, reparent_leaves, tree_lower_bounds
from synth.result import Status
from synth.solvers import LpBackend, lp_backend

__all__ = ["Column", "LpOutcome", "solve_depth_lp"]

FloatArray = npt.NDArray[np.float64]

_RC_TOL = 1e-9
#: past this many columns per master row, unused columns are dropped down to the cheapest
#: ``_KEEP_ROWS`` per row (plus every column in use)
_PURGE_ROWS = 8
_KEEP_ROWS = 2
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Column:
    """One tree: its root, ``(parent, child)`` edges parents first, link loads, and the physical path
    of every edge (``paths``, shared between the columns of one pricing round)."""

    root: int
    edges: tuple[tuple[int, int], ...]
    links: npt.NDArray[np.int64]
    loads: FloatArray
    depth: int
    paths: dict[tuple[int, int], tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]] = field(repr=False, compare=False)

    @property
    def hops(self) -> tuple[tuple[int, int, tuple[NodeId, ...]], ...]:
        """``(parent, child, physical path)`` per edge, parents first."""
        return tuple((u, v, self.paths[(u, v)][1]) for u, v in self.edges)


@dataclass
class LpOutcome:
    """The master's final solution: columns, weights, ``U`` and the certified lower bound."""

    columns: list[Column]
    y: FloatArray
    u_lp: float
    u_lower: float
    iterations: int
    status: Status
    message: str
    stats: dict[str, float | int | str] = field(default_factory=dict)


def _column(root: int, edges: list[tuple[int, int]], paths: dict[tuple[int, int], tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]],
            depth: int) -> Column:
    links = np.concatenate([paths[e][0] for e in edges])
    keys, counts = np.unique(links, return_counts=True)
    return Column(root, tuple(edges), keys.astype(np.int64), counts.astype(np.float64), depth, paths)


def column_from_hops(graph: LinkGraph, root: int, hops: list[tuple[int, int, tuple[NodeId, ...]]]) -> Column | None:
    """A column from an existing tree (warm start); ``None`` when a hop crosses a link not live here."""
    paths: dict[tuple[int, int], tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]] = {}
    depth = {root: 0}
    for u, v, path in hops:
        idx = [graph.key_index.get((a, b)) for a, b in zip(path[:-1], path[1:])]
        if u not in depth or any(i is None for i in idx):
            return None
        paths[(u, v)] = (np.array(idx, dtype=np.int64), tuple(path))
        depth[v] = depth[u] + 1
    if len(depth) != graph.n:
        return None
    return _column(root, [(u, v) for u, v, _ in hops], paths, max(depth.values()))


class _Trees:
    """Builds priced trees for all roots under one weighting."""

    def __init__(self, graph: LinkGraph, weights: FloatArray) -> None:
        self.graph = graph
        self.pc = graph.costs(weights)
        self.paths: dict[tuple[int, int], tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]] = {}

    def trees(self, max_depth: int, mode: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_], FloatArray]:
        """Greedy trees for every root and their costs under the weighting."""
        n = self.graph.n
        roots = np.arange(n)
        parent, order, ok = greedy_trees(self.pc.cost, roots, max_depth, mode)
        parent, order = reparent_leaves(self.pc.cost, parent, order, ok, max_depth)
        par = np.where(parent < 0, 0, parent)
        edge_cost = np.where(parent < 0, 0.0, self.pc.cost[par, np.arange(n)[None, :]])
        return parent, order, ok, edge_cost.sum(axis=1)

    def column(self, root: int, parent: npt.NDArray[np.int64], order: npt.NDArray[np.int64]) -> Column:
        g = self.graph
        edges = [(int(parent[v]), v) for v in order[1:].tolist()]
        depth = {root: 0}
        for u, v in edges:
            depth[v] = depth[u] + 1
            if (u, v) not in self.paths:
                self.paths[(u, v)] = g.path_entry(self.pc, u, v)
        return _column(root, edges, self.paths, max(depth.values()))

    def build(self, max_depth: int, mode: str) -> list[Column | None]:
        parent, order, ok, _ = self.trees(max_depth, mode)
        return [self.column(r, parent[r], order[r]) if ok[r] else None for r in range(self.graph.n)]


def _col_key(c: Column) -> tuple[object, ...]:
    return (c.root, c.edges, c.links.tobytes(), c.loads.tobytes())


def solve_depth_lp(
    graph: LinkGraph,
    max_depth: int,
    *,
    u_inf: float,
    warm_columns: list[Column] | None = None,
    gap_tol: float = 1e-4,
    max_iterations: int = 200,
    time_limit_s: float | None = None,
    solver: str = "highs",
) -> LpOutcome:
    """Column generation for ``U*_D`` (module docstring); ``u_inf`` is the unbounded optimum's ``U``.

    >>> from synth.topologies import named_topology
    >>> g = LinkGraph(named_topology("nvswitch:4"))
    >>> out = solve_depth_lp(g, 1, u_inf=0.0)  # the star: 3 copies out of each 360 GB/s GPU link
    >>> round(4 / out.u_lp, 3), round(4 / out.u_lower, 3)
    (480.0, 480.0)
    """
    start = time.perf_counter()
    n, nl = graph.n, graph.nlinks
    cap = graph.cap_GBps
    master = _Master(graph, solver)
    master.add(_first_columns(graph, max_depth))
    if warm_columns:
        master.add([c for c in warm_columns if c.depth <= max_depth])
    u_lower = u_inf
    it = 0
    status, why = Status.OPTIMAL, ""
    u_lp = float("inf")
    added_total = 0
    purged = 0
    purge_at = max(_PURGE_ROWS, _KEEP_ROWS + 1) * (n + nl)
    next_report = start + _deadline.PROGRESS_EVERY_S
    while True:
        it += 1
        sol = master.lp.solve(method="primal")
        if not sol.has_solution:
            raise SolverError(f"depth-{max_depth} master LP: solver status {sol.native}")
        u_lp = float(sol.objective)
        pi = sol.row_duals[:n]
        w = np.clip(-sol.row_duals[n:], 0.0, None)
        norm = float(w @ cap)
        if norm <= 0:
            break
        wn = w / norm
        eps = 1e-9 * float(wn.max())
        trees = _Trees(graph, wn + eps)
        lbs = tree_lower_bounds(trees.pc.cost, np.arange(n), max_depth)
        slack = eps * (graph.nnodes + 1)
        lb = float(np.maximum(lbs - slack * (n - 1), 0.0).sum())
        u_lower = min(max(u_lower, lb), u_lp)
        now = time.perf_counter()
        if now >= next_report:
            next_report = now + _deadline.PROGRESS_EVERY_S
            log.info("depth-%d tree LP: iteration %d, %d trees, algbw %.6g GB/s, certified bound %.6g GB/s "
                     "(%.1f s)", max_depth, it, len(master.columns), n / u_lp if u_lp > 0 else float("inf"),
                     n / u_lower if u_lower > 0 else float("inf"), now - start)
        stop = _stop(u_lp, u_lower, gap_tol, max_depth, it, max_iterations, time_limit_s, start)
        if stop is not None:
            status, why = stop
            break
        new = _price(trees, max_depth, pi, norm, w)
        rebuilt = bool(new) and len(master.columns) > purge_at
        if rebuilt:
            purged += master.purge(np.asarray(sol.col_values[1:]), w, pi)
        got = master.add(new)
        added_total += got
        if got == 0 and not rebuilt:
            why = (f"pricing found no improving tree; certified gap {100 * (1 - u_lower / u_lp):.3g}% "
                   f"to the depth-{max_depth} optimum")
            break
    columns = master.columns
    y = np.asarray(sol.col_values[1:], dtype=np.float64)
    assert len(y) == len(columns), "the final solution belongs to the current master"
    stats: dict[str, float | int | str] = {"iterations": it, "columns": len(columns), "columns_dropped": purged,
                                           "lp_time_s": time.perf_counter() - start}
    return LpOutcome(columns, y, u_lp, u_lower, it, status, why, stats)


def _stop(u_lp: float, u_lower: float, gap_tol: float, max_depth: int, it: int, max_iterations: int,
          time_limit_s: float | None, start: float) -> tuple[Status, str] | None:
    """Why column generation stops after this iteration (certified gap, iteration or time limit), or None."""
    if u_lp - u_lower <= gap_tol * u_lp:
        return Status.OPTIMAL, f"certified within {100 * (1 - u_lower / u_lp):.3g}% of the depth-{max_depth} optimum"
    if it >= max_iterations:
        return Status.TIME_LIMIT, f"iteration limit {max_iterations}"
    if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
        return Status.TIME_LIMIT, f"time limit {time_limit_s:g} s"
    return None


class _Master:
    """The restricted master LP of :func:`solve_depth_lp` and its columns (each added once)."""

    def __init__(self, graph: LinkGraph, solver: str) -> None:
        self.graph, self.solver = graph, solver
        self.lp = self._fresh()
        self.columns: list[Column] = []
        self.seen: set[tuple[object, ...]] = set()

    def _fresh(self) -> LpBackend:
        n, nl, cap = self.graph.n, self.graph.nlinks, self.graph.cap_GBps
        m = lp_backend(self.solver)
        m.add_rows(np.ones(n), np.ones(n))
        m.add_rows(np.full(nl, -np.inf), np.zeros(nl))
        m.add_cols(np.array([1.0]), np.array([0.0]), np.array([np.inf]), np.array([0]), np.arange(n, n + nl), -cap)
        return m

    def add(self, cols: list[Column]) -> int:
        """Add the columns not in the master yet; returns how many."""
        n = self.graph.n
        fresh = [c for c in cols if _col_key(c) not in self.seen]
        if not fresh:
            return 0
        starts, index, value = [], [], []
        pos = 0
        for c in fresh:
            self.seen.add(_col_key(c))
            starts.append(pos)
            index.extend([c.root, *(n + c.links).tolist()])
            value.extend([1.0, *c.loads.tolist()])
            pos += 1 + len(c.links)
        k = len(fresh)
        self.lp.add_cols(np.zeros(k), np.zeros(k), np.full(k, np.inf), np.array(starts), np.array(index),
                         np.array(value))
        self.columns.extend(fresh)
        return k

    def purge(self, y: FloatArray, w: FloatArray, pi: FloatArray) -> int:
        """Rebuild the master from the columns in use and the cheapest others; returns how many were dropped.

        Keeps the master small: the columns in use and the cheapest others under these duals (a dropped
        column can be priced in again). The next solve starts from scratch; a rebuilt master is always
        re-solved, so the final solution matches ``columns``.
        """
        n, nl = self.graph.n, self.graph.nlinks
        columns = self.columns
        rc = load_matrix(columns, nl).T @ w - pi[np.array([c.root for c in columns])]
        keep = y > 0
        keep[np.argsort(rc, kind="stable")[: _KEEP_ROWS * (n + nl)]] = True
        kept = [c for c, k in zip(columns, keep.tolist()) if k]
        self.lp, self.columns = self._fresh(), []
        self.seen.clear()
        self.add(kept)
        return len(columns) - len(kept)


def _first_columns(graph: LinkGraph, max_depth: int) -> list[Column]:
    """One tree of depth at most ``max_depth`` per root (Prim-like, else shortest paths), or SolverError."""
    init = _Trees(graph, 1.0 / graph.cap_GBps)
    first = init.build(max_depth, "prim")
    missing = [r for r, c in enumerate(first) if c is None]
    if missing:
        spt = init.build(max_depth, "spt")
        first = [c if c is not None else s for c, s in zip(first, spt)]
        missing = [r for r, c in enumerate(first) if c is None]
    if missing:
        raise SolverError(f"no spanning tree of depth <= {max_depth} found from rank {missing[0]} "
                          f"({len(missing)} root(s) in all): the switch paths need more GPU hops")
    return [c for c in first if c is not None]


def _price(trees: _Trees, max_depth: int, pi: FloatArray, norm: float, w: FloatArray) -> list[Column]:
    """Per root, the cheapest of the greedy trees if its exact reduced cost is negative."""
    n = trees.graph.n
    new: list[Column] = []
    best_rc = np.zeros(n)
    best_from: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None] = [None] * n
    for mode in ("prim", "spt"):
        parent, order, ok, cost = trees.trees(max_depth, mode)
        rc = np.where(ok, cost - pi / norm, np.inf)
        for r in np.flatnonzero(rc < best_rc).tolist():
            best_rc[r] = rc[r]
            best_from[r] = (parent[r], order[r])
    for r in range(n):
        pick = best_from[r]
        if pick is None:
            continue
        c = trees.column(r, pick[0], pick[1])
        exact = float(w[c.links] @ c.loads) - float(pi[r])
        if exact < -_RC_TOL * max(1.0, abs(float(pi[r]))):
            new.append(c)
    return new


def load_matrix(columns: list[Column], nlinks: int) -> csc_matrix:
    """Links × columns matrix of chunk loads (one unit per column)."""
    indptr = np.cumsum([0] + [len(c.links) for c in columns])
    idx = np.concatenate([c.links for c in columns]) if columns else np.zeros(0, np.int64)
    val = np.concatenate([c.loads for c in columns]) if columns else np.zeros(0)
    return csc_matrix((val, idx, indptr), shape=(nlinks, len(columns)))
