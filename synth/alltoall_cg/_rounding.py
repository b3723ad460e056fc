"""Deep-dive rounding of the LP optimum to whole chunks per (source, destination) block.

The tree solution is first disaggregated into path flows in chunk units, ``y_p = K·Σ_{τ∋p} λ_τ``.
Every path keeps ``floor(y_p)`` chunks for good; the commodities left with a
remainder ``r_k = K − Σ floor`` form a *residual* T-form path LP whose capacity rows carry the
fixed loads on their right-hand side. That LP is then dived (after Sadykov et al.
2019, "Primal heuristics for branch-and-price: the assets of diving methods", INFORMS JoC 31(2)):

1. solve, then price paths for the unfinished commodities until none has negative reduced cost;
2. fix every column at ``floor(u_p)`` where that raises its lower bound (free fixes);
3. if nothing was fixed, round up a batch (fraction β of the fractional, non-tabu columns, at
   most one per commodity, largest fractions first) to ``ceil(u_p)``;
4. if a round-up raised T by more than δ, undo it, make half the batch tabu and retry (at most
   ``backtracks`` times).

Lower bounds only ever rise, so the master never becomes infeasible and the dive ends with every
commodity on at most K paths. :func:`largest_remainder` is the no-LP fallback used when the time
limit leaves no room for diving.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._cg import ColumnGeneration, tie_break
from synth.alltoall_cg.chunks import remainder_round
from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.alltoall_cg._pool import PathPool
from synth.alltoall_cg._pricing import price_trees
from synth.result import Status
from synth.solvers import LpMethod, LpSolution, lp_backend

__all__ = ["DIVES", "ROUNDING_RETRY_GAP", "DiveResult", "PathLp", "Pricer", "balanced_remainder", "deep_dive",
           "disaggregate", "largest_remainder", "tree_pricer"]

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

INT_TOL = 1e-6

# Dive settings tried in order (batch fraction, backtracks, slack) while the gap stays above
# ROUNDING_RETRY_GAP: small instances are where K-chunk granularity bites and retries are cheap.
DIVES: tuple[tuple[float, int, float], ...] = ((0.05, 2, 0.002), (0.3, 8, 0.0), (1.0, 8, 0.0), (0.0, 8, 0.0))
ROUNDING_RETRY_GAP = 0.005

# (link weights, open commodities) -> (cheapest path cost per commodity, register(positions) -> path ids)
Pricer = Callable[[FloatArray, IntArray], tuple[FloatArray, Callable[[IntArray], IntArray]]]


class PathLp(Protocol):
    """What the path LPs of rounding and repair need: :class:`ColumnGeneration` is one."""

    net: Network
    paths: PathPool
    graph: ExpandedGraph
    solver: str
    scale: float


def tree_pricer(cg: PathLp) -> Pricer:
    """Price open commodities by one shortest-path tree per source that has one."""
    n = cg.net.n_gpus

    def price(w: FloatArray, open_k: IntArray) -> tuple[FloatArray, Callable[[IntArray], IntArray]]:
        srcs = np.unique(open_k // n)
        trees = price_trees(cg.graph, w, sources=srcs, tie_break=tie_break(w))
        row_of_src = np.full(n, -1, dtype=np.int64)
        row_of_src[srcs] = np.arange(len(srcs))
        pc = trees.pair_cost[row_of_src[open_k // n], open_k % n]

        def register(sel: IntArray) -> IntArray:
            better = open_k[sel]
            rows_needed = np.unique(row_of_src[better // n])
            ids = cg.paths.register(trees, rows_needed)
            lookup = np.full(n, -1, dtype=np.int64)
            lookup[rows_needed] = np.arange(len(rows_needed))
            return ids[lookup[row_of_src[better // n]], better % n]

        return pc, register

    return price


@dataclass(frozen=True)
class DiveResult:
    """Integral chunks per path (``pids[i]`` carries ``chunks[i]``) and how the dive went."""

    pids: IntArray
    chunks: IntArray
    steps: int
    backtracks: int
    columns_added: int
    lp_solves: int
    dived: bool


def disaggregate(cg: ColumnGeneration, lam: FloatArray, nchunks: int) -> tuple[IntArray, FloatArray]:
    """Path ids and their flows ``y_p`` in chunk units from tree weights ``lam``."""
    use = np.flatnonzero(lam > 1e-12)
    paths = cg.trees.paths[use]
    weights = np.repeat(lam[use], paths.shape[1]) * nchunks
    flat = paths.ravel()
    keep = flat >= 0
    y = np.bincount(flat[keep], weights=weights[keep], minlength=len(cg.paths))
    pids = np.flatnonzero(y > 1e-12).astype(np.int64)
    return pids, y[pids].astype(np.float64)


def _commodity(cg: PathLp, pids: IntArray) -> IntArray:
    return cg.paths.src[pids] * cg.net.n_gpus + cg.paths.dst[pids]


def largest_remainder(cg: PathLp, pids: IntArray, y: FloatArray, nchunks: int) -> DiveResult:
    """Per commodity, floors plus one more chunk on the paths with the largest remainders."""
    chunks = remainder_round(_commodity(cg, pids), y, nchunks, INT_TOL)
    keep = chunks > 0
    return DiveResult(pids[keep], chunks[keep], 0, 0, 0, 0, False)


def balanced_remainder(cg: PathLp, pids: IntArray, y: FloatArray, nchunks: int, base_load: FloatArray) -> DiveResult:
    """Floors, then each block's missing chunks on the paths that keep the busiest link lowest.

    Blocks are taken in order; link loads start at the LP's (``base_load`` plus ``y``) and follow
    every decision, so blocks with the same split round different paths up instead of all the same
    ones (what :func:`largest_remainder` does to symmetric blocks). A greedy: no optimality claim."""
    caps = cg.net.caps_GBps
    k = _commodity(cg, pids)
    base = np.floor(y + INT_TOL).astype(np.int64)
    frac = np.where(y - base > INT_TOL, y - base, 0.0)
    short = nchunks - np.bincount(k, weights=base, minlength=cg.net.n_gpus**2).round().astype(np.int64)
    cand = np.flatnonzero(frac > 0)
    chunks = base.copy()
    if len(cand):
        a_starts, a_links = cg.paths.link_csr(pids)
        load = (base_load + np.bincount(a_links, weights=np.repeat(y, np.diff(a_starts)),
                                        minlength=len(caps))).tolist()
        starts, links = cg.paths.link_csr(pids[cand])
        inv_cap = np.where(caps > 0, 1.0 / np.where(caps > 0, caps, 1.0), np.inf).tolist()
        # Least flexible blocks first (fewest fractional paths), so the flexible ones absorb the rest.
        kk = k[cand]
        _, block_of, count = np.unique(kk, return_inverse=True, return_counts=True)
        order = np.lexsort((pids[cand], kk, count[block_of]))
        st, lk = starts.tolist(), links.tolist()
        groups: dict[int, list[tuple[int, float]]] = {}  # block -> (candidate, fraction), insertion-ordered
        for c, b, f in zip(order.tolist(), kk[order].tolist(), frac[cand][order].tolist()):
            groups.setdefault(b, []).append((c, f))
        for b, group in groups.items():
            scored = sorted((max((load[e] + 1.0 - f) * inv_cap[e] for e in lk[st[c] : st[c + 1]]), -f, c, f)
                            for c, f in group)
            for rank, (_, _, c, f) in enumerate(scored):
                up = rank < short[b]
                delta = 1.0 - f if up else -f
                for e in lk[st[c] : st[c + 1]]:
                    load[e] += delta
                if up:
                    chunks[cand[c]] += 1
    keep = chunks > 0
    return DiveResult(pids[keep], chunks[keep], 0, 0, 0, 0, False)


class DiveLp:
    """The residual path LP of the dive (rows: active commodities, then links)."""

    def __init__(self, cg: PathLp, active_k: IntArray, residual: IntArray, fixed_load: FloatArray,
                 nchunks: int) -> None:
        self.cg = cg
        self.k_of_row = active_k
        self.row_of_k = np.full(cg.net.n_gpus**2, -1, dtype=np.int64)
        self.row_of_k[active_k] = np.arange(len(active_k))
        self.residual = residual
        self.nk = len(active_k)
        self.K = nchunks
        caps = cg.net.caps_GBps
        self.lp = lp_backend(cg.solver)
        self.lp.add_rows(np.r_[residual.astype(float), np.full(len(caps), -np.inf)],
                         np.r_[residual.astype(float), -fixed_load])
        live = np.flatnonzero(caps > 0)
        self.lp.add_cols(np.ones(1), np.zeros(1), np.full(1, np.inf), np.zeros(1, np.int64), self.nk + live,
                         -caps[live] / cg.scale)
        self.col_pid: list[int] = []
        self.col_of_pid: dict[int, int] = {}
        self.lb = np.zeros(0)
        self.col_row = np.zeros(0, dtype=np.int64)

    def add(self, pids: IntArray) -> int:
        pids = np.array([p for p in pids.tolist() if p not in self.col_of_pid], dtype=np.int64)
        if len(pids) == 0:
            return 0
        starts, links = self.cg.paths.link_csr(pids)
        ncol = len(pids)
        # Column j: its commodity row, then its links' rows (a simple path crosses each link once).
        lengths = np.diff(starts) + 1
        col_starts = np.zeros(ncol, dtype=np.int64)
        np.cumsum(lengths[:-1], out=col_starts[1:])
        index = np.empty(int(lengths.sum()), dtype=np.int64)
        value = np.full(len(index), 1.0 / self.K)
        index[col_starts] = self.row_of_k[_commodity(self.cg, pids)]
        value[col_starts] = 1.0
        body = np.ones(len(index), dtype=bool)
        body[col_starts] = False
        index[body] = self.nk + links
        self.lp.add_cols(np.zeros(ncol), np.zeros(ncol), np.full(ncol, np.inf), col_starts, index, value)
        base = len(self.col_pid)
        for i, p in enumerate(pids.tolist()):
            self.col_of_pid[p] = base + i + 1
            self.col_pid.append(p)
        self.lb = np.r_[self.lb, np.zeros(ncol)]
        self.col_row = np.r_[self.col_row, self.row_of_k[_commodity(self.cg, pids)]]
        return ncol

    def set_lb(self, cols: IntArray, lb: FloatArray) -> None:
        self.lb[cols - 1] = lb
        self.lp.set_col_bounds(cols, lb, np.full(len(cols), np.inf))


def deep_dive(
    cg: PathLp,
    pids: IntArray,
    y: FloatArray,
    nchunks: int,
    *,
    deadline: float | None,
    batch: float = 0.05,
    slack: float = 0.002,
    backtracks: int = 2,
    max_pricing_rounds: int = 50,
    pricer: Pricer | None = None,
) -> DiveResult:
    """Round path flows ``y`` (chunk units) to integers by diving (see the module docstring).

    ``pricer`` prices paths for the unfinished commodities (default :func:`tree_pricer`: one
    shortest-path tree per source that has one)."""
    fixed_pids, fixed_chunks, dive = _start_dive(cg, pids, y, nchunks)
    if dive is None:
        return DiveResult(fixed_pids, fixed_chunks, 0, 0, 0, 0, True)
    pricer = tree_pricer(cg) if pricer is None else pricer
    added_total = 0
    solves = 0
    tabu: set[int] = set()
    used_backtracks = 0
    steps = 0
    method: LpMethod = "primal"
    while True:
        # Re-solve, pricing paths for commodities that still have room.
        sol, n_solves, n_added = _solve_and_price(dive, pricer, nchunks, deadline, method, max_pricing_rounds)
        solves += n_solves
        added_total += n_added
        if sol is None or sol.status is not Status.OPTIMAL:
            log.info("alltoall_cg: dive LP stopped (%s); finishing by largest remainder",
                     "no solve" if sol is None else sol.native)
            cur = np.maximum(dive.lb, 0.0)
            return _finish(cg, fixed_pids, fixed_chunks, dive, cur, nchunks, steps, used_backtracks, added_total,
                           solves, fallback=True)
        t_now = sol.objective
        u = sol.col_values[1:]
        frac = u - np.floor(u + INT_TOL)
        fractional = frac > INT_TOL
        if not fractional.any():
            return _finish(cg, fixed_pids, fixed_chunks, dive, np.round(u), nchunks, steps, used_backtracks,
                           added_total, solves, fallback=False)
        if deadline is not None and time.perf_counter() > deadline:
            return _finish(cg, fixed_pids, fixed_chunks, dive, u, nchunks, steps, used_backtracks, added_total,
                           solves, fallback=True)
        steps += 1
        floors = np.floor(u + INT_TOL)
        raise_cols = np.flatnonzero(floors > dive.lb + INT_TOL)
        if len(raise_cols):
            dive.set_lb(raise_cols + 1, floors[raise_cols])
            method = "dual"
            continue
        chosen = _pick(dive, frac, fractional, tabu, batch)
        cols = np.array(chosen, dtype=np.int64)
        old_lb = dive.lb[cols].copy()
        dive.set_lb(cols + 1, np.ceil(u[cols] - INT_TOL))
        sol2 = dive.lp.solve(method="dual", time_limit_s=None if deadline is None else
                             max(0.0, deadline - time.perf_counter()))
        solves += 1
        if sol2.status is Status.OPTIMAL and sol2.objective > (1 + slack) * t_now and used_backtracks < backtracks:
            dive.set_lb(cols + 1, old_lb)
            tabu.update(chosen[len(chosen) // 2 :])
            used_backtracks += 1
            method = "dual"
            log.info("alltoall_cg: dive step %d backtracks (T %.6g -> %.6g)", steps, t_now, sol2.objective)
            continue
        method = "primal"
        log.info("alltoall_cg: dive step %d rounded up %d columns (LP value before: %.9g)", steps, len(cols), t_now)


def _start_dive(cg: PathLp, pids: IntArray, y: FloatArray,
                nchunks: int) -> tuple[IntArray, IntArray, DiveLp | None]:
    """The whole chunks of ``y`` (fixed) and the dive LP over the commodities' remainders (None if none)."""
    net = cg.net
    n = net.n_gpus
    base = np.floor(y + INT_TOL).astype(np.int64)
    k_all = _commodity(cg, pids)
    residual_all = nchunks - np.bincount(k_all, weights=base, minlength=n * n).round().astype(np.int64)
    residual_all[np.arange(n) * (n + 1)] = 0  # no block from a GPU to itself
    active_k = np.flatnonzero(residual_all > 0)
    fixed_pids = pids[base > 0]
    fixed_chunks = base[base > 0]
    if len(active_k) == 0:
        return fixed_pids, fixed_chunks, None
    starts, links = cg.paths.link_csr(fixed_pids)
    fixed_load = np.bincount(links, weights=np.repeat(fixed_chunks / nchunks, np.diff(starts)),
                             minlength=net.n_links).astype(np.float64)
    dive = DiveLp(cg, active_k, residual_all[active_k], fixed_load, nchunks)
    frac_pids = pids[(y - base > INT_TOL) & (residual_all[k_all] > 0)]
    dive.add(frac_pids)
    log.info("alltoall_cg: rounding %d fractional commodities (%d columns)", len(active_k), len(frac_pids))
    return fixed_pids, fixed_chunks, dive


