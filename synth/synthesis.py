"""One entry point that dispatches a collective to its synthesizer: the library's ``synthesize``.

Examples
--------
>>> from synth import load_topology, synthesize
>>> r = synthesize("allgather", load_topology("ring:4"))
>>> r.status.value, round(r.algbw_GBps, 3)
('optimal', 133.333)
"""

from __future__ import annotations

import math
import time

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from synth._types import Collective, Rank
from synth._deadline import check_time_limit, solving
from synth.baselines import baseline_choice, nccl_ring
from synth.bounds import optimal_bound
from synth.errors import ScheduleError, SolverError, TimeLimitError, expect_type, short_repr
from synth.figures import RoutedAllToAllFigures, RoutedTreeFigures
from synth.result import Status, SynthResult, gap_pct
from synth.schedule import Schedule
from synth.routing import has_route_choice
from synth.topologies.capacity import certify_synthesis
from synth.topologies.communicator import communicator
from synth.topologies.model import Link, Topology

if TYPE_CHECKING:
    from synth.alltoall_cg.alltoallv import AllToAllvResult

__all__ = ["ROUTINGS", "synthesize"]

#: The routing modes of :func:`synthesize`.
ROUTINGS: tuple[str, ...] = ("auto", "free", "routed")


def _routed(collective: Collective, topo: Topology, chunks: int | None, warm_from: Schedule | SynthResult | None,
            solver: str, time_limit_s: float | None) -> SynthResult:
    """Routed synthesis, with the free-routing optimum and the executor's loss in its routing figures.

    Under a time limit the free-routing bound gets the time left, at least a tenth of the limit; a
    free bound stopped by it leaves the free figures unset, but still caps the proven upper bound of
    a routed run the limit stopped (the routed optimum is at most the free one)."""
    from synth.routed import synthesize_routed

    start = time.perf_counter()
    result = synthesize_routed(collective, topo, chunks=chunks, warm_from=warm_from, solver=solver,
                               time_limit_s=time_limit_s)
    left = None if time_limit_s is None else max(time_limit_s - (time.perf_counter() - start), time_limit_s / 10)
    bound = optimal_bound(collective, topo, time_limit_s=left)
    free = bound.algbw_GBps
    figures = result.figures
    if not isinstance(figures, RoutedTreeFigures | RoutedAllToAllFigures):
        return result  # a failed re-check: no figures to complete
    # Never above the free optimum (a time-limited run states a proven upper bound, which may be).
    routed = min(figures.routing.routed_optimal_algbw_GBps, free)
    proven_free = bound.status is Status.OPTIMAL
    loss = max(0.0, 100.0 * (1.0 - routed / free)) if free > 0 else 0.0
    loss = 0.0 if loss < 1e-7 else loss  # LP round-off where the two optima coincide
    routing = replace(figures.routing, free_optimal_algbw_GBps=free if proven_free else None,
                      routed_optimal_algbw_GBps=routed, routing_gap_pct=loss if proven_free else None,
                      routed_bound_algbw_GBps=min(figures.routing.routed_bound_algbw_GBps, free))
    result = replace(result, figures=replace(figures, routing=routing))
    if result.status is not Status.TIME_LIMIT or result.schedule is None or free >= result.optimal_algbw_GBps:
        return result
    gap = gap_pct(result.algbw_GBps, free)
    capped = replace(result.figures, gap=gap / 100.0) if isinstance(result.figures, RoutedAllToAllFigures) else \
        result.figures
    return replace(result, optimal_algbw_GBps=free, gap_pct=gap, figures=capped,
                   message=f"{result.message}; the free-routing bound {free:.6g} GB/s caps it: within {gap:.3f}%")


@overload
def synthesize(collective: Literal["alltoallv"], topo: Topology, *, chunks: int | None = None,  # type: ignore[overload-overlap]
               warm_from: Any = None, max_steps: int | None = None, solver: str = "highs",
               time_limit_s: float | None = None, ranks: Sequence[Rank] | None = None, relay: bool = False,
               demand: Any = None, routing: str = "auto") -> AllToAllvResult: ...


