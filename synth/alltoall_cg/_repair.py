"""Local repair: re-route only the blocks a capacity drop touches, proven optimal or not used.

After a gray failure most of an AllToAll schedule is still right: only the (source, destination)
blocks whose rounded paths cross a degraded link need new routes. The repair keeps every other
block's rounded chunks as fixed link loads and solves the T-form *path* LP of the touched blocks
alone (rows: those blocks, then every link with its fixed load on the right-hand side), started
from a feasible basis and priced per block on the time-expanded graph from a few roots
(:func:`~synth.alltoall_cg._pricing.price_pairs`). Its optimum T_r is feasible for the full
problem, so T* ≤ T_r. Two lower bounds can prove T* ≥ T_r (relative 1e-9), and the repair is used
only then:

* the Farley bound under the repair LP's link duals, over all sources (and without a step bound
  when the caller's step bound was chosen automatically);
* the previous optimum, since capacities only fell (what proves it when T did not move and the
  repair LP's duals are degenerate).

Not proven, the blocks routed over the links the LP found binding are freed too and the LP is
solved again (at most :data:`GROW_ROUNDS` times, at most :data:`MAX_BLOCKS_PER_GPU` blocks per
GPU); after that, or when a capacity grew (which can help every block), the caller runs the full
warm column generation.

The touched blocks are then rounded to whole chunks (balanced remainder, or the dive when that
leaves more than :data:`ROUNDING_RETRY_GAP`), checked, and spliced into the previous schedule's
route tuple, so the work is proportional to the touched blocks, not to N².

Examples
--------
>>> from synth.alltoall_cg import synthesize_alltoall
>>> from synth.topologies import load_topology
>>> prev = synthesize_alltoall(load_topology("hpn:1x2x8"))
>>> r = synthesize_alltoall(load_topology("hpn:1x2x8", ["fail2"]), warm_start=prev)
>>> r.figures.warm_mode, r.figures.repaired_blocks, round(r.optimal_algbw_GBps, 4)
('repair', 16, 89.0625)
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from synth.collective import Collective
from synth.alltoall_cg._cg import tie_break
from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.alltoall_cg._pool import PathPool
from synth.alltoall_cg._pricing import price_pairs, reversed_network, tree_costs
from synth.alltoall_cg._rounding import (
    DIVES,
    INT_TOL,
    ROUNDING_RETRY_GAP,
    DiveResult,
    Pricer,
    DiveLp,
    balanced_remainder,
    deep_dive,
)
from synth.alltoall_cg._schedule import RouteCache, make_routes, measure_loads, route_order
from synth.errors import SolverError
from synth.result import Status
from synth.schedule import CutLink, Schedule
from synth.solvers import LpMethod, LpSolution
from synth.topologies.model import Topology

__all__ = ["Repair", "RoundedState", "repair"]

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CERTIFY_TOL = 1e-9  # relative Farley gap under which the repair's LP value is the full optimum
GROW_ROUNDS = 2  # times an uncertified repair frees the blocks routed over its binding links
MAX_BLOCKS_PER_GPU = 16  # a repair re-routing more than this many blocks per GPU leaves it to the full CG
MAX_ROUNDS = 50  # pricing rounds of the repair LP before giving up (then the full CG runs)


@dataclass(frozen=True, eq=False)
class RoundedState:
    """The previous synthesis's rounded schedule: what a repair starts from (treat as opaque).

    ``route_pid[i]``/``route_chunks[i]`` are the pool path and chunks of ``schedule.routes[i]``;
    ``loads`` counts chunks per link; ``caps_GBps`` are the capacities it was made for."""

    caps_GBps: FloatArray  # noqa: N815
    nchunks: int
    schedule: Schedule
    route_pid: IntArray
    route_chunks: IntArray
    loads: FloatArray  # chunks per link
    t_lp: float  # LP optimum, s/GB per pair
    unbounded: bool  # t_lp is also the optimum without a step bound


@dataclass(frozen=True, eq=False)
class Repair:
    """A certified repair: the spliced schedule (``rounded.schedule``) and what the result reports."""

    rounded: RoundedState
    paths: PathPool
    algbw_GBps: float  # noqa: N815
    t_lp: float
    certificate: str  # what proves t_lp optimal: "Farley bound" or "previous optimum"
    blocks: int
    rounds: int
    pivots: int
    lp_time_s: float
    pricing_time_s: float
    rounding_time_s: float
    dive: DiveResult


@dataclass(eq=False)
class _Context:
    """The :class:`~synth.alltoall_cg._rounding.PathLp` of a repair."""

    net: Network
    paths: PathPool
    graph: ExpandedGraph
    reverse: ExpandedGraph
    solver: str
    scale: float
    pricing_time_s: float = 0.0


def pair_pricer(ctx: _Context) -> Pricer:
    """Price open commodities pair by pair from few roots (see :func:`price_pairs`)."""
    n = ctx.net.n_gpus

    def price(w: FloatArray, open_k: IntArray) -> tuple[FloatArray, Callable[[IntArray], IntArray]]:
        t0 = time.perf_counter()
        src, dst = open_k // n, open_k % n
        pp = price_pairs(ctx.graph, ctx.reverse, w, src, dst, tie_break=tie_break(w))
        ctx.pricing_time_s += time.perf_counter() - t0

        def register(sel: IntArray) -> IntArray:
            return ctx.paths.add_many(src[sel], dst[sel], [pp.links(i) for i in sel.tolist()], pp.hash1[sel],
                                      pp.hash2[sel], pp.steps[sel])

        return pp.cost, register

    return price


def _crash(dive: DiveLp, seeds: IntArray, fixed_unit: FloatArray) -> None:
    """Start the repair LP from a feasible basis: one seed path per block carries it whole, T sits
    at the busiest link's ratio (that link's row is tight), every other link's slack is basic."""
    net = dive.cg.net
    starts, links = dive.cg.paths.link_csr(seeds)
    load = fixed_unit + np.bincount(links, minlength=net.n_links)
    caps = net.caps_GBps
    ratio = np.where(caps > 0, load / np.where(caps > 0, caps, 1.0), -np.inf)
    tight = int(np.argmax(ratio))
    cols = np.r_[0, [dive.col_of_pid[p] for p in seeds.tolist()]]
    rows = dive.nk + np.flatnonzero(np.arange(net.n_links) != tight)
    dive.lp.start_basis(cols, rows)


