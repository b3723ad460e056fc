"""AllToAllv synthesis: AllToAll column generation with an arbitrary demand matrix, warm as it shifts.

:func:`synthesize_alltoallv` minimises the completion time of an AllToAllv whose block (s, d) is
``demand[s][d]`` bytes: a maximum-concurrent-flow LP over per-source shortest-path trees (GPUs
relay; at most ``max_steps`` GPU hops, swept up from the hop diameter until the LP equals the
unbounded one), rounded to ``nchunks`` equal chunks per block and improved by chunk moves; the
gap against the LP optimum is certified. A warm start from the previous result re-weights its
tree pool for the new matrix and re-solves from its basis. :func:`alltoallv_lp_bound` is the
exact LP optimum (no step bound).

Units: demand in bytes, capacities in GB/s (10^9 byte/s), times in seconds.

Examples
--------
>>> from synth.topologies import named_topology
>>> r = synthesize_alltoallv(named_topology("nvswitch:4"), [[0, 9e9, 0, 0], [0] * 4, [0] * 4, [0] * 4])
>>> r.status.value, round(r.completion_time_s, 6), round(r.optimal_time_s, 6)  # 9 GB over one 360 GB/s link
('optimal', 0.025, 0.025)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._args import check_cg_args
from synth.alltoall_cg._expanded import Network, hop_diameter
from synth.alltoall_cg._schedule import RouteCache, make_routes, route_order
from synth.alltoall_cg._vcg import VRun, WeightedCg
from synth.alltoall_cg._vround import disaggregate_v, greedy_remainder, improve, largest_remainder_v, link_loads
from synth.alltoallv_schedule import AllToAllvSchedule, check_demand
from synth.errors import ScheduleError, SolverError
from synth.figures import AllToAllvFigures
from synth.result import Status, format_status, gap_pct_time, judge_time
from synth.topologies.capacity import refuse_adjusted
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["AllToAllvBound", "AllToAllvResult", "AllToAllvWarmState", "alltoallv_lp_bound", "synthesize_alltoallv"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AllToAllvWarmState:
    """What a warm re-synthesis needs: the CG (pool, master with basis) and the topology it ran on."""

    fingerprint: str
    nchunks: int
    cg: WeightedCg
    demand_bytes: FloatArray


@dataclass(frozen=True, slots=True, kw_only=True)
class AllToAllvResult:
    """Outcome of :func:`synthesize_alltoallv`.

    ``completion_time_s`` is the rounded schedule's bandwidth-term time, ``optimal_time_s`` the LP
    optimum or, under ``TIME_LIMIT``, a proven lower bound; ``gap_pct`` is
    ``100 · (1 − optimal/completion)``. ``OPTIMAL`` when the schedule reaches the LP optimum, else
    ``FEASIBLE`` (:func:`synth.result.judge_time`); ``figures`` (:class:`~synth.figures.AllToAllvFigures`:
    iterations, pivots, phase times) is ``None`` for an empty demand matrix. Built by keyword only.
    """

    status: Status
    message: str
    schedule: AllToAllvSchedule | None
    completion_time_s: float
    optimal_time_s: float
    gap_pct: float
    solve_time_s: float
    warm: bool = False
    figures: AllToAllvFigures | None = None
    warm_state: AllToAllvWarmState | None = field(default=None, compare=False, repr=False)

    @property
    def success(self) -> bool:
        """True when a schedule exists (``OPTIMAL``, ``FEASIBLE``, or a time limit with a certified gap)."""
        return self.schedule is not None and self.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT)

    def status_text(self) -> str:
        """The status with its gap, for text output (:func:`synth.result.format_status`)."""
        return format_status(self.status, self.gap_pct, f"{1e6 * self.optimal_time_s:.3f} us")


@dataclass(frozen=True, slots=True)
class AllToAllvBound:
    """Exact LP optimum of an AllToAllv (``OPTIMAL``) or a proven lower bound (``TIME_LIMIT``)."""

    status: Status
    message: str
    time_s: float
    cg_iterations: int
    solve_time_s: float

    @property
    def success(self) -> bool:
        """True when ``time_s`` is the LP optimum."""
        return self.status is Status.OPTIMAL


def _check_args(topology: object, nchunks: object, max_steps: object, solver: object, time_limit_s: object) -> None:
    check_cg_args("synthesize_alltoallv", "AllToAllv", topology, nchunks, max_steps, solver, time_limit_s)

    # Rule 0 and the floor (docs/exactness.md) are not proven for a demand matrix: refuse such fabrics.
    refuse_adjusted(cast(Topology, topology), "AllToAllv")


def _demand_array(topology: Topology, demand: Any) -> FloatArray:
    try:
        rows = check_demand(demand, topology.nranks)
    except ScheduleError as exc:
        raise SolverError(str(exc)) from None
    return np.array(rows, dtype=np.float64)


def _scale(net: Network) -> float:
    return float(net.caps_GBps.sum()) / (3.0 * net.n_gpus)


def _unit(d: FloatArray) -> float:
    pos = d[d > 0]
    return float(pos.mean())


def _empty(topology: Topology, d: FloatArray, nchunks: int, start: float) -> AllToAllvResult:
    sched = AllToAllvSchedule(topology.nranks, nchunks, d.tolist(), (), topology.fingerprint,
                              {"synthesizer": "alltoallv_cg", "topology": topology.name})
    return AllToAllvResult(status=Status.OPTIMAL, message="empty demand matrix: nothing to move", schedule=sched,
                           completion_time_s=0.0, optimal_time_s=0.0, gap_pct=0.0,
                           solve_time_s=time.perf_counter() - start)


def synthesize_alltoallv(
    topology: Topology,
    demand: Any,
    *,
    nchunks: int = 16,
    max_steps: int | None = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
    warm_start: AllToAllvResult | AllToAllvWarmState | None = None,
    max_moves: int = 2000,
    target_gap: float = 1e-3,
    warm_pool: str = "auto",
) -> AllToAllvResult:
    """Throughput-optimal AllToAllv schedule for ``demand`` (bytes per ordered rank pair).

    Parameters
    ----------
    topology
        Any topology whose GPUs reach each other over live links.
    demand
        N×N non-negative bytes (nested lists or a numpy array); the diagonal is ignored.
    nchunks
        Equal chunks per block (K ≥ 1). The default 16 splits evenly over 2, 4, 8 or 16 rails; no
        MSCCL limit applies (AllToAllv schedules are not exported as MSCCL XML).
    max_steps
        GPU hops per path; ``None`` sweeps upward from the hop diameter until the LP equals the
        unbounded optimum.
    solver
        ``"highs"`` (default) or ``"ortools"``.
    time_limit_s
        Wall-clock seconds; when reached, the best schedule so far with its proven gap.
    warm_start
        A previous result (or its ``warm_state``) on the same topology: its tree pool is
        re-weighted for ``demand`` and the LP re-solved from its basis. On another topology (or
        backend) the start is cold.
    warm_pool
        Which previous trees a warm start keeps: ``"full"`` (all, with the previous basis),
        ``"support"`` (only those with λ > 0, a smaller master), or ``"auto"`` (support when the
        pool is more than three times the support: degenerate masters re-solve faster small).
    max_moves
        Cap on single-chunk moves after rounding.
    target_gap
        Chunk moves stop once the schedule is within this fraction of the LP optimum (0 moves on
        while any move helps).

    Raises
    ------
    SolverError
        Bad arguments, unreachable GPUs, or an LP that fails before any solution.
    """
    _check_args(topology, nchunks, max_steps, solver, time_limit_s)
    _check_options(max_moves, warm_pool, target_gap, warm_start)
    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + float(time_limit_s)
    d_bytes = _demand_array(topology, demand)
    if not (d_bytes > 0).any():
        return _empty(topology, d_bytes, nchunks, start)
    unit = _unit(d_bytes)
    state = warm_start.warm_state if isinstance(warm_start, AllToAllvResult) else warm_start
    cg, mode = _start(topology, state, d_bytes / unit, solver, max_steps, warm_pool)
    t_setup = time.perf_counter() - start
    run = cg.run(deadline=deadline, sweep=max_steps is None)
    t_cg = time.perf_counter() - start - t_setup
    return _finish(topology, cg, run, d_bytes, unit, nchunks, mode, max_moves, target_gap, deadline, start, t_setup, t_cg)


def _check_options(max_moves: object, warm_pool: object, target_gap: object, warm_start: object) -> None:
    """Refuse a bad ``max_moves``, ``warm_pool``, ``target_gap`` or ``warm_start``, naming it."""
    if isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0:
        raise SolverError(f"max_moves must be an integer >= 0, got {max_moves!r}")
    if warm_pool not in ("auto", "full", "support"):
        raise SolverError(f"warm_pool must be 'auto', 'full' or 'support', got {warm_pool!r}")
    if isinstance(target_gap, bool) or not isinstance(target_gap, (int, float)) or not 0 <= target_gap < 1:
        raise SolverError(f"target_gap must be a number in [0, 1), got {target_gap!r}")
    if warm_start is not None and not isinstance(warm_start, (AllToAllvResult, AllToAllvWarmState)):
        raise SolverError(f"warm_start must be an AllToAllvResult or its warm_state, got {type(warm_start).__name__}")


def _start(topology: Topology, state: AllToAllvWarmState | None, dn: FloatArray, solver: str,
           max_steps: int | None, warm_pool: str) -> tuple[WeightedCg, str]:
    """The column generation for the demand ``dn`` (in units of its mean block): the warm state's
    pool re-weighted where it is on the same topology, backend and steps, else a cold start."""
    if (state is not None and state.fingerprint == topology.fingerprint and state.cg.solver == solver
            and (max_steps is None or state.cg.steps == max_steps)):
        support = int((state.cg.lambdas() > 1e-12).sum())
        small = warm_pool == "support" or (warm_pool == "auto" and len(state.cg.trees) > 3 * max(support, 1))
        return state.cg.reweighted(dn, support_only=small), "reweighted-support" if small else "reweighted"
    net = Network.from_topology(topology)
    diameter = hop_diameter(net)
    if max_steps is not None and max_steps < diameter:
        raise SolverError(f"max_steps={max_steps!r} is below the hop diameter {diameter} of topology "
                          f"{topology.name!r}: some GPU pair needs {diameter} hops")
    cg = WeightedCg(net, solver, max_steps if max_steps is not None else diameter, dn, scale=_scale(net))
    cg.seed()
    return cg, "cold"


def _finish(topology: Topology, cg: WeightedCg, run: VRun, d_bytes: FloatArray, unit: float, nchunks: int,
            mode: str, max_moves: int, target_gap: float, deadline: float | None, start: float, t_setup: float,
            t_cg: float) -> AllToAllvResult:
    to_s = unit / 1e9
    n = cg.net.n_gpus
    t0 = time.perf_counter()
    pids, y = disaggregate_v(cg, cg.lambdas(), nchunks)
    block = cg.paths.src[pids] * n + cg.paths.dst[pids]
    caps = np.where(cg.net.caps_GBps > 0, cg.net.caps_GBps, np.inf)
    chunks = largest_remainder_v(block, y, nchunks)
    t_lr = float((link_loads(cg, pids, chunks, nchunks) / caps).max())
    greedy = greedy_remainder(cg, pids, y, nchunks)
    t_greedy = float((link_loads(cg, pids, greedy, nchunks) / caps).max())
    if t_greedy < t_lr:
        chunks = greedy
    keep = chunks > 0
    pids, chunks = pids[keep], chunks[keep]
    move_deadline = deadline if deadline is not None else time.perf_counter() + max(0.5, 2 * t_cg)
    good_enough = run.t_lp * (1 + target_gap) if run.converged else 0.0
    pids, chunks, moves = improve(cg, pids, chunks, nchunks, max_moves=max_moves, deadline=move_deadline,
                                  good_enough=good_enough)
    loads = link_loads(cg, pids, chunks, nchunks)
    t_round = float((loads / caps).max())
    t_rounding = time.perf_counter() - t0
    t0 = time.perf_counter()
    order = route_order(cg.paths, pids, chunks)
    cache = getattr(cg, "route_cache", None) or RouteCache()
    routes = make_routes(cg.paths, pids[order], chunks[order], cache)
    cg.route_cache = cache
    lp_s = run.t_lp * to_s
    lb_s = (run.t_lp if run.converged else run.lower_bound) * to_s
    ratio = loads / caps
    tight = sorted(cg.net.link_keys[e] for e in np.flatnonzero(ratio >= ratio.max() * (1 - 1e-9)).tolist())
    meta: dict[str, Any] = {"synthesizer": "alltoallv_cg", "solver": cg.solver, "nchunks": nchunks,
                            "max_steps": cg.steps, "lp_completion_s": lp_s, "optimal_time_s": lb_s,
                            "bottleneck": [list(k) for k in tight], "topology": topology.name,
                            **communicator_meta(topology)}
    schedule = AllToAllvSchedule(n, nchunks, cast(Any, d_bytes), tuple(routes), topology.fingerprint, meta)
    t_sched = time.perf_counter() - t0
    completion = t_round * to_s
    status, gap_pct = judge_time(completion, lb_s)
    if not run.converged:  # stopped by the limit: the gap is against the proven lower bound
        status, gap_pct = Status.TIME_LIMIT, gap_pct_time(completion, lb_s)
    gap = gap_pct / 100.0
    elapsed = time.perf_counter() - start
    figures = AllToAllvFigures(
        lp_completion_s=lp_s, lower_bound_s=lb_s, gap=gap, cg_iterations=run.iterations, lp_pivots=run.lp_pivots,
        columns=len(cg.trees), paths=len(cg.paths), max_steps=cg.steps, warm_mode=mode,
        largest_remainder_completion_s=t_lr * to_s, greedy_remainder_completion_s=t_greedy * to_s, moves=moves,
        setup_time_s=t_setup, cg_time_s=t_cg, lp_solve_time_s=run.lp_time_s, pricing_time_s=run.pricing_time_s,
        rounding_time_s=t_rounding, schedule_time_s=t_sched)
    if run.converged:
        message = (f"LP optimal after {run.iterations} CG iterations ({len(cg.trees)} trees, {cg.steps} steps); "
                   f"rounded to {nchunks} chunks per block, gap {100 * gap:.3f}% ({cg.solver} {run.native})")
    else:
        message = f"time limit after {elapsed:.2f} s, gap {100 * gap:.2f}% vs a proven lower bound ({cg.solver})"
    state = AllToAllvWarmState(topology.fingerprint, nchunks, cg, d_bytes) if run.converged else None
    return AllToAllvResult(status=status, message=message, schedule=schedule, completion_time_s=completion,
                           optimal_time_s=lb_s, gap_pct=gap_pct, solve_time_s=elapsed, warm=mode != "cold",
                           figures=figures, warm_state=state)


def alltoallv_lp_bound(topology: Topology, demand: Any, *, solver: str = "highs",
                       time_limit_s: float | None = None) -> AllToAllvBound:
    """Exact LP optimum of the AllToAllv completion time (GPUs relay, no step bound).

    >>> from synth.topologies import named_topology
    >>> b = alltoallv_lp_bound(named_topology("ring:3"), [[0, 5e9, 5e9], [0, 0, 0], [0, 0, 0]])
    >>> b.status.value, round(b.time_s, 6)  # 10 GB leave rank 0 over two 50 GB/s links
    ('optimal', 0.1)
    """
    _check_args(topology, 1, None, solver, time_limit_s)
    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + float(time_limit_s)
    d_bytes = _demand_array(topology, demand)
    if not (d_bytes > 0).any():
        return AllToAllvBound(Status.OPTIMAL, "empty demand matrix", 0.0, 0, time.perf_counter() - start)
    unit = _unit(d_bytes)
    net = Network.from_topology(topology)
    cg = WeightedCg(net, solver, None, d_bytes / unit, scale=_scale(net))
    cg.seed()
    run = cg.run(deadline=deadline, sweep=False)
    t = (run.t_lp if run.converged else run.lower_bound) * unit / 1e9
    status = Status.OPTIMAL if run.converged else Status.TIME_LIMIT
    msg = (f"LP optimum after {run.iterations} CG iterations ({solver})" if run.converged
           else f"time limit after {run.iterations} CG iterations: {t:.6g} s is a proven lower bound ({solver})")
    return AllToAllvBound(status, msg, t, run.iterations, time.perf_counter() - start)