@overload
def synthesize(collective: Collective | str, topo: Topology, *, chunks: int | None = None,
               warm_from: Any = None, max_steps: int | None = None,
               solver: str = "highs", time_limit_s: float | None = None, ranks: Sequence[Rank] | None = None,
               relay: bool = False, demand: Any = None, routing: str = "auto") -> SynthResult: ...


def synthesize(
    collective: Collective | str,
    topo: Topology,
    *,
    chunks: int | None = None,
    warm_from: Schedule | SynthResult | None = None,
    max_steps: int | None = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
    ranks: Sequence[Rank] | None = None,
    relay: bool = False,
    demand: Any = None,
    routing: str = "auto",
) -> SynthResult | AllToAllvResult:
    """Synthesize ``collective`` on ``topo`` with the matching synthesizer.

    ``chunks`` is ``max_chunks`` for the tree collectives and ``nchunks`` for AllToAll (default: 10,
    or another K up to 64 that rounds within 0.1 % of the optimum: docs/exactness.md; a given
    K is used as is) and AllToAllv (default 16).
    ``warm_from`` is a previous :class:`SynthResult` (its in-memory warm state lets AllToAll take
    the certified local repair) or a :class:`Schedule` (e.g. read back from a file).
    ``time_limit_s`` bounds every synthesizer: AllToAll returns its best schedule with a certified
    gap (``TIME_LIMIT``); a tree collective stopped before its trees exist returns ``TIME_LIMIT``
    with the warm-start schedule if it is still valid (gap certified by a cut), else no schedule.
    ``ranks`` runs the collective on a communicator of these global ranks of ``topo`` (same as
    passing ``topo.communicator(ranks, relay=relay)``): the schedule's ranks are ``0..k-1`` in the
    order given and its ``meta["global_ranks"]`` maps them back; the other GPUs forward data only
    with ``relay=True``. A warm start must come from the same communicator.
    ``"alltoallv"`` needs ``demand`` (an N×N matrix of bytes per ordered rank pair, N the
    communicator's size) and returns an :class:`~synth.alltoall_cg.AllToAllvResult`; ``warm_from``
    is then a previous AllToAllv result (see :func:`synth.alltoall_cg.synthesize_alltoallv`).

    ``routing`` (docs/topology.md, "Routing"): ``"free"`` lets hops take any switch path (the
    physical limit; a peer-addressed executor may not run such a schedule at its rate);
    ``"routed"`` uses only every GPU pair's route (:mod:`synth.routed`); ``"auto"`` (default) is
    ``"routed"`` where some pair has several switch-only paths and ``"free"`` elsewhere, where the
    two coincide. A routed result's ``figures.routing`` also carries the free-routing optimum and
    the gap. AllToAllv is not routed.

    An option that does not apply raises :class:`~synth.errors.SolverError` naming it: ``max_steps``
    for a tree collective, a ``solver`` other than ``"highs"`` for a tree collective with free
    routing (ForestColl solves no LP), ``routing="routed"`` for AllToAllv.

    >>> from synth import load_topology
    >>> r = synthesize("allgather", load_topology("ring:6"), ranks=[0, 1, 2])
    >>> r.schedule.nranks, r.schedule.meta["global_ranks"]
    (3, [0, 1, 2])
    """
    expect_type(collective, str, "collective", SolverError)
    topo, time_limit_s = _checked_args(topo, chunks, time_limit_s, ranks, relay)
    if collective == "alltoallv":
        return _alltoallv(topo, demand, chunks, max_steps, solver, time_limit_s, warm_from, routing)
    if demand is not None:
        raise SolverError(f"demand= is for alltoallv only, not {collective!r}")
    kind = Collective.parse(collective)
    if isinstance(warm_from, Schedule):
        _check_warm_schedule(warm_from, topo)
    elif warm_from is not None and not isinstance(warm_from, SynthResult):
        raise SolverError(f"warm_from must be a Schedule, a SynthResult or None, got {type(warm_from).__name__}")
    if routing not in ROUTINGS:
        raise SolverError(f"routing must be one of {', '.join(ROUTINGS)}, got {short_repr(routing)}")
    routed = routing == "routed" or (routing == "auto" and has_route_choice(topo))
    _check_applies(kind, routed, max_steps, solver)
    if routed:
        return _certified(topo, _routed(kind, topo, chunks, warm_from, solver, time_limit_s))
    if kind is Collective.ALLTOALL:
        from synth.alltoall_cg import synthesize_alltoall

        return _certified(topo, synthesize_alltoall(topo, nchunks=chunks, max_steps=max_steps, solver=solver,
                                                    time_limit_s=time_limit_s, warm_start=warm_from))
    return _forestcoll(kind, topo, chunks, warm_from, time_limit_s)


