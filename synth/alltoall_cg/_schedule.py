"""Integral path chunks → the :class:`~synth.schedule.Schedule` IR, with loopcoll's own re-check.

Routes are PATH routes split into hops at GPUs. :class:`RouteCache` keeps each path's hops (and
each (path, chunks) route) so that a warm re-synthesis reuses the objects of unchanged blocks.
:func:`check_and_measure` re-checks the rounded solution in whole-array form (coverage of every
block with exactly K chunks, live links only, GPU-simple paths) and computes the exact algbw and
the bottleneck ``K_s`` (saturated links with base slack, as :meth:`Schedule.bottleneck_for`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from itertools import repeat
from fractions import Fraction
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from synth.collective import Collective
from synth.alltoall_cg._expanded import Network
from synth.alltoall_cg._pool import PathPool
from synth.errors import ScheduleError, TimeLimitError
from synth.schedule import CutLink, Hop, Route, RouteKind, Schedule
from synth.topologies.model import Topology

__all__ = ["ROUTE_BATCH", "ROUTE_COST_S", "SCHEDULE_GRACE_S", "RouteCache", "build_deadline", "build_schedule",
           "min_build_s", "check_and_measure", "make_routes", "measure_loads", "route_order", "schedule_reserve_s"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Routes built between two deadline checks (2048 GPUs: ~4 M routes, ~30 checks).
ROUTE_BATCH = 1 << 17
#: Seconds building the schedule may run past the time limit (a deployable result is worth them);
#: past that, :class:`~synth.errors.TimeLimitError` names the phase.
SCHEDULE_GRACE_S = 2.0
#: Seconds of schedule building reserved per (source, destination) block (measured: 1024 GPUs, ~1 M
#: routes in 6.7 s, one core under load).
ROUTE_COST_S = 6.5e-6


def schedule_reserve_s(n_gpus: int, time_limit_s: float) -> float:
    """Seconds of ``time_limit_s`` kept for building the schedule: the estimate for N² blocks, at most half.

    >>> round(schedule_reserve_s(1024, 60.0), 2), schedule_reserve_s(2048, 20.0)
    (6.82, 10.0)
    """
    return min(ROUTE_COST_S * n_gpus * n_gpus, time_limit_s / 2)


def min_build_s(n_gpus: int) -> float:
    """A conservative estimate of building a schedule from an empty route cache: one route per GPU pair at
    half of :data:`ROUTE_COST_S` (a limit checked before the rounding stops early when even this would not fit).

    >>> round(min_build_s(2048), 1)
    13.6
    """
    return 0.5 * ROUTE_COST_S * n_gpus * (n_gpus - 1)


def build_deadline(end: float | None) -> float | None:
    """When building the schedule stops (``time.perf_counter()``): the time limit's ``end`` plus
    :data:`SCHEDULE_GRACE_S`; ``None`` without a limit.

    >>> build_deadline(None) is None, build_deadline(10.0) == 10.0 + SCHEDULE_GRACE_S
    (True, True)
    """
    return None if end is None else end + SCHEDULE_GRACE_S


class RouteCache:
    """Hop tuples per path id and Route objects per (path id, chunks) of one path pool."""

    def __init__(self) -> None:
        self.hops: dict[int, tuple[Hop, ...]] = {}
        self.routes: dict[tuple[int, int], Route] = {}
        self.segments: dict[int, Hop] = {}  # packed link sequence of a GPU-to-GPU segment -> its Hop

    def segments_only(self) -> RouteCache:
        """A cache that shares this one's segment hops only (the segment dict is copied)."""
        out = RouteCache()
        out.segments = dict(self.segments)
        return out

    def copy(self) -> RouteCache:
        out = RouteCache()
        out.hops = dict(self.hops)
        out.routes = dict(self.routes)
        out.segments = dict(self.segments)
        return out


