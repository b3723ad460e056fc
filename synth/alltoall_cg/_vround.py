"""Rounding an AllToAllv LP solution to ``K`` equal chunks per block, then load-aware chunk moves.

``disaggregate_v`` turns tree weights λ into fractional chunk counts per path (``K · Σ_{τ∋p} λ_τ``
for blocks with demand); ``largest_remainder_v`` rounds them per block to exactly K and
``greedy_remainder`` places each block's leftover chunks on its least loaded fractional path;
``improve`` then moves single chunks off the most loaded link onto another path of the same block
(a pooled one, else a fewest-link path found by BFS over links that stay below the bottleneck)
while that strictly lowers the link's time without lifting any other link to it. Loads are in
bytes of the demand matrix divided by K per chunk, so chunks of big blocks weigh more.

Examples
--------
>>> y = np.array([2.6, 7.4, 10.0]); block = np.array([0, 0, 1])
>>> largest_remainder_v(block, y, 10).tolist()
[3, 7, 10]
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._pricing import path_hashes
from synth.alltoall_cg._vcg import WeightedCg

__all__ = ["disaggregate_v", "greedy_remainder", "improve", "largest_remainder_v", "link_loads"]

BFS_USERS = 16  # blocks on the bottleneck link tried per move for a new, uncongested path

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def disaggregate_v(cg: WeightedCg, lam: FloatArray, nchunks: int) -> tuple[IntArray, FloatArray]:
    """(path ids, fractional chunks) of blocks with demand; chunks of a block sum to K."""
    n = cg.net.n_gpus
    rows = np.flatnonzero(lam > 1e-12)
    src = np.repeat(cg.trees.source[rows], n)
    dst = np.tile(np.arange(n), len(rows))
    flat = cg.trees.paths[rows].ravel()
    vals = np.repeat(nchunks * lam[rows], n)
    keep = (flat >= 0) & (cg.demand[src, dst] > 0)
    pids, inv = np.unique(flat[keep], return_inverse=True)
    y: FloatArray = np.bincount(inv, weights=vals[keep], minlength=len(pids)).astype(np.float64)
    block = cg.paths.src[pids] * n + cg.paths.dst[pids]
    _, binv = np.unique(block, return_inverse=True)
    total = np.bincount(binv, weights=y)
    return pids.astype(np.int64), (y * nchunks / total[binv]).astype(np.float64)


def largest_remainder_v(block: IntArray, y: FloatArray, nchunks: int) -> IntArray:
    """Integer chunks per path, exactly ``nchunks`` per block (``y`` sums to it per block)."""
    base = np.floor(y + 1e-9).astype(np.int64)
    frac = y - base
    _, inv = np.unique(block, return_inverse=True)
    rem = nchunks - np.bincount(inv, weights=base).astype(np.int64)
    order = np.lexsort((-frac, inv))
    first = np.r_[0, np.flatnonzero(np.diff(inv[order])) + 1]
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    out = base.copy()
    out[order] += (rank < rem[inv[order]]).astype(np.int64)
    return out


def link_loads(cg: WeightedCg, pids: IntArray, chunks: IntArray, nchunks: int) -> FloatArray:
    """Normalised demand units per link of the rounded solution."""
    starts, links = cg.paths.link_csr(pids)
    size = cg.demand[cg.paths.src[pids], cg.paths.dst[pids]] * chunks / nchunks
    out: FloatArray = np.bincount(links, weights=np.repeat(size, np.diff(starts)),
                                  minlength=cg.net.n_links).astype(np.float64)
    return out


def improve(cg: WeightedCg, pids: IntArray, chunks: IntArray, nchunks: int, *, max_moves: int,
            deadline: float | None, good_enough: float = 0.0) -> tuple[IntArray, IntArray, int]:
    """Chunk moves that lower the bottleneck (see the module docstring) until its time (load /
    capacity, normalised) is at most ``good_enough``; returns the new (path ids, chunks) and how
    many moves were made."""
    st = _Moves(cg, pids, chunks, nchunks)
    moves = 0
    blocked: set[int] = set()
    while moves < max_moves and (deadline is None or time.perf_counter() < deadline):
        ratio = st.loads / st.caps
        e = int(np.argmax(ratio))
        t = float(ratio[e])
        if t <= good_enough or e in blocked:
            break
        users = st.users(e)
        if st.pool_move(users, e, t) or st.bfs_move(users[:BFS_USERS], e, t):
            moves += 1
            continue
        blocked.add(e)
        break
    items = sorted((p, c) for p, c in st.chunk_of.items() if c > 0)
    return (np.array([p for p, _ in items], dtype=np.int64), np.array([c for _, c in items], dtype=np.int64), moves)


class _Moves:
    """The state of :func:`improve`: link loads, chunks per path, each block's pooled paths."""

    def __init__(self, cg: WeightedCg, pids: IntArray, chunks: IntArray, nchunks: int) -> None:
        self.cg, self.nchunks = cg, nchunks
        self.caps = np.where(cg.net.caps_GBps > 0, cg.net.caps_GBps, np.inf)
        paths = self.paths = cg.paths
        n = self.n = cg.net.n_gpus
        pool_block = paths.src * n + paths.dst
        self.pool_order = np.argsort(pool_block, kind="stable")
        self.pool_sorted = pool_block[self.pool_order]
        self.by_block: dict[int, IntArray] = {}
        self.chunk_of = dict(zip(pids.tolist(), chunks.tolist()))
        self.loads = link_loads(cg, pids, chunks, nchunks)
        self.links_of = cg.links_cache
        net = cg.net
        self.live = live = cg.net.caps_GBps > 0
        self.out_links: list[list[int]] = [[] for _ in range(net.n_nodes)]
        for li in np.flatnonzero(live).tolist():
            self.out_links[int(net.tail[li])].append(li)
        starts, self.all_links = paths.link_csr(pids)
        self.owner = np.repeat(pids, np.diff(starts))
        self.extra: set[int] = set()  # paths that received a chunk by a move

    def lk(self, p: int) -> list[int]:
        got = self.links_of.get(p)
        if got is None:
            got = self.links_of[p] = self.paths.links(p).tolist()
        return got

    def move(self, p: int, q: int, size: float) -> None:
        """One chunk of path ``p``'s block from ``p`` onto ``q``."""
        np.subtract.at(self.loads, self.lk(p), size)
        np.add.at(self.loads, self.lk(q), size)
        self.chunk_of[p] -= 1
        self.chunk_of[q] = self.chunk_of.get(q, 0) + 1
        self.extra.add(q)

    def users(self, e: int) -> list[int]:
        """Paths with chunks on link ``e``, biggest blocks first."""
        cg, paths = self.cg, self.paths
        cand = set(self.owner[self.all_links == e].tolist()) | {p for p in self.extra if e in self.lk(p)}
        users = [p for p in sorted(cand) if self.chunk_of.get(p, 0) > 0]
        users.sort(key=lambda p: -cg.demand[paths.src[p], paths.dst[p]])
        return users

    def pool_move(self, users: list[int], e: int, t: float) -> bool:
        """Move one chunk of the first user that has a pooled path avoiding ``e`` and staying below ``t``."""
        cg, paths, n, loads, caps = self.cg, self.paths, self.n, self.loads, self.caps
        for p in users:
            s, d = int(paths.src[p]), int(paths.dst[p])
            size = cg.demand[s, d] / self.nchunks
            b = s * n + d
            alts = self.by_block.get(b)
            if alts is None:
                lo, hi = np.searchsorted(self.pool_sorted, [b, b + 1])
                alts = self.by_block[b] = self.pool_order[lo:hi]
            lp = set(self.lk(p))
            best_q, best_t = -1, t * (1 - 1e-12)
            for q in alts.tolist():
                if q == p:
                    continue
                lq = self.lk(q)
                if e in lq:
                    continue
                new = [x for x in lq if x not in lp]
                if not new:
                    continue
                worst = max((loads[x] + size) / caps[x] for x in new)
                if worst < best_t:
                    best_q, best_t = q, worst
            if best_q >= 0:
                self.move(p, best_q, size)
                return True
        return False

    def bfs_move(self, users: list[int], e: int, t: float) -> bool:
        """Move one chunk of the first user for which BFS finds a new path over links staying below ``t``."""
        cg, paths, n, loads, caps = self.cg, self.paths, self.n, self.loads, self.caps
        for p in users:
            s, d = int(paths.src[p]), int(paths.dst[p])
            size = cg.demand[s, d] / self.nchunks
            on_path = np.zeros(len(loads), dtype=bool)
            on_path[self.lk(p)] = True
            ok = self.live & (((loads + size) / caps < t * (1 - 1e-12)) | on_path)
            ok[e] = False
            links = _bfs(cg, s, d, ok, self.out_links)
            if links is None:
                continue
            arr = np.asarray(links, dtype=np.int64)
            h1, h2 = path_hashes([arr])
            q = int(paths.add_many(np.array([s]), np.array([d]), [arr], h1, h2,
                                   np.array([int(cg.net.is_gpu[cg.net.head[arr]].sum())]))[0])
            if q == p:
                continue
            b = s * n + d
            self.by_block[b] = np.union1d(self.by_block.get(b, np.zeros(0, dtype=np.int64)), [q])
            self.move(p, q, size)
            return True
        return False


