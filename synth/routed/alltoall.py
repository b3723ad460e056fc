"""Routed AllToAll: maximum concurrent flow over routed hops, by column generation on the logical graph.

Columns are per-source path sets (one GPU path per destination, each hop a routed arc); the
master is the T-form LP of :class:`synth.kernels.tree_master.TreeMaster` with a route's links as
an arc's load. Pricing is exact: under link duals w an arc costs the sum of w over its route, and
the cheapest path set of a source is its shortest-path tree on the logical graph (Dijkstra, all
sources at once), relaying through GPUs where that is cheaper than a direct route. The Lagrangian
bound ``Σ_s tree_cost_s / Σ_a c_a w_a`` proves the optimum. Rounding gives every (source,
destination) block ``nchunks`` chunks: a block's LP flow splits over its paths; whole parts of ``nchunks ×``
each share first, then the leftover chunks one at a time to the path that keeps the largest link
utilisation lowest.

Warm start: the columns of a previous routed result (its ``warm_state``) or the paths of a
previous schedule seed the master; columns over a pair that lost its route are dropped.

Examples
--------
>>> from synth.topologies import named_topology
>>> r = synthesize_routed_alltoall(named_topology("nvswitch:4"), nchunks=2)
>>> r.status.value, round(r.algbw_GBps, 3), round(r.optimal_algbw_GBps, 3)
('optimal', 480.0, 480.0)
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from synth.collective import Collective
from synth.alltoall_cg.chunks import (
    ROUNDING_BUDGET_S,
    TARGET_LOSS,
    BlockPaths,
    binding_note,
    check_rounding_args,
    choose_chunks,
    chunk_cap,
)
from synth.kernels.tree_master import TreeMaster
from synth.errors import ScheduleError, SolverError
from synth.figures import RoutedAllToAllFigures, RoutingFigures, Tried
from synth.result import Status, SynthResult, gap_pct, judge
from synth.routed._cuts import alltoall_cut_bound_GBps
from synth.routed._logical import Logical
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["RoutedAllToAllWarm", "routed_alltoall_lp", "synthesize_routed_alltoall"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Column = tuple[int, tuple[tuple[int, ...], ...]]  # (source, rank path to each destination; () for itself)

MAX_ROUNDS = 2000


@dataclass(frozen=True, eq=False)
class RoutedAllToAllWarm:
    """Warm state of a routed AllToAll: its column pool (rank paths), reusable on a changed fabric."""

    nranks: int
    columns: tuple[Column, ...]


def _scale(lg: Logical) -> float:
    live = lg.caps_GBps[lg.caps_GBps > 0]
    return float(live.sum()) / (3.0 * lg.n) if len(live) else 1.0


class _Cg:
    def __init__(self, lg: Logical, solver: str) -> None:
        self.lg = lg
        self.scale = _scale(lg)
        self.master = TreeMaster(solver, lg.n, lg.caps_GBps, scale=self.scale)
        self.pool: list[Column] = []
        self.seen: set[Column] = set()
        self.loads: list[FloatArray] = []
        self.best_lower = 0.0
        self.rounds = 0

    def column_loads(self, col: Column) -> FloatArray | None:
        counts = np.zeros(len(self.lg.pairs))
        for path in col[1]:
            for u, v in zip(path[:-1], path[1:]):
                i = self.lg.index[u, v]
                if i < 0:
                    return None
                counts[i] += 1
        return self.lg.loads(counts)

    def add(self, cols: list[Column]) -> int:
        fresh, loads = [], []
        for col in cols:
            if col in self.seen:
                continue
            lo = self.column_loads(col)
            if lo is None:
                continue
            self.seen.add(col)
            fresh.append(col)
            loads.append(lo)
        if not fresh:
            return 0
        self.pool.extend(fresh)
        self.loads.extend(loads)
        self.master.add_trees(np.array([c[0] for c in fresh], dtype=np.int64), np.rint(np.array(loads)).astype(np.int64))
        return len(fresh)

    def price(self, w: FloatArray) -> tuple[list[Column], FloatArray]:
        """Shortest-path trees of every source under link weights ``w``: columns and their costs."""
        lg, n = self.lg, self.lg.n
        cost = lg.arc_cost(w)
        eps = 1e-9 * max(float(cost.max(initial=0.0)), 1e-300) + 1e-300
        g = csr_matrix((cost + eps, (lg.pairs[:, 0], lg.pairs[:, 1])), shape=(n, n))
        dist, pred = dijkstra(g, directed=True, return_predecessors=True)
        if not np.isfinite(dist).all():
            s, d = np.argwhere(~np.isfinite(dist))[0]
            raise SolverError(f"GPU {int(d)} cannot be reached from GPU {int(s)} along routed hops")
        c = np.full((n, n), np.inf)
        c[lg.pairs[:, 0], lg.pairs[:, 1]] = cost
        cols: list[Column] = []
        costs = np.zeros(n)
        for s in range(n):
            paths: list[tuple[int, ...]] = []
            total = 0.0
            for d in range(n):
                if d == s:
                    paths.append(())
                    continue
                path = [d]
                while path[-1] != s:
                    path.append(int(pred[s, path[-1]]))
                path.reverse()
                total += float(sum(c[a, b] for a, b in zip(path[:-1], path[1:])))
                paths.append(tuple(path))
            cols.append((s, tuple(paths)))
            costs[s] = total
        return cols, costs

    def run(self, deadline: float | None) -> tuple[Any, bool]:
        """Price until no column improves or the deadline (which also bounds every master solve but
        the first); returns (last solution, proven)."""
        n = self.lg.n
        last = None
        while True:
            self.rounds += 1
            left = None if deadline is None or last is None else max(0.0, deadline - time.perf_counter())
            sol = self.master.solve(time_limit_s=left)
            if not sol.has_solution:
                if last is not None and sol.status is Status.TIME_LIMIT:
                    self.rounds -= 1
                    return last, False
                raise SolverError(f"routed AllToAll LP: master {sol.native}")
            last = sol
            mu, w = self.master.duals(sol)
            cols, costs = self.price(w)
            denom = float((self.lg.caps_GBps / self.scale) @ w)
            if denom > 0:
                self.best_lower = max(self.best_lower, float(costs.sum()) / denom)
            if self.best_lower >= sol.objective * (1 - 1e-9):
                return sol, True
            better = [cols[s] for s in range(n) if costs[s] < mu[s] - 1e-9 * max(1.0, abs(mu[s]))]
            if self.add(better) == 0:
                return sol, True
            if self.rounds >= MAX_ROUNDS or (deadline is not None and time.perf_counter() > deadline):
                return sol, False


def _seed_columns(warm: Any, n: int) -> list[Column]:
    if isinstance(warm, SynthResult):
        if isinstance(warm.warm_state, RoutedAllToAllWarm) and warm.warm_state.nranks == n:
            return list(warm.warm_state.columns)
        warm = warm.schedule
    if isinstance(warm, RoutedAllToAllWarm):
        return list(warm.columns) if warm.nranks == n else []
    if not isinstance(warm, Schedule) or warm.collective != "alltoall" or warm.nranks != n:
        return []
    best: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
    for route in warm.routes:
        if route.dest is None or not route.hops:
            continue
        path = (route.hops[0].src, *(h.dst for h in route.hops))
        key = (route.root, route.dest)
        if key not in best or route.chunks > best[key][0]:
            best[key] = (route.chunks, path)
    cols = []
    for s in range(n):
        if all((s, d) in best for d in range(n) if d != s):
            cols.append((s, tuple(() if d == s else best[(s, d)][1] for d in range(n))))
    return cols


def routed_alltoall_lp(topology: Topology, *, solver: str = "highs", time_limit_s: float | None = None,
                       warm: Any = None) -> tuple[_Cg, Any, bool]:
    """Column generation to the routed AllToAll LP optimum: (state, last solution, proven)."""
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    lg = Logical.build(topology)
    lg.check_connected(topology.name)
    cg = _Cg(lg, solver)
    seeded = cg.add(_seed_columns(warm, lg.n))
    cg.seeded = seeded  # type: ignore[attr-defined]
    live = lg.caps_GBps > 0
    cols, _ = cg.price(np.where(live, 1.0 / np.where(live, lg.caps_GBps, 1.0), 0.0))
    cg.add(cols)
    sol, proven = cg.run(deadline)
    return cg, sol, proven


Weights = dict[tuple[int, int], dict[tuple[int, ...], float]]


def _weights(cg: _Cg, lam: FloatArray) -> Weights:
    """Every pair's LP flow per rank path."""
    weight: Weights = defaultdict(lambda: defaultdict(float))
    for col, lo in zip(cg.pool, lam):
        if lo > 1e-12:
            for d, path in enumerate(col[1]):
                if path:
                    weight[(col[0], d)][path] += float(lo)
    return weight


