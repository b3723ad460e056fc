"""Routed AllGather, ReduceScatter and AllReduce: tree packing over routed hops only.

Every hop of the schedules made here is a GPU pair's route (:func:`synth.routing.pair_route`), so a
peer-addressed executor (MSCCL XML) runs them at exactly their stated algbw. The routed optimum is
the tree-packing LP's, solved in arc-capacity form by cutting planes (:mod:`synth.routed._cutlp`;
equal to the tree LP of :mod:`synth.routed._treelp` by Edmonds' theorem); the schedule takes
integer arc capacities near the optimum's (:mod:`synth.routed._lovasz`) for the best ``k`` chunks
per root up to ``max_chunks`` (default :data:`DEFAULT_MAX_CHUNKS`) and states the gap. On up to
:data:`CG_MAX_RANKS` GPUs a rounding short of the optimum also tries the tree LP's own optimum
(column generation with Edmonds pricing, warm-started from the previous schedule's trees).
ReduceScatter packs in-trees (out-trees of the transposed logical graph); AllReduce is
ReduceScatter then AllGather with one common ``k``, against the bound ``N / (T_RS + T_AG)``.

Examples
--------
>>> from synth.topologies import named_topology
>>> r = synthesize_routed_trees("allgather", named_topology("nvswitch:4"))
>>> r.status.value, round(r.algbw_GBps, 3), r.figures.routing.routed_optimum_proven
('optimal', 480.0, True)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order

from synth.alltoall_cg.chunks import ROUNDING_BUDGET_S, TARGET_LOSS, binding_note, chunk_cap
from synth.collective import TREE_COLLECTIVES, Collective
from synth._deadline import fallback_grace_s, solving
from synth.errors import ScheduleError, SolverError, TimeLimitError
from synth.figures import RoutedTreeFigures, RoutingFigures
from synth.result import Status, SynthResult, gap_pct, judge
from synth.routed._logical import Logical
from synth.kernels.packing import PackingError, TreeClass
from synth.routed._lovasz import integral_capacities, may_reach, pack_trees
from synth.routed._cutlp import cut_lp
from synth.routed._cuts import tree_cut_T
from synth.routed._treelp import TreeLp, solve_tree_lp, tree_arcs
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["DEFAULT_MAX_CHUNKS", "synthesize_routed_trees"]

#: Chunks per root tried at most when the caller gives no ``max_chunks``.
DEFAULT_MAX_CHUNKS = 8
#: Up to this many GPUs, a rounding short of the optimum also tries the column-generation optimum.
CG_MAX_RANKS = 32
# Under a time limit, the rounding and packing may run past it by synth._deadline.fallback_grace_s
# (the rule every fallback shares) before the direct trees of every root replace the packing.


def _routes(lg: Logical, classes: list[TreeClass], kind: RouteKind) -> list[Route]:
    """Routes of packed tree classes (edges in growth order: every edge leaves the tree grown so far).

    Trees that use one arc share its :class:`Hop` object (the schedule's re-check then checks
    each arc's path once)."""
    hops_of: dict[tuple[int, int], Hop] = {}

    def hop(u: int, v: int) -> Hop:
        h = hops_of.get((u, v))
        if h is None:
            path = lg.paths[lg.arc(u, v)]
            h = hops_of[(u, v)] = Hop(u, v, path) if kind is RouteKind.OUT_TREE else Hop(v, u, path)
        return h

    out: list[Route] = []
    for c in sorted(classes, key=lambda c: (c.root, c.edges)):
        if kind is RouteKind.OUT_TREE:
            hops = tuple(hop(u, v) for u, v in c.edges)
        else:  # arcs of the transposed graph: data flows v -> u on the real links, leaves first
            hops = tuple(hop(u, v) for u, v in reversed(c.edges))
        out.append(Route(kind, c.root, c.mult, hops))
    return out


def _g_star(lg: Logical, lp: TreeLp) -> np.ndarray:
    """Each arc's total tree weight in the LP optimum (all roots)."""
    g = np.zeros(len(lg.pairs))
    for r, p, lam in zip(lp.roots, lp.parents, lp.lam):
        g[tree_arcs(lg, int(r), p)] += lam
    return g


def _ratio(lg: Logical, g: np.ndarray) -> float:
    loads = lg.loads(g.astype(np.float64))
    live = lg.caps_GBps > 0
    return float((loads[live] / lg.caps_GBps[live]).max())


def _seeds(warm: Schedule | None, lg: Logical, kind: RouteKind) -> list[tuple[int, tuple[int, ...]]]:
    """Trees of a previous schedule whose hops are all routed arcs now (warm-start columns)."""
    if warm is None or warm.nranks != lg.n:
        return []
    out = []
    for route in warm.routes:
        if route.kind is not kind:
            continue
        parents = [-1] * lg.n
        parents[route.root] = route.root
        ok = True
        for hop in route.hops:
            child, parent = (hop.dst, hop.src) if kind is RouteKind.OUT_TREE else (hop.src, hop.dst)
            if parents[child] != -1 or lg.index[parent, child] < 0:
                ok = False
                break
            parents[child] = parent
        if ok and -1 not in parents:
            out.append((route.root, tuple(parents)))
    return out


def _best_k(graphs: Sequence[Logical], stars: Sequence[np.ndarray], k_max: int,
            lp_T: float, *, k_min: int = 1, deadline: float | None = None,  # noqa: N803
            limit: float | None = None, stop_rtol: float = 1e-9,
            phase_T: Sequence[float] | None = None) -> tuple[int, list[np.ndarray], float]:  # noqa: N803
    """The k in k_min..k_max whose integral capacities have the smallest summed phase ratio per
    chunk (the first such k; stops at a k within ``stop_rtol`` of the LP optimum, or after
    ``deadline`` or the time limit's ``limit`` once one k is done; past ``limit`` the repairs of
    :func:`integral_capacities` take whole deficits). With the phases' optima ``phase_T`` and no
    deadline, the k that :func:`may_reach` proves short of the optimum are tried only when no
    other k reaches it (the same pick, fewer roundings)."""
    def rounded(k: int) -> tuple[float, int, list[np.ndarray]]:
        caps = [integral_capacities(g, star, k, deadline=limit) for g, star in zip(graphs, stars)]
        return sum(_ratio(g, c) for g, c in zip(graphs, caps)) / k, k, caps

    ks = range(k_min, k_max + 1)
    done: dict[int, tuple[float, int, list[np.ndarray]]] = {}
    if phase_T is not None and deadline is None and limit is None:
        for k in ks:
            if all(may_reach(g, t, k) for g, t in zip(graphs, phase_T)):
                done[k] = rounded(k)
                if done[k][0] <= lp_T * (1 + stop_rtol):
                    return k, done[k][2], done[k][0]
    best: tuple[float, int, list[np.ndarray]] | None = None
    for k in ks:
        cur = done[k] if k in done else rounded(k)
        if best is None or cur[0] < best[0] * (1 - 1e-12):
            best = cur
        now = time.perf_counter()
        if best[0] <= lp_T * (1 + stop_rtol) or any(d is not None and now > d for d in (deadline, limit)):
            break
    assert best is not None
    return best[1], best[2], best[0]


def _denominator(stars: Sequence[np.ndarray], k_min: int, k_max: int) -> int | None:
    """The smallest k in ``k_min..k_max`` that makes every ``k·g*`` integral (within 1e-6), or None.

    >>> _denominator([np.array([0.5, 1 / 3])], 1, 8), _denominator([np.array([0.1])], 1, 8)
    (6, None)
    """
    if k_max < k_min:
        return None
    ks = np.arange(k_min, k_max + 1, dtype=np.float64)[:, None]
    whole = np.ones(len(ks), dtype=bool)
    for star in stars:
        scaled = ks * np.asarray(star, dtype=np.float64)[None, :]
        whole &= np.abs(scaled - np.rint(scaled)).max(axis=1, initial=0.0) <= 1e-6
    hits = np.flatnonzero(whole)
    return int(k_min + hits[0]) if len(hits) else None


def _exact_beyond(graphs: Sequence[Logical], stars: Sequence[np.ndarray], n: int, lp_T: float,  # noqa: N803
                  deadline: float | None) -> tuple[int, list[np.ndarray], float] | None:
    """Without ``max_chunks``, when some ``q`` beyond :data:`DEFAULT_MAX_CHUNKS` (within the chunk
    cap) makes the cut LP's ``q·g*`` integral, that rounding is exact: the first k up to q that
    reaches the optimum (what :func:`_more_chunks` would pick from these stars), found before any
    column generation; None when there is no such q or the k found falls short."""
    q = _denominator(stars, DEFAULT_MAX_CHUNKS + 1, chunk_cap(n, None, None)[1])
    if q is None:
        return None
    budget = time.perf_counter() + ROUNDING_BUDGET_S
    more = _best_k(graphs, stars, q, lp_T, k_min=DEFAULT_MAX_CHUNKS + 1, deadline=budget, limit=deadline)
    return more if more[2] <= lp_T * (1 + 1e-9) else None


def _more_chunks(graphs: Sequence[Logical], stars: Sequence[np.ndarray], n: int, lp_T: float,  # noqa: N803
                 best: tuple[int, list[np.ndarray], float], budget_s: float,
                 limit: float | None) -> tuple[tuple[int, list[np.ndarray], float], str | None]:
    """Without ``max_chunks``: k beyond :data:`DEFAULT_MAX_CHUNKS` (up to 64 and the MSCCL executor's
    ``N·k ≤ 32768``) while the rounding is short of the optimum, within ``budget_s`` and the time
    limit's deadline ``limit``; the pick and the limit that bound it (None when within 0.1 %)."""
    _, cap, cap_name = chunk_cap(n, None, None)
    if best[2] <= lp_T * (1 + 1e-9):
        return best, None
    deadline = time.perf_counter() + budget_s
    if cap > DEFAULT_MAX_CHUNKS and budget_s > 0:
        more = _best_k(graphs, stars, cap, lp_T, k_min=DEFAULT_MAX_CHUNKS + 1, deadline=deadline, limit=limit)
        if more[2] < best[2] * (1 - 1e-12):
            best = more
    if best[2] <= lp_T * (1 + TARGET_LOSS):
        return best, None
    cap_limit = cap_name if "32768" in cap_name else f"at most {max(cap, DEFAULT_MAX_CHUNKS)} chunks per root"
    if limit is not None and time.perf_counter() > limit:
        return best, "time_limit_s"
    return best, (f"rounding time budget {budget_s:g} s" if time.perf_counter() > deadline else cap_limit)


def synthesize_routed_trees(
    collective: str,
    topology: Topology,
    *,
    max_chunks: int | None = None,
    warm_start: Schedule | None = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
) -> SynthResult:
    """AllGather / ReduceScatter / AllReduce over routed hops (module docstring).

    Returns ``OPTIMAL`` when the rounded schedule reaches the routed LP optimum
    (``optimal_algbw_GBps``), else ``FEASIBLE`` with ``gap_pct`` its certified gap to it
    (:func:`synth.result.judge`), or ``TIME_LIMIT`` when the LP stopped first
    (gap to the best proven bound). ``figures`` is a :class:`~synth.figures.RoutedTreeFigures`:
    the routed optimum (or while it is not proven the best proven upper bound on it), LP and
    column-generation rounds, ``k`` and ``seeded_trees`` (warm-start trees reused as columns).
    """
    if collective not in TREE_COLLECTIVES:
        raise SolverError(f"routed tree synthesis handles allgather, reducescatter and allreduce, not {collective!r}")
    if max_chunks is not None and (isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1):
        raise SolverError(f"max_chunks must be an integer >= 1 or None, got {max_chunks!r}")
    start = time.perf_counter()
    lg = Logical.build(topology)
    lg.check_connected(topology.name)
    phases: list[tuple[Logical, RouteKind]] = []
    coll = Collective(collective)
    if coll.in_trees:
        phases.append((lg.transposed(), RouteKind.IN_TREE))
    if coll.out_trees:
        phases.append((lg, RouteKind.OUT_TREE))
    deadline = None if time_limit_s is None else start + time_limit_s
    cuts = [cut_lp(g, deadline=deadline) for g, _ in phases]
    # A phase stopped by the limit: its last LP's T, or the cheap cut bound where that is higher.
    lp_T = sum(c[1] if c[3] else max(c[1], tree_cut_T(topology, into=kind is RouteKind.OUT_TREE))  # noqa: N806
               for c, (_, kind) in zip(cuts, phases))
    proven = all(c[3] for c in cuts)
    lp = _RoutedLp(time.perf_counter() - start, lp_T, proven, tuple(c[2] for c in cuts),
                   tuple(c[1] for c in cuts) if proven else ())
    pick = _pick(phases, [c[0] for c in cuts], lp, topology.nranks, max_chunks, warm_start, solver, deadline)
    grace = None if time_limit_s is None else start + time_limit_s + fallback_grace_s(time_limit_s)
    routes: list[Route] = []
    for (g, kind), cap in zip(phases, pick.caps):
        try:
            routes.extend(_routes(g, _packed(g, cap, pick.k, grace), kind))
        except PackingError as exc:  # cannot happen: the capacities meet Lovász's condition
            raise SolverError(f"{topology.name}: routed tree packing failed: {exc}") from exc
    return _routed_result(collective, topology, routes, lp, pick, start, warm_start is not None)


def _bfs_trees(lg: Logical, k: int) -> list[TreeClass]:
    """Every root's breadth-first out-tree over the routed arcs, ``k`` chunks each: straight to
    every GPU it has a route to, relayed beyond (cheap, and always there: the graph is strongly connected)."""
    g = csr_matrix((np.ones(len(lg.pairs)), (lg.pairs[:, 0], lg.pairs[:, 1])), shape=(lg.n, lg.n))
    out = []
    for r in range(lg.n):
        order, pred = breadth_first_order(g, r, directed=True, return_predecessors=True)
        out.append(TreeClass(r, k, [int(v) for v in order], [(int(pred[v]), int(v)) for v in order[1:]], r))
    return out


def _packed(lg: Logical, caps: np.ndarray, k: int, grace: float | None) -> list[TreeClass]:
    """The exact packing of ``caps``; past the time limit's ``grace`` deadline (or once the packing
    runs past it) the breadth-first trees of :func:`_bfs_trees` instead."""
    if grace is None:
        return pack_trees(lg, caps, k)
    left = grace - time.perf_counter()
    if left <= 0:
        return _bfs_trees(lg, k)
    try:
        with solving(left, "routed tree packing"):
            return pack_trees(lg, caps, k)
    except TimeLimitError:
        return _bfs_trees(lg, k)


@dataclass(frozen=True, slots=True)
class _RoutedLp:
    """The cutting-plane LP over all phases: its time, T (``n / lp_T`` bounds the routed algbw),
    whether it is proven and its rounds per phase."""

    lp_s: float
    lp_T: float  # noqa: N815
    proven: bool
    rounds: tuple[int, ...]
    phase_T: tuple[float, ...] = ()  # noqa: N815  (each phase's proven optimum; empty when not proven)


@dataclass(frozen=True, slots=True)
class _Pick:
    """The chosen chunks per root and integral capacities per phase, and how the choice went."""

    k: int
    caps: list[np.ndarray]
    cg_rounds: tuple[int, ...]
    seeded: int
    binding: str | None


def _pick(phases: Sequence[tuple[Logical, RouteKind]], stars: list[np.ndarray], lp: _RoutedLp, n: int,
          max_chunks: int | None, warm_start: Schedule | None, solver: str, deadline: float | None) -> _Pick:
    """The best ``k`` and capacities from the cut LP's optimum or, on small fabrics short of it, the
    tree LP's (column generation); beyond ``max_chunks`` when none was given."""
    graphs = [g for g, _ in phases]
    k_max = max_chunks or DEFAULT_MAX_CHUNKS
    phase_T = lp.phase_T or None  # noqa: N806
    k, caps, per_unit = _best_k(graphs, stars, k_max, lp.lp_T, limit=deadline, phase_T=phase_T)
    cg_rounds: tuple[int, ...] = ()
    seeded = 0
    if per_unit > lp.lp_T * (1 + 1e-9) and max_chunks is None and lp.proven:
        exact = _exact_beyond(graphs, stars, n, lp.lp_T, deadline)
        if exact is not None:
            return _Pick(exact[0], exact[1], cg_rounds, seeded, None)
    if per_unit > lp.lp_T * (1 + 1e-9) and n <= CG_MAX_RANKS and (deadline is None or time.perf_counter() < deadline):
        # Small fabrics: the tree LP's optimum (column generation, warm-started from the previous
        # schedule's trees) is another optimal g*, often with a better rounding.
        lps: list[TreeLp] = []
        for g, kind in phases:
            left = None if deadline is None else max(0.0, deadline - time.perf_counter())
            lps.append(solve_tree_lp(g, solver=solver, seeds=_seeds(warm_start, g, kind), time_limit_s=left))
        cg_rounds = tuple(t.rounds for t in lps)
        seeded = sum(t.seeded for t in lps)
        stars2 = [_g_star(g, t) for g, t in zip(graphs, lps)]
        k2, caps2, per_unit2 = _best_k(graphs, stars2, k_max, lp.lp_T, limit=deadline, phase_T=phase_T)
        if per_unit2 < per_unit * (1 - 1e-12):
            k, caps, per_unit, stars = k2, caps2, per_unit2, stars2
    binding = None
    if max_chunks is None and lp.proven:
        left = ROUNDING_BUDGET_S if deadline is None else min(ROUNDING_BUDGET_S, deadline - time.perf_counter())
        (k, caps, per_unit), binding = _more_chunks(graphs, stars, n, lp.lp_T, (k, caps, per_unit), max(0.0, left),
                                                    deadline)
    elif per_unit > lp.lp_T * (1 + TARGET_LOSS):
        binding = "time_limit_s" if not lp.proven else f"max_chunks={max_chunks}"
    return _Pick(k, caps, cg_rounds, seeded, binding)


def _routed_result(collective: str, topology: Topology, routes: list[Route], lp: _RoutedLp, pick: _Pick,
                   start: float, warm: bool) -> SynthResult:
    """The checked schedule of these routes as a result, judged against the routed optimum."""
    n, k = topology.nranks, pick.k
    sched = Schedule(collective, n, k, tuple(routes))  # type: ignore[arg-type]
    try:
        sched.validate(topology)
    except ScheduleError as exc:
        return SynthResult(status=Status.FAILED, message=f"re-check failed: {exc}", schedule=None, algbw_GBps=0.0,
                           optimal_algbw_GBps=n / lp.lp_T, gap_pct=100.0, solve_time_s=time.perf_counter() - start,
                           warm=warm)
    sched = sched.with_bottleneck(topology)
    algbw = sched.algbw_GBps(topology)
    optimal = n / lp.lp_T if lp.lp_T > 0 else float("inf")
    upper = n / lp.lp_T if lp.lp_T > 0 else float("inf")
    solve_s = time.perf_counter() - start
    figures = RoutedTreeFigures(
        # The optimum when proven, else the best proven upper bound on it.
        routing=RoutingFigures(routed_optimal_algbw_GBps=optimal if lp.proven else upper,
                               routed_optimum_proven=lp.proven, routed_bound_algbw_GBps=upper),
        lp_rounds=lp.rounds, cg_rounds=pick.cg_rounds, seeded_trees=pick.seeded, lp_s=lp.lp_s, k=k,
        trees=len(routes), binding_limit=pick.binding)
    meta = {"synthesizer": "routed-trees", "k": str(k), "solve_time_s": solve_s, "optimal_algbw_GBps": optimal,
            "routing": "routed", **communicator_meta(topology)}
    sched = sched.with_meta(**meta)
    if not lp.proven:
        gap = gap_pct(algbw, upper)
        return SynthResult(status=Status.TIME_LIMIT, message=f"routed LP stopped at the time limit: {algbw:.6g} "
                           f"GB/s, proven within {gap:.3f}% of the routed optimum", schedule=sched, algbw_GBps=algbw,
                           optimal_algbw_GBps=upper, gap_pct=gap, solve_time_s=solve_s, warm=warm, figures=figures)
    status, gap = judge(algbw, optimal)
    how = "routed optimum" if status is Status.OPTIMAL else \
        f"routed optimum {optimal:.6g} GB/s rounded to k={k} ({gap:.3f}% gap)"
    return SynthResult(status=status, message=f"{how}: {algbw:.6g} GB/s with k={k} chunks per root, every hop on "
                       f"its pair's route{binding_note(pick.binding)}", schedule=sched, algbw_GBps=algbw,
                       optimal_algbw_GBps=optimal, gap_pct=gap, solve_time_s=solve_s, warm=warm, figures=figures)