def _fill_hops(paths: PathPool, pids: list[int], cache: dict[int, tuple[Hop, ...]],
               segments: dict[int, Hop] | None = None) -> None:
    """Hop tuples of many paths at once: paths are cut at GPUs into segments, and one :class:`Hop`
    is made per distinct segment (few: a hop is a GPU pair and a switch route), shared by all paths
    and, through ``segments``, by later calls."""
    if not pids:
        return
    net = paths.net
    starts, links = paths.link_csr(np.asarray(pids, dtype=np.int64))
    heads = net.head[links]
    ends = net.is_gpu[heads]  # a segment ends where a link enters a GPU (every path ends so)
    seg_of: IntArray = np.cumsum(ends) - ends
    n_seg = int(ends.sum())
    seg_first = np.r_[0, np.flatnonzero(ends)[:-1] + 1]
    pos = np.arange(len(links)) - seg_first[seg_of]
    width = int(pos.max()) + 1
    base = net.n_links + 1
    packed = width * np.log2(base) < 62
    if packed:
        key = np.zeros(n_seg, dtype=np.int64)
        np.add.at(key, seg_of, (links + 1) * base ** pos)
        keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:  # pragma: no cover - segments too long for a packed key
        mat = np.full((n_seg, width), -1, dtype=np.int64)
        mat[seg_of, pos] = links
        _, first, inverse = np.unique(mat, axis=0, return_index=True, return_inverse=True)
        segments = None
    rank_of = net.rank_of_node().tolist()
    names = net.node_ids
    seg_lo = seg_first[first].tolist()
    seg_hi = (np.r_[seg_first[1:], len(links)][first]).tolist()
    link_l = links.tolist()
    tails, heads_l = net.tail.tolist(), net.head.tolist()
    known = segments if segments is not None else {}
    key_l = keys.tolist() if packed else [None] * len(seg_lo)
    hop_objs = []
    for lo, hi, kk in zip(seg_lo, seg_hi, key_l):
        hop = known.get(kk) if kk is not None else None
        if hop is None:
            nodes = [tails[link_l[lo]], *(heads_l[e] for e in link_l[lo:hi])]
            hop = Hop(rank_of[nodes[0]], rank_of[nodes[-1]], tuple(names[v] for v in nodes))
            if segments is not None:
                segments[kk] = hop
        hop_objs.append(hop)
    inverse = inverse.ravel()
    n_hops = np.add.reduceat(ends.astype(np.int64), starts[:-1])  # segments per path
    first_seg = np.r_[0, np.cumsum(n_hops)[:-1]]
    pid_arr = np.asarray(pids, dtype=np.int64)
    hop_arr = np.empty(len(hop_objs), dtype=object)
    hop_arr[:] = hop_objs
    for k in np.unique(n_hops).tolist():  # paths with k hops: k columns of hop objects, gathered and zipped in C
        rows = np.flatnonzero(n_hops == k)
        cols = [hop_arr[inverse[first_seg[rows] + j]].tolist() for j in range(k)]
        cache.update(zip(pid_arr[rows].tolist(), zip(*cols)))


def check_and_measure(topo: Topology, paths: PathPool, pids: IntArray, chunks: IntArray,
                      nchunks: int) -> tuple[float, tuple[CutLink, ...], FloatArray]:
    """Re-check the integral solution; return (exact algbw in GB/s, bottleneck with base slacks,
    chunks per link)."""
    net = paths.net
    n = net.n_gpus
    if len(pids) == 0 or (chunks < 1).any():
        raise ScheduleError("rounded AllToAll solution has no routes or a route with < 1 chunk")
    per_block = np.bincount(paths.src[pids] * n + paths.dst[pids], weights=chunks, minlength=n * n)
    want = np.full(n * n, float(nchunks))
    want[np.arange(n) * (n + 1)] = 0.0
    bad = np.flatnonzero(per_block != want)
    if len(bad):
        s, d = divmod(int(bad[0]), n)
        raise ScheduleError(f"block {s}->{d} carries {per_block[bad[0]]:g} chunk(s), expected nchunks={nchunks}")
    starts, links = paths.link_csr(pids)
    if (net.caps_GBps[links] <= 0).any():
        e = int(links[np.flatnonzero(net.caps_GBps[links] <= 0)[0]])
        raise ScheduleError(f"rounded AllToAll schedule uses link {net.link_keys[e][0]}->{net.link_keys[e][1]}, "
                            "which is down")
    if not paths.gpu_simple(pids).all():
        raise ScheduleError("rounded AllToAll schedule has a path that revisits a GPU")
    loads = np.bincount(links, weights=np.repeat(chunks, np.diff(starts)), minlength=net.n_links)
    return (*measure_loads(topo, net, loads, nchunks), np.asarray(loads, dtype=np.float64))


