"""AllGather by ForestColl tree packing, cold or warm-started from a previous schedule.

Examples
--------
>>> from synth.topologies import named_topology
>>> res = synthesize_allgather(named_topology("nvswitch:8"))
>>> res.status.value, round(res.algbw_GBps, 3), res.schedule.nchunks
('optimal', 411.429, 1)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from synth._deadline import note_upper_bound
from synth.errors import ScheduleError, SolverError
from synth.figures import ReductionFigures, TreeFigures, WarmTreeFigures
from synth.forestcoll_warm._mapback import to_routes
from synth.forestcoll_warm._optimum import IntGraph, Optimum, dinkelbach, exact_optimum, fixed_k_optimum
from synth.kernels.packing import PackingError, TreeClass, pack_with_figures
from synth.forestcoll_warm._splitting import SplitStuck, split_switches
from synth.forestcoll_warm.warm import accept_old_trees, hint_from_meta, hint_to_meta, old_trees
from synth.result import Status, SynthResult, judge
from synth.schedule import Route, RouteKind, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Link, Topology, exact_gbps

__all__ = ["synthesize_allgather"]

log = logging.getLogger(__name__)

META_KEY = "forestcoll"


@dataclass(frozen=True)
class Solved:
    """One direction's trees (out-trees on the topology it was solved on) and its figures."""

    routes: tuple[Route, ...]
    k: int
    U: Fraction  # noqa: N815
    rate_gbps: Fraction  # per source, of the schedule
    bound_gbps: Fraction  # exact cut bound per source
    cut: frozenset[str]
    hint_meta: Mapping[str, Any]
    figures: TreeFigures | None = None  # None for a merged (AllReduce) direction
    message: str = ""


def _validate_args(topology: Topology, max_chunks: int | None, warm_start: Schedule | None) -> None:
    if not isinstance(topology, Topology):
        raise SolverError(f"topology must be a Topology, got {type(topology).__name__}")
    if max_chunks is not None and (isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1):
        raise SolverError(f"max_chunks must be an integer >= 1 or None, got {max_chunks!r}")
    if warm_start is not None and not isinstance(warm_start, Schedule):
        raise SolverError(f"warm_start must be a Schedule or None, got {type(warm_start).__name__}")
    if warm_start is not None and warm_start.nranks != topology.nranks:
        raise SolverError(
            f"warm_start schedule has {warm_start.nranks} ranks, topology {topology.name!r} has {topology.nranks}"
        )


def _choose_k(graph: IntGraph, opt: Optimum, max_chunks: int | None) -> tuple[Optimum, int | None]:
    """The optimum with at most ``max_chunks`` trees per root, and the max-flows of the fixed-k
    search (``None`` when none ran)."""
    if max_chunks is None or opt.k <= max_chunks:
        return opt, None
    best: Optimum | None = None
    maxflows = 0
    for k in range(1, max_chunks + 1):
        cand = fixed_k_optimum(graph, k, Fraction(k) / opt.rate_units)
        maxflows += cand.maxflows
        if best is None or cand.rate_units > best.rate_units:
            best = cand
    assert best is not None
    return best, maxflows


def _rebalanced(topo: Topology) -> Topology:
    """Scale down, in proportion, the out-links of every switch whose out-capacity exceeds its in-capacity.

    Only used when no exact splitting exists: the cut bound treats switches as able to replicate,
    but a tree unit entering a switch leaves it once, so at most ``ρ(w)`` of ``δ(w)`` is usable.
    Proportional lowering keeps every GPU's share (for one NVSwitch it reaches the switch's
    throughput limit). The schedule is valid on the original topology; the gap is reported.
    """
    gbps = {lk.key: topo.exact_capacity(*lk.key) for lk in topo.links}
    for sw in topo.switches:
        w = sw.id
        ins = sum((gbps[lk.key] for lk in topo.in_links(w)), Fraction(0))
        outs = [lk.key for lk in topo.out_links(w)]
        total = sum((gbps[key] for key in outs), Fraction(0))
        if total > ins:
            for key in outs:
                gbps[key] = gbps[key] * ins / total
    links = []
    for lk in topo.links:
        new = lk.gbps
        if gbps[lk.key] != topo.exact_capacity(*lk.key):
            new = float(gbps[lk.key])
            if exact_gbps(new) > gbps[lk.key]:  # float() rounded up: never exceed the lowered value
                new = new * (1 - 2**-50)
        links.append(Link(lk.src, lk.dst, new, lk.latency_us))
    return topo.with_links(links, name=topo.name + "+rebalanced")


def _phase1(graph: IntGraph, topo: Topology, hint_doc: Any, note: bool) -> Optimum:
    """The exact optimum (Dinkelbach from the warm cut of ``hint_doc`` where there is one); with
    ``note``, recorded as the solve's proven upper bound for a time-limit fallback (not for the
    rebalanced re-solve, whose bound lies below the true one)."""
    if isinstance(hint_doc, dict):
        opt = dinkelbach(graph, frozenset(str(v) for v in hint_doc.get("cut", [])))
    else:
        opt = exact_optimum(graph, topo)
    if note:
        note_upper_bound(float(graph.n_gpus * opt.rate_units * graph.unit_gbps / 8))
    return opt


