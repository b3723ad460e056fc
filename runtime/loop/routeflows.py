"""Per-pair flows of a schedule's routes, vectorised (numpy): what :class:`~runtime.loop.estimator.ScheduleRouting`
is built from.

A route's hops are GPU→GPU edges; the estimator needs, per pair of global ranks ``(u, v)``: the chunks one
collective sends ``u→v``, the physical paths its hops name, the pairs that feed ``u`` what it sends on (within
the same route: the hops that end at ``u``), and per in-tree root the pairs reduced into it. A 2048-rank ring
AllGather has ~33 M hop references (16 384 routes of 2047 hops sharing ~6 k hop objects); a Python loop over
them took minutes, so the hops are turned into arrays of pair codes (``u · R + v``, ``R`` = the highest global
rank + 1) in batches of routes and the "feeds" relation is a sorted join per batch.

Examples
--------
>>> from synth import load_topology
>>> from runtime.loop.bootstrap import fallback_schedule
>>> ring = fallback_schedule("allgather", load_topology("hpn:1x1x4"))
>>> f = route_flows(ring.routes, range(4))
>>> sorted(f.chunks.items())[:2], sorted(f.upstream[(1, 2)]), f.reduced_into
([((0, 1), 12), ((1, 2), 12)], [(0, 1)], {})
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from synth.schedule import Hop, Route

__all__ = ["RouteFlows", "route_flows"]

_Pair = tuple[int, int]
_BATCH_HOPS = 1 << 21  # hop references per batch: bounds the arrays (a few tens of MiB) at any size

_hops_of = attrgetter("hops")
_chunks_of = attrgetter("chunks")
_root_of = attrgetter("root")


@dataclass(frozen=True, slots=True)
class RouteFlows:
    """Per pair of global ranks: ``chunks`` sent, ``paths`` named, ``upstream`` pairs feeding it (itself
    excluded); per in-tree root (global rank), ``reduced_into``: the pairs whose hops end at the root."""

    chunks: dict[_Pair, int]
    paths: dict[_Pair, set[tuple[str, ...]]]
    upstream: dict[_Pair, set[_Pair]]
    reduced_into: dict[int, set[_Pair]]


def route_flows(routes: Sequence[Route], g: Sequence[int]) -> RouteFlows:
    """The flows of ``routes`` with local ranks mapped to global ones by ``g`` (see the module docstring).

    Exactly the per-hop definition: ``chunks[(u, v)]`` sums ``route.chunks`` over every hop ``u→v``;
    ``upstream[(u, v)]`` holds every pair ``(w, u)`` of a hop in the same route as a hop ``u→v``.
    """
    g_arr = np.asarray(list(g), dtype=np.int64)
    radix = int(g_arr.max()) + 1 if len(g_arr) else 1
    chunk_acc = np.zeros(radix * radix, dtype=np.int64)
    paths: dict[_Pair, set[tuple[str, ...]]] = defaultdict(set)
    code_of: dict[int, int] = {}  # id(hop) -> pair code (hop objects are shared between routes)
    keep: list[Hop] = []  # the hops whose id is in code_of stay alive while it is used
    ups: list[np.ndarray] = []
    reds: list[np.ndarray] = []
    start = 0
    while start < len(routes):
        stop, n_hops = start, 0
        while stop < len(routes) and (n_hops == 0 or n_hops + len(routes[stop].hops) <= _BATCH_HOPS):
            n_hops += len(routes[stop].hops)
            stop += 1
        batch = routes[start:stop]
        codes, first_new = _batch_codes(batch, g_arr, radix, code_of, keep)
        for hop, code in first_new:
            paths[(code // radix, code % radix)].add(hop.path)
        _fold_batch(batch, codes, radix, g_arr, chunk_acc, ups, reds)
        start = stop
    nz = np.flatnonzero(chunk_acc)
    pair_of = {c: (c // radix, c % radix) for c in nz.tolist()}  # one tuple per pair, shared by every mention
    chunks = {pair_of[c]: n for c, n in zip(nz.tolist(), chunk_acc[nz].tolist())}

    def pair(c: int) -> _Pair:
        p = pair_of.get(c)
        return p if p is not None else pair_of.setdefault(c, (c // radix, c % radix))

    upstream: dict[_Pair, set[_Pair]] = defaultdict(set)
    if ups:
        r2 = radix * radix
        for c in np.unique(np.concatenate(ups)).tolist():
            e, f = divmod(c, r2)
            if e != f:
                upstream[pair(e)].add(pair(f))
    reduced: dict[int, set[_Pair]] = defaultdict(set)
    if reds:
        r2 = radix * radix
        for c in np.unique(np.concatenate(reds)).tolist():
            root, code = divmod(c, r2)
            reduced[root].add(pair(code))
    return RouteFlows(dict(chunks), dict(paths), dict(upstream), dict(reduced))


def _batch_codes(batch: Sequence[Route], g_arr: np.ndarray, radix: int, code_of: dict[int, int],
                 keep: list[Hop]) -> tuple[np.ndarray, list[tuple[Hop, int]]]:
    """Pair code of every hop reference of ``batch`` (in route order), and the hops seen for the first time."""
    flat = list(chain.from_iterable(map(_hops_of, batch)))
    new: list[tuple[Hop, int]] = []
    for i, hop in dict(zip(map(id, flat), flat)).items():  # one entry per hop object (C-speed dedup)
        if i not in code_of:
            code = code_of[i] = int(g_arr[hop.src]) * radix + int(g_arr[hop.dst])
            keep.append(hop)
            new.append((hop, code))
    return np.fromiter(map(code_of.__getitem__, map(id, flat)), dtype=np.int64, count=len(flat)), new


def _fold_batch(batch: Sequence[Route], codes: np.ndarray, radix: int, g_arr: np.ndarray,
                chunk_acc: np.ndarray, ups: list[np.ndarray], reds: list[np.ndarray]) -> None:
    """Chunks per pair, the (fed pair, feeding pair) codes and the in-tree reductions of one batch."""
    lens = np.fromiter(map(len, map(_hops_of, batch)), dtype=np.int64, count=len(batch))
    rid = np.repeat(np.arange(len(batch), dtype=np.int64), lens)
    per = np.repeat(np.fromiter(map(_chunks_of, batch), dtype=np.int64, count=len(batch)), lens)
    chunk_acc += np.bincount(codes, weights=per, minlength=len(chunk_acc)).astype(np.int64)
    src, dst = codes // radix, codes % radix
    in_tree = np.fromiter((r.kind.value == "in_tree" for r in batch), dtype=bool, count=len(batch))
    fed, feeder = _feeds(rid, src, dst, radix, dense=not in_tree.any() and len(batch) * radix <= 4 * len(codes))
    if len(fed):
        ups.append(np.unique(codes[fed] * (radix * radix) + codes[feeder]))
    if in_tree.any():
        roots = g_arr[np.fromiter(map(_root_of, batch), dtype=np.int64, count=len(batch))]
        mask = in_tree[rid] & (dst == roots[rid])
        reds.append(np.unique(roots[rid][mask] * (radix * radix) + codes[mask]))


def _feeds(rid: np.ndarray, src: np.ndarray, dst: np.ndarray, radix: int, dense: bool) -> tuple[np.ndarray, np.ndarray]:
    """Hop references ``(e, f)`` of one route where ``f`` ends where ``e`` starts.

    ``dense``: every GPU has at most one hop into it per route (out-trees, paths), so a table indexed by
    ``(route, rank)`` answers the join; otherwise (in-trees: a node has several children) a sorted join."""
    key_dst, key_src = rid * radix + dst, rid * radix + src
    if dense:
        table = np.full((int(rid[-1]) + 1) * radix if len(rid) else 0, -1, dtype=np.int64)
        table[key_dst] = np.arange(len(key_dst), dtype=np.int64)
        feeder = table[key_src]
        ok = feeder >= 0
        return np.flatnonzero(ok), feeder[ok]
    order = np.argsort(key_dst, kind="stable")
    sorted_dst = key_dst[order]
    lo = np.searchsorted(sorted_dst, key_src, side="left")
    cnt = np.searchsorted(sorted_dst, key_src, side="right") - lo
    fed = np.repeat(np.arange(len(key_src), dtype=np.int64), cnt)
    offs = np.arange(len(fed), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return fed, order[np.repeat(lo, cnt) + offs]
