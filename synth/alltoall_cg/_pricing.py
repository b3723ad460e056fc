"""Vectorised pricing: one shortest-path tree per source on the (time-expanded) graph.

On a step-bounded graph a layered min-plus DP covers every source at once (a nodes × sources
distance matrix per layer, see :func:`layered_shortest`); without a step bound one
``scipy.sparse.csgraph.dijkstra`` call does. The predecessor walk from all destinations back to
their sources runs as whole-array steps (one per link of the longest path), never a per-node
Python loop. :func:`tree_costs` gives the cheapest tree cost per source from distances alone
(no walk), which is all that proving LP optimality and the Farley bound need. Each source's tree is returned as its per-link load (how many of
its destinations' paths cross each link) and, per destination, a path identity (two 64-bit
rolling hashes of the link sequence) plus the link sequence itself.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.alltoall_cg._expanded import ExpandedGraph, Network
>>> net = Network.from_topology(named_topology("nvswitch:3"))
>>> trees = price_trees(ExpandedGraph.build(net, 1), np.ones(net.n_links))
>>> trees.loads[0].tolist()  # rank 0 sends 2 paths up its link, one down each other link
[2, 0, 0, 1, 0, 1]
>>> trees.cost.tolist()
[4.0, 4.0, 4.0]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.sparse.csgraph import dijkstra

from synth.alltoall_cg._distances import condensed_shortest, free_shortest, layered_shortest
from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.errors import SolverError

__all__ = ["PairPaths", "TreeSet", "condensed_shortest", "free_shortest", "layered_shortest", "path_hashes",
           "price_pairs", "price_trees", "reversed_network", "tree_costs"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
HashArray = npt.NDArray[np.uint64]

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


@dataclass(frozen=True, eq=False)
class TreeSet:
    """Shortest-path trees of ``sources`` (ranks): loads, costs and paths to every destination.

    ``loads[i, e]`` counts the paths of source ``sources[i]`` over link e; ``cost[i]`` is the tree's
    cost under the weights without tie-break; ``hash1/hash2[i, d]`` identify the path to rank d
    (0 for d = source); ``seq[k, i, d]`` is the k-th link of that path counted from its
    destination backwards, -1 past its start; ``steps[i, d]`` its GPU hops.
    """

    sources: IntArray
    loads: IntArray
    cost: FloatArray
    pair_cost: FloatArray
    hash1: HashArray
    hash2: HashArray
    seq: IntArray
    steps: IntArray


def price_trees(
    graph: ExpandedGraph,
    link_weight: FloatArray,
    *,
    sources: IntArray | None = None,
    tie_break: float = 0.0,
    method: str = "auto",
) -> TreeSet:
    """Shortest-path trees from each source rank under ``link_weight`` (+ ``tie_break`` per link).

    ``tie_break`` > 0 prefers paths with fewer links among equal-cost ones and keeps every path
    simple. Raises :class:`SolverError` when a destination is unreachable within the step bound.
    ``method`` picks the shortest-path engine: ``"dp"`` (layered min-plus DP over all sources at
    once; step-bounded graphs only), ``"dijkstra"`` (scipy), or ``"auto"`` (DP when step-bounded).
    """
    net = graph.net
    n = net.n_gpus
    if sources is None:
        sources = np.arange(n, dtype=np.int64)
    sources = np.asarray(sources, dtype=np.int64)
    w = np.asarray(link_weight, dtype=np.float64)
    if method not in ("auto", "dp", "dijkstra"):
        raise ValueError(f"unknown pricing method {method!r}")
    use_dp = graph.steps is not None and method != "dijkstra"
    # Strictly positive arc weights: a positive tie-break is what makes every shortest path
    # simple (and csgraph keeps explicit zeros as arcs).
    tb = np.asarray(tie_break, dtype=np.float64)
    wt = (w[:, None] + tb) if tb.ndim == 2 else w + tb
    cur, best, pred, pred_link = _shortest(graph, wt, net.gpu_node[sources], use_dp)
    own = sources[:, None] == np.arange(n)[None, :]
    unreachable = ~np.isfinite(best) & ~own
    if unreachable.any():
        i, d = np.argwhere(unreachable)[0]
        bound = "without a step bound" if graph.steps is None else f"within max_steps={graph.steps} steps"
        raise SolverError(
            f"topology {net.name!r}: rank {int(d)} cannot be reached from rank {int(sources[i])} {bound}"
        )
    return _walk_trees(graph, w, sources, cur, own, pred, pred_link)


def _shortest(graph: ExpandedGraph, wt: FloatArray, src_nodes: IntArray,
              use_dp: bool) -> tuple[IntArray, FloatArray, IntArray | None, IntArray | None]:
    """Per (source row, destination rank): the expanded node its shortest path ends at and its cost, with
    the predecessors to walk back (Dijkstra's node predecessors, or the DP's predecessor links)."""
    net = graph.net
    nv, n, s = net.n_nodes, net.n_gpus, len(src_nodes)
    rows = np.arange(s)[:, None]
    pred_link: IntArray | None = None
    if use_dp:
        dist_l, pred_link = layered_shortest(graph, wt, src_nodes)
        cand = dist_l[1:, net.gpu_node, :].transpose(2, 0, 1)  # (s, m, n)
    else:
        mat = graph.matrix(wt)
        dist, pred = dijkstra(mat, indices=src_nodes, return_predecessors=True)
        if graph.steps is not None:
            layer_nodes = net.gpu_node[None, :] + nv * np.arange(1, graph.n_layers)[:, None]  # (m, n)
            cand = dist[:, layer_nodes]  # (s, m, n)
    if graph.steps is None:
        cur = np.broadcast_to(net.gpu_node[None, :], (s, n)).copy()
        best = dist[rows, cur]
    else:
        t_best = np.argmin(cand, axis=1)  # fewest steps among ties
        cur = net.gpu_node[None, :] + nv * (t_best + 1)
        best = np.take_along_axis(cand, t_best[:, None, :], axis=1)[:, 0, :]
    return cur, best, (pred if not use_dp else None), pred_link


def _walk_trees(graph: ExpandedGraph, w: FloatArray, sources: IntArray, cur: IntArray, own: npt.NDArray[np.bool_],
                pred: IntArray | None, pred_link: IntArray | None) -> TreeSet:
    """Walk every destination's predecessors back to its source at once (whole-array steps, one per link
    of the longest path): per-link loads, path hashes, link sequences, GPU hops and costs."""
    net = graph.net
    nv, n, ne = net.n_nodes, net.n_gpus, net.n_links
    src_nodes = net.gpu_node[sources]
    s = len(sources)
    is_gpu = net.is_gpu
    size = s * n
    h1 = np.zeros(size, dtype=np.uint64)
    h2 = np.zeros(size, dtype=np.uint64)
    steps = np.zeros(size, dtype=np.int64)
    pair_cost = np.zeros(size)
    seq_parts: list[tuple[IntArray, IntArray]] = []
    load_keys: list[IntArray] = []
    q = np.flatnonzero(~own.ravel())  # flat (source row, destination) pairs still walking
    ri = q // n
    c = cur.ravel()[q]  # expanded node: v + nv·t
    node, layer = c % nv, c // nv
    # Per walking pair (compacted as pairs finish): hashes, GPU arrivals, cost so far.
    a1 = np.zeros(len(q), dtype=np.uint64)
    a2 = np.zeros(len(q), dtype=np.uint64)
    a_steps = np.zeros(len(q), dtype=np.int64)
    a_cost = np.zeros(len(q))
    tails = net.tail
    pred_flat = pred_link.reshape(-1) if pred_link is not None else None
    for _ in range(nv * graph.n_layers + 1):
        if len(q) == 0:
            break
        arrived = is_gpu[node]
        if pred_flat is not None:
            link = pred_flat[(layer * nv + node) * s + ri]
        else:
            assert pred is not None
            p = pred[ri, c].astype(np.int64)
            link = graph.link_of(p, c)
        p_node = tails[link]
        p_layer = layer - arrived if graph.steps is not None else layer
        seq_parts.append((q, link))
        lk = (link + 1).astype(np.uint64)
        with np.errstate(over="ignore"):
            a1 *= _M1
            a1 += lk
            a2 ^= lk
            a2 *= _M2
            a2 += np.uint64(1)
        a_steps += arrived
        a_cost += w[link]
        load_keys.append(ri * ne + link)
        go = (p_node != src_nodes[ri]) | (p_layer != 0)
        if not go.all():
            done = ~go
            qd = q[done]
            h1[qd], h2[qd], steps[qd], pair_cost[qd] = a1[done], a2[done], a_steps[done], a_cost[done]
            q, ri, node, layer = q[go], ri[go], p_node[go], p_layer[go]
            a1, a2, a_steps, a_cost = a1[go], a2[go], a_steps[go], a_cost[go]
        else:
            node, layer = p_node, p_layer
        if pred_flat is None:
            c = node + nv * layer
    else:  # pragma: no cover - a predecessor walk longer than the graph means a cycle
        raise SolverError(f"topology {net.name!r}: shortest-path predecessors form a cycle")
    keys = np.concatenate(load_keys) if load_keys else np.zeros(0, dtype=np.int64)
    loads = np.bincount(keys, minlength=s * ne).reshape(s, ne)
    flat_seq = np.full((len(seq_parts), size), -1, dtype=np.int64)
    for j, (qj, lj) in enumerate(seq_parts):
        flat_seq[j, qj] = lj
    seq = flat_seq.reshape(len(seq_parts), s, n)
    cost2 = pair_cost.reshape(s, n)
    # Tree cost = Σ_d pair cost (the same sum as loads @ w, without a dense matmul).
    return TreeSet(sources, loads, cost2.sum(axis=1), cost2, h1.reshape(s, n), h2.reshape(s, n), seq,
                   steps.reshape(s, n))


def tree_costs(graph: ExpandedGraph, link_weight: FloatArray, *, sources: IntArray | None = None) -> FloatArray:
    """Per source, the exact cost Σ_d dist(s, d) of its cheapest tree under ``link_weight`` ≥ 0.

    Distances only, no trees (no tie-break, no predecessor walk): what proving LP optimality and
    the Farley bound need. Step-bounded graphs use the layered DP, the plain graph Bellman-Ford
    rounds; both vectorised over all sources. Raises like :func:`price_trees` when a
    destination is unreachable.
    """
    net = graph.net
    n = net.n_gpus
    sources = np.arange(n, dtype=np.int64) if sources is None else np.asarray(sources, dtype=np.int64)
    w = np.asarray(link_weight, dtype=np.float64)
    src_nodes = net.gpu_node[sources]
    if graph.steps is not None:
        dist, _ = layered_shortest(graph, w, src_nodes, with_pred=False)
        d = dist[1:, net.gpu_node, :].min(axis=0)  # (destinations, sources)
    else:
        d = condensed_shortest(net, w, src_nodes)
        if d is None:
            d = free_shortest(graph, w, src_nodes)
        d = d[net.gpu_node]
    d[sources, np.arange(len(sources))] = 0.0
    if not np.isfinite(d).all():
        price_trees(graph, w, sources=sources, tie_break=1.0)  # raises with the unreachable pair
        raise SolverError(f"topology {net.name!r}: unreachable destination")  # pragma: no cover
    return d.sum(axis=0)


def reversed_network(net: Network) -> Network:
    """``net`` with every link turned around (same link ids): shortest paths *into* a rank.

    A GPU-simple path makes as many GPU hops in either direction, so the time-expanded graph of
    the reversed network has the same step bound semantics."""
    return replace(net, tail=net.head, head=net.tail, name=f"{net.name} (reversed)")


def _cover_roots(src: IntArray, dst: IntArray, n: int) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Few roots covering every (src, dst) pair: a source (forward tree) or a destination (reverse).

    Greedy set cover, largest group first, ties to sources then lower ranks. Returns the forward
    roots, the reverse roots and, per pair, whether a forward root covers it."""
    fwd: list[int] = []
    rev: list[int] = []
    by_fwd = np.zeros(len(src), dtype=bool)
    left = np.ones(len(src), dtype=bool)
    while left.any():
        cs = np.bincount(src[left], minlength=n)
        cd = np.bincount(dst[left], minlength=n)
        if cs.max() >= cd.max():
            r = int(np.argmax(cs))
            fwd.append(r)
            hit = left & (src == r)
            by_fwd |= hit
        else:
            r = int(np.argmax(cd))
            rev.append(r)
            hit = left & (dst == r)
        left &= ~hit
    return np.array(fwd, dtype=np.int64), np.array(rev, dtype=np.int64), by_fwd


