"""Cut and distance lower bounds on the AllToAll time T, cheap enough for a time-limited 2048-GPU solve.

For any node set S holding the GPUs X (1 ≤ |X| ≤ N − 1), the |X|·(N − |X|) unit blocks from X to
the other GPUs all leave S, and those coming back all enter it:
``T ≥ |X|·(N − |X|) / min(c(δ⁺(S)), c(δ⁻(S)))``. The sets tried are every single GPU (its own
links) and every switch with the GPUs it links to directly (a host behind its NVSwitch, the GPUs
of one rail behind their ToR). On rail fabrics the host set is the binding cut, so the bound
equals the LP optimum and a time-limited run's certified gap is its rounding loss, not the gap to
a single GPU's links.

Direct (switchless) fabrics such as tori have no small cut that binds: there the traffic's *length*
does. For any link lengths ℓ ≥ 0 every unit block from s to d occupies at least dist_ℓ(s, d)
length-weighted link capacity, so ``T ≥ Σ_{s≠d} dist_ℓ(s, d) / Σ_e c_e·ℓ_e`` (the LP's dual at
one ℓ: its optimum is this ratio at the best ℓ). Two lengths are tried, each link's transit time
``1/c_e`` and (up to :data:`HOP_BOUND_MAX_GPUS` GPUs) one per hop; on a uniform torus either
equals the LP optimum (torus:6x6: 66.7 GB/s, where the cuts give 205.7).

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.alltoall_cg._expanded import Network
>>> net = Network.from_topology(named_topology("hpn:1x2x4"))
>>> round(net.n_gpus / cut_lower_bound(net), 6)   # algbw bound: the host's 4 NICs carry 4·4 blocks
100.0
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from synth.alltoall_cg._expanded import Network

__all__ = ["HOP_BOUND_MAX_GPUS", "cut_lower_bound", "distance_lower_bound"]

#: Largest fabric on which the per-hop length is tried too (each length costs one shortest-path run
#: from every GPU: ~0.7 s at 2048 GPUs).
HOP_BOUND_MAX_GPUS = 512


def _single_gpu_bound(net: Network) -> float:
    """Every GPU sends (and receives) N − 1 units over its own links."""
    live = net.live
    out_cap = np.bincount(net.tail[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
    in_cap = np.bincount(net.head[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
    worst = min(float(out_cap.min()), float(in_cap.min()))
    return (net.n_gpus - 1) / worst if worst > 0 else 0.0


def distance_lower_bound(net: Network, lengths: np.ndarray) -> float:
    """``Σ_{s≠d} dist(s, d) / Σ_e c_e·ℓ_e`` over live links with ``lengths`` ℓ (one per link, > 0 where
    live); 0.0 when some GPU cannot reach another (the LP then has no finite T to bound).

    >>> from synth.topologies import named_topology
    >>> net = Network.from_topology(named_topology("torus:6x6"))
    >>> round(net.n_gpus / distance_lower_bound(net, np.ones(net.n_links)), 6)
    66.666667
    """
    live = net.live
    tail, head, length = net.tail[live], net.head[live], np.asarray(lengths, dtype=np.float64)[live]
    denom = float(net.caps_GBps[live] @ length)
    if denom <= 0:
        return 0.0
    # Parallel links: a shortest path uses the shortest one (csr_matrix would sum duplicates).
    order = np.lexsort((length, head, tail))
    tail, head, length = tail[order], head[order], length[order]
    first = np.ones(len(tail), dtype=bool)
    first[1:] = (tail[1:] != tail[:-1]) | (head[1:] != head[:-1])
    graph = csr_matrix((length[first], (tail[first], head[first])), shape=(net.n_nodes, net.n_nodes))
    dist = dijkstra(graph, indices=net.gpu_node)[:, net.gpu_node]
    if not np.isfinite(dist).all():
        return 0.0
    return float(dist.sum()) / denom


def cut_lower_bound(net: Network) -> float:
    """The largest of the cut and distance bounds on T of the module docstring (0.0 when none bounds it)."""
    n = net.n_gpus
    live = net.live
    tail, head, caps = net.tail[live], net.head[live], net.caps_GBps[live]
    best = _single_gpu_bound(net)
    gpu_head = net.is_gpu[head]
    gpu_tail = net.is_gpu[tail]
    for w in np.flatnonzero(~net.is_gpu).tolist():
        member = np.zeros(net.n_nodes, dtype=bool)
        member[w] = True
        member[head[(tail == w) & gpu_head]] = True
        member[tail[(head == w) & gpu_tail]] = True
        size = int(member[net.gpu_node].sum())
        if not 1 <= size <= n - 1:
            continue
        leaving = member[tail] & ~member[head]
        entering = ~member[tail] & member[head]
        cap = min(float(caps[leaving].sum()), float(caps[entering].sum()))
        if cap > 0:
            best = max(best, size * (n - size) / cap)
    transit = np.where(net.live, 1.0 / np.where(net.live, net.caps_GBps, 1.0), 0.0)
    best = max(best, distance_lower_bound(net, transit))
    if n <= HOP_BOUND_MAX_GPUS:
        best = max(best, distance_lower_bound(net, np.ones(net.n_links)))
    return best
