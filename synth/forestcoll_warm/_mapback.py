"""Map tree classes on logical GPU→GPU arcs back to physical trees (Hop paths through switches).

Each logical arc owns a pool of ``[physical path, units]`` bundles (built while splitting). A class
of multiplicity C takes C units from the pool of each of its edges; where an edge's C units come
from several paths, the class is cut into sub-trees at the breakpoints of the cumulative amounts.

Examples
--------
>>> from synth.forestcoll_warm._packing import TreeClass
>>> pools = {(0, 1): [[("gpu0", "sw", "gpu1"), 1], [("gpu0", "gpu1"), 1]]}
>>> [r.chunks for r in to_routes([TreeClass(0, 2, [0, 1], [(0, 1)], 0)], pools)]
[1, 1]
"""

from __future__ import annotations

from synth.forestcoll_warm._packing import TreeClass
from synth.forestcoll_warm._splitting import Pool
from synth.schedule import Hop, Route, RouteKind

__all__ = ["to_routes"]


def _take(pool: Pool, g: int) -> list[tuple[tuple[str, ...], int]]:
    taken = []
    while g > 0:
        path, amt = pool[0]
        use = min(amt, g)
        taken.append((tuple(path), use))
        g -= use
        if use == amt:
            pool.pop(0)
        else:
            pool[0][1] = amt - use
    return taken


def to_routes(classes: list[TreeClass], pools: dict[tuple[int, int], Pool]) -> list[Route]:
    """Physical out-tree routes (hops parents first), merged and sorted deterministically."""
    pools = {key: [list(b) for b in pool] for key, pool in pools.items()}
    merged: dict[tuple[int, tuple[Hop, ...]], int] = {}
    for c in sorted(classes, key=lambda c: (c.root, c.node_id)):
        pieces = [_take(pools[e], c.mult) for e in c.edges]
        cuts = sorted({0, c.mult} | {acc for p in pieces for acc in _cumulative(p)})
        for lo, hi in zip(cuts, cuts[1:]):
            hops = tuple(Hop(x, y, _at(p, lo)) for (x, y), p in zip(c.edges, pieces))
            key = (c.root, hops)
            merged[key] = merged.get(key, 0) + hi - lo
    return [Route(RouteKind.OUT_TREE, root, chunks, hops) for (root, hops), chunks in sorted(merged.items(), key=_key)]


def _key(item: tuple[tuple[int, tuple[Hop, ...]], int]) -> tuple:
    (root, hops), chunks = item
    return (root, tuple((h.src, h.dst, h.path) for h in hops), chunks)


def _cumulative(piece: list[tuple[tuple[str, ...], int]]) -> list[int]:
    acc, out = 0, []
    for _, amt in piece:
        acc += amt
        out.append(acc)
    return out


def _at(piece: list[tuple[tuple[str, ...], int]], pos: int) -> tuple[str, ...]:
    acc = 0
    for path, amt in piece:
        acc += amt
        if pos < acc:
            return path
    raise AssertionError("position beyond the class multiplicity")