def _checked_args(topo: Topology, chunks: int | None, time_limit_s: float | None, ranks: Sequence[Rank] | None,
                  relay: bool) -> tuple[Topology, float | None]:
    """The topology to synthesize on (the communicator of ``ranks``) and the checked time limit."""
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int)):
        raise SolverError(f"chunks must be an integer >= 1 or None, got {short_repr(chunks)}")
    if chunks is not None and chunks < 1:
        raise SolverError(f"--chunks must be >= 1, got {chunks!r}")
    time_limit_s = check_time_limit(time_limit_s)
    if not isinstance(topo, Topology):
        raise SolverError(f"topo must be a Topology, got {type(topo).__name__}")
    if ranks is not None:
        topo = communicator(topo, ranks, relay=relay)
    elif relay:
        raise SolverError("relay=True needs ranks (the communicator whose non-members relay)")
    return topo, time_limit_s


def _check_applies(collective: Collective, routed: bool, max_steps: int | None, solver: str) -> None:
    """Refuse an option that the collective's synthesizer would not use (rather than ignore it)."""
    if collective is Collective.ALLTOALL and routed and max_steps is not None:
        raise SolverError(f"max_steps={max_steps!r} does not apply to routed alltoall: its relay paths are priced "
                          "on the logical graph of routed GPU pairs without a step bound (routing='free' takes it)")
    if not collective.is_tree:
        return
    if max_steps is not None:
        raise SolverError(f"max_steps={max_steps!r} does not apply to {collective}: it bounds the hops of "
                          f"alltoall and alltoallv paths")
    if solver != "highs" and not routed:
        raise SolverError(f"solver={short_repr(solver)} does not apply to {collective} with free routing: "
                          f"ForestColl solves no LP (solver is for alltoall, alltoallv and routed synthesis)")


def _alltoallv(topo: Topology, demand: Any, chunks: int | None, max_steps: int | None, solver: str,
               time_limit_s: float | None, warm_from: Any, routing: str) -> AllToAllvResult:
    """:func:`synthesize`'s AllToAllv (16 chunks per block by default; never routed)."""
    from synth.alltoall_cg import synthesize_alltoallv

    if demand is None:
        raise SolverError("alltoallv needs demand= (an N x N matrix of bytes per ordered rank pair)")
    if routing == "routed":
        raise SolverError("routing='routed' does not apply to alltoallv: AllToAllv is synthesized with free routing")
    return synthesize_alltoallv(topo, demand, nchunks=16 if chunks is None else chunks, max_steps=max_steps,
                                solver=solver, time_limit_s=time_limit_s,
                                warm_start=cast("AllToAllvResult | None", warm_from))