def _solve_and_price(dive: DiveLp, pricer: Pricer, nchunks: int, deadline: float | None, method: LpMethod,
                     max_pricing_rounds: int) -> tuple[LpSolution | None, int, int]:
    """Re-solve the dive LP, pricing paths for commodities that still have room: (last solution, solves,
    columns added); the first solve uses ``method``, the others primal simplex."""
    sol = None
    solves = added_total = 0
    for _ in range(max_pricing_rounds):
        sol = dive.lp.solve(method=method, time_limit_s=None if deadline is None else
                            max(0.0, deadline - time.perf_counter()))
        solves += 1
        method = "primal"
        if sol.status is not Status.OPTIMAL:
            break
        room = np.bincount(dive.col_row, weights=dive.lb, minlength=dive.nk) < dive.residual - INT_TOL
        open_k = dive.k_of_row[room]
        if len(open_k) == 0:
            break
        mu = sol.row_duals[: dive.nk]
        w = np.maximum(0.0, -sol.row_duals[dive.nk :])
        pc, register = pricer(w, open_k)
        tol = 1e-9 * max(1.0, abs(sol.objective)) / max(1, dive.nk)
        better = np.flatnonzero(pc / nchunks - mu[dive.row_of_k[open_k]] < -tol)
        if len(better) == 0:
            break
        new_pids = register(better)
        got = dive.add(new_pids)
        added_total += got
        if got == 0:
            break
    return sol, solves, added_total