def measure_loads(topo: Topology, net: Network, loads: FloatArray | IntArray,
                  nchunks: int) -> tuple[float, tuple[CutLink, ...]]:
    """Exact algbw (GB/s) and bottleneck cut of chunks-per-link ``loads`` (K chunks per block)."""
    n = net.n_gpus
    used = np.flatnonzero(loads > 0)
    ratio = loads[used] / net.caps_GBps[used]
    # Exact arithmetic only for the links that can be the maximum.
    near = used[ratio >= ratio.max() * (1 - 1e-9)]
    worst = max(Fraction(int(round(loads[e]))) * 8 / topo.exact_capacity(*net.link_keys[e]) for e in near)
    algbw = float(n * Fraction(nchunks) / worst)
    load_used = np.round(loads[used])
    caps = net.caps_GBps[used]
    x_min = float((caps / load_used).min())
    slack = (caps - load_used * x_min) / caps
    tight = sorted((net.link_keys[e], float(v)) for e, v in zip(used[slack <= 1e-9].tolist(),
                                                              slack[slack <= 1e-9].tolist()))
    cut = tuple(CutLink(a, b, v) for (a, b), v in tight)
    return algbw, cut


def route_order(paths: PathPool, pids: IntArray, chunks: IntArray) -> IntArray:
    """Positions of ``pids`` sorted by (source, destination, chunks descending, path id): route order."""
    n = paths.net.n_gpus
    kmax = int(chunks.max()) + 1 if len(chunks) else 1
    block = paths.src[pids] * n + paths.dst[pids]
    if float(n) * n * kmax * max(len(paths), 1) >= 2.0**62:  # pragma: no cover - one packed key would overflow
        return np.lexsort((pids, -chunks, block))
    return np.argsort((block * kmax + (kmax - 1 - chunks)) * len(paths) + pids, kind="stable")


def make_routes(paths: PathPool, pids: IntArray, chunks: IntArray, cache: RouteCache, *,
                deadline: float | None = None) -> list[Route]:
    """One PATH route per (path, chunk count), in the given order; objects shared through ``cache``.

    Built :data:`ROUTE_BATCH` routes at a time; past ``deadline`` (``time.perf_counter()``) before a
    batch, raises :class:`~synth.errors.TimeLimitError` saying how many routes were built.
    """
    routes: list[Route] = []
    total = len(pids)
    cold = not cache.hops and not cache.routes  # nothing to look up: every route is made
    for lo in range(0, total, ROUTE_BATCH):
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitError(f"while building the schedule ({lo} of {total} routes built)")
        batch = (paths, pids[lo:lo + ROUTE_BATCH], chunks[lo:lo + ROUTE_BATCH], cache)
        routes += _make_cold(*batch) if cold else _make_batch(*batch)
    return routes


def _make_cold(paths: PathPool, pids: IntArray, chunks: IntArray, cache: RouteCache) -> list[Route]:
    """The routes of one batch with no cache lookups (they are added to ``cache``)."""
    pid_l, chunk_l = pids.tolist(), chunks.tolist()
    _fill_hops(paths, pid_l, cache.hops, cache.segments)
    made = list(map(Route, repeat(RouteKind.PATH), paths.src[pids].tolist(), chunk_l,
                    map(cache.hops.__getitem__, pid_l), paths.dst[pids].tolist()))
    cache.routes.update(zip(zip(pid_l, chunk_l), made))
    return made


def _make_batch(paths: PathPool, pids: IntArray, chunks: IntArray, cache: RouteCache) -> list[Route]:
    hops_cache, route_cache = cache.hops, cache.routes
    pid_l, chunk_l = pids.tolist(), chunks.tolist()
    _fill_hops(paths, [p for p in pid_l if p not in hops_cache], hops_cache, cache.segments)
    keys = list(zip(pid_l, chunk_l))
    routes = list(map(route_cache.get, keys))
    missing = [i for i, r in enumerate(routes) if r is None]
    if missing:
        need = pids[missing]
        src_l, dst_l = paths.src[need].tolist(), paths.dst[need].tolist()
        made = list(map(Route, repeat(RouteKind.PATH), src_l, chunks[missing].tolist(),
                        map(hops_cache.__getitem__, need.tolist()), dst_l))
        for i, r in zip(missing, made):
            routes[i] = r
        route_cache.update(zip([keys[i] for i in missing], made))
    return cast(list[Route], routes)


def build_schedule(paths: PathPool, pids: IntArray, chunks: IntArray, nchunks: int, meta: Mapping[str, Any],
                   cache: RouteCache, *, deadline: float | None = None) -> tuple[Schedule, IntArray]:
    """The schedule (routes in :func:`route_order`) and the route order it used (``deadline``: as
    :func:`make_routes`)."""
    order = route_order(paths, pids, chunks)
    routes = make_routes(paths, pids[order], chunks[order], cache, deadline=deadline)
    return Schedule(Collective.ALLTOALL, paths.net.n_gpus, nchunks, tuple(routes), meta=dict(meta)), order