def _repair_lp(ctx: _Context, pricer: Pricer, moved_pids: IntArray, m_starts: IntArray, m_links: IntArray,
               active_k: IntArray, fixed: FloatArray, k: int,
               deadline: float | None) -> tuple[DiveLp, LpSolution, int, int]:
    """The repair LP of the ``active_k`` blocks around ``fixed`` loads, solved and priced out."""
    dive = DiveLp(ctx, active_k, np.full(len(active_k), k, dtype=np.int64), fixed / k, k)
    # Seeds: the old paths that are still alive, and a capacity-aware shortest path per block.
    new = ctx.net.caps_GBps
    live = new > 0
    dead_path = np.logical_or.reduceat(~live[m_links], m_starts[:-1]) if len(m_links) else np.zeros(0, bool)
    dive.add(moved_pids[~dead_path])
    w0 = np.where(live, 1.0 / np.where(live, new, 1.0), 0.0)
    _, register = pricer(w0, active_k)
    seeds = register(np.arange(len(active_k)))
    dive.add(seeds)
    _crash(dive, seeds, fixed / k)
    sol, rounds, pivots = _solve_priced(dive, pricer, k, deadline)
    return dive, sol, rounds, pivots


def _solve_priced(dive: DiveLp, pricer: Pricer, nchunks: int, deadline: float | None) -> tuple[LpSolution, int, int]:
    """Re-solve and price until no path improves: (solution, rounds, pivots)."""
    method: LpMethod = "primal"
    pivots = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
        sol = dive.lp.solve(method=method, time_limit_s=remaining)
        pivots += sol.iterations
        if sol.status is not Status.OPTIMAL:
            raise SolverError(f"repair LP ended with {sol.native}")
        mu = sol.row_duals[: dive.nk]
        w = np.maximum(0.0, -sol.row_duals[dive.nk :])
        open_k = dive.k_of_row
        pc, register = pricer(w, open_k)
        tol = 1e-9 * max(1.0, abs(sol.objective)) / max(1, dive.nk)
        better = np.flatnonzero(pc / nchunks - mu < -tol)
        if len(better) == 0 or dive.add(register(better)) == 0:
            return sol, rounds, pivots
    raise SolverError(f"repair LP still improving after {MAX_ROUNDS} pricing rounds")


