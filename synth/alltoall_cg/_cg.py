"""Column generation on the tree master: the pricing loop and the sweep over the step bound.

The loop: solve the master (primal simplex from the previous basis), compute each source's
cheapest tree cost under the link duals (distances only, exact), build and add shortest-path
trees for the sources whose reduced cost is negative, and stop when none is left or the Farley
bound meets the master's value. Every iteration also yields a lower
bound on T (Farley, §2.2): ``T* ≥ Σ_s cost_s(w) / Σ_e c_e w_e`` for the link weights w ≥ 0; the
cut bounds of :mod:`synth.alltoall_cg._cuts` (a host's NICs on rail fabrics) also count.

The step sweep (§2.6 a): start at the hop diameter; after convergence at m steps, price once more
without a step bound. If no tree improves, the m-step optimum is the unbounded optimum and m is
kept; otherwise m grows by one and the loop continues with the pool it has.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._cuts import cut_lower_bound
from synth.alltoall_cg.chunks import binding_note
from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.kernels.tree_master import TreeMaster
from synth.alltoall_cg._pool import PathPool, TreePool
from synth.alltoall_cg._pricing import TreeSet, price_trees, tree_costs
from synth.errors import SolverError
from synth.figures import AllToAllFigures
from synth.result import Status
from synth.solvers import LpMethod, LpSolution

__all__ = ["CgRun", "ColumnGeneration", "cg_message"]

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RC_TOL = 1e-8  # reduced cost (scaled units, μ_s ~ 1) below which a tree enters
GAP_TOL = 1e-10  # relative Farley gap at which the loop stops


@dataclass
class CgRun:
    """Outcome of :meth:`ColumnGeneration.run` (T values in real units: seconds per GB per pair)."""

    status: Status
    native: str
    t_lp: float
    lam: FloatArray
    lower_bound: float
    iterations: int
    converged: bool
    lp_time_s: float = 0.0
    pricing_time_s: float = 0.0
    lp_pivots: int = 0  # simplex iterations over all master solves of the loop
    history: list[tuple[int, float]] = field(default_factory=list)  # (steps, T) at each convergence


def tie_break(w: FloatArray) -> float:
    top = float(w.max()) if len(w) else 0.0
    return 1e-11 * top if top > 0 else 1.0


class ColumnGeneration:
    """Mutable CG state: network, step bound, pools and master (owned by one synthesis)."""

    def __init__(self, net: Network, solver: str, steps: int | None, *, scale: float) -> None:
        self.net = net
        self.solver = solver
        self.steps = steps
        self.graph = ExpandedGraph.build(net, steps)
        self.scale = scale
        self.paths = PathPool(net)
        self.trees = TreePool(net.n_gpus)
        self.tree_loads: list[IntArray] = []
        self.master = TreeMaster(solver, net.n_gpus, net.caps_GBps, scale=scale)
        self.lp_time_s = 0.0
        self.pricing_time_s = 0.0
        self.lp_pivots = 0
        self.last_solution: LpSolution | None = None
        self._cut_bound: float | None = None
        self.trees_feasible = False  # set by a warm restore whose pool covers every source

    # -- columns --------------------------------------------------------------------------------
    def add_from(self, trees: TreeSet, rows: IntArray) -> int:
        """Register the trees in ``rows`` and add the new ones to the master; returns how many."""
        if len(rows) == 0:
            return 0
        ids = self.paths.register(trees, rows)
        kept = self.trees.add(trees.sources[rows], ids)
        if len(kept):
            loads = trees.loads[rows[kept]]
            self.tree_loads.append(loads)
            self.master.add_trees(trees.sources[rows[kept]], loads)
        return len(kept)

    def add_path_trees(self, sources: IntArray, path_ids: IntArray) -> int:
        """Add trees given as path ids (warm seeds); loads are recomputed from the paths."""
        kept = self.trees.add(sources, path_ids)
        if len(kept) == 0:
            return 0
        loads = np.zeros((len(kept), self.net.n_links), dtype=np.int64)
        for row, i in enumerate(kept.tolist()):
            pids = path_ids[i][path_ids[i] >= 0]
            _, links = self.paths.link_csr(pids)
            loads[row] = np.bincount(links, minlength=self.net.n_links)
        self.tree_loads.append(loads)
        self.master.add_trees(sources[kept], loads)
        return len(kept)

    def all_loads(self) -> IntArray:
        if not self.tree_loads:
            return np.zeros((0, self.net.n_links), dtype=np.int64)
        if len(self.tree_loads) > 1:
            self.tree_loads = [np.concatenate(self.tree_loads)]
        return self.tree_loads[0]

    def price(self, w: FloatArray, graph: ExpandedGraph | None = None, sources: IntArray | None = None) -> TreeSet:
        t0 = time.perf_counter()
        out = price_trees(graph or self.graph, w, sources=sources, tie_break=tie_break(w))
        self.pricing_time_s += time.perf_counter() - t0
        return out

    def costs(self, w: FloatArray, graph: ExpandedGraph | None = None) -> FloatArray:
        """Exact cheapest-tree cost per source under w (distances only; see :func:`tree_costs`)."""
        t0 = time.perf_counter()
        out = tree_costs(graph or self.graph, w)
        self.pricing_time_s += time.perf_counter() - t0
        return out

    def farley_costs(self, costs: FloatArray, w: FloatArray) -> float:
        """Farley lower bound on T (real units) from exact cheapest-tree costs under ``w``."""
        denom = float(self.master.caps @ w) / self.scale
        if denom <= 0:
            return 0.0
        return float(np.maximum(costs, 0.0).sum()) / denom / self.scale

    def cut_bound(self) -> float:
        """Lower bound on T from cuts: single GPUs and each switch with its GPUs (:mod:`._cuts`)."""
        if self._cut_bound is None:
            self._cut_bound = cut_lower_bound(self.net)
        return self._cut_bound

    # -- the loop ---------------------------------------------------------------------------------
    def solve_master(self, method: LpMethod, deadline: float | None) -> LpSolution:
        t0 = time.perf_counter()
        remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
        if self.last_solution is None:
            remaining = None  # the first master (seed trees only) is small; it gives the incumbent
        sol = self.master.solve(method=method, time_limit_s=remaining)
        self.lp_time_s += time.perf_counter() - t0
        self.lp_pivots += sol.iterations
        if sol.status is Status.OPTIMAL:
            self.last_solution = sol
        return sol

    def run(self, *, deadline: float | None, first_method: LpMethod = "primal", sweep: bool = True) -> CgRun:
        """Column generation to LP optimality at ``self.steps`` (growing it when ``sweep``)."""
        iterations = 0
        best_lb = 0.0
        method = first_method
        history: list[tuple[int, float]] = []
        while True:
            sol = self.solve_master(method, deadline)
            method = "primal"
            iterations += 1
            if sol.status is not Status.OPTIMAL:
                return self._stop(sol.status, sol.native, best_lb, iterations, history)
            t_now = sol.objective / self.scale
            mu, w = self.master.duals(sol)
            # Distances first (cheap, exact): they prove optimality and give the Farley bound;
            # trees are built only for the sources whose cheapest tree has negative reduced cost.
            costs = self.costs(w)
            # The cut bound holds for every step bound: where it meets T (rail fabrics) it proves
            # the master optimal without the last pricing rounds.
            lb = max(self.farley_costs(costs, w), self.cut_bound())
            if self.steps is None:
                best_lb = max(best_lb, lb)
            need = np.flatnonzero(costs - mu < -RC_TOL)
            added = 0
            if len(need) and lb < t_now * (1 - GAP_TOL):
                trees = self.price(w, sources=need)
                added = self.add_from(trees, np.flatnonzero(trees.cost - mu[need] < -RC_TOL))
            log.info("alltoall_cg: iteration %d, steps %s, T=%.9g, Farley bound %.9g, %d trees added (%d in pool)",
                     iterations, self.steps, t_now, lb, added, len(self.trees))
            if added:
                if deadline is not None and time.perf_counter() > deadline:
                    return self._stop(Status.TIME_LIMIT, "deadline", best_lb, iterations, history)
                continue
            history.append((self.steps if self.steps is not None else -1, t_now))
            if self.steps is None or not sweep:
                return self._finish(sol, t_now, max(best_lb, lb) if self.steps is None else lb, iterations, history)
            # Converged at m steps: does any tree without a step bound improve?
            free = self.costs(w, self._free_graph())
            free_lb = max(self.farley_costs(free, w), self.cut_bound())
            best_lb = max(best_lb, free_lb)
            if not (free - mu < -RC_TOL).any() or free_lb >= t_now * (1 - GAP_TOL):
                return self._finish(sol, t_now, best_lb, iterations, history)
            if self.steps >= self.net.n_gpus - 1:  # simple paths never need more hops
                return self._finish(sol, t_now, best_lb, iterations, history)
            self.steps += 1
            self.graph = ExpandedGraph.build(self.net, self.steps)
            log.info("alltoall_cg: %d steps leave T=%.9g above the unbounded bound; trying %d", self.steps - 1,
                     t_now, self.steps)

    def _free_graph(self) -> ExpandedGraph:
        if not hasattr(self, "_free"):
            self._free = ExpandedGraph.build(self.net, None)
        return self._free

    def lambdas(self) -> FloatArray:
        sol = self.last_solution
        if sol is None:
            return np.zeros(len(self.trees))
        return np.maximum(sol.col_values[1 : 1 + len(self.trees)], 0.0)

    def _finish(self, sol: LpSolution, t_now: float, lb: float, iterations: int,
                history: list[tuple[int, float]]) -> CgRun:
        return CgRun(Status.OPTIMAL, sol.native, t_now, self.lambdas(), lb, iterations, True, self.lp_time_s,
                     self.pricing_time_s, self.lp_pivots, history)

    def _stop(self, status: Status, native: str, best_lb: float, iterations: int,
              history: list[tuple[int, float]]) -> CgRun:
        if self.last_solution is None:
            raise SolverError(f"AllToAll master LP on {self.net.name!r} ended with {native} before any solution")
        sol = self.last_solution
        mu, w = self.master.duals(sol)
        best_lb = max(best_lb, self.farley_costs(self.costs(w, self._free_graph()), w), self.cut_bound())
        return CgRun(status if status is not Status.OPTIMAL else Status.TIME_LIMIT, native, sol.objective / self.scale,
                     self.lambdas(), best_lb, iterations, False, self.lp_time_s, self.pricing_time_s,
                     self.lp_pivots, history)


def cg_message(run: CgRun, figures: AllToAllFigures, solver: str, bound_algbw: float, elapsed_s: float) -> str:
    """The result's message: the LP, the rounding and its gap (or the time limit and the proven bound)."""
    if run.converged:
        return (f"LP optimal after {run.iterations} CG iterations ({figures.columns} trees, {figures.max_steps} "
                f"steps); rounded to {figures.nchunks} chunks, gap {100 * figures.gap:.3f}% ({solver} {run.native})"
                + binding_note(figures.binding_limit))
    return (f"time limit after {elapsed_s:.1f} s, gap {100 * figures.gap:.2f}% vs proven bound "
            f"{bound_algbw:.6g} GB/s ({solver} {run.native})")
