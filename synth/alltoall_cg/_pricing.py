"""Vectorised pricing: one shortest-path tree per source on the (time-expanded) graph.

One ``scipy.sparse.csgraph.dijkstra`` call covers every source; the predecessor walk from all
destinations back to their sources runs as whole-array steps (one per link of the longest path),
never a per-node Python loop. Each source's tree is returned as its per-link load (how many of
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

__all__ = ["TreeSet", "price_trees"]

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
) -> TreeSet:
    """Shortest-path trees from each source rank under ``link_weight`` (+ ``tie_break`` per link).

    ``tie_break`` > 0 prefers paths with fewer links among equal-cost ones and keeps every path
    simple. Raises :class:`SolverError` when a destination is unreachable within the step bound.
    """
    net = graph.net
    nv, n, ne = net.n_nodes, net.n_gpus, net.n_links
    if sources is None:
        sources = np.arange(n, dtype=np.int64)
    src_nodes = net.gpu_node[sources]
    s = len(sources)
    w = np.asarray(link_weight, dtype=np.float64)
    # Strictly positive arc weights: csgraph keeps explicit zeros as arcs, but a positive
    # tie-break is what makes every shortest path simple.
    mat = graph.matrix(w + tie_break)
    dist, pred = dijkstra(mat, indices=src_nodes, return_predecessors=True)
    rows = np.arange(s)[:, None]
    if graph.steps is None:
        cur = np.broadcast_to(net.gpu_node[None, :], (s, n)).copy()
        best = dist[rows, cur]
    else:
        layer_nodes = net.gpu_node[None, :] + nv * np.arange(1, graph.n_layers)[:, None]  # (m, n)
        cand = dist[:, layer_nodes]  # (s, m, n)
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
    rank_of = net.rank_of_node()
    active = ~own
    cur = np.where(own, src_nodes[:, None], cur)
    h1 = np.zeros((s, n), dtype=np.uint64)
    h2 = np.zeros((s, n), dtype=np.uint64)
    steps = np.zeros((s, n), dtype=np.int64)
    seqs: list[IntArray] = []
    load_keys: list[IntArray] = []
    row_full = np.broadcast_to(rows, (s, n))
    for _ in range(nv * graph.n_layers + 1):
        if not active.any():
            break
        ri, di = np.nonzero(active)
        c = cur[ri, di]
        p = pred[ri, c].astype(np.int64)
        link = graph.link_of(p, c)
        step = np.full((s, n), -1, dtype=np.int64)
        step[ri, di] = link
        seqs.append(step)
        lk = (link + 1).astype(np.uint64)
        with np.errstate(over="ignore"):
            h1[ri, di] = h1[ri, di] * _M1 + lk
            h2[ri, di] = (h2[ri, di] ^ lk) * _M2 + np.uint64(1)
        steps[ri, di] += rank_of[c % nv] >= 0
        load_keys.append(row_full[ri, di] * ne + link)
        cur[ri, di] = p
        active[ri, di] = p != src_nodes[ri]
    else:  # pragma: no cover - a predecessor walk longer than the graph means a cycle
        raise SolverError(f"topology {net.name!r}: shortest-path predecessors form a cycle")
    keys = np.concatenate(load_keys) if load_keys else np.zeros(0, dtype=np.int64)
    loads = np.bincount(keys, minlength=s * ne).reshape(s, ne).astype(np.int64)
    seq = np.stack(seqs) if seqs else np.full((0, s, n), -1, dtype=np.int64)
    pair_cost = np.zeros((s, n))
    for step in seqs:
        pair_cost += np.where(step >= 0, w[np.maximum(step, 0)], 0.0)
    return TreeSet(sources, loads, loads @ w, pair_cost, h1, h2, seq, steps)
