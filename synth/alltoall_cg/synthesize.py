"""AllToAll synthesis by column generation (MCCL §4.2): public entry points.

:func:`synthesize_alltoall` solves the maximum-concurrent-flow LP by column generation over
per-source shortest-path trees on a time-expanded graph (at most ``max_steps`` GPU hops per path),
then rounds the LP optimum to at most ``nchunks`` chunks per (source, destination) block by deep
diving. Warm from a previous result after capacities fell, it first tries the certified local
repair of :mod:`synth.alltoall_cg._repair` (``warm_mode == "repair"``), which touches only the
blocks routed over a degraded link and is used only when proven LP-optimal. :func:`alltoall_lp_bound`
runs the same column generation without a step bound and returns the LP optimum only, for bounds
on topologies too large for the compact LP.

Units: an AllToAll moves one block of B/N bytes between every ordered GPU pair; the LP's T is the
time per byte of block (s/GB), and algbw = N / T in GB/s (nccl-tests convention).

Examples
--------
>>> from synth.topologies import named_topology
>>> r = synthesize_alltoall(named_topology("hpn:1x2x2"), nchunks=2)
>>> r.status.value, round(r.optimal_algbw_GBps, 6), round(r.algbw_GBps, 6), r.figures.max_steps
('optimal', 100.0, 100.0, 2)
>>> round(alltoall_lp_bound(named_topology("nvswitch:4")).algbw_GBps, 6)
480.0
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._args import check_cg_args
from synth.alltoall_cg._cg import CgRun, ColumnGeneration, cg_message
from synth.alltoall_cg.chunks import (
    ROUNDING_BUDGET_S,
    TARGET_LOSS,
    BlockPaths,
    binding_note,
    check_rounding_args,
    choose_chunks,
    chunk_cap,
)
from synth.alltoall_cg._expanded import Network, hop_diameter
from synth.alltoall_cg._repair import RoundedState, repair
from synth.alltoall_cg._rounding import (
    DIVES,
    ROUNDING_RETRY_GAP,
    DiveResult,
    balanced_remainder,
    deep_dive,
    disaggregate,
    largest_remainder,
)
from synth.alltoall_cg._ask import Ask, check_end, limit_error, make_ask
from synth.alltoall_cg._schedule import (
    RouteCache,
    build_deadline,
    build_schedule,
    check_and_measure,
    min_build_s,
)
from synth.alltoall_cg._warm import WarmState, paths_from_schedule, restore, seed_paths
from synth._resources import require_memory
from synth.errors import ScheduleError, SolverError, TimeLimitError
from synth.figures import AllToAllFigures, Tried
from synth.result import Status, SynthResult, judge
from synth.result import gap_pct as gap_pct_of
from synth.schedule import CutLink, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["AllToAllBound", "alltoall_lp_bound", "synthesize_alltoall"]

log = logging.getLogger(__name__)

WarmStart = SynthResult | WarmState | Schedule | None

#: A warm-start schedule with more routes than this is not seeded: its paths cost more to add than they save.
#: Measured (fail2, schedule of the healthy fabric): seeding cuts a 64-GPU torus from 4.7 to 0.3 s, but on
#: hpn, where the cold column generation converges in 3 iterations, it only adds time (256 GPUs 0.7 -> 3.2 s,
#: 512 GPUs 2.3 -> 9.0 s) and at 1024 GPUs the NCCL-like baseline's 1.05M routes kept a 30 s solve from
#: improving on the baseline at all (cold: optimal in 12 s).
SEED_MAX_ROUTES = 1 << 17


@dataclass(frozen=True, slots=True)
class AllToAllBound:
    """LP optimum of AllToAll by column generation: ``OPTIMAL``, or ``TIME_LIMIT`` with the best
    proven (Farley) upper bound.

    ``rate_GBps`` is per ordered pair, ``algbw_GBps = N · rate_GBps``; ``saturated`` lists the links
    whose capacity constraint has a nonzero dual at the optimum.
    """

    status: Status
    message: str
    algbw_GBps: float  # noqa: N815
    rate_GBps: float  # noqa: N815
    saturated: tuple[tuple[str, str], ...]
    cg_iterations: int
    solve_time_s: float

    @property
    def success(self) -> bool:
        """True when the LP optimum is proven."""
        return self.status is Status.OPTIMAL

    @property
    def optimal(self) -> bool:
        """Same as :attr:`success`: ``algbw_GBps`` is the LP optimum, not only an upper bound."""
        return self.status is Status.OPTIMAL


def _validate_args(topology: object, nchunks: object, max_steps: object, solver: object, time_limit_s: object,
                   warm_start: object) -> None:
    check_cg_args("synthesize_alltoall", "AllToAll", topology, nchunks, max_steps, solver, time_limit_s)
    if warm_start is not None and not isinstance(warm_start, (SynthResult, WarmState, Schedule)):
        raise SolverError(
            f"warm_start must be a SynthResult, its warm_state, or a Schedule, got {type(warm_start).__name__}"
        )
    if isinstance(warm_start, Schedule) and warm_start.collective != "alltoall":
        raise SolverError(f"warm_start schedule is a {warm_start.collective} schedule, not alltoall")


def _require_memory(net: Network, diameter: int) -> None:
    """Refuse a solve whose path pool would not fit: it stores ~N² paths of up to ``diameter`` hops
    per tree family; measured peaks are about 64 bytes per N²·diameter (rings of 200-300 GPUs)."""
    n = net.n_gpus
    require_memory(64.0 * n * n * max(1, diameter), f"AllToAll on {net.name!r} ({n} GPUs, hop diameter {diameter})",
                   "the path pool grows as N^2 times the hop diameter; use fewer ranks or a lower-diameter topology")


def _scale(net: Network) -> float:
    # Capacities are divided by this so that T is of order N and each source's dual of order 1.
    return float(net.caps_GBps.sum()) / (3.0 * net.n_gpus)


def _start(net: Network, solver: str, steps: int | None,
           warm: WarmStart) -> tuple[ColumnGeneration, str, int, RouteCache]:
    """A column generation seeded cold, from a warm state or from a schedule."""
    state = warm.warm_state if isinstance(warm, SynthResult) else warm
    if isinstance(state, WarmState) and steps is not None:
        steps = max(steps, state.steps) if state.fits(net) else steps
    cg = ColumnGeneration(net, solver, steps, scale=_scale(net))
    dropped = 0
    cache = RouteCache()
    if isinstance(state, WarmState) and state.fits(net) and state.solver == solver:
        dropped = restore(cg, state)
        cache = state.routes.copy()
        mode = "state"
    elif isinstance(state, WarmState):
        seed_paths(cg, state.node_paths())
        mode = "pool-paths"
    elif isinstance(state, Schedule) and len(state.routes) <= SEED_MAX_ROUTES:
        seed_paths(cg, paths_from_schedule(state))
        mode = "schedule"
    else:  # cold, or a schedule too large to seed (the result's message says so)
        mode = "cold"
    # Shortest-hop trees make the master feasible whatever the seeds were (a restored pool with a
    # usable tree per source already is, and its basis is worth more than extra columns).
    if not (mode == "state" and cg.trees_feasible):
        trees = cg.price(np.zeros(net.n_links))
        cg.add_from(trees, np.arange(net.n_gpus))
    return cg, mode, dropped, cache


# (exact algbw, bottleneck, chunks per link), None if the check failed
Measured = tuple[float, tuple[CutLink, ...], npt.NDArray[np.float64]] | None


def _round(topology: Topology, cg: ColumnGeneration, pids: np.ndarray, y: np.ndarray, nchunks: int, t_lp: float,
           deadline: float | None) -> tuple[DiveResult, Measured]:
    """Best of largest-remainder, balanced-remainder and (while the gap stays above
    ``ROUNDING_RETRY_GAP``) a few dives, by the exact T of the rounded solution."""
    best = largest_remainder(cg, pids, y, nchunks)
    best_m = _measure(topology, cg, best, nchunks)
    best_t = _t_of(cg, best_m)
    if best_t > t_lp * (1 + ROUNDING_RETRY_GAP) and (deadline is None or time.perf_counter() < deadline):
        # Load-aware greedy: blocks that split alike stop stacking their extra chunks on the same
        # links; often enough to skip the dive, whose LP re-solves dominate large degraded fabrics.
        cand = balanced_remainder(cg, pids, y, nchunks, np.zeros(cg.net.n_links))
        m = _measure(topology, cg, cand, nchunks)
        if _t_of(cg, m) < best_t:
            best, best_m, best_t = cand, m, _t_of(cg, m)
    for batch, backtracks, slack in DIVES:
        if best_t <= t_lp * (1 + ROUNDING_RETRY_GAP) or (deadline is not None and time.perf_counter() > deadline):
            break
        cand = deep_dive(cg, pids, y, nchunks, deadline=deadline, batch=batch, backtracks=backtracks, slack=slack)
        m = _measure(topology, cg, cand, nchunks)
        t = _t_of(cg, m)
        if t < best_t * (1 - 1e-12) or not best.dived:
            best, best_t, best_m = cand, t, m
    return best, best_m


def _measure(topology: Topology, cg: ColumnGeneration, dive: DiveResult, nchunks: int) -> Measured:
    try:
        return check_and_measure(topology, cg.paths, dive.pids, dive.chunks, nchunks)
    except ScheduleError:
        return None


def _t_of(cg: ColumnGeneration, measured: Measured) -> float:
    return math.inf if measured is None else cg.net.n_gpus / measured[0]


def _choose(topology: Topology, cg: ColumnGeneration, pids: np.ndarray, y: np.ndarray, first: int,
            cap: tuple[int, str], dive: DiveResult, measured: Measured, lp_algbw: float,
            budget_s: float) -> tuple[DiveResult, Measured, int, str | None, Tried]:
    """The K-search of :mod:`synth.alltoall_cg.chunks` when the rounding at ``first`` chunks is not
    exact: its pick where it measures better than ``dive``, with the binding limit and the Ks tried."""
    loss = 1.0 - measured[0] / lp_algbw if measured is not None else math.inf
    if loss <= 1e-9 or len(pids) == 0:
        return dive, measured, first, None, ()
    starts, links = cg.paths.link_csr(pids)
    bp = BlockPaths(cg.paths.src[pids] * cg.net.n_gpus + cg.paths.dst[pids], starts, links, cg.net.caps_GBps,
                    y / first)
    pick = choose_chunks(bp, first, cap[0], budget_s=budget_s, first_loss=loss, cap_name=cap[1])
    keep = pick.chunks > 0
    cand = DiveResult(pids[keep], pick.chunks[keep], 0, 0, 0, 0, False)
    m = _measure(topology, cg, cand, pick.nchunks)
    if m is not None and m[0] > (measured[0] if measured is not None else 0.0) * (1 + 1e-12):
        dive, measured, first, loss = cand, m, pick.nchunks, 1.0 - m[0] / lp_algbw
    return dive, measured, first, (pick.binding or cap[1]) if loss > TARGET_LOSS else None, tuple(pick.tried)


def synthesize_alltoall(
    topology: Topology,
    *,
    nchunks: int | None = 10,
    max_nchunks: int | None = None,
    rounding_budget_s: float = ROUNDING_BUDGET_S,
    max_steps: int | None = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
    warm_start: WarmStart = None,
    local_repair: bool = True,
) -> SynthResult:
    """Throughput-optimal AllToAll schedule with at most ``nchunks`` chunks per block.

    Parameters
    ----------
    topology
        Any topology whose GPUs all reach each other over live links.
    nchunks
        Chunks per (source, destination) block, K ≥ 1, used as given (default 10; a MIP over the
        LP's paths improves a rounding that loses over 0.1 %). ``None`` (:func:`synth.synthesize`'s
        default) chooses K: 10 if that rounds within 0.1 % of the LP optimum, else another K up to
        ``max_nchunks`` that does (:mod:`synth.alltoall_cg.chunks`), else the best, naming the
        limit in ``figures.binding_limit``.
    max_nchunks, rounding_budget_s
        Largest K of that choice (default 64, never above the MSCCL executor's ``N·K ≤ 32768``) and
        the wall-clock seconds its search may take (default 3; the loss stays certified).
    max_steps
        Step bound m: at most m GPU-to-GPU hops per path. ``None`` sweeps m upward from the hop
        diameter and keeps the first m whose LP optimum equals the unbounded one.
    solver
        LP backend, ``"highs"`` (default; primal simplex re-solves) or ``"ortools"`` (GLOP).
    time_limit_s
        Wall-clock seconds; when reached, the best schedule so far is returned with status
        ``TIME_LIMIT`` and its gap against a proven (Farley) upper bound. Building the schedule
        (time reserved for it) may pass the limit by 2 s, then raises :class:`TimeLimitError`.
    warm_start
        A previous :class:`SynthResult` (or its ``warm_state``), reusing its column pool and basis,
        or a :class:`Schedule` whose paths seed the pool.
    local_repair
        With a warm state on the same links and only capacity drops, first try the certified local
        repair (re-route only the blocks over a degraded link; ``warm_mode == "repair"``), kept only
        when a lower bound proves its LP value optimal. False skips it.

    Returns
    -------
    SynthResult
        ``optimal_algbw_GBps`` is the LP optimum (N·z*), ``gap_pct`` the rounding gap against it
        (:func:`synth.result.judge`); ``figures`` an :class:`~synth.figures.AllToAllFigures`;
        ``warm_state`` seeds the next call.

    Raises
    ------
    SolverError
        Bad arguments (naming them), ``max_steps`` below the hop diameter, GPUs that cannot reach
        each other, or an LP that fails before any solution.

    Notes: pricing finds every source's cheapest tree cost by one layered min-plus DP (``O(N·|A_T|)``,
    proving optimality and giving the Farley bound), then trees for sources with negative reduced cost.

    References: MCCL §4.2 (column generation, time-expanded pricing).
    """
    _validate_args(topology, 1 if nchunks is None else nchunks, max_steps, solver, time_limit_s, warm_start)
    check_rounding_args(max_nchunks, rounding_budget_s)
    first, cap_k, cap_name = chunk_cap(topology.nranks, nchunks, max_nchunks)
    ask = make_ask(topology.nranks, solver, max_steps, (first, cap_k, cap_name), rounding_budget_s, time_limit_s)
    net = Network.from_topology(topology)
    state = warm_start.warm_state if isinstance(warm_start, SynthResult) else warm_start
    diameter = _diameter(topology, net, state, max_steps)
    if local_repair and isinstance(state, WarmState) and _repairable(state, net, nchunks, cap_k, diameter, max_steps):
        repaired = _try_repair(topology, net, state, ask, diameter)
        # The repair keeps the previous K: with K to choose, a repair short of 0.1 % gives way to
        # the full warm run and its chunk choice.
        if repaired is not None and isinstance(repaired.figures, AllToAllFigures) \
                and (nchunks is not None or repaired.figures.binding_limit is None):
            return repaired
    return _column_generation(topology, net, warm_start, ask, diameter)


def _diameter(topology: Topology, net: Network, state: object, max_steps: int | None) -> int:
    """The hop diameter (a warm state's where it knows it), once the path pool is known to fit and
    ``max_steps`` to reach every pair."""
    known = state.diameter_for(net) if isinstance(state, WarmState) else None
    diameter = known if known is not None else hop_diameter(net)
    _require_memory(net, diameter)
    if max_steps is not None and max_steps < diameter:
        raise SolverError(
            f"max_steps={max_steps!r} is below the hop diameter {diameter} of topology {topology.name!r}: "
            f"some GPU pair needs {diameter} hops"
        )
    return diameter


def _repairable(state: WarmState, net: Network, nchunks: int | None, cap_k: int, diameter: int,
                max_steps: int | None) -> bool:
    """Whether the certified local repair may start from ``state`` (same links, same K and steps)."""
    return state.rounded is not None and state.fits(net) \
        and (state.rounded.nchunks == nchunks or nchunks is None and state.rounded.nchunks <= cap_k) \
        and diameter <= state.steps and (max_steps is None or max_steps == state.steps)


def _column_generation(topology: Topology, net: Network, warm_start: WarmStart, ask: Ask,
                       diameter: int) -> SynthResult:
    """The full column generation (cold or warm), then the rounding and the K choice."""
    steps = ask.max_steps if ask.max_steps is not None else diameter
    cg, mode, dropped, cache = _start(net, ask.solver, steps, warm_start)
    t_setup = time.perf_counter() - ask.start
    check_end(topology, ask, "setting up the path pool", None)
    run = cg.run(deadline=ask.deadline, first_method="dual" if mode == "state" else "primal",
                 sweep=ask.max_steps is None)
    t_cg = time.perf_counter() - ask.start - t_setup
    n = net.n_gpus
    lp_algbw = n / run.t_lp
    bound_algbw = lp_algbw if run.converged else (n / run.lower_bound if run.lower_bound > 0 else math.inf)
    log.info("alltoall_cg: LP %s after %d iterations: algbw %.6g GB/s (bound %.6g), %d trees, %d steps",
             "optimal" if run.converged else "stopped", run.iterations, lp_algbw, bound_algbw, len(cg.trees),
             cg.steps)
    check_end(topology, ask, f"after {run.iterations} CG iterations", bound_algbw,
              build_s=min_build_s(n) if not cache.hops and not cache.routes else 0.0, optimum=run.converged)
    t0 = time.perf_counter()
    pids, y = disaggregate(cg, run.lam, ask.first)
    dive, measured = _round(topology, cg, pids, y, ask.first, run.t_lp, ask.deadline if run.converged else ask.start)
    budget = ask.rounding_budget_s if ask.deadline is None else \
        min(ask.rounding_budget_s, ask.deadline - time.perf_counter())
    tried: Tried | None = None
    nchunks, binding = ask.first, None
    if run.converged:
        dive, measured, nchunks, binding, tried = _choose(topology, cg, pids, y, ask.first, (ask.cap_k, ask.cap_name),
                                                          dive, measured, lp_algbw, budget)
    t_round = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        algbw, schedule, rounded = _schedule_of(topology, net, cg, run, dive, measured, nchunks, cache, ask)
    except TimeLimitError as exc:
        raise limit_error(topology, ask, str(exc), bound_algbw, run.converged) from exc
    except ScheduleError as exc:
        return SynthResult(status=Status.FAILED, message=f"rounded AllToAll schedule failed loopcoll's re-check: "
                           f"{exc}", schedule=None, algbw_GBps=0.0, optimal_algbw_GBps=lp_algbw, gap_pct=100.0,
                           solve_time_s=time.perf_counter() - ask.start, warm=mode != "cold")
    t_sched = time.perf_counter() - t0
    optimal = lp_algbw if run.converged else bound_algbw
    status, gap_pct = judge(algbw, optimal) if run.converged else (Status.TIME_LIMIT, gap_pct_of(algbw, optimal))
    elapsed = time.perf_counter() - ask.start
    assert cg.steps is not None  # synthesis always bounds the steps (only alltoall_lp_bound does not)
    figures = AllToAllFigures(
        lp_algbw_GBps=lp_algbw, lp_bound_algbw_GBps=bound_algbw, gap=gap_pct / 100.0, cg_iterations=run.iterations,
        lp_pivots=run.lp_pivots, columns=len(cg.trees), paths=len(cg.paths), max_steps=cg.steps,
        hop_diameter=diameter, warm_mode=mode, trees_dropped=dropped, repaired_blocks=None, dive_steps=dive.steps,
        dive_backtracks=dive.backtracks, dive_columns_added=dive.columns_added, dive_lp_solves=dive.lp_solves,
        dived=dive.dived, setup_time_s=t_setup, cg_time_s=t_cg, lp_time_s=run.lp_time_s,
        pricing_time_s=run.pricing_time_s, rounding_time_s=t_round, schedule_time_s=t_sched, nchunks=nchunks,
        binding_limit=binding, rounding_tried=tried)
    message = cg_message(run, figures, ask.solver, bound_algbw, elapsed)
    if isinstance(warm_start, Schedule) and mode == "cold":
        message += (f"; cold: the warm-start schedule's {len(warm_start.routes)} routes were not seeded (more than "
                    f"SEED_MAX_ROUTES = {SEED_MAX_ROUTES}: seeding them costs more than it saves)")
    log.info("alltoall_cg: %s", message)
    return SynthResult(status=status, message=message, schedule=schedule, algbw_GBps=algbw,
                       optimal_algbw_GBps=optimal, gap_pct=gap_pct, solve_time_s=elapsed, warm=mode != "cold",
                       figures=figures, warm_state=WarmState.capture(cg, cache, diameter, rounded))


def _schedule_of(topology: Topology, net: Network, cg: ColumnGeneration, run: CgRun, dive: DiveResult,
                 measured: Measured, nchunks: int, cache: RouteCache,
                 ask: Ask) -> tuple[float, Schedule, RoundedState | None]:
    """The rounded schedule's algbw, the schedule (checked) and, for a converged LP, the state a
    later repair starts from."""
    lp_algbw = net.n_gpus / run.t_lp
    bound_algbw = lp_algbw if run.converged else (net.n_gpus / run.lower_bound if run.lower_bound > 0 else math.inf)
    meta: dict[str, Any] = {
        "synthesizer": "alltoall_cg",
        "solver": ask.solver,
        "nchunks": nchunks,
        "max_steps": cg.steps,
        "lp_algbw_GBps": lp_algbw,
        "optimal_algbw_GBps": lp_algbw if run.converged else bound_algbw,
        "topology": topology.name,
        **communicator_meta(topology),
    }
    # The check ran on exactly this rounding in _round; run it again only if it failed there.
    algbw, cut, loads = measured if measured is not None else check_and_measure(topology, cg.paths, dive.pids,
                                                                                dive.chunks, nchunks)
    schedule, order = build_schedule(cg.paths, dive.pids, dive.chunks, nchunks, meta, cache,
                                     deadline=build_deadline(ask.end))
    schedule = replace(schedule, bottleneck=cut, topology_fingerprint=topology.fingerprint)
    rounded = RoundedState(net.caps_GBps.copy(), nchunks, schedule, dive.pids[order], dive.chunks[order],
                           loads, run.t_lp, ask.max_steps is None) if run.converged else None
    return algbw, schedule, rounded


def _try_repair(topology: Topology, net: Network, state: WarmState, ask: Ask, diameter: int) -> SynthResult | None:
    """The certified local repair as a result, or None when it does not apply (see ``_repair``)."""
    assert state.rounded is not None
    n, nchunks = net.n_gpus, state.rounded.nchunks
    meta: dict[str, Any] = {"synthesizer": "alltoall_cg", "solver": ask.solver, "nchunks": nchunks,
                            "max_steps": state.steps, "topology": topology.name,
                            **communicator_meta(topology)}
    rep = repair(topology, net, state.paths, state.rounded, steps=state.steps, free_bound=ask.max_steps is None,
                 solver=ask.solver, scale=_scale(net), deadline=ask.deadline, cache=state.routes.segments_only(),
                 meta=meta)
    if rep is None:
        return None
    lp_algbw = n / rep.t_lp
    status, gap_pct = judge(rep.algbw_GBps, lp_algbw)
    gap = gap_pct / 100.0
    elapsed = time.perf_counter() - ask.start
    dive = rep.dive
    binding = ask.cap_name if gap > TARGET_LOSS else None
    figures = AllToAllFigures(
        lp_algbw_GBps=lp_algbw, lp_bound_algbw_GBps=lp_algbw, gap=gap, cg_iterations=rep.rounds,
        lp_pivots=rep.pivots, columns=len(state.trees), paths=len(rep.paths), max_steps=state.steps,
        hop_diameter=diameter, warm_mode="repair", trees_dropped=0, repaired_blocks=rep.blocks,
        dive_steps=dive.steps, dive_backtracks=dive.backtracks, dive_columns_added=dive.columns_added,
        dive_lp_solves=dive.lp_solves, dived=dive.dived, setup_time_s=0.0,
        cg_time_s=rep.lp_time_s + rep.pricing_time_s, lp_time_s=rep.lp_time_s,
        pricing_time_s=rep.pricing_time_s, rounding_time_s=rep.rounding_time_s,
        schedule_time_s=elapsed - rep.lp_time_s - rep.pricing_time_s - rep.rounding_time_s,
        nchunks=nchunks, binding_limit=binding, rounding_tried=())
    message = (f"LP optimal by local repair of {rep.blocks} blocks ({rep.rounds} pricing rounds, certified by the "
               f"{rep.certificate}); rounded to {nchunks} chunks, gap {100 * gap:.3f}% ({ask.solver})"
               + binding_note(binding))
    log.info("alltoall_cg: %s", message)
    new_state = WarmState(state.node_ids, state.link_keys, state.solver, state.steps, rep.paths, state.trees,
                          state.tree_loads, state.basis, state.routes, net.live.copy(), diameter, rep.rounded)
    return SynthResult(status=status, message=message, schedule=rep.rounded.schedule, algbw_GBps=rep.algbw_GBps,
                       optimal_algbw_GBps=lp_algbw, gap_pct=gap_pct, solve_time_s=elapsed, warm=True,
                       figures=figures, warm_state=new_state)


def alltoall_lp_bound(topology: Topology, *, solver: str = "highs", time_limit_s: float | None = None) -> AllToAllBound:
    """AllToAll LP optimum (maximum concurrent flow, GPUs relay) by column generation.

    Without a step bound, pricing runs on the physical graph, so the result equals the compact LP
    of :func:`synth.bounds.alltoall.alltoall_rate_GBps`. On a time limit, ``algbw_GBps`` is the best
    proven upper bound (Farley) and ``optimal`` is False.
    """
    _validate_args(topology, 1, None, solver, time_limit_s, None)
    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + float(time_limit_s)
    net = Network.from_topology(topology)
    _require_memory(net, hop_diameter(net))
    cg = ColumnGeneration(net, solver, None, scale=_scale(net))
    cg.add_from(cg.price(np.zeros(net.n_links)), np.arange(net.n_gpus))
    run: CgRun = cg.run(deadline=deadline, sweep=False)
    n = net.n_gpus
    t = run.t_lp if run.converged else run.lower_bound
    saturated: tuple[tuple[str, str], ...] = ()
    if cg.last_solution is not None:
        _, w = cg.master.duals(cg.last_solution)
        top = float(w.max()) if len(w) else 0.0
        saturated = tuple(sorted(net.link_keys[e] for e in np.flatnonzero(w > 1e-7 * max(top, 1e-300))))
    algbw = n / t if t > 0 else math.inf
    status, message = (Status.OPTIMAL, f"LP optimum after {run.iterations} CG iterations ({solver} {run.native})") \
        if run.converged else (Status.TIME_LIMIT, f"time limit after {run.iterations} CG iterations: {algbw:.6g} "
                               f"GB/s is the best proven upper bound ({solver} {run.native})")
    return AllToAllBound(status, message, algbw, algbw / n, saturated, run.iterations, time.perf_counter() - start)
