"""Integral path chunks → the :class:`~synth.schedule.Schedule` IR, with loopcoll's own re-check.

Routes are PATH routes split into hops at GPUs. :class:`RouteCache` keeps each path's hops (and
each (path, chunks) route) so that a warm re-synthesis reuses the objects of unchanged blocks.
:func:`check_and_measure` re-checks the rounded solution in whole-array form (coverage of every
block with exactly K chunks, live links only, GPU-simple paths) and computes the exact algbw and
the bottleneck ``K_s`` (saturated links with base slack, as :meth:`Schedule.bottleneck_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._pool import PathPool
from synth.errors import ScheduleError
from synth.schedule import CutLink, Hop, Route, RouteKind, Schedule
from synth.topologies.model import Topology, exact_gbps

__all__ = ["RouteCache", "build_schedule", "check_and_measure"]

IntArray = npt.NDArray[np.int64]


class RouteCache:
    """Hop tuples per path id and Route objects per (path id, chunks) of one path pool."""

    def __init__(self) -> None:
        self.hops: dict[int, tuple[Hop, ...]] = {}
        self.routes: dict[tuple[int, int], Route] = {}

    def copy(self) -> RouteCache:
        out = RouteCache()
        out.hops = dict(self.hops)
        out.routes = dict(self.routes)
        return out


def _fill_hops(paths: PathPool, pids: list[int], cache: dict[int, tuple[Hop, ...]]) -> None:
    """Hop tuples of many paths at once (array work first, then plain-list Python)."""
    if not pids:
        return
    net = paths.net
    rank_of = net.rank_of_node().tolist()
    starts, links = paths.link_csr(np.asarray(pids, dtype=np.int64))
    tails = net.tail[links[starts[:-1]]].tolist()
    heads = net.head[links].tolist()
    bounds = starts.tolist()
    names = net.node_ids
    for j, pid in enumerate(pids):
        nodes = [tails[j], *heads[bounds[j] : bounds[j + 1]]]
        hops = []
        start = 0
        for i in range(1, len(nodes)):
            r = rank_of[nodes[i]]
            if r >= 0:
                hops.append(Hop(rank_of[nodes[start]], r, tuple(names[v] for v in nodes[start : i + 1])))
                start = i
        cache[pid] = tuple(hops)


def check_and_measure(topo: Topology, paths: PathPool, pids: IntArray, chunks: IntArray,
                      nchunks: int) -> tuple[float, tuple[CutLink, ...]]:
    """Re-check the integral solution and return (exact algbw in GB/s, bottleneck with base slacks)."""
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
    route_of = np.repeat(np.arange(len(pids)), np.diff(starts))
    heads = net.head[links]
    gpu = net.is_gpu[heads]
    visits = np.r_[route_of[gpu] * net.n_nodes + heads[gpu], np.arange(len(pids)) * net.n_nodes
                   + net.gpu_node[paths.src[pids]]]
    if len(np.unique(visits)) != len(visits):
        raise ScheduleError("rounded AllToAll schedule has a path that revisits a GPU")
    loads = np.bincount(links, weights=np.repeat(chunks, np.diff(starts)), minlength=net.n_links)
    used = np.flatnonzero(loads > 0)
    ratio = loads[used] / net.caps_GBps[used]
    # Exact arithmetic only for the links that can be the maximum.
    near = used[ratio >= ratio.max() * (1 - 1e-9)]
    worst = max(Fraction(int(loads[e])) * 8 / exact_gbps(topo.link(*net.link_keys[e]).gbps) for e in near)
    algbw = float(n * Fraction(nchunks) / worst)
    caps = {net.link_keys[e]: topo.link(*net.link_keys[e]).GBps for e in used}
    load_of = {net.link_keys[e]: int(loads[e]) for e in used}
    x_min = min(caps[k] / v for k, v in load_of.items())
    slack = {k: (caps[k] - v * x_min) / caps[k] for k, v in load_of.items()}
    cut = tuple(CutLink(a, b, slack[(a, b)]) for a, b in sorted(k for k, v in slack.items() if v <= 1e-9))
    return algbw, cut


def build_schedule(paths: PathPool, pids: IntArray, chunks: IntArray, nchunks: int, meta: Mapping[str, Any],
                   cache: RouteCache) -> Schedule:
    """One PATH route per (path, chunk count), sorted by (source, destination, chunks desc, path id)."""
    order = np.lexsort((pids, -chunks, paths.dst[pids], paths.src[pids]))
    routes = []
    hops_cache, route_cache = cache.hops, cache.routes
    _fill_hops(paths, [p for p in pids.tolist() if p not in hops_cache], hops_cache)
    src_l, dst_l = paths.src.tolist(), paths.dst.tolist()
    for pid, c in zip(pids[order].tolist(), chunks[order].tolist()):
        route = route_cache.get((pid, c))
        if route is None:
            route = route_cache[(pid, c)] = Route(RouteKind.PATH, src_l[pid], c, hops_cache[pid], dst_l[pid])
        routes.append(route)
    return Schedule("alltoall", paths.net.n_gpus, nchunks, tuple(routes), meta=dict(meta))