def solve_out_trees(
    topo: Topology,
    *,
    max_chunks: int | None,
    hint_doc: Any = None,
    prev: Schedule | None = None,
    prev_kind: RouteKind = RouteKind.OUT_TREE,
    rebalance: bool = True,
) -> Solved:
    """Phases 1-3 and map-back on ``topo``: out-trees from every GPU.

    Where a switch has no exact splitting, ``rebalance`` solves once more on the rebalanced topology
    (:func:`_rebalanced`); that second solve does not rebalance again.
    """
    t0 = time.perf_counter()
    graph = IntGraph.from_topology(topo)
    split_hint = hint_from_meta(hint_doc) if isinstance(hint_doc, dict) else None
    opt = _phase1(graph, topo, hint_doc if split_hint is not None else None, rebalance)
    bound = opt.rate_units * graph.unit_gbps
    chosen, fixed_k_maxflows = _choose_k(graph, opt, max_chunks)
    t1 = time.perf_counter()
    log.info("phase 1: %s optimum k=%d U=%s (%.3f s)", topo.name, chosen.k, chosen.U, t1 - t0)
    try:
        split = split_switches(graph, chosen, split_hint)
    except SplitStuck as exc:
        if not rebalance:
            raise SolverError(f"switch {exc.switch!r} of {topo.name!r} cannot be split even after rebalancing") from exc
        log.info("phase 2: switch %s has no exact splitting; rebalancing non-Eulerian switches", exc.switch)
        inner = solve_out_trees(_rebalanced(topo), max_chunks=max_chunks, rebalance=False)
        assert inner.figures is not None
        return replace(
            inner,
            bound_gbps=bound,
            figures=replace(inner.figures, bound_attained=inner.rate_gbps == bound),
            message=(
                f"switch {exc.switch!r} is not Eulerian and cannot be split exactly: switches do not replicate, "
                f"so the cut bound is not attainable by trees; solved on the rebalanced topology"
            ),
        )
    t2 = time.perf_counter()
    n = graph.n_gpus
    prefs = None
    kept: list[TreeClass] = []
    arcs = split.arcs
    initial = None
    previous = old_trees(prev, prev_kind) if prev is not None else {}
    warm_figures: WarmTreeFigures | None = None
    if previous:
        prefs = {r: [edges for edges, _ in previous.get(r, [])] for r in range(n)}
        k_old = prev.nchunks if prev is not None else chosen.k
        accepted, warm_figures = accept_old_trees(split.arcs, n, chosen.k, previous, k_old)
        if accepted is not None:
            arcs, kept, initial = accepted
    try:
        grown, pack_figures = pack_with_figures(arcs, n, chosen.k, prefs=prefs, initial=initial) \
            if initial != [] else ([], None)
    except PackingError as exc:
        raise SolverError(f"{topo.name}: {exc}") from exc
    classes = kept + grown
    t3 = time.perf_counter()
    routes = to_routes(classes, split.pools)
    t4 = time.perf_counter()
    reused_edges_frac = None
    if previous:
        old_edges = {r: {e for edges, _ in previous.get(r, []) for e in edges} for r in range(n)}
        same = sum(c.mult * len(old_edges[c.root].intersection(c.edges)) for c in classes)
        reused_edges_frac = same / (n * chosen.k * (n - 1))
    # The one place this direction's figures are assembled (the parts return theirs).
    figures = TreeFigures(
        phase1_maxflows=opt.maxflows, fixed_k_maxflows=fixed_k_maxflows, phase1_s=t1 - t0, phase2_s=t2 - t1,
        split=split.figures, logical_arcs=len(split.arcs), warm=warm_figures, packing=pack_figures,
        phase3_s=t3 - t2, mapback_s=t4 - t3, k=chosen.k, trees=len(routes), kept_tree_units=sum(c.mult for c in kept),
        reused_edges_frac=reused_edges_frac,
    )
    hint = hint_to_meta(opt.cut, split.order, split.record)
    return Solved(tuple(routes), chosen.k, chosen.U, chosen.rate_units * graph.unit_gbps, bound, opt.cut, hint,
                  figures)


def _cut_links(topo: Topology, cut: frozenset[str]) -> list[tuple[str, str]]:
    return sorted(lk.key for lk in topo.live_links if lk.src in cut and lk.dst not in cut)