def repair(topology: Topology, net: Network, paths: PathPool, rounded: RoundedState, *, steps: int,
           free_bound: bool, solver: str, scale: float, deadline: float | None, cache: RouteCache,
           meta: dict[str, object]) -> Repair | None:
    """Certified local repair of ``rounded`` for ``net``'s capacities, or None (see the module docstring).

    ``paths`` is the previous pool (not modified); ``free_bound`` proves the bound without a step
    bound (the caller's step bound was chosen automatically)."""
    old, new = rounded.caps_GBps, net.caps_GBps
    if old.shape != new.shape:
        return None
    changed = old != new
    if not changed.any() or (new[changed] > old[changed]).any():
        return None
    t0 = time.perf_counter()
    n = net.n_gpus
    paths = copy.copy(paths)
    paths.net = net
    blocks = _Blocks.of(paths, rounded, n)
    hit = np.logical_or.reduceat(changed[blocks.links], blocks.starts[:-1]) if len(blocks.links) \
        else np.zeros(0, dtype=bool)
    touched = np.zeros(n * n, dtype=bool)
    touched[blocks.block[hit]] = True
    ctx = _Context(net, paths, ExpandedGraph.build(net, steps), ExpandedGraph.build(reversed_network(net), steps),
                   solver, scale)
    pricer = pair_pricer(ctx)
    cert = _certified_lp(ctx, pricer, blocks, rounded, touched, free_bound, deadline)
    if cert is None:
        return None
    t_round = time.perf_counter()
    picked = _round_touched(topology, ctx, pricer, blocks, cert, rounded.nchunks, deadline)
    if picked is None:
        log.info("alltoall_cg: local repair's rounding failed its check; full warm CG runs")
        return None
    rounding_time = time.perf_counter() - t_round
    state = _spliced(topology, paths, blocks, rounded, cert, picked, cache, meta, free_bound)
    log.info("alltoall_cg: local repair re-routed %d blocks in %.3f s (certified, T %.9g)", len(cert.active_k),
             time.perf_counter() - t0, cert.t_lp)
    return Repair(state, paths, picked[1][0], cert.t_lp, cert.certificate, len(cert.active_k), cert.rounds,
                  cert.pivots, cert.lp_time_s, ctx.pricing_time_s, rounding_time, picked[0])


@dataclass(frozen=True, eq=False)
class _Blocks:
    """The previous rounding's routes on the repair's pool: path, chunks, links (CSR) and block."""

    pid: IntArray
    chunks: IntArray
    starts: IntArray
    links: IntArray
    block: IntArray  # source * N + destination of each route

    @classmethod
    def of(cls, paths: PathPool, rounded: RoundedState, n: int) -> _Blocks:
        pid = rounded.route_pid
        starts, links = paths.link_csr(pid)
        return cls(pid, rounded.route_chunks, starts, links, paths.src[pid] * n + paths.dst[pid])


@dataclass(frozen=True, eq=False)
class _Certified:
    """A repair LP proven optimal for the full problem: its blocks, loads, solution and work."""

    dive: DiveLp
    sol: LpSolution
    t_lp: float
    certificate: str  # "Farley bound" or "previous optimum"
    touched: npt.NDArray[np.bool_]  # per block
    moved: npt.NDArray[np.bool_]  # per previous route
    active_k: IntArray
    fixed: FloatArray  # chunks per link of the untouched blocks
    lp_time_s: float
    rounds: int
    pivots: int


