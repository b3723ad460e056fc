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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse.csgraph import dijkstra

from synth.alltoall_cg._expanded import ExpandedGraph
from synth.errors import SolverError

__all__ = ["TreeSet", "layered_shortest", "price_trees", "tree_costs"]

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
    nv, n, ne = net.n_nodes, net.n_gpus, net.n_links
    if sources is None:
        sources = np.arange(n, dtype=np.int64)
    sources = np.asarray(sources, dtype=np.int64)
    src_nodes = net.gpu_node[sources]
    s = len(sources)
    w = np.asarray(link_weight, dtype=np.float64)
    if method not in ("auto", "dp", "dijkstra"):
        raise ValueError(f"unknown pricing method {method!r}")
    use_dp = graph.steps is not None and method != "dijkstra"
    # Strictly positive arc weights: a positive tie-break is what makes every shortest path
    # simple (and csgraph keeps explicit zeros as arcs).
    tb = np.asarray(tie_break, dtype=np.float64)
    wt = (w[:, None] + tb) if tb.ndim == 2 else w + tb
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
    own = sources[:, None] == np.arange(n)[None, :]
    unreachable = ~np.isfinite(best) & ~own
    if unreachable.any():
        i, d = np.argwhere(unreachable)[0]
        bound = "without a step bound" if graph.steps is None else f"within max_steps={graph.steps} steps"
        raise SolverError(
            f"topology {net.name!r}: rank {int(d)} cannot be reached from rank {int(sources[i])} {bound}"
        )
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


def layered_shortest(graph: ExpandedGraph, wt: FloatArray, src_nodes: IntArray, *,
                     with_pred: bool = True) -> tuple[FloatArray, IntArray | None]:
    """Shortest distances and predecessor links on the time-expanded graph by a layered min-plus DP.

    Returns ``dist[t, v, i]`` (node v at layer t from source node ``src_nodes[i]`` at layer 0) and
    ``pred[t, v, i]``, the link entering (v, t) on a shortest path (-1 at the source and where
    unreachable). Links into a GPU come from layer t − 1 (one vectorised relaxation per layer);
    links into a switch stay in the layer: GPU → switch once, then switch → switch to a fixed
    point. Weights ``wt`` must be > 0 for predecessors (they never form a cycle then); distances
    alone (``with_pred=False``, ``pred`` is None) only need ``wt`` ≥ 0. Ties go to the in-link
    listed last, like scipy's Dijkstra on the named topologies (tie choices steer how many CG
    iterations a degenerate master needs). Node-major layout: every relaxation gathers whole
    rows (one column per source).
    """
    net = graph.net
    if graph.steps is None:
        raise SolverError("the layered DP needs a step bound")
    arcs = graph.layered
    nv, s, layers = net.n_nodes, len(src_nodes), graph.n_layers
    dist = np.full((layers, nv, s), np.inf)
    pred = np.full((layers, nv, s), -1, dtype=np.int64) if with_pred else None
    dist[0, src_nodes, np.arange(s)] = 0.0
    for t in range(layers):
        cur = dist[t]
        pcur = pred[t] if pred is not None else None
        if t > 0 and len(arcs.step):
            best, arg = arcs.step.segmin(dist[t - 1], wt, track=with_pred)
            cur[arcs.step.heads] = best
            if pcur is not None:
                pcur[arcs.step.heads] = arg
        if len(arcs.flat):
            best, arg = arcs.flat.segmin(cur, wt, track=with_pred)
            cur[arcs.flat.heads] = best
            if pcur is not None:
                pcur[arcs.flat.heads] = arg
        if len(arcs.chain):
            heads = arcs.chain.heads
            base = cur[heads]
            for _ in range(nv + 1):
                via, via_pred = arcs.chain.segmin(cur, wt, track=with_pred)
                new = np.minimum(base, via)
                if np.array_equal(new, cur[heads]):
                    break
                cur[heads] = new
            else:  # pragma: no cover - nonnegative weights converge within n_nodes passes
                raise SolverError(f"topology {net.name!r}: switch-chain relaxation did not converge")
            if pcur is not None:
                pcur[heads] = np.where(via < base, via_pred, pcur[heads])
    return dist, pred


def _free_shortest(graph: ExpandedGraph, w: FloatArray, src_nodes: IntArray) -> FloatArray:
    """Distances (nodes × sources) without a step bound: Bellman-Ford rounds over all live links."""
    net = graph.net
    arcs = graph.all_arcs
    dist = np.full((net.n_nodes, len(src_nodes)), np.inf)
    dist[src_nodes, np.arange(len(src_nodes))] = 0.0
    if len(arcs) == 0:
        return dist
    for _ in range(net.n_nodes + 1):
        best, _ = arcs.segmin(dist, w, track=False)
        new = np.minimum(dist[arcs.heads], best)
        if np.array_equal(new, dist[arcs.heads]):
            return dist
        dist[arcs.heads] = new
    raise SolverError(f"topology {net.name!r}: Bellman-Ford did not converge")  # pragma: no cover


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
        d = _free_shortest(graph, w, src_nodes)[net.gpu_node]
    d[sources, np.arange(len(sources))] = 0.0
    if not np.isfinite(d).all():
        price_trees(graph, w, sources=sources, tie_break=1.0)  # raises with the unreachable pair
        raise SolverError(f"topology {net.name!r}: unreachable destination")  # pragma: no cover
    return d.sum(axis=0)