def _forestcoll(collective: Collective, topo: Topology, chunks: int | None, warm_from: Schedule | SynthResult | None,
                time_limit_s: float | None) -> SynthResult:
    """A tree collective by ForestColl; a time limit keeps the warm start's schedule where it is valid."""
    from synth import forestcoll_warm

    fn = {
        Collective.ALLGATHER: forestcoll_warm.synthesize_allgather,
        Collective.REDUCESCATTER: forestcoll_warm.synthesize_reducescatter,
        Collective.ALLREDUCE: forestcoll_warm.synthesize_allreduce,
    }[collective]
    warm_schedule = warm_from.schedule if isinstance(warm_from, SynthResult) else warm_from
    start = time.perf_counter()
    solve_s = time_limit_s
    if time_limit_s is not None and warm_schedule is None:
        # A cold solve leaves the ring fallback its time (at least a third of the limit stays solving:
        # phase 1 is the exact bound the fallback's gap is certified against).
        solve_s = max(time_limit_s - _ring_reserve_s(topo, chunks), time_limit_s / 3)
    try:
        with solving(solve_s, f"{collective} on {topo.name}"):
            return _certified(topo, fn(topo, max_chunks=chunks, warm_start=warm_schedule))
    except TimeLimitError as exc:
        # ForestColl builds its trees only after the exact optimum: the best schedule so far is the
        # warm start's, if it is still valid here; its gap is certified by a cut's upper bound.
        # Cold, it is the NCCL-like ring (:func:`_ring_fallback`).
        noted = exc.upper_algbw_GBps if collective is not Collective.ALLREDUCE else None
        kept = _warm_fallback(collective, topo, warm_schedule, noted)
        elapsed = time.perf_counter() - start
        if kept is None and warm_schedule is None:
            return _certified(topo, _ring_fallback(collective, topo, chunks, exc, (start, time_limit_s)))
        if kept is None:
            return SynthResult(status=Status.TIME_LIMIT, message=f"{exc} before a schedule was built (no schedule)",
                               schedule=None, algbw_GBps=0.0, optimal_algbw_GBps=math.inf, gap_pct=100.0,
                               solve_time_s=elapsed, warm=warm_from is not None)
        sched, algbw, upper = kept
        gap = gap_pct(algbw, upper)
        return SynthResult(status=Status.TIME_LIMIT, message=f"{exc}; kept the warm-start schedule, valid on "
                           f"{topo.name!r}: {algbw:.6g} GB/s, gap <= {gap:.3f}% vs a proven upper bound of "
                           f"{upper:.6g} GB/s", schedule=sched, algbw_GBps=algbw, optimal_algbw_GBps=upper,
                           gap_pct=gap, solve_time_s=elapsed, warm=True)


#: Seconds per ring hop (GPUs² × channels) that building, validating and rating the NCCL-like ring
#: takes: hpn:16x16x8 (33.5 M hops) took 28 s of CPU (0.85 µs a hop; 139 s wall on 2 cores under a
#: load of 6-8); 0.9 µs leaves it 30 s of a 60 s limit.
RING_S_PER_HOP = 0.9e-6


def _ring_channels(topo: Topology, chunks: int | None) -> int:
    """The ring fallback's channels: one per NIC of a host (2 without a NIC layout), at most ``chunks``."""
    layout = baseline_choice(topo).layout
    channels = layout.nrails if layout is not None else 2
    return channels if chunks is None else max(1, min(channels, chunks))


def _ring_reserve_s(topo: Topology, chunks: int | None) -> float:
    """Seconds of a cold solve's time limit left to the ring fallback."""
    return RING_S_PER_HOP * topo.nranks ** 2 * _ring_channels(topo, chunks)


def _gpu_cut_algbw(collective: Collective, topo: Topology) -> float:
    """A proven upper bound that costs no max-flow: every GPU receives (AllGather; ReduceScatter:
    sends) N − 1 blocks over its own links; AllReduce does both, one phase after the other."""
    n = topo.nranks
    ins = min(sum(float(topo.exact_capacity(*lk.key)) for lk in topo.in_links(g.id)) for g in topo.gpus)
    outs = min(sum(float(topo.exact_capacity(*lk.key)) for lk in topo.out_links(g.id)) for g in topo.gpus)
    ag, rs = n * ins / (8 * (n - 1)), n * outs / (8 * (n - 1))
    if collective is Collective.ALLGATHER:
        return ag
    if collective is Collective.REDUCESCATTER:
        return rs
    return 1 / (1 / ag + 1 / rs) if ag > 0 and rs > 0 else 0.0