def finish(
    topo: Topology,
    collective: str,
    routes: Sequence[Route],
    solved: list[Solved],
    cut_links: list[tuple[str, str]] | None,
    optimal_GBps: float,  # noqa: N803
    optimal_rate: Fraction,
    start: float,
    warm: bool,
    meta_extra: dict[str, Any],
    *,
    figures: TreeFigures | ReductionFigures | None,
    u_meta: str | list[str],
) -> SynthResult:
    """Validate, attach the bottleneck and meta, and build the result with these figures."""
    k = solved[0].k
    sched = Schedule(collective, topo.nranks, k, tuple(routes))  # type: ignore[arg-type]
    try:
        sched.validate(topo)
    except ScheduleError as exc:
        return SynthResult(status=Status.FAILED, message=f"re-check failed: {exc}", schedule=None, algbw_GBps=0.0,
                           optimal_algbw_GBps=optimal_GBps, gap_pct=100.0, solve_time_s=time.perf_counter() - start,
                           warm=warm)
    exact_opt = all(s.rate_gbps == s.bound_gbps for s in solved)
    sched = sched.with_bottleneck(topo, cut_links if exact_opt else None)
    rate = sched.rate_GBps(topo)
    algbw = float(topo.nranks * rate)
    solve_s = time.perf_counter() - start
    meta = {
        "synthesizer": "forestcoll",
        "U": u_meta,
        "k": str(k),
        "optimal_algbw_GBps": optimal_GBps,
        META_KEY: meta_extra,
        **communicator_meta(topo),
    }
    sched = sched.with_meta(**meta)
    if rate > optimal_rate and collective != "allreduce":
        return SynthResult(status=Status.FAILED, message=f"re-check failed: rate {rate} above the proven bound "
                           f"{optimal_rate}", schedule=None, algbw_GBps=algbw, optimal_algbw_GBps=optimal_GBps,
                           gap_pct=0.0, solve_time_s=solve_s, warm=warm, figures=figures)
    status, gap = judge(algbw, optimal_GBps)
    if rate > optimal_rate:
        # The bound assumes RS then AG back to back; in the IR's link-load model the two phases
        # share links, and where their bottlenecks lie on different links (e.g. one GPU's in- and
        # out-links) the combined schedule is faster than that bound.
        message = (f"optimal RS+AG trees: {algbw:.6g} GB/s, above the sequential RS+AG bound {optimal_GBps:.6g} "
                   f"GB/s (phase bottlenecks on different links)")
    elif status is Status.OPTIMAL:
        message = f"optimal: {algbw:.6g} GB/s with k={k} trees per root"
    else:
        why = "; ".join(s.message for s in solved if s.message) or (
            f"best schedule with at most {k} chunk(s) per source (fixed-k search), gap vs the unconstrained optimum"
        )
        message = f"{why}: {algbw:.6g} of {optimal_GBps:.6g} GB/s ({gap:.3f}% gap)"
    return SynthResult(status=status, message=message, schedule=sched, algbw_GBps=algbw,
                       optimal_algbw_GBps=optimal_GBps, gap_pct=gap, solve_time_s=solve_s, warm=warm, figures=figures)


def _warm_doc(warm_start: Schedule | None, key: str) -> Any:
    if warm_start is None:
        return None
    doc = warm_start.meta.get(META_KEY)
    return doc.get(key) if isinstance(doc, dict) else None


def synthesize_allgather(
    topology: Topology,
    *,
    max_chunks: int | None = None,
    warm_start: Schedule | None = None,
) -> SynthResult:
    """Throughput-optimal AllGather: k spanning out-trees per GPU (ForestColl), cold or warm.

    Parameters
    ----------
    topology
        Any validated topology; switches may be non-Eulerian.
    max_chunks
        At most this many chunks per source (trees per root, counted with multiplicity); ``None``
        for the exact optimum whatever its k.
    warm_start
        A previous ForestColl schedule (AllGather or AllReduce, e.g. reloaded from JSON): its cut
        brackets the optimum, its splittings and trees are tried first. Same optimum as cold.

    Returns
    -------
    SynthResult
        ``OPTIMAL`` when the schedule's rate reaches the cut bound (``gap_pct == 0``,
        :func:`synth.result.judge`); with ``max_chunks`` below the optimum's k, or a non-Eulerian
        switch, ``FEASIBLE`` with the gap to the unconstrained optimum in ``message`` and ``gap_pct``.

    Raises
    ------
    SolverError
        Bad arguments, or an internal invariant broke (a bug).

    References
    ----------
    Zhao et al., ForestColl (arXiv 2402.06787) §3-4; MCCL §4.3 (ForestColl-warm).
    """
    _validate_args(topology, max_chunks, warm_start)
    start = time.perf_counter()
    solved = solve_out_trees(
        topology, max_chunks=max_chunks, hint_doc=_warm_doc(warm_start, "out"), prev=warm_start,
        prev_kind=RouteKind.OUT_TREE,
    )
    optimal = float(topology.nranks * solved.bound_gbps / 8)
    return finish(topology, "allgather", solved.routes, [solved], _cut_links(topology, solved.cut), optimal,
                  solved.bound_gbps / 8, start, warm_start is not None, {"out": solved.hint_meta},
                  figures=solved.figures, u_meta=str(solved.U))