def _path_links(lg: Logical) -> Any:
    inc = lg.incidence.tocsr()

    def links(path: tuple[int, ...]) -> IntArray:
        rows = [inc.indices[inc.indptr[i]:inc.indptr[i + 1]] for i in (lg.arc(u, v) for u, v in zip(path[:-1], path[1:]))]
        return np.concatenate(rows).astype(np.int64)

    return links


def _block_paths(cg: _Cg, weight: Weights) -> tuple[list[tuple[int, int, tuple[int, ...]]], BlockPaths]:
    """The LP's support as :class:`~synth.alltoall_cg.chunks.BlockPaths` and its (s, d, path) keys."""
    links = _path_links(cg.lg)
    keys, block, share, parts = [], [], [], []
    for (s, d), paths in sorted(weight.items()):
        total = sum(paths.values())
        for path, w in sorted(paths.items()):
            keys.append((s, d, path))
            block.append(s * cg.lg.n + d)
            share.append(w / total)
            parts.append(links(path))
    starts = np.r_[0, np.cumsum([len(p) for p in parts])].astype(np.int64)
    return keys, BlockPaths(np.array(block, dtype=np.int64), starts, np.concatenate(parts).astype(np.int64),
                            cg.lg.caps_GBps, np.array(share))


def _round(cg: _Cg, weight: Weights, nchunks: int) -> dict[tuple[int, int, tuple[int, ...]], int]:
    """Chunks per (source, destination, path), ``nchunks`` per block (module docstring): each
    pair's LP split over its paths, whole parts first, then one chunk at a time (pairs with the
    largest leftover first) to the path whose links stay least utilised."""
    lg = cg.lg
    live = lg.caps_GBps > 0
    inv = np.where(live, 1.0 / np.where(live, lg.caps_GBps, 1.0), 0.0)
    links = _path_links(lg)

    counts: dict[tuple[int, int, tuple[int, ...]], int] = {}
    util = np.zeros(len(lg.caps_GBps))
    leftovers = []
    for (s, d), paths in sorted(weight.items()):
        total = sum(paths.values())
        given = 0
        for path, w in sorted(paths.items()):
            x = nchunks * w / total
            c = int(np.floor(x + 1e-9))
            counts[(s, d, path)] = c
            given += c
            if c:
                np.add.at(util, links(path), c * inv[links(path)])
            leftovers.append((-(x - c), s, d, path))
        counts[(s, d, ())] = nchunks - given  # units still to place for this pair
    for _, s, d, _ in sorted(leftovers):
        if counts[(s, d, ())] == 0:
            continue
        best = None
        for path in sorted(weight[(s, d)]):
            ls = links(path)
            key = (float((util[ls] + inv[ls]).max()), -weight[(s, d)][path], path)
            if best is None or key < best[0]:
                best = (key, path, ls)
        assert best is not None
        counts[(s, d, best[1])] += 1
        counts[(s, d, ())] -= 1
        np.add.at(util, best[2], inv[best[2]])
    return {k: c for k, c in counts.items() if k[2] and c > 0}


