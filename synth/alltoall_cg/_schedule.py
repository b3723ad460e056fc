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
from typing import Any, cast

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
    """Hop tuples of many paths at once: paths are cut at GPUs into segments, and one :class:`Hop`
    is made per distinct segment (few: a hop is a GPU pair and a switch route), shared by all paths."""
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
    if width * np.log2(base) < 62:
        key = np.zeros(n_seg, dtype=np.int64)
        np.add.at(key, seg_of, (links + 1) * base ** pos)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:  # pragma: no cover - segments too long for a packed key
        mat = np.full((n_seg, width), -1, dtype=np.int64)
        mat[seg_of, pos] = links
        _, first, inverse = np.unique(mat, axis=0, return_index=True, return_inverse=True)
    rank_of = net.rank_of_node().tolist()
    names = net.node_ids
    seg_lo = seg_first[first].tolist()
    seg_hi = (np.r_[seg_first[1:], len(links)][first]).tolist()
    link_l = links.tolist()
    tails, heads_l = net.tail.tolist(), net.head.tolist()
    hop_objs = []
    for lo, hi in zip(seg_lo, seg_hi):
        nodes = [tails[link_l[lo]], *(heads_l[e] for e in link_l[lo:hi])]
        hop_objs.append(Hop(rank_of[nodes[0]], rank_of[nodes[-1]], tuple(names[v] for v in nodes)))
    inverse = inverse.ravel()
    n_hops = np.add.reduceat(ends.astype(np.int64), starts[:-1])  # segments per path
    first_seg = np.r_[0, np.cumsum(n_hops)[:-1]]
    pid_arr = np.asarray(pids, dtype=np.int64)
    for k in np.unique(n_hops).tolist():  # paths with k hops: k columns of hop objects, zipped in C
        rows = np.flatnonzero(n_hops == k)
        cols = [[hop_objs[i] for i in inverse[first_seg[rows] + j].tolist()] for j in range(k)]
        cache.update(zip(pid_arr[rows].tolist(), zip(*cols)))


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
    if not paths.gpu_simple(pids).all():
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
    hops_cache, route_cache = cache.hops, cache.routes
    _fill_hops(paths, [p for p in pids.tolist() if p not in hops_cache], hops_cache)
    pid_l, chunk_l = pids[order].tolist(), chunks[order].tolist()
    keys = list(zip(pid_l, chunk_l))
    routes = list(map(route_cache.get, keys))
    missing = [i for i, r in enumerate(routes) if r is None]
    if missing:
        src_l, dst_l = paths.src.tolist(), paths.dst.tolist()
        kind = RouteKind.PATH
        made = [Route(kind, src_l[pid_l[i]], chunk_l[i], hops_cache[pid_l[i]], dst_l[pid_l[i]]) for i in missing]
        for i, r in zip(missing, made):
            routes[i] = r
        route_cache.update(zip([keys[i] for i in missing], made))
    return Schedule("alltoall", paths.net.n_gpus, nchunks, tuple(cast(list[Route], routes)), meta=dict(meta))