def _ring_fallback(collective: Collective, topo: Topology, chunks: int | None, exc: TimeLimitError,
                   started: tuple[float, float | None]) -> SynthResult:
    """A cold tree collective stopped by its time limit: the NCCL-like multi-ring (valid on ``topo``)
    with its gap against the exact cut bound where phase 1 finished, else a GPU's own links.
    ``started`` is the solve's start (``perf_counter``) and the caller's time limit."""
    start, limit_s = started
    stopped = f"{collective} on {topo.name!r}: the cold solve stopped within the time limit of {limit_s:g} s ({exc})"
    upper = exc.upper_algbw_GBps if collective is not Collective.ALLREDUCE else None
    how = "the exact cut bound" if upper is not None else "a GPU's own links (the cut bound was not reached)"
    if upper is None:
        upper = _gpu_cut_algbw(collective, topo)
    try:
        sched = nccl_ring(collective, topo, nchannels=_ring_channels(topo, chunks))
    except ScheduleError as why:
        return SynthResult(status=Status.TIME_LIMIT, message=f"{stopped} before a schedule was built, and no ring "
                           f"fallback: {why}", schedule=None, algbw_GBps=0.0, optimal_algbw_GBps=upper,
                           gap_pct=100.0, solve_time_s=time.perf_counter() - start, warm=False)
    algbw = sched.algbw_GBps(topo)
    upper = max(upper, algbw)
    gap = gap_pct(algbw, upper)
    return SynthResult(status=Status.TIME_LIMIT, message=f"{stopped}; fell back to the NCCL-like ring "
                       f"({sched.meta['baseline']}, {sched.nchunks} channels): {algbw:.6g} GB/s, gap <= {gap:.3f}% "
                       f"vs {how}, {upper:.6g} GB/s", schedule=sched, algbw_GBps=algbw, optimal_algbw_GBps=upper,
                       gap_pct=gap, solve_time_s=time.perf_counter() - start, warm=False)


def _certified(topo: Topology, result: SynthResult) -> SynthResult:
    """``result`` once its optimum and schedule are certified on the true capacities (rule 0 and the
    floor of docs/exactness.md, :func:`~synth.topologies.capacity.certify_synthesis`)."""
    # The loads matter only where a link was lifted (a full pass over a 2048-GPU schedule costs ~10 s).
    lifted = bool(topo.capacity_grid.lifted)
    loaded = result.schedule.link_loads() if result.schedule is not None and lifted else {}
    certify_synthesis(topo, result.optimal_algbw_GBps, result.status is not Status.TIME_LIMIT, loaded)
    return result


def _warm_fallback(collective: str, topo: Topology, warm: Schedule | None,
                   noted: float | None = None) -> tuple[Schedule, float, float] | None:
    """(the warm schedule, its algbw on ``topo``, a proven upper bound) when it is valid on ``topo``;
    ``noted`` is the exact bound phase 1 noted before the limit, if it got that far."""
    if warm is None or warm.collective != collective or warm.nranks != topo.nranks:
        return None
    try:
        warm.validate(topo)
        algbw = warm.algbw_GBps(topo)
    except ScheduleError:
        return None
    # Else a time limit of 1 ns stops the cut search at once: its starting cut's ratio, a proven bound.
    upper = noted if noted is not None else \
        optimal_bound(collective, topo, time_limit_s=1e-9).algbw_GBps  # type: ignore[arg-type]
    return warm, algbw, max(upper, algbw)


def _check_warm_schedule(warm: Schedule, topo: Topology) -> None:
    """A warm-start schedule must be valid on ``topo`` (as ``simulate --schedule`` requires), except
    that links down since it was made count as up: re-synthesis after a failure is the point."""
    if warm.nranks != topo.nranks:
        raise ScheduleError(f"warm_from: schedule has {warm.nranks} ranks, topology {topo.name!r} has {topo.nranks}")
    down = [lk for lk in topo.links if lk.gbps <= 0]
    check = topo if not down else topo.with_links(
        [Link(lk.src, lk.dst, lk.gbps if lk.gbps > 0 else 1.0, lk.latency_us) for lk in topo.links])
    try:
        warm.validate(check)
    except ScheduleError as exc:
        raise ScheduleError(f"warm_from: not a valid schedule on {topo.name!r}: {exc}") from None
