"""Column generation for AllToAllv: the AllToAll tree master with a demand matrix on its columns.

The T-form master of :mod:`synth.kernels.tree_master` is reused unchanged; only a tree column's
load changes: ``load_e(τ) = Σ_d D[s, d] · [path_τ(d) uses e]`` (demand in normalised units). Pricing
is unchanged too: a source's cheapest tree is its shortest-path tree whatever the weights D ≥ 0,
and its cost is ``Σ_d D[s, d] · dist_w(s, d)``; the Farley bound keeps its form with those
weighted costs. Trees depend only on the link weights, so a warm start after the matrix changed
re-weights every pooled tree and re-solves from the previous basis.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.alltoall_cg._expanded import Network
>>> net = Network.from_topology(named_topology("nvswitch:3"))
>>> cg = WeightedCg(net, "highs", 1, np.array([[0, 2, 0], [1, 0, 1], [0, 0, 0.]]), scale=1.0)
>>> cg.seed()
>>> run = cg.run(deadline=None)
>>> round(run.t_lp, 9)  # rank 0 sends 2 units over its 360 GB/s link
0.005555556
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix

from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.kernels.tree_master import TreeMaster, tree_columns
from synth.alltoall_cg._pool import PathPool, TreePool
from synth.alltoall_cg._schedule import RouteCache
from synth.alltoall_cg._pricing import condensed_shortest, free_shortest, layered_shortest, price_trees
from synth.errors import SolverError
from synth.result import Status
from synth.solvers import LpMethod, LpSolution

__all__ = ["VRun", "WeightedCg", "pair_distances"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RC_TOL = 1e-9  # relative reduced cost below which a tree enters
GAP_TOL = 1e-9  # relative Farley gap at which the loop stops


def pair_distances(graph: ExpandedGraph, w: FloatArray) -> FloatArray:
    """``dist[d, s]``: cheapest path cost from rank s to rank d under link weights w ≥ 0."""
    net = graph.net
    n = net.n_gpus
    src_nodes = net.gpu_node
    if graph.steps is not None:
        dist, _ = layered_shortest(graph, w, src_nodes, with_pred=False)
        d = dist[1:, net.gpu_node, :].min(axis=0)
    else:
        full = condensed_shortest(net, w, src_nodes)
        if full is None:
            full = free_shortest(graph, w, src_nodes)
        d = full[net.gpu_node]
    d[np.arange(n), np.arange(n)] = 0.0
    if not np.isfinite(d).all():
        dd, ss = np.argwhere(~np.isfinite(d))[0]
        bound = "without a step bound" if graph.steps is None else f"within {graph.steps} steps"
        raise SolverError(f"topology {net.name!r}: rank {int(dd)} cannot be reached from rank {int(ss)} {bound}")
    return d


@dataclass
class VRun:
    """Outcome of :meth:`WeightedCg.run`; T values in normalised units (demand unit / GB/s)."""

    status: Status
    native: str
    t_lp: float
    lower_bound: float
    iterations: int
    converged: bool
    lp_pivots: int
    lp_time_s: float
    pricing_time_s: float


class WeightedCg:
    """Mutable CG state for one demand matrix ``demand`` (n×n, normalised, zero diagonal)."""

    def __init__(self, net: Network, solver: str, steps: int | None, demand: FloatArray, *, scale: float) -> None:
        self.net = net
        self.solver = solver
        self.steps = steps
        self.demand = np.asarray(demand, dtype=np.float64)
        self.scale = scale
        self.graph = ExpandedGraph.build(net, steps)
        self.paths = PathPool(net)
        self.trees = TreePool(net.n_gpus)
        self.master = TreeMaster(solver, net.n_gpus, net.caps_GBps, scale=scale)
        self.last: LpSolution | None = None
        self.lp_time_s = 0.0
        self.pricing_time_s = 0.0
        self.lp_pivots = 0
        self.route_cache: RouteCache | None = None
        self.links_cache: dict[int, list[int]] = {}  # path id -> its link ids (paths never change)

    # -- columns ------------------------------------------------------------------------------
    def _path_links(self) -> csr_matrix:
        """Path × link incidence of the whole path pool (rebuilt when the pool grew)."""
        pl = getattr(self, "_pl", None)
        if pl is None or pl.shape[0] != len(self.paths):
            ids = np.arange(len(self.paths), dtype=np.int64)
            starts, links = self.paths.link_csr(ids)
            pl = csr_matrix((np.ones(len(links)), links, starts), shape=(len(ids), self.net.n_links))
            self._pl = pl
        return pl

    def weighted_loads(self, sources: IntArray, path_ids: IntArray) -> csr_matrix:
        """Per tree, ``Σ_d D[s, d]`` over the links of its path to d: sparse (trees × links)."""
        k, n = len(sources), self.net.n_gpus
        flat = path_ids.reshape(-1)
        wgt = self.demand[sources].reshape(-1)
        keep = (flat >= 0) & (wgt > 0)
        rows = np.repeat(np.arange(k), n)[keep]
        tp = csr_matrix((wgt[keep], (rows, flat[keep])), shape=(k, len(self.paths)))
        out = (tp @ self._path_links()).tocsr()
        out.sort_indices()
        return out

    def _add_columns(self, sources: IntArray, loads: csr_matrix) -> None:
        """Tree columns into the master: 1 in the source's convexity row, loads in link rows."""
        k, n = len(sources), self.net.n_gpus
        starts, index, value = tree_columns(sources, np.diff(loads.indptr), n + loads.indices, loads.data)
        self.master.lp.add_cols(np.zeros(k), np.zeros(k), np.full(k, np.inf), starts, index, value)

    def add_trees(self, sources: IntArray, path_ids: IntArray) -> int:
        kept = self.trees.add(sources, path_ids)
        if len(kept):
            self._add_columns(sources[kept], self.weighted_loads(sources[kept], path_ids[kept]))
        return len(kept)

    def price_and_add(self, w: FloatArray, sources: IntArray, mu: FloatArray | None) -> int:
        t0 = time.perf_counter()
        top = float(w.max()) if len(w) else 0.0
        trees = price_trees(self.graph, w, sources=sources, tie_break=1e-11 * top if top > 0 else 1.0)
        self.pricing_time_s += time.perf_counter() - t0
        ids = self.paths.register(trees)
        if mu is not None:
            cost = (self.demand[trees.sources] * trees.pair_cost).sum(axis=1)
            good = np.flatnonzero(cost - mu[sources] < -RC_TOL * np.maximum(1.0, np.abs(mu[sources])))
            return self.add_trees(trees.sources[good], ids[good])
        return self.add_trees(trees.sources, ids)

    def seed(self) -> None:
        """Shortest-hop trees for every source: the master becomes feasible."""
        self.price_and_add(np.zeros(self.net.n_links), np.arange(self.net.n_gpus), None)

    def reweighted(self, demand: FloatArray, *, support_only: bool = False) -> WeightedCg:
        """A new CG for ``demand`` holding this one's trees (re-weighted) and, where the backend
        keeps one, its basis: the warm start after the matrix changed. ``support_only`` keeps only
        the trees with λ > 0 in the last solution (a smaller master, no basis)."""
        other = WeightedCg.__new__(WeightedCg)
        other.__dict__.update(self.__dict__)
        other.demand = np.asarray(demand, dtype=np.float64)
        other.paths = copy.copy(self.paths)
        trees = TreePool(self.net.n_gpus)
        if support_only and self.last is not None:
            keep = np.flatnonzero(self.lambdas() > 1e-12)
            trees.add(self.trees.source[keep], self.trees.paths[keep])
        else:
            trees.source, trees.paths, trees._seen = self.trees.source, self.trees.paths, set(self.trees._seen)
        other.trees = trees
        other.master = TreeMaster(self.solver, self.net.n_gpus, self.net.caps_GBps, scale=self.scale)
        if len(trees):
            other._add_columns(trees.source, other.weighted_loads(trees.source, trees.paths))
        basis = self.master.lp.basis() if not support_only else None
        if basis is not None:
            other.master.lp.set_basis(basis)
        other.last = None
        cache = getattr(self, "route_cache", None)
        other.route_cache = cache.copy() if cache is not None else None
        other.lp_time_s = other.pricing_time_s = 0.0
        other.lp_pivots = 0
        return other

    # -- the loop -----------------------------------------------------------------------------
    def costs(self, w: FloatArray, graph: ExpandedGraph | None = None) -> FloatArray:
        t0 = time.perf_counter()
        d = pair_distances(graph or self.graph, w)  # (dst, src)
        self.pricing_time_s += time.perf_counter() - t0
        return (self.demand * d.T).sum(axis=1)

    def farley(self, costs: FloatArray, w: FloatArray) -> float:
        """Lower bound on T (normalised units) from exact cheapest-tree costs under w ≥ 0."""
        denom = float(self.master.caps @ w) / self.scale
        return float(np.maximum(costs, 0.0).sum()) / denom / self.scale if denom > 0 else 0.0

    def _free(self) -> ExpandedGraph:
        if not hasattr(self, "_free_graph"):
            self._free_graph = ExpandedGraph.build(self.net, None)
        return self._free_graph

    def lambdas(self) -> FloatArray:
        if self.last is None:
            return np.zeros(len(self.trees))
        return np.maximum(self.last.col_values[1 : 1 + len(self.trees)], 0.0)

    def run(self, *, deadline: float | None, first_method: LpMethod = "primal", sweep: bool = True) -> VRun:
        """Column generation to LP optimality at ``self.steps`` (grown while ``sweep`` and the
        unbounded graph still improves)."""
        it, best_lb, method = 0, 0.0, first_method
        while True:
            t0 = time.perf_counter()
            remaining = None if deadline is None or self.last is None else max(0.0, deadline - time.perf_counter())
            sol = self.master.solve(method=method, time_limit_s=remaining)
            self.lp_time_s += time.perf_counter() - t0
            self.lp_pivots += sol.iterations
            method = "primal"
            it += 1
            if sol.status is not Status.OPTIMAL:
                return self._stop(sol.native, best_lb, it)
            self.last = sol
            t_now = sol.objective / self.scale
            mu, w = self.master.duals(sol)
            costs = self.costs(w)
            lb = self.farley(costs, w)
            if self.steps is None:
                best_lb = max(best_lb, lb)
            need = np.flatnonzero(costs - mu < -RC_TOL * np.maximum(1.0, np.abs(mu)))
            added = self.price_and_add(w, need, mu) if len(need) and lb < t_now * (1 - GAP_TOL) else 0
            if added:
                if deadline is not None and time.perf_counter() > deadline:
                    return self._stop("deadline", best_lb, it)
                continue
            if self.steps is None or not sweep:
                return self._done(sol, t_now, max(best_lb, lb) if self.steps is None else lb, it)
            free = self.costs(w, self._free())
            free_lb = self.farley(free, w)
            best_lb = max(best_lb, free_lb)
            improves = (free - mu < -RC_TOL * np.maximum(1.0, np.abs(mu))).any()
            if not improves or free_lb >= t_now * (1 - GAP_TOL) or self.steps >= self.net.n_gpus - 1:
                return self._done(sol, t_now, max(best_lb, t_now if not improves else free_lb), it)
            self.steps += 1
            self.graph = ExpandedGraph.build(self.net, self.steps)

    def _done(self, sol: LpSolution, t_now: float, lb: float, it: int) -> VRun:
        return VRun(Status.OPTIMAL, sol.native, t_now, lb, it, True, self.lp_pivots, self.lp_time_s,
                    self.pricing_time_s)

    def cut_bound(self) -> float:
        """Trivial lower bound on T: every rank sends its row (receives its column) over its own links."""
        net = self.net
        live = net.live
        out_cap = np.bincount(net.tail[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
        in_cap = np.bincount(net.head[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
        with np.errstate(divide="ignore", invalid="ignore"):
            send = np.where(out_cap > 0, self.demand.sum(axis=1) / out_cap, 0.0)
            recv = np.where(in_cap > 0, self.demand.sum(axis=0) / in_cap, 0.0)
        return float(max(send.max(), recv.max()))

    def _stop(self, native: str, best_lb: float, it: int) -> VRun:
        if self.last is None:
            raise SolverError(f"AllToAllv master LP on {self.net.name!r} ended with {native} before any solution")
        mu, w = self.master.duals(self.last)
        best_lb = max(best_lb, self.farley(self.costs(w, self._free()), w), self.cut_bound())
        return VRun(Status.TIME_LIMIT, native, self.last.objective / self.scale, best_lb, it, False,
                    self.lp_pivots, self.lp_time_s, self.pricing_time_s)
