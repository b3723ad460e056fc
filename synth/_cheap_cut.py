"""Proven upper bounds on a tree collective's algbw that cost no max-flow: a few cuts' ratios.

A set S of nodes that holds ``g`` of the N GPUs (``0 < g < N``) receives every outside GPU's block
at least once (AllGather), so ``(N − g) · x ≤ B⁻(S)`` for the per-source rate x (Gbit/s) and
``algbw = N · x / 8``; ReduceScatter sends out of S as much (``B⁺(S)``); AllReduce runs one phase
after the other (``1 / (1/AG + 1/RS)``). The sets tried: every GPU alone, and every switch with the
GPUs cabled to it (a host behind its NVSwitch, a rail segment behind its ToR), so a slow NIC's host
is judged by the NICs it has left. One pass over the links, then over each switch's neighbours.

Examples
--------
>>> from synth.collective import Collective
>>> from synth.topologies import load_topology
>>> t = load_topology("hpn:2x4x4", ["fail2"])  # rank 0's NIC at 50 of 400 Gbit/s: its host's cut binds
>>> round(cheap_cut_algbw(Collective.ALLGATHER, t), 3)
178.571
"""

from __future__ import annotations

from fractions import Fraction

from synth.collective import Collective
from synth.topologies.model import Topology

__all__ = ["cheap_cut_algbw"]


def _phase_bound(topo: Topology, into: bool) -> float:
    """min over the sets of ``B(S) / (N − g)`` in Gbit/s per source (``into``: links entering S)."""
    n = topo.nranks
    grid = topo.capacity_grid
    scale = 10 ** grid.decimals  # capacities lie on this decimal grid: integer sums stay exact and fast
    scaled = {key: c * scale for key, c in grid.caps.items()}
    caps: dict[tuple[str, str], int | Fraction] = \
        {key: int(c) for key, c in scaled.items()} if all(c.denominator == 1 for c in scaled.values()) else dict(scaled)
    gpus = {g.id for g in topo.gpus}
    total: dict[str, int | Fraction] = {}
    for (a, b), units in caps.items():
        end = b if into else a
        total[end] = total.get(end, 0) + units
    best = min((Fraction(total.get(g, 0), n - 1) for g in gpus), default=Fraction(0))
    for sw in topo.switches:
        members = {lk.dst for lk in topo.out_links(sw.id) if lk.dst in gpus} | \
            {lk.src for lk in topo.in_links(sw.id) if lk.src in gpus}
        if not members or len(members) >= n:
            continue
        inside = members | {sw.id}
        crossing: int | Fraction = 0
        for v in inside:
            for lk in (topo.in_links(v) if into else topo.out_links(v)):
                if (lk.src if into else lk.dst) not in inside:
                    crossing += caps[lk.key]
        best = min(best, Fraction(crossing, n - len(members)))
    return float(best / scale)


def cheap_cut_algbw(collective: Collective, topo: Topology) -> float:
    """The bound of the module docstring for ``collective`` on ``topo``, in GB/s."""
    n = topo.nranks
    ag = n * _phase_bound(topo, True) / 8
    rs = n * _phase_bound(topo, False) / 8
    if collective is Collective.ALLGATHER:
        return ag
    if collective is Collective.REDUCESCATTER:
        return rs
    return 1 / (1 / ag + 1 / rs) if ag > 0 and rs > 0 else 0.0
