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
from synth._cheap_cut import cheap_cut_algbw
from synth._deadline import check_time_limit, fallback_grace_s, fallback_reserve_s, solving
from synth.baselines import weighted_rings
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
    if time_limit_s is not None:
        # The ring fallback's time is kept from the solve (synth._deadline.fallback_reserve_s).
        solve_s = time_limit_s - fallback_reserve_s(time_limit_s, _ring_estimate_s(topo))
    skip = _skip_tree_solve(collective, topo, warm_from, time_limit_s)
    try:
        if skip is not None:
            raise TimeLimitError(skip)
        with solving(solve_s, f"{collective} on {topo.name}"):
            return _certified(topo, fn(topo, max_chunks=chunks, warm_start=warm_schedule))
    except TimeLimitError as exc:
        # ForestColl builds its trees only after the exact optimum: the best schedule so far is the
        # warm start's, if it is still valid here (gap certified by a cut's upper bound), or the
        # degraded-aware rings (:func:`_ring_fallback`), whichever rates higher on ``topo``.
        ring = _ring_fallback(collective, topo, chunks, exc, (start, time_limit_s))
        if ring.schedule is not None and time_limit_s is not None:
            # The limit the tree solve could not finish within, kept with the schedule: a warm start
            # from this result under no more than twice it skips the tree solve (_skip_tree_solve).
            stopped = _stopped_limit_s(warm_from) if skip is not None else time_limit_s
            ring = replace(ring, schedule=ring.schedule.with_meta(tree_solve_stopped_at_limit_s=stopped))
        noted = exc.upper_algbw_GBps if collective is not Collective.ALLREDUCE else None
        kept = _warm_fallback(collective, topo, warm_schedule, noted if noted is not None else ring.optimal_algbw_GBps)
        if kept is None or (ring.schedule is not None and ring.algbw_GBps > kept[1]):
            if kept is not None:
                ring = replace(ring, message=f"{ring.message}; the warm-start schedule rates {kept[1]:.6g} GB/s here")
            return _certified(topo, replace(ring, warm=warm_from is not None))
        sched, algbw, upper = kept
        upper = min(upper, ring.optimal_algbw_GBps) if ring.optimal_algbw_GBps >= algbw else upper
        gap = gap_pct(algbw, upper)
        elapsed = time.perf_counter() - start
        return SynthResult(status=Status.TIME_LIMIT, message=f"{exc}; kept the warm-start schedule, valid on "
                           f"{topo.name!r}: {algbw:.6g} GB/s (the rings: {ring.algbw_GBps:.6g}), gap <= {gap:.3f}% "
                           f"vs a proven upper bound of {upper:.6g} GB/s", schedule=sched, algbw_GBps=algbw,
                           optimal_algbw_GBps=upper, gap_pct=gap, solve_time_s=elapsed, warm=True)


def _stopped_limit_s(warm_from: Schedule | SynthResult | None) -> float:
    """The time limit a time-limited result's tree solve stopped at: as its schedule records it
    (``meta["tree_solve_stopped_at_limit_s"]``, carried along a chain of warm starts), else the time
    the result took."""
    assert isinstance(warm_from, SynthResult)
    noted = warm_from.schedule.meta.get("tree_solve_stopped_at_limit_s") if warm_from.schedule is not None else None
    if isinstance(noted, int | float) and not isinstance(noted, bool) and math.isfinite(noted) and noted > 0:
        return float(noted)
    return warm_from.solve_time_s


def _skip_tree_solve(collective: Collective, topo: Topology, warm_from: Schedule | SynthResult | None,
                     time_limit_s: float | None) -> str | None:
    """Why the tree solve is not started (``None``: it is): the warm start is a result of this
    collective on as many ranks that already stopped at its time limit, and this limit is at most
    twice that one (:func:`_stopped_limit_s`): the tree solve would stop again, after the whole limit."""
    if time_limit_s is None or not isinstance(warm_from, SynthResult) or warm_from.status is not Status.TIME_LIMIT:
        return None
    prev = warm_from.schedule
    if prev is None or prev.collective != collective or prev.nranks != topo.nranks:
        return None
    stopped = _stopped_limit_s(warm_from)
    if time_limit_s > 2 * stopped:
        return None
    return (f"{collective} on {topo.name}: tree solve not started: the warm start's tree solve stopped at a "
            f"time limit of {stopped:g} s, and this limit of {time_limit_s:g} s is at most twice that")


#: Seconds per GPU that building, validating and rating the ring fallback takes (the degraded-aware
#: rings, :func:`synth.baselines.weighted_rings`, 8 channels): hpn:16x16x8 after fail2, 3.1 s of CPU
#: (1.5 ms a GPU), 6-10 s of wall time on 2 cores under a load of 8; 4 ms leaves it 8.2 s.
RING_S_PER_GPU = 4e-3


def _ring_estimate_s(topo: Topology) -> float:
    """Seconds the ring fallback is estimated to take on ``topo`` (no layout search: it costs seconds)."""
    return RING_S_PER_GPU * topo.nranks


def _ring_fallback(collective: Collective, topo: Topology, chunks: int | None, exc: TimeLimitError,
                   started: tuple[float, float | None]) -> SynthResult:
    """A tree collective stopped by its time limit: the degraded-aware rings (valid on ``topo``,
    :func:`synth.baselines.weighted_rings`) with their gap against the exact cut bound where phase 1
    finished, else cheap cuts (:func:`synth._cheap_cut.cheap_cut_algbw`). ``started`` is the solve's start (``perf_counter``) and the
    caller's time limit; a ring built past the limit's grace (:func:`synth._deadline.fallback_grace_s`)
    says so."""
    start, limit_s = started
    stopped = f"{collective} on {topo.name!r} under a time limit of {limit_s:g} s: {exc}"
    upper = exc.upper_algbw_GBps if collective is not Collective.ALLREDUCE else None
    how = "the exact cut bound" if upper is not None else \
        "cheap cuts (every GPU alone, every switch with its GPUs; the exact cut bound was not reached)"
    if upper is None:
        upper = cheap_cut_algbw(collective, topo)
    try:
        sched = weighted_rings(collective, topo, max_chunks=chunks)
    except ScheduleError as why:
        return SynthResult(status=Status.TIME_LIMIT, message=f"{stopped} before a schedule was built, and no ring "
                           f"fallback: {why}", schedule=None, algbw_GBps=0.0, optimal_algbw_GBps=upper,
                           gap_pct=100.0, solve_time_s=time.perf_counter() - start, warm=False)
    algbw = sched.algbw_GBps(topo)
    upper = max(upper, algbw)
    gap = gap_pct(algbw, upper)
    elapsed = time.perf_counter() - start
    over = "" if limit_s is None or elapsed <= limit_s + fallback_grace_s(limit_s) else \
        f"; building it ran {elapsed - limit_s:.3g} s past the time limit"
    if "ring_chunks" in sched.meta:
        rings = (f"the degraded-aware rings (ring-lp: {sched.meta['baseline']}, {sched.nchunks} chunks over "
                 f"{len(sched.meta['ring_chunks'])} LP-weighted rings)")
    else:
        rings = f"the NCCL-like ring ({sched.meta['baseline']}, {sched.nchunks} channels)"
    return SynthResult(status=Status.TIME_LIMIT, message=f"{stopped}; fell back to {rings}: {algbw:.6g} GB/s, gap "
                       f"<= {gap:.3f}% vs {how}, {upper:.6g} GB/s{over}",
                       schedule=sched, algbw_GBps=algbw, optimal_algbw_GBps=upper, gap_pct=gap,
                       solve_time_s=elapsed, warm=False)


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
