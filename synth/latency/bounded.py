"""Depth-bounded AllGather / ReduceScatter / AllReduce: the best throughput with trees of at most ``D``
GPU hops, with a certified gap (:mod:`synth.latency._lp`), rounded to integral chunks.

``max_depth=None`` (``D = inf``) takes today's path: ForestColl's exact optimum, unchanged.

Rounding: the LP gives each root's trees weights ``y_T`` summing to 1. For ``k = 1 .. chunks`` each
root's ``k`` chunks go to its trees by largest remainder (``c_T = floor(k y_T)`` or one more). Since
``c_T < k y_T + 1``, that rounding's time is below ``U_LP + max_a sum_{T rounded up, on a} load_a(T) /
(k b_a)`` (``figures.lp.rounding_bound_algbw_GBps``, the a-priori guarantee). A local search then moves
single chunks between a root's trees while the bottleneck time drops (never above the rounding it
starts from); the ``k`` with the least time wins (the first that matches the LP stops the search).

>>> from synth import load_topology
>>> r = synthesize_depth_bounded("allgather", load_topology("hpn:1x2x4"), 2)
>>> r.figures.depth <= 2, round(r.algbw_GBps, 3) == round(r.figures.lp_algbw_GBps, 3)
(True, True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from synth._deadline import check_time_limit
from synth.collective import TREE_COLLECTIVES, Collective
from synth.bounds import optimal_bound
from synth.errors import ScheduleError, SolverError, short_repr
from synth.figures import DepthFigures, DepthLpFigures
from synth.latency._graph import LinkGraph
from synth.latency._lp import Column, LpOutcome, column_from_hops, load_matrix, solve_depth_lp
from synth.latency.depth import schedule_depth
from synth.result import Status, SynthResult, gap_pct, judge
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.synthesis import synthesize
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["DEFAULT_CHUNKS", "MIN_SHARE_S", "synthesize_depth_bounded", "time_share"]

DEFAULT_CHUNKS = 8


def _round(out: LpOutcome, graph: LinkGraph, k: int) -> tuple[np.ndarray, float, float]:
    """Chunk counts per column for ``k`` chunks per root, their time ``U`` and the a-priori bound."""
    y = np.clip(out.y, 0.0, None)
    counts = np.zeros(len(out.columns), dtype=np.int64)
    roots = np.array([c.root for c in out.columns])
    for r in range(graph.n):
        idx = np.flatnonzero(roots == r)
        share = y[idx] / max(float(y[idx].sum()), 1e-300) * k
        base = np.floor(share + 1e-9).astype(np.int64)
        rest = k - int(base.sum())
        if rest > 0:
            frac = share - base
            order = np.lexsort((idx, -frac))  # largest remainder, then the older column
            base[order[:rest]] += 1
        counts[idx] = base
    mat = load_matrix(out.columns, graph.nlinks)
    cap = graph.cap_GBps
    u = float((mat @ counts.astype(np.float64) / (k * cap)).max())
    up = (counts > k * y + 1e-9).astype(np.float64)
    u_bound = out.u_lp + float((mat @ up / (k * cap)).max())
    return counts, u, u_bound


def _improve(out: LpOutcome, graph: LinkGraph, k: int, counts: np.ndarray, max_moves: int = 400) -> np.ndarray:
    """Local search after rounding: move one chunk of a root from a tree on the bottleneck link to
    another tree of the same root (from the LP's support) while that lowers the bottleneck time, or
    keeps it and saturates fewer links."""
    support = np.flatnonzero((out.y > 1e-9) | (counts > 0))
    if len(support) < 2:
        return counts
    cols = [out.columns[i] for i in support.tolist()]
    dense = load_matrix(cols, graph.nlinks).toarray()  # links x support
    inv = 1.0 / (k * graph.cap_GBps)
    roots = np.array([c.root for c in cols])
    cnt = counts[support].copy()
    loads = dense @ cnt.astype(np.float64)
    same = roots[:, None] == roots[None, :]
    for _ in range(max_moves):
        ratio = loads * inv
        u = float(ratio.max())
        at_max = ratio >= u * (1 - 1e-12)
        nmax = int(at_max.sum())
        hot = int(np.argmax(ratio))
        src = np.flatnonzero((cnt > 0) & (dense[hot] > 0))
        if len(src) == 0:
            break
        pairs = [(a, b) for a in src.tolist() for b in np.flatnonzero(same[a]).tolist() if dense[hot, b] < dense[hot, a]]
        if not pairs:
            break
        a_idx = np.array([p[0] for p in pairs])
        b_idx = np.array([p[1] for p in pairs])
        new = (loads[:, None] - dense[:, a_idx] + dense[:, b_idx]) * inv[:, None]
        umax = new.max(axis=0)
        nm = (new >= umax[None, :] * (1 - 1e-12)).sum(axis=0)
        score = np.lexsort((nm, umax))
        j = int(score[0])
        if not (umax[j] < u * (1 - 1e-12) or (umax[j] <= u * (1 + 1e-12) and nm[j] < nmax)):
            break
        cnt[a_idx[j]] -= 1
        cnt[b_idx[j]] += 1
        loads += dense[:, b_idx[j]] - dense[:, a_idx[j]]
    out_counts = counts.copy()
    out_counts[support] = cnt
    return out_counts


def _out_trees(graph: LinkGraph, out: LpOutcome, max_chunks: int) -> tuple[list[Route], int, float, float]:
    best: tuple[float, int, np.ndarray, float] | None = None
    mat = load_matrix(out.columns, graph.nlinks)
    for k in range(1, max_chunks + 1):
        counts, u, u_bound = _round(out, graph, k)
        if u > out.u_lp * (1 + 1e-9):
            counts = _improve(out, graph, k, counts)
            u = float((mat @ counts.astype(np.float64) / (k * graph.cap_GBps)).max())
        if best is None or u < best[0] * (1 - 1e-12):
            best = (u, k, counts, u_bound)
        if u <= out.u_lp * (1 + 1e-9):
            break
    assert best is not None
    u, k, counts, u_bound = best
    routes = [Route(RouteKind.OUT_TREE, c.root, int(n), tuple(Hop(a, b, p) for a, b, p in c.hops))
              for c, n in zip(out.columns, counts.tolist()) if n > 0]
    routes.sort(key=lambda rt: rt.root)
    return routes, k, u, u_bound


def _in_trees(routes: list[Route]) -> list[Route]:
    return [Route(RouteKind.IN_TREE, r.root, r.chunks, tuple(Hop(h.dst, h.src, tuple(reversed(h.path)))
                                                              for h in reversed(r.hops))) for r in routes]


def _warm_columns(graph: LinkGraph, warm: Schedule | None, kind: RouteKind) -> list[Column]:
    if warm is None or warm.nranks != graph.n:
        return []
    cols = []
    for rt in warm.routes:
        if rt.kind is not kind:
            continue
        hops = [(h.src, h.dst, h.path) for h in rt.hops]
        if kind is RouteKind.IN_TREE:
            hops = [(h.dst, h.src, tuple(reversed(h.path))) for h in reversed(rt.hops)]
        col = column_from_hops(graph, rt.root, hops)
        if col is not None:
            cols.append(col)
    return cols


def _side(topo: Topology, max_depth: int, kind: RouteKind, warm: Schedule | None, gap_tol: float,
          deadline: float | None, parts: int, solver: str) -> tuple[LinkGraph, LpOutcome, float]:
    """One side's graph, LP and unbounded optimum; the LP gets its share of the time left to
    ``deadline`` with ``parts`` sides to go (:func:`time_share`), taken once the graph is built."""
    g = LinkGraph(topo)
    opt = optimal_bound("allgather", topo).algbw_GBps  # the out-tree side of ``topo`` (reversed for RS)
    out = solve_depth_lp(g, max_depth, u_inf=topo.nranks / opt, warm_columns=_warm_columns(g, warm, kind),
                         gap_tol=gap_tol, time_limit_s=time_share(deadline, parts), solver=solver)
    return g, out, opt


#: The least time a share of a limit gets (a column generation always solves its first master).
MIN_SHARE_S = 1e-3


def time_share(deadline: float | None, parts: int) -> float | None:
    """An equal share of the time left to ``deadline`` (``time.perf_counter()``) for the first of
    ``parts`` solves run one after another (time one leaves unused goes to the next); None without
    a deadline.

    >>> time_share(None, 3) is None, time_share(time.perf_counter() - 1.0, 2) == MIN_SHARE_S
    (True, True)
    """
    if deadline is None:
        return None
    return max(MIN_SHARE_S, (deadline - time.perf_counter()) / max(1, parts))


def _check(collective: str, max_depth: int | None, chunks: int | None, gap_tol: float) -> None:
    if collective not in TREE_COLLECTIVES:
        raise SolverError(f"depth-bounded synthesis is for {', '.join(TREE_COLLECTIVES)}, not {short_repr(collective)} "
                          "(AllToAll bounds its steps with max_steps)")
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
        raise SolverError(f"--max-depth must be an integer >= 1 or None (unbounded), got {short_repr(max_depth)}")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1
                               or (max_depth is not None and chunks > 64)):
        raise SolverError(f"chunks must be an integer in 1..64 for depth-bounded trees (>= 1 for max_depth None), "
                          f"got {short_repr(chunks)}")
    if not (isinstance(gap_tol, float | int) and 0 <= gap_tol < 1):
        raise SolverError(f"gap_tol must be a number in [0, 1), got {short_repr(gap_tol)}")


def synthesize_depth_bounded(
    collective: Collective,
    topo: Topology,
    max_depth: int | None,
    *,
    chunks: int | None = None,
    warm_from: Schedule | SynthResult | None = None,
    gap_tol: float = 1e-4,
    time_limit_s: float | None = None,
    solver: str = "highs",
) -> SynthResult:
    """Trees of at most ``max_depth`` GPU hops with the best throughput the LP finds (module docstring).

    ``chunks`` is the most chunks per source (default 8; ``D = inf`` passes it to ForestColl as
    ``max_chunks``). ``warm_from`` seeds the LP with a previous schedule's trees that are still
    valid and within the bound. The result's ``optimal_algbw_GBps`` is the *certified upper bound*
    on any depth-``D`` schedule (so ``gap_pct`` covers both the LP gap and rounding; the status is
    ``OPTIMAL`` only when the schedule reaches that bound, else ``FEASIBLE``); ``figures`` is a
    :class:`~synth.figures.DepthFigures` (``depth``, ``lp_algbw_GBps``, ``depth_bound_algbw_GBps``,
    ``unbounded_optimal_algbw_GBps``, ``lp_gap_pct``, the LP's figures in ``lp``).

    ``time_limit_s`` bounds the whole call: AllReduce's two sides share it (:func:`time_share`); a
    side's column generation stopped by its share makes the result ``TIME_LIMIT``, with the gap to
    the certified bound (rounding and the re-check run after the limit).
    """
    _check(collective, max_depth, chunks, gap_tol)
    time_limit_s = check_time_limit(time_limit_s)
    start = time.perf_counter()
    if max_depth is None:
        return _unbounded(collective, topo, chunks, warm_from, time_limit_s, solver)
    warm = warm_from.schedule if isinstance(warm_from, SynthResult) else warm_from
    n = topo.nranks
    deadline = None if time_limit_s is None else start + time_limit_s
    coll = Collective(collective)
    kinds = ([RouteKind.IN_TREE] if coll.in_trees else []) + ([RouteKind.OUT_TREE] if coll.out_trees else [])
    sides: list[tuple[RouteKind, LinkGraph, LpOutcome, float]] = []
    for i, kind in enumerate(kinds):
        side_topo = topo.reversed() if kind is RouteKind.IN_TREE else topo
        g, out, opt = _side(side_topo, max_depth, kind, warm, gap_tol, deadline, len(kinds) - i, solver)
        sides.append((kind, g, out, opt))
    rounded = _rounded(sides, n, DEFAULT_CHUNKS if chunks is None else chunks)
    sched = Schedule(collective, n, rounded.k, tuple(rounded.routes))
    try:
        sched.validate(topo)
    except ScheduleError as exc:
        return _failed(f"re-check failed: {exc}", n / rounded.u_low, start)
    depth = schedule_depth(sched)
    if depth > max_depth:
        return _failed(f"re-check failed: depth {depth} > bound {max_depth}", n / rounded.u_low, start)
    sched = sched.with_bottleneck(topo)
    algbw = sched.algbw_GBps(topo)
    bound = n / rounded.u_low
    figures = DepthFigures(
        depth=depth, max_depth=max_depth, lp_algbw_GBps=n / rounded.u_lp, depth_bound_algbw_GBps=bound,
        unbounded_optimal_algbw_GBps=n / rounded.u_inf, lp_gap_pct=100.0 * (1 - rounded.u_low / rounded.u_lp),
        lp=DepthLpFigures(
            k=rounded.k, trees=len(rounded.routes), rounding_bound_algbw_GBps=n / rounded.u_bnd,
            rounding_gap_pct=100.0 * (1 - rounded.u_lp / rounded.u_round),
            iterations=sum(s[2].iterations for s in sides), columns=sum(len(s[2].columns) for s in sides),
            columns_dropped=sum(int(s[2].stats.get("columns_dropped", 0)) for s in sides)))
    meta = {"synthesizer": "depth-bounded", "max_depth": max_depth, "depth": depth,
            "optimal_algbw_GBps": n / rounded.u_inf, "depth_bound_algbw_GBps": bound, **communicator_meta(topo)}
    sched = sched.with_meta(**meta)
    # The LP's certified bound is the optimum held to; an LP stopped by a limit makes the run TIME_LIMIT.
    status, gap = judge(algbw, bound) if rounded.stopped is None else (rounded.stopped, gap_pct(algbw, bound))
    message = (f"depth <= {max_depth} (actual {depth}): {algbw:.6g} GB/s with k={rounded.k}; LP "
               f"{n / rounded.u_lp:.6g}, depth-{max_depth} bound {bound:.6g}, unbounded optimum "
               f"{n / rounded.u_inf:.6g} GB/s; " + "; ".join(rounded.why))
    return SynthResult(status=status, message=message, schedule=sched, algbw_GBps=algbw, optimal_algbw_GBps=bound,
                       gap_pct=gap, solve_time_s=time.perf_counter() - start, warm=warm is not None, figures=figures)


def _unbounded(collective: Collective, topo: Topology, chunks: int | None, warm_from: Schedule | SynthResult | None,
               time_limit_s: float | None, solver: str) -> SynthResult:
    """``max_depth=None``: today's synthesizer, unchanged, with its depth added to the figures."""
    res = synthesize(collective, topo, chunks=chunks, warm_from=warm_from, time_limit_s=time_limit_s, solver=solver)
    if res.schedule is None:
        return res
    depth = schedule_depth(res.schedule)
    sched = res.schedule.with_meta(max_depth=None, depth=depth)
    figures = DepthFigures(depth=depth, max_depth=None, lp_algbw_GBps=res.algbw_GBps,
                           depth_bound_algbw_GBps=res.optimal_algbw_GBps,
                           unbounded_optimal_algbw_GBps=res.optimal_algbw_GBps, lp_gap_pct=0.0, inner=res.figures)
    return replace(res, schedule=sched, figures=figures)


def _failed(message: str, bound_GBps: float, start: float) -> SynthResult:  # noqa: N803
    """A schedule that failed loopcoll's re-check: no schedule, judged against the LP's bound."""
    return SynthResult(status=Status.FAILED, message=message, schedule=None, algbw_GBps=0.0,
                       optimal_algbw_GBps=bound_GBps, gap_pct=100.0, solve_time_s=time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class _Rounded:
    """Both sides' rounded trees with one chunk count ``k``, and the summed times per unit (``u_*``)."""

    routes: list[Route]
    k: int
    u_round: float
    u_lp: float
    u_low: float
    u_inf: float
    u_bnd: float
    stopped: Status | None  # the status of a side's LP that a limit stopped, else None
    why: list[str]


def _rounded(sides: list[tuple[RouteKind, LinkGraph, LpOutcome, float]], n: int, k_max: int) -> _Rounded:
    """Round every side's LP to at most ``k_max`` chunks per root, then scale to their common ``k``."""
    routes: list[Route] = []
    ks = []
    u_round = u_lp = u_low = u_inf = u_bnd = 0.0
    stopped: Status | None = None
    why: list[str] = []
    for kind, g, out, opt in sides:
        rts, k, u, ub = _out_trees(g, out, k_max)
        ks.append(k)
        routes.extend(_in_trees(rts) if kind is RouteKind.IN_TREE else rts)
        u_round += u
        u_lp += out.u_lp
        u_low += out.u_lower
        u_inf += n / opt
        u_bnd += ub
        if out.status is not Status.OPTIMAL:
            stopped = out.status
        why.append(out.message)
    k = math.lcm(*ks)
    routes = [Route(r.kind, r.root, r.chunks * (k // ks[0 if r.kind is RouteKind.IN_TREE or len(ks) == 1 else 1]), r.hops)
              for r in routes]
    return _Rounded(routes, k, u_round, u_lp, u_low, u_inf, u_bnd, stopped, why)