@dataclass(frozen=True, eq=False)
class PairPaths:
    """Shortest paths of chosen (src, dst) pairs: ``cost``, GPU hops ``steps``, the pool hashes
    ``hash1``/``hash2`` and the links, ``forward[j, i]`` the j-th link of pair i (-1 past its end)."""

    cost: FloatArray
    forward: IntArray
    lengths: IntArray
    steps: IntArray
    hash1: HashArray
    hash2: HashArray

    def links(self, i: int) -> IntArray:
        return self.forward[: self.lengths[i], i]


def _flip(seq: IntArray, lengths: IntArray) -> IntArray:
    """Reverse each column's first ``lengths[i]`` entries of a -1 padded (L, P) matrix."""
    j = np.arange(seq.shape[0])[:, None]
    src = lengths[None, :] - 1 - j
    out = np.full(seq.shape, -1, dtype=np.int64)
    ok = src >= 0
    out[ok] = seq[src[ok], np.broadcast_to(np.arange(seq.shape[1]), seq.shape)[ok]]
    return out


def _engine(roots: int) -> str:
    # scipy's Dijkstra beats the all-sources DP (whose cost is per layer, not per source) for few roots.
    return "dijkstra" if roots <= 16 else "auto"


def price_pairs(graph: ExpandedGraph, reverse: ExpandedGraph, link_weight: FloatArray, src: IntArray, dst: IntArray,
                *, tie_break: float = 0.0) -> PairPaths:
    """Shortest path of each (src[i], dst[i]) pair under ``link_weight`` (+ ``tie_break`` per link).

    Pairs are grouped under few roots (:func:`_cover_roots`): a source's forward tree on ``graph``
    or a destination's tree on ``reverse`` (the time-expanded graph of :func:`reversed_network`
    with the same step bound). Pricing a handful of pairs after a local change thus costs a few
    trees, not one per source.
    """
    n = graph.net.n_gpus
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    p = len(src)
    fwd, rev, by_fwd = _cover_roots(src, dst, n)
    cost = np.zeros(p)
    steps = np.zeros(p, dtype=np.int64)
    parts: list[tuple[IntArray, IntArray, IntArray]] = []  # (pairs, backward links, forward links)
    w = np.asarray(link_weight, dtype=np.float64)
    for roots, g, forward_root in ((fwd, graph, True), (rev, reverse, False)):
        if len(roots) == 0:
            continue
        row = np.full(n, -1, dtype=np.int64)
        row[roots] = np.arange(len(roots))
        idx = np.flatnonzero(by_fwd if forward_root else ~by_fwd)
        r, far = (row[src[idx]], dst[idx]) if forward_root else (row[dst[idx]], src[idx])
        cost[idx], steps[idx], seq = _walk_pairs(g, w, tie_break, roots, r, far)  # seq: far end back to root
        lengths = (seq >= 0).sum(axis=0)
        flipped = _flip(seq, lengths)
        parts.append((idx, seq, flipped) if forward_root else (idx, flipped, seq))
    width = max((b.shape[0] for _, b, _ in parts), default=0)
    back = np.full((width, p), -1, dtype=np.int64)
    forward = np.full((width, p), -1, dtype=np.int64)
    for idx, b, f in parts:
        back[: b.shape[0], idx] = b
        forward[: f.shape[0], idx] = f
    h1, h2 = _hash_back(back)
    return PairPaths(cost, forward, (forward >= 0).sum(axis=0), steps, h1, h2)