def _certified_lp(ctx: _Context, pricer: Pricer, blocks: _Blocks, rounded: RoundedState,
                  touched: npt.NDArray[np.bool_], free_bound: bool, deadline: float | None) -> _Certified | None:
    """The repair LP of the ``touched`` blocks, grown over its binding links until a lower bound
    proves it optimal; None when it is not proven (or not solved) within the limits."""
    net, k = ctx.net, rounded.nchunks
    n, new = net.n_gpus, net.caps_GBps
    bound_graph = ExpandedGraph.build(net, None) if free_bound else ctx.graph
    monotone = rounded.unbounded or not free_bound
    lp_time, rounds, pivots = 0.0, 0, 0
    limit = max(MAX_BLOCKS_PER_GPU * n, 64)
    for grow in range(GROW_ROUNDS + 1):
        active_k = np.flatnonzero(touched)
        if len(active_k) > limit:
            log.info("alltoall_cg: local repair would re-route %d blocks (> %d); full warm CG runs", len(active_k),
                     limit)
            return None
        moved = touched[blocks.block]
        m_starts, m_links = ctx.paths.link_csr(blocks.pid[moved])
        fixed = rounded.loads - np.bincount(m_links, weights=np.repeat(blocks.chunks[moved], np.diff(m_starts)),
                                            minlength=net.n_links)
        try:
            t_lp0, priced0 = time.perf_counter(), ctx.pricing_time_s
            dive, sol, r, p = _repair_lp(ctx, pricer, blocks.pid[moved], m_starts, m_links, active_k, fixed, k,
                                         deadline)
            lp_time += time.perf_counter() - t_lp0 - (ctx.pricing_time_s - priced0)
            rounds, pivots = rounds + r, pivots + p
        except SolverError as exc:
            log.info("alltoall_cg: local repair not used: %s", exc)
            return None
        t_r = sol.objective / ctx.scale
        w = np.maximum(0.0, -sol.row_duals[dive.nk :])
        denom = float(new @ w)
        t_b = time.perf_counter()
        lb = float(np.maximum(tree_costs(bound_graph, w), 0.0).sum()) / denom if denom > 0 else 0.0
        ctx.pricing_time_s += time.perf_counter() - t_b
        certificate = "Farley bound"
        if monotone and rounded.t_lp > lb:
            # Capacities only fell, so the optimum cannot beat the previous one (the repair LP's duals
            # can be degenerate when T did not move: a single fixed-load link, a weak Farley bound).
            lb, certificate = rounded.t_lp, "previous optimum"
        if lb >= t_r * (1 - CERTIFY_TOL):
            return _Certified(dive, sol, t_r, certificate, touched, moved, active_k, fixed, lp_time, rounds, pivots)
        # Not proven: free the blocks routed over the links the repair LP found binding, and retry.
        binding = w > 1e-9 * max(float(w.max()), 1e-300)
        more = np.logical_or.reduceat(binding[blocks.links], blocks.starts[:-1]) if len(blocks.links) \
            else np.zeros(0, dtype=bool)
        grown = touched.copy()
        grown[blocks.block[more]] = True
        log.info("alltoall_cg: local repair of %d blocks not certified (T %.9g, bound %.9g)%s", len(active_k), t_r,
                 lb, "; growing it" if grown.sum() > touched.sum() and grow < GROW_ROUNDS else "")
        if grown.sum() == touched.sum():
            return None
        touched = grown
    log.info("alltoall_cg: local repair not certified after %d growths; full warm CG runs", GROW_ROUNDS)
    return None


Measured = tuple[float, tuple[CutLink, ...], FloatArray]


def _round_touched(topology: Topology, ctx: _Context, pricer: Pricer, blocks: _Blocks, cert: _Certified, k: int,
                   deadline: float | None) -> tuple[DiveResult, Measured] | None:
    """The touched blocks rounded to ``k`` chunks each (balanced remainder, else the dives), checked
    and measured with the untouched blocks; None when no rounding passes the check."""
    net, paths, n = ctx.net, ctx.paths, ctx.net.n_gpus
    u = cert.sol.col_values[1:]
    cols = np.array(cert.dive.col_pid, dtype=np.int64)
    use = u > 1e-12
    best = balanced_remainder(ctx, cols[use], u[use], k, cert.fixed)
    best_m = _measure(topology, net, paths, cert.fixed, best, k, cert.active_k)
    if best_m is None or n / best_m[0] > cert.t_lp * (1 + ROUNDING_RETRY_GAP):
        keep = ~cert.moved
        all_pids = np.r_[blocks.pid[keep], cols[use]]
        all_y = np.r_[blocks.chunks[keep].astype(np.float64), u[use]]
        for batch, backtracks, slack in DIVES:
            cand = deep_dive(ctx, all_pids, all_y, k, deadline=deadline, batch=batch, backtracks=backtracks,
                             slack=slack, pricer=pricer)
            sel = cert.touched[paths.src[cand.pids] * n + paths.dst[cand.pids]]
            cand = DiveResult(cand.pids[sel], cand.chunks[sel], cand.steps, cand.backtracks, cand.columns_added,
                              cand.lp_solves, cand.dived)
            m = _measure(topology, net, paths, cert.fixed, cand, k, cert.active_k)
            if m is not None and (best_m is None or m[0] > best_m[0] * (1 + 1e-12)):
                best, best_m = cand, m
            if best_m is not None and n / best_m[0] <= cert.t_lp * (1 + ROUNDING_RETRY_GAP):
                break
    return None if best_m is None else (best, best_m)


