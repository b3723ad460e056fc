"""The T-form restricted master LP over per-source tree columns.

Rows: one convexity row per source (``Σ_τ λ_{s,τ} = 1``, dual μ_s), one capacity row per link
(``Σ load_e(τ)·λ − c_e·T ≤ 0``, dual π_e ≤ 0). Column 0 is T (minimised; T = 1/z, the time to
move one unit between every ordered pair). Capacities enter scaled by ``1/scale`` so that T is
of order N and each μ_s of order 1, which keeps solver tolerances meaningful for pricing.

Examples
--------
>>> caps_GBps = np.full(6, 360.0)  # nvswitch:3: three GPUs, each cabled both ways to one switch
>>> m = TreeMaster("highs", 3, caps_GBps, scale=1.0)
>>> m.add_trees(np.arange(3), np.array([[2, 0, 0, 1, 0, 1], [0, 1, 2, 0, 0, 1], [0, 1, 0, 1, 2, 0]]))
>>> sol = m.solve()
>>> round(3 / sol.objective, 6)  # algbw = N / T, in GB/s
540.0
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from synth.solvers import LpBackend, LpMethod, LpSolution, lp_backend

__all__ = ["TreeMaster"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class TreeMaster:
    """The restricted master; column j ≥ 1 is tree j − 1 of the caller's pool."""

    def __init__(self, solver: str, n_gpus: int, caps_GBps: FloatArray, *, scale: float) -> None:  # noqa: N803
        self.n = n_gpus
        self.ne = len(caps_GBps)
        self.scale = scale
        self.lp: LpBackend = lp_backend(solver)
        self.lp.add_rows(np.r_[np.ones(n_gpus), np.full(self.ne, -np.inf)], np.r_[np.ones(n_gpus), np.zeros(self.ne)])
        self.caps = np.asarray(caps_GBps, dtype=np.float64).copy()
        rows, vals = self._t_column(self.caps)
        self.lp.add_cols(np.ones(1), np.zeros(1), np.full(1, np.inf), np.zeros(1, np.int64), rows, vals)

    def _t_column(self, caps: FloatArray) -> tuple[IntArray, FloatArray]:
        live = np.flatnonzero(caps > 0)
        return self.n + live, -caps[live] / self.scale

    @property
    def n_trees(self) -> int:
        return self.lp.num_cols - 1

    def add_trees(self, sources: IntArray, loads: IntArray, *, upper: FloatArray | None = None) -> None:
        """Append tree columns: ``loads[i, e]`` paths of tree i over link e."""
        k = len(sources)
        if k == 0:
            return
        tr, lk = np.nonzero(loads)
        starts, index, value = tree_columns(sources, np.bincount(tr, minlength=k), self.n + lk,
                                            loads[tr, lk].astype(np.float64))
        ub = np.full(k, np.inf) if upper is None else upper
        self.lp.add_cols(np.zeros(k), np.zeros(k), ub, starts, index, value)

    def set_caps(self, caps_GBps: FloatArray) -> None:  # noqa: N803
        """Change link capacities in place: one coefficient of column T per changed link."""
        caps = np.asarray(caps_GBps, dtype=np.float64)
        for e in np.flatnonzero(caps != self.caps):
            self.lp.set_coeff(self.n + int(e), 0, -float(caps[e]) / self.scale)
        self.caps = caps.copy()

    def fix_trees(self, trees: IntArray, upper: float) -> None:
        """Set the upper bound of tree columns (0 drops a tree through a dead link)."""
        cols = np.asarray(trees, dtype=np.int64) + 1
        self.lp.set_col_bounds(cols, np.zeros(len(cols)), np.full(len(cols), upper))

    def solve(self, *, method: LpMethod = "primal", time_limit_s: float | None = None) -> LpSolution:
        return self.lp.solve(method=method, time_limit_s=time_limit_s)

    def duals(self, sol: LpSolution) -> tuple[FloatArray, FloatArray]:
        """(μ per source, link weights w = −π ≥ 0), both in scaled units."""
        mu = sol.row_duals[: self.n]
        w = np.maximum(0.0, -sol.row_duals[self.n :])
        return mu, w


def tree_columns(sources: IntArray, link_counts: IntArray, link_rows: IntArray,
                 link_values: IntArray | FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """CSC ``(starts, index, value)`` of tree columns: 1 in the source's convexity row, then its link entries.

    ``link_rows`` / ``link_values`` hold the link entries of all columns in column order, ``link_counts[i]``
    of them for column i.

    >>> s, i, v = tree_columns(np.array([0, 1]), np.array([1, 2]), np.array([5, 5, 6]), np.array([1.0, 2.0, 3.0]))
    >>> s.tolist(), i.tolist(), v.tolist()
    ([0, 2], [0, 5, 1, 5, 6], [1.0, 1.0, 1.0, 2.0, 3.0])
    """
    k = len(sources)
    counts = np.asarray(link_counts) + 1
    starts = np.zeros(k, dtype=np.int64)
    starts[1:] = np.cumsum(counts)[:-1]
    index = np.empty(int(counts.sum()), dtype=np.int64)
    value = np.empty(len(index), dtype=np.float64)
    index[starts] = sources
    value[starts] = 1.0
    body = np.ones(len(index), dtype=bool)
    body[starts] = False
    index[body] = link_rows
    value[body] = link_values
    return starts, index, value