def _walk_pairs(graph: ExpandedGraph, w: FloatArray, tie_break: float, roots: IntArray, r: IntArray,
                far: IntArray) -> tuple[FloatArray, IntArray, IntArray]:
    """Shortest paths from ``roots[r[i]]`` to rank ``far[i]``: (cost under ``w``, GPU hops, links from
    the far end back, -1 padded). Like :func:`price_trees` (fewest steps among ties), but walks only
    the requested pairs."""
    net = graph.net
    nv = net.n_nodes
    root_nodes = net.gpu_node[roots]
    wt = w + tie_break
    pred_link: IntArray | None = None
    if graph.steps is not None and _engine(len(roots)) != "dijkstra":
        dist_l, pred_link = layered_shortest(graph, wt, root_nodes)
        assert pred_link is not None
        flat_pred = pred_link.reshape(-1)
        dist = dist_l.reshape(graph.n_layers * nv, len(roots)).T  # (roots, expanded nodes)
    else:
        dist, pred = dijkstra(graph.matrix(wt), indices=root_nodes, return_predecessors=True)
    far_nodes = net.gpu_node[far]
    if graph.steps is None:
        c = far_nodes.copy()
        best = dist[r, c]
    else:
        layer_nodes = far_nodes[None, :] + nv * np.arange(1, graph.n_layers)[:, None]  # (m, P)
        cand = dist[r[None, :], layer_nodes]
        t_best = np.argmin(cand, axis=0)
        c = far_nodes + nv * (t_best + 1)
        best = cand[t_best, np.arange(len(far))]
    if not np.isfinite(best).all():
        i = int(np.flatnonzero(~np.isfinite(best))[0])
        bound = "without a step bound" if graph.steps is None else f"within max_steps={graph.steps} steps"
        raise SolverError(f"topology {net.name!r}: no path between ranks {int(roots[r[i]])} and {int(far[i])} {bound}")
    p = len(far)
    cost = np.zeros(p)
    steps = np.zeros(p, dtype=np.int64)
    rows: list[tuple[IntArray, IntArray]] = []
    q = np.arange(p)
    node, layer = c % nv, c // nv
    ri = r.copy()
    for _ in range(nv * graph.n_layers + 1):
        if len(q) == 0:
            break
        if pred_link is not None:
            link = flat_pred[(layer * nv + node) * len(roots) + ri]
        else:
            link = graph.link_of(pred[ri, node + nv * layer], node + nv * layer)
        arrived = net.is_gpu[node]
        rows.append((q, link))
        cost[q] += w[link]
        steps[q] += arrived
        node = net.tail[link]
        if graph.steps is not None:
            layer = layer - arrived
        go = (node != root_nodes[ri]) | (layer != 0)
        q, node, layer, ri = q[go], node[go], layer[go], ri[go]
    else:  # pragma: no cover - a predecessor walk longer than the graph means a cycle
        raise SolverError(f"topology {net.name!r}: shortest-path predecessors form a cycle")
    seq = np.full((len(rows), p), -1, dtype=np.int64)
    for j, (qj, lj) in enumerate(rows):
        seq[j, qj] = lj
    return cost, steps, seq


def _hash_back(back: IntArray) -> tuple[HashArray, HashArray]:
    """The pricing walk's rolling hashes of -1 padded link columns listed from the destination back."""
    h1 = np.zeros(back.shape[1], dtype=np.uint64)
    h2 = np.zeros(back.shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for row in back:
            m = row >= 0
            v = (row[m] + 1).astype(np.uint64)
            h1[m] = h1[m] * _M1 + v
            h2[m] = (h2[m] ^ v) * _M2 + np.uint64(1)
    return h1, h2


def path_hashes(links: list[IntArray]) -> tuple[HashArray, HashArray]:
    """The pricing walk's two rolling hashes of forward link sequences (hashed destination first)."""
    width = max((len(x) for x in links), default=0)
    back = np.full((width, len(links)), -1, dtype=np.int64)
    for i, x in enumerate(links):
        back[: len(x), i] = x[::-1]
    return _hash_back(back)
