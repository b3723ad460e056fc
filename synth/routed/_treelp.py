"""The routed tree-packing LP by column generation, and its rounding to a few chunks per root.

LP (T-form, as :class:`synth.kernels.tree_master.TreeMaster`): minimise T subject to, for every
root r, ``Σ_τ λ_τ = 1`` over spanning out-arborescences τ of the logical graph rooted at r, and for
every physical link a, ``Σ_τ load_a(τ) λ_τ ≤ c_a T`` where ``load_a(τ)`` counts the arcs of τ
whose route crosses a. Its optimum ``N / T*`` is the largest AllGather algbw of any schedule of
routed hops with fractional (pipelined) chunks: a schedule's chunks per root are a combination of
spanning out-trees (each chunk must reach every GPU along routed hops; the hops that first deliver
it to each GPU form an arborescence, and extra hops only add load), so the LP relaxes every
routed schedule, and its optimum is attained by the fractional packing it returns.

Optimality: pricing is exact. With duals μ_r (convexity) and w_a ≥ 0 (links), a column's reduced
cost is ``Σ_{e∈τ} cost_w(e) − μ_r`` with ``cost_w(e) = Σ_{a∈route(e)} w_a``; Edmonds' algorithm
(:func:`synth.routed._arborescence.all_root_arborescences`, every root from one contraction)
finds the cheapest τ per root, so no
improving column is missed. Every round also yields the Lagrangian bound
``T* ≥ Σ_r min_τ cost_w(τ) / Σ_a c_a w_a``; the loop stops when it meets the master's T.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.routed._logical import Logical
>>> lp = solve_tree_lp(Logical.build(named_topology("nvswitch:4")))
>>> round(lp.algbw_GBps, 6), lp.proven
(480.0, True)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from synth.kernels.tree_master import TreeMaster
from synth.errors import SolverError
from synth.result import Status
from synth.routed._arborescence import all_root_arborescences, min_arborescence
from synth.routed._logical import Logical

__all__ = ["TreeCG", "TreeLp", "largest_remainder", "solve_tree_lp", "tree_arcs"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_ROUNDS = 2000

log = logging.getLogger(__name__)
_REL_TOL = 1e-9


@dataclass(frozen=True, eq=False)
class TreeLp:
    """The LP's outcome: trees ``(root, parents)`` with weights ``lam`` (each root's sum 1).

    ``T`` is the optimum time per unit in GB⁻¹·s (``algbw_GBps = N / T``); ``T_lower`` the best
    proven lower bound (``== T`` up to tolerance when ``proven``).
    """

    n: int
    roots: IntArray
    parents: tuple[tuple[int, ...], ...]
    lam: FloatArray
    loads: FloatArray  # per tree, per physical link
    T: float  # noqa: N815
    T_lower: float  # noqa: N815
    proven: bool
    rounds: int
    columns: int
    seeded: int
    solve_time_s: float

    @property
    def algbw_GBps(self) -> float:  # noqa: N802
        return self.n / self.T

    @property
    def bound_GBps(self) -> float:  # noqa: N802
        """Proven upper bound on the routed algbw (``inf`` if nothing was proven)."""
        return self.n / self.T_lower if self.T_lower > 0 else float("inf")


def tree_arcs(lg: Logical, root: int, parents: Sequence[int]) -> IntArray:
    """Arc ids of the tree (one per non-root node)."""
    return np.array([lg.index[parents[v], v] for v in range(lg.n) if v != root], dtype=np.int64)


def _scale(lg: Logical) -> float:
    live = lg.caps_GBps[lg.caps_GBps > 0]
    return float(live.sum()) / (3.0 * lg.n) if len(live) else 1.0


class TreeCG:
    """The restricted master with its tree pool; :meth:`run` prices to optimality."""

    def __init__(self, lg: Logical, *, solver: str = "highs", seeds: Iterable[tuple[int, tuple[int, ...]]] = ()) -> None:
        self.lg = lg
        self.n = lg.n
        self.scale = _scale(lg)
        self.master = TreeMaster(solver, lg.n, lg.caps_GBps, scale=self.scale)
        self.pool: list[tuple[int, tuple[int, ...]]] = []
        self.seen: set[tuple[int, tuple[int, ...]]] = set()
        self.pool_loads: list[FloatArray] = []
        self.rounds = 0
        self.best_lower = 0.0
        self.seeded = self.add([t for t in seeds if len(t[1]) == lg.n])
        live = lg.caps_GBps > 0
        w0 = np.where(live, 1.0 / np.where(live, lg.caps_GBps, 1.0), 0.0)
        c0 = lg.cost_matrix(w0)
        try:
            self.add([(r, tuple(int(x) for x in min_arborescence(c0, r))) for r in range(lg.n)])
        except ValueError as exc:
            raise SolverError(f"no spanning tree of routed hops: {exc}") from exc

    def add(self, trees: list[tuple[int, tuple[int, ...]]]) -> int:
        fresh = [t for t in trees if t not in self.seen]
        if not fresh:
            return 0
        m = len(self.lg.pairs)
        loads = np.array([self.lg.loads(np.bincount(tree_arcs(self.lg, r, p), minlength=m).astype(np.float64))
                          for r, p in fresh])
        for t in fresh:
            self.seen.add(t)
            self.pool.append(t)
        self.pool_loads.extend(loads)
        self.master.add_trees(np.array([r for r, _ in fresh], dtype=np.int64), np.rint(loads).astype(np.int64))
        return len(fresh)

    def run(self, deadline: float | None = None) -> tuple[Any, bool]:
        """Price until no column improves (or the deadline); returns (last solution, proven)."""
        lg, n = self.lg, self.n
        last = None
        while True:
            self.rounds += 1
            # The first master (one tree per root) is solved whatever the time; later ones within it.
            left = None if deadline is None or last is None else max(0.0, deadline - time.perf_counter())
            sol = self.master.solve(time_limit_s=left)
            if not sol.has_solution:
                if last is not None and sol.status is Status.TIME_LIMIT:
                    self.rounds -= 1
                    return last, False
                raise SolverError(f"routed tree LP: master {sol.native}")
            last = sol
            mu, w = self.master.duals(sol)
            c = lg.cost_matrix(w)
            parents = all_root_arborescences(c)
            arc_cost = c[parents, np.arange(n)[None, :]]
            arc_cost[np.arange(n), np.arange(n)] = 0.0
            costs = arc_cost.sum(axis=1)
            total = float(costs.sum())
            fresh = [(r, tuple(int(x) for x in parents[r])) for r in range(n)
                     if costs[r] < mu[r] - _REL_TOL * max(1.0, abs(mu[r]))]
            denom = float((lg.caps_GBps / self.scale) @ w)
            if denom > 0:
                self.best_lower = max(self.best_lower, total / denom)
            if self.best_lower >= sol.objective * (1 - 1e-9):
                return sol, True
            if self.add(fresh) == 0:
                return sol, True
            if self.rounds % 10 == 0:
                log.info("routed tree LP: round %d, %d trees, algbw %.6g GB/s, proven bound %.6g GB/s", self.rounds,
                         len(self.pool), n * self.scale / sol.objective,
                         n * self.scale / self.best_lower if self.best_lower > 0 else float("inf"))
            if self.rounds >= MAX_ROUNDS or (deadline is not None and time.perf_counter() > deadline):
                return sol, False

    def lp(self, sol: Any, proven: bool, start: float, *, support_only: bool = False) -> TreeLp:
        lam = np.asarray(sol.col_values[1:], dtype=np.float64)
        keep = np.flatnonzero(lam > 1e-12) if support_only else np.arange(len(self.pool))
        lower = max(self.best_lower, sol.objective * (1 - 1e-9)) if proven else self.best_lower
        return TreeLp(
            self.n, np.array([self.pool[i][0] for i in keep], dtype=np.int64), tuple(self.pool[i][1] for i in keep),
            lam[keep], np.array([self.pool_loads[i] for i in keep]).reshape(len(keep), len(self.lg.caps_GBps)),
            float(sol.objective) / self.scale, lower / self.scale, proven, self.rounds, len(self.pool), self.seeded,
            time.perf_counter() - start,
        )


def solve_tree_lp(
    lg: Logical,
    *,
    solver: str = "highs",
    seeds: Iterable[tuple[int, tuple[int, ...]]] = (),
    time_limit_s: float | None = None,
) -> TreeLp:
    """Column generation to the routed tree-packing optimum (module docstring); trees of positive weight."""
    start = time.perf_counter()
    cg = TreeCG(lg, solver=solver, seeds=seeds)
    deadline = None if time_limit_s is None else start + time_limit_s
    sol, proven = cg.run(deadline)
    return cg.lp(sol, proven, start, support_only=True)


def largest_remainder(weights: FloatArray, total: int) -> IntArray:
    """Integers summing to ``total`` in proportion to ``weights`` (ties to the lower index).

    >>> largest_remainder(np.array([0.5, 0.3, 0.2]), 4).tolist()
    [2, 1, 1]
    """
    share = weights / weights.sum() * total
    out = np.floor(share + 1e-12).astype(np.int64)
    rest = total - int(out.sum())
    if rest > 0:
        order = np.lexsort((np.arange(len(share)), -(share - out)))
        out[order[:rest]] += 1
    return out