def _pick(dive: DiveLp, frac: FloatArray, fractional: npt.NDArray[np.bool_], tabu: set[int],
          batch: float) -> list[int]:
    """The columns to round up next: the most fractional ones not tabu (all again once every one is), at
    most one per commodity, ``batch`` of the candidates (at least one)."""
    cand = [c for c in np.flatnonzero(fractional)[np.argsort(-frac[fractional], kind="stable")].tolist()
            if c not in tabu]
    if not cand:
        tabu.clear()
        cand = np.flatnonzero(fractional)[np.argsort(-frac[fractional], kind="stable")].tolist()
    want = max(1, math.ceil(batch * len(cand)))
    chosen: list[int] = []
    seen_k: set[int] = set()
    for c in cand:
        kk = int(dive.col_row[c])
        if kk in seen_k:
            continue
        seen_k.add(kk)
        chosen.append(c)
        if len(chosen) >= want:
            break
    return chosen


def _finish(cg: PathLp, fixed_pids: IntArray, fixed_chunks: IntArray, dive: DiveLp, u: FloatArray,
            nchunks: int, steps: int, backtracks: int, added: int, solves: int, *, fallback: bool) -> DiveResult:
    dive_pids = np.array(dive.col_pid, dtype=np.int64)
    if fallback:
        # Complete each commodity's residual by largest remainder on the dive's current values.
        k = _commodity(cg, dive_pids)
        rows = dive.row_of_k[k]
        base = np.floor(u + INT_TOL)
        short = dive.residual - np.bincount(rows, weights=base, minlength=dive.nk).round().astype(np.int64)
        frac = u - base
        order = np.lexsort((dive_pids, -frac, rows))
        rs = rows[order]
        first = np.r_[0, np.flatnonzero(np.diff(rs)) + 1] if len(rs) else np.zeros(0, np.int64)
        rank = np.arange(len(rs)) - np.repeat(first, np.diff(np.r_[first, len(rs)]))
        chunks = base.astype(np.int64)
        chunks[order] += (rank < short[rs]).astype(np.int64)
    else:
        chunks = np.round(u).astype(np.int64)
    pids = np.r_[fixed_pids, dive_pids]
    allc = np.r_[fixed_chunks, chunks]
    # A path can be both floor-fixed and a dive column: merge.
    merged = np.bincount(pids, weights=allc, minlength=len(cg.paths)).round().astype(np.int64)
    out = np.flatnonzero(merged > 0)
    return DiveResult(out, merged[out], steps, backtracks, added, solves, not fallback)
