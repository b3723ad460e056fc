"""Shortest-path distances for pricing: the layered min-plus DP on a step-bounded time-expanded graph
(:func:`layered_shortest`, with predecessor links), Bellman-Ford rounds without a step bound, and exact
distances on the graph condensed by its zero-weight components.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.alltoall_cg._expanded import ExpandedGraph, Network
>>> net = Network.from_topology(named_topology("nvswitch:3"))
>>> dist, _ = layered_shortest(ExpandedGraph.build(net, 1), np.ones(net.n_links), net.gpu_node, with_pred=False)
>>> dist[1, net.gpu_node, 0].tolist()  # one step from rank 0: up to the switch, down to any GPU
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, csgraph_from_dense, dijkstra

from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.errors import SolverError

__all__ = ["CONDENSED_MAX", "condensed_shortest", "free_shortest", "layered_shortest"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


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


def free_shortest(graph: ExpandedGraph, w: FloatArray, src_nodes: IntArray) -> FloatArray:
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


CONDENSED_MAX = 2000  # components up to which the condensed graph's all-pairs distances are worth it


def condensed_shortest(net: Network, w: FloatArray, src_nodes: IntArray) -> FloatArray | None:
    """Exact distances (nodes × sources) without a step bound, on the graph whose nodes are the
    strongly connected components of the zero-weight live links (free to move inside one).

    Link duals are mostly zero, so the condensed graph is tiny: all-pairs distances there cost
    next to nothing. Returns None when it would not be (more than ``CONDENSED_MAX`` components)."""
    live = np.flatnonzero(net.live)
    tail, head, wl = net.tail[live], net.head[live], w[live]
    nv = net.n_nodes
    zero = wl <= 0
    g0 = csr_matrix((np.ones(int(zero.sum())), (tail[zero], head[zero])), shape=(nv, nv))
    ncomp, label = connected_components(g0, directed=True, connection="strong")
    if ncomp > CONDENSED_MAX:
        return None
    ct, ch = label[tail], label[head]
    inter = ct != ch
    dense = np.full((ncomp, ncomp), np.inf)
    np.minimum.at(dense, (ct[inter], ch[inter]), wl[inter])
    between = dijkstra(csgraph_from_dense(dense, null_value=np.inf), indices=np.unique(label[src_nodes]))
    row = np.full(ncomp, -1, dtype=np.int64)
    row[np.unique(label[src_nodes])] = np.arange(len(between))
    return between[row[label[src_nodes]]][:, label].T