def _bfs(cg: WeightedCg, s: int, d: int, ok: npt.NDArray[np.bool_], out_links: list[list[int]]) -> list[int] | None:
    """Fewest-link path from rank s to rank d over links with ``ok`` (node-simple; within the
    step bound), as link ids, or None."""
    net = cg.net
    src, dst = int(net.gpu_node[s]), int(net.gpu_node[d])
    parent: dict[int, int] = {src: -1}
    frontier = [src]
    while frontier and dst not in parent:
        nxt = []
        for u in frontier:
            for li in out_links[u]:
                v = int(net.head[li])
                if ok[li] and v not in parent:
                    parent[v] = li
                    nxt.append(v)
        frontier = nxt
    if dst not in parent:
        return None
    links = []
    v = dst
    while v != src:
        li = parent[v]
        links.append(li)
        v = int(net.tail[li])
    links.reverse()
    if cg.steps is not None and int(net.is_gpu[net.head[links]].sum()) > cg.steps:
        return None
    return links


def greedy_remainder(cg: WeightedCg, pids: IntArray, y: FloatArray, nchunks: int) -> IntArray:
    """Integer chunks per path, exactly ``nchunks`` per block: whole parts of ``y`` first, then each
    block's remaining chunks (largest blocks first) onto its fractional path whose links stay least
    loaded relative to capacity."""
    n = cg.net.n_gpus
    paths = cg.paths
    base = np.floor(y + 1e-9).astype(np.int64)
    caps = np.where(cg.net.caps_GBps > 0, cg.net.caps_GBps, np.inf)
    loads = link_loads(cg, pids, base, nchunks)
    block = paths.src[pids] * n + paths.dst[pids]
    uniq, inv = np.unique(block, return_inverse=True)
    rem = nchunks - np.bincount(inv, weights=base).astype(np.int64)
    size = cg.demand[uniq // n, uniq % n] / nchunks
    frac = y - base
    order = np.argsort(inv, kind="stable")
    first = np.searchsorted(inv[order], np.arange(len(uniq)))
    last = np.r_[first[1:], len(order)]
    out = base.copy()
    cap_l = caps.tolist()
    for b in np.lexsort((uniq, -size * (rem > 0))).tolist():
        if rem[b] <= 0:
            break
        members = order[first[b]:last[b]].tolist()
        cand = [i for i in members if frac[i] > 1e-9] or members
        sz = float(size[b])
        for _ in range(int(rem[b])):
            best_i, best_t = cand[0], np.inf
            for i in cand:
                lk = paths.links(int(pids[i])).tolist()
                worst = max((loads[x] + sz) / cap_l[x] for x in lk)
                if worst < best_t:
                    best_i, best_t = i, worst
            out[best_i] += 1
            np.add.at(loads, paths.links(int(pids[best_i])), sz)
    return out