def _spliced(topology: Topology, paths: PathPool, blocks: _Blocks, rounded: RoundedState, cert: _Certified,
             picked: tuple[DiveResult, Measured], cache: RouteCache, meta: dict[str, object],
             free_bound: bool) -> RoundedState:
    """The repaired rounding: the previous routes of untouched blocks, then the new blocks' routes,
    in route order, as the state a later repair starts from."""
    best, (_, cut, loads) = picked
    n, k = paths.net.n_gpus, rounded.nchunks
    order = route_order(paths, best.pids, best.chunks)
    new_pid, new_chunks = best.pids[order], best.chunks[order]
    new_routes = make_routes(paths, new_pid, new_chunks, cache)
    cuts = _Cuts.of(blocks.block, paths.src[new_pid] * n + paths.dst[new_pid], cert.active_k)
    routes = tuple(chain.from_iterable(cuts.pieces(rounded.schedule.routes, new_routes)))
    lp_algbw = n / cert.t_lp
    schedule = Schedule(Collective.ALLTOALL, n, k, routes, bottleneck=cut, topology_fingerprint=topology.fingerprint,
                        meta={**meta, "lp_algbw_GBps": lp_algbw, "optimal_algbw_GBps": lp_algbw})
    return RoundedState(paths.net.caps_GBps.copy(), k, schedule, np.concatenate(cuts.pieces(blocks.pid, new_pid)),
                        np.concatenate(cuts.pieces(blocks.chunks, new_chunks)), loads, cert.t_lp, free_bound)


@dataclass(frozen=True)
class _Cuts:
    """Where the touched blocks sit in the old and the new route lists (both sorted by block)."""

    lo: list[int]
    hi: list[int]
    nlo: list[int]
    nhi: list[int]

    @classmethod
    def of(cls, old_block: IntArray, new_block: IntArray, touched: IntArray) -> _Cuts:
        return cls(np.searchsorted(old_block, touched, side="left").tolist(),
                   np.searchsorted(old_block, touched, side="right").tolist(),
                   np.searchsorted(new_block, touched, side="left").tolist(),
                   np.searchsorted(new_block, touched, side="right").tolist())

    def pieces(self, old: Any, new: Any) -> list[Any]:
        """Slices of ``old`` (a tuple or an array) with each touched block's run replaced by its
        run in ``new``; the O(N²) part is slicing and concatenation in C."""
        out = []
        prev = 0
        for a, b, c, d in zip(self.lo, self.hi, self.nlo, self.nhi):
            out.append(old[prev:a])
            out.append(new[c:d])
            prev = b
        out.append(old[prev:])
        return out


def _measure(topology: Topology, net: Network, paths: PathPool, fixed: FloatArray, dive: DiveResult, k: int,
             active_k: IntArray) -> tuple[float, tuple[CutLink, ...], FloatArray] | None:
    """Check the touched blocks' rounding (K chunks each, live links, GPU-simple) and measure the whole."""
    n = net.n_gpus
    if len(dive.pids) == 0 or (dive.chunks < 1).any():
        return None
    blk = paths.src[dive.pids] * n + paths.dst[dive.pids]
    per = np.bincount(np.searchsorted(active_k, blk), weights=dive.chunks, minlength=len(active_k))
    if not np.isin(blk, active_k).all() or (np.abs(per - k) > INT_TOL).any():
        return None
    starts, links = paths.link_csr(dive.pids)
    if (net.caps_GBps[links] <= 0).any() or not paths.gpu_simple(dive.pids).all():
        return None
    loads = fixed + np.bincount(links, weights=np.repeat(dive.chunks, np.diff(starts)), minlength=net.n_links)
    algbw, cut = measure_loads(topology, net, np.round(loads), k)
    return algbw, cut, np.round(loads)
