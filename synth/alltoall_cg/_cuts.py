"""Cut lower bounds on the AllToAll time T, cheap enough for a time-limited 2048-GPU solve.

For any node set S holding the GPUs X (1 ≤ |X| ≤ N − 1), the |X|·(N − |X|) unit blocks from X to
the other GPUs all leave S, and those coming back all enter it:
``T ≥ |X|·(N − |X|) / min(c(δ⁺(S)), c(δ⁻(S)))``. The sets tried are every single GPU (its own
links) and every switch with the GPUs it links to directly (a host behind its NVSwitch, the GPUs
of one rail behind their ToR). On rail fabrics the host set is the binding cut, so the bound
equals the LP optimum and a time-limited run's certified gap is its rounding loss, not the gap to
a single GPU's links.

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

from synth.alltoall_cg._expanded import Network

__all__ = ["cut_lower_bound"]


def _single_gpu_bound(net: Network) -> float:
    """Every GPU sends (and receives) N − 1 units over its own links."""
    live = net.live
    out_cap = np.bincount(net.tail[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
    in_cap = np.bincount(net.head[live], weights=net.caps_GBps[live], minlength=net.n_nodes)[net.gpu_node]
    worst = min(float(out_cap.min()), float(in_cap.min()))
    return (net.n_gpus - 1) / worst if worst > 0 else 0.0


def cut_lower_bound(net: Network) -> float:
    """The largest of the cut bounds on T of the module docstring (0.0 when no set bounds it)."""
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
    return best