def _schedule(cg: _Cg, counts: dict[tuple[int, int, tuple[int, ...]], int], nchunks: int) -> Schedule:
    lg = cg.lg
    routes = []
    for (s, d, path), c in sorted(counts.items()):
        hops = tuple(Hop(u, v, lg.paths[lg.arc(u, v)]) for u, v in zip(path[:-1], path[1:]))
        routes.append(Route(RouteKind.PATH, s, c, hops, dest=d))
    return Schedule(Collective.ALLTOALL, lg.n, nchunks, tuple(routes))


def _measured(topology: Topology, cg: _Cg, counts: dict[tuple[int, int, tuple[int, ...]], int],
              nchunks: int) -> tuple[Schedule, float]:
    """The schedule of ``counts``, re-checked on ``topology``, and its algbw."""
    sched = _schedule(cg, counts, nchunks)
    sched.validate(topology)
    sched = sched.with_bottleneck(topology)
    return sched, sched.algbw_GBps(topology)


def synthesize_routed_alltoall(
    topology: Topology,
    *,
    nchunks: int | None = 10,
    max_nchunks: int | None = None,
    rounding_budget_s: float = ROUNDING_BUDGET_S,
    solver: str = "highs",
    time_limit_s: float | None = None,
    warm_start: Any = None,
) -> SynthResult:
    """AllToAll over routed hops (module docstring); ``warm_start`` as the ``warm_from`` of
    :func:`synth.synthesize`; ``nchunks``, ``max_nchunks`` and ``rounding_budget_s`` as in
    :func:`synth.alltoall_cg.synthesize_alltoall` (K chosen within 0.1 % of the routed optimum where
    the cap allows). Status as :func:`synth.routed.trees.synthesize_routed_trees`; ``figures`` is a
    :class:`~synth.figures.RoutedAllToAllFigures` (``binding_limit``: the limit that keeps the loss
    above 0.1 %, or None)."""
    if nchunks is not None and (isinstance(nchunks, bool) or not isinstance(nchunks, int) or nchunks < 1):
        raise SolverError(f"nchunks must be None or an integer >= 1, got {nchunks!r}")
    check_rounding_args(max_nchunks, rounding_budget_s)
    start = time.perf_counter()
    cg, sol, proven = routed_alltoall_lp(topology, solver=solver, time_limit_s=time_limit_s, warm=warm_start)
    n = topology.nranks
    t_lp = time.perf_counter() - start
    lam = np.asarray(sol.col_values[1:], dtype=np.float64)
    weight = _weights(cg, lam)
    first, cap_k, cap_name = chunk_cap(n, nchunks, max_nchunks)
    counts = _round(cg, weight, first)
    warm = warm_start is not None
    optimal = n * cg.scale / float(sol.objective)
    upper = n * cg.scale / cg.best_lower if cg.best_lower > 0 else float("inf")
    if not proven:
        upper = min(upper, alltoall_cut_bound_GBps(topology))
    try:
        sched, algbw = _measured(topology, cg, counts, first)
    except ScheduleError as exc:
        return SynthResult(status=Status.FAILED, message=f"re-check failed: {exc}", schedule=None, algbw_GBps=0.0,
                           optimal_algbw_GBps=optimal, gap_pct=100.0, solve_time_s=time.perf_counter() - start,
                           warm=warm)
    nchunks, binding = first, None
    tried: Tried = ()
    loss = 1.0 - algbw / optimal
    if proven and loss > 1e-9:
        budget = rounding_budget_s if time_limit_s is None else \
            max(0.0, min(rounding_budget_s, start + time_limit_s - time.perf_counter()))
        keys, bp = _block_paths(cg, weight)
        pick = choose_chunks(bp, first, cap_k, budget_s=budget, first_loss=loss, cap_name=cap_name)
        tried = pick.tried
        picked = {key: int(c) for key, c in zip(keys, pick.chunks.tolist()) if c > 0}
        try:
            sched2, algbw2 = _measured(topology, cg, picked, pick.nchunks)
        except ScheduleError:
            algbw2 = 0.0
        if algbw2 > algbw * (1 + 1e-12):
            sched, algbw, nchunks, loss = sched2, algbw2, pick.nchunks, 1.0 - algbw2 / optimal
        if loss > TARGET_LOSS:
            binding = pick.binding or cap_name
    solve_s = time.perf_counter() - start
    state = RoutedAllToAllWarm(n, tuple(cg.pool[i] for i in np.flatnonzero(lam > 1e-12)))
    meta = {"synthesizer": "routed-alltoall-cg", "solve_time_s": solve_s, "optimal_algbw_GBps": optimal,
            "routing": "routed", **communicator_meta(topology)}
    sched = sched.with_meta(**meta)
    if not proven:
        status, gap = Status.TIME_LIMIT, gap_pct(algbw, upper)
        message = (f"routed column generation stopped at the time limit: {algbw:.6g} GB/s, proven within "
                   f"{gap:.3f}% of the routed optimum")
    else:
        status, gap = judge(algbw, optimal)
        message = (f"routed LP optimum {optimal:.6g} GB/s rounded to {nchunks} chunks per block: {algbw:.6g} GB/s "
                   f"({gap:.3f}% gap), every hop on its pair's route{binding_note(binding)}")
    figures = RoutedAllToAllFigures(
        routing=RoutingFigures(routed_optimal_algbw_GBps=optimal if proven else upper, routed_optimum_proven=proven,
                               routed_bound_algbw_GBps=upper),
        lp_algbw_GBps=optimal, lp_rounds=cg.rounds, lp_columns=len(cg.pool), seeded_columns=getattr(cg, "seeded", 0),
        lp_s=t_lp, nchunks=nchunks, binding_limit=binding, rounding_tried=tried, gap=gap / 100.0)
    return SynthResult(status=status, message=message, schedule=sched, algbw_GBps=algbw,
                       optimal_algbw_GBps=optimal if proven else upper, gap_pct=gap, solve_time_s=solve_s, warm=warm,
                       figures=figures, warm_state=state)
