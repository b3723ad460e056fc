"""Map tree classes on logical GPU→GPU arcs back to physical trees (Hop paths through switches).

Each logical arc owns a pool of ``[physical path, units]`` bundles (built while splitting). A class
of multiplicity C takes C units from the pool of each of its edges; where an edge's C units come
from several paths, the class is cut into sub-trees at the breakpoints of the cumulative amounts.

Examples
--------
>>> from synth.kernels.packing import TreeClass
>>> pools = {(0, 1): [[("gpu0", "sw", "gpu1"), 1], [("gpu0", "gpu1"), 1]]}
>>> [r.chunks for r in to_routes([TreeClass(0, 2, [0, 1], [(0, 1)], 0)], pools)]
[1, 1]
"""

from __future__ import annotations

from synth.kernels.packing import TreeClass
from synth.forestcoll_warm._splitting import Pool
from synth.schedule import Hop, Route, RouteKind

__all__ = ["to_routes"]


def to_routes(classes: list[TreeClass], pools: dict[tuple[int, int], Pool]) -> list[Route]:
    """Physical out-tree routes (hops parents first), merged and sorted deterministically."""
    # Per arc: bundles [path, units left, hop id or -1] and the first bundle with units left.
    bundles = {key: [[path, units, -1] for path, units in pool] for key, pool in pools.items()}
    first = dict.fromkeys(bundles, 0)
    hop_ids: dict[tuple[int, int, tuple[str, ...]], int] = {}
    hops: list[Hop] = []  # one Hop object per (src, dst, path)

    def hop_id(x: int, y: int, b: list) -> int:
        if b[2] < 0:
            key = (x, y, tuple(b[0]))
            i = hop_ids.get(key)
            if i is None:
                i = hop_ids[key] = len(hops)
                hops.append(Hop(x, y, key[2]))
            b[2] = i
        return b[2]

    merged: dict[tuple[int, tuple[int, ...]], int] = {}
    for c in sorted(classes, key=lambda c: (c.root, c.node_id)):
        g = c.mult
        ids: list[int] = []
        several: dict[int, list[tuple[int, int]]] = {}  # edge position -> [(hop id, units)]
        for pos, e in enumerate(c.edges):
            bl, j = bundles[e], first[e]
            b = bl[j]
            if b[1] >= g:
                ids.append(hop_id(e[0], e[1], b))
                b[1] -= g
                first[e] = j + (b[1] == 0)
                continue
            piece, need = [], g
            while need > 0:
                b = bl[j]
                use = min(b[1], need)
                piece.append((hop_id(e[0], e[1], b), use))
                b[1] -= use
                need -= use
                j += b[1] == 0
            first[e] = j
            several[pos] = piece
            ids.append(-1)
        if not several:
            key = (c.root, tuple(ids))
            merged[key] = merged.get(key, 0) + g
            continue
        # Cut the class where any edge switches bundles.
        cuts = sorted({0, g} | {acc for p in several.values() for acc in _cumulative(p)})
        seg = {pos: _segments(p, cuts[:-1]) for pos, p in several.items()}
        for s_i, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
            key = (c.root, tuple(seg[pos][s_i] if i < 0 else i for pos, i in enumerate(ids)))
            merged[key] = merged.get(key, 0) + hi - lo
    # Sort routes by (root, hops as (src, dst, path)): rank the distinct hops once.
    rank = [0] * len(hops)
    for r, i in enumerate(sorted(range(len(hops)), key=lambda i: (hops[i].src, hops[i].dst, hops[i].path))):
        rank[i] = r
    items = sorted(merged.items(), key=lambda it: (it[0][0], [rank[i] for i in it[0][1]]))
    return [Route(RouteKind.OUT_TREE, root, chunks, tuple(hops[i] for i in ids)) for (root, ids), chunks in items]


def _segments(piece: list[tuple[int, int]], starts: list[int]) -> list[int]:
    """The hop of ``piece`` at each position of ``starts`` (ascending; every cumulative amount of
    ``piece`` is a segment boundary)."""
    out = []
    j, acc = 0, piece[0][1]
    for pos in starts:
        while pos >= acc:
            j += 1
            acc += piece[j][1]
        out.append(piece[j][0])
    return out


def _cumulative(piece: list[tuple[int, int]]) -> list[int]:
    acc, out = 0, []
    for _, amt in piece:
        acc += amt
        out.append(acc)
    return out
