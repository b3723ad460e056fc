"""Exact optimal AllGather rate by the cut characterisation, solved with integer max-flows.

The optimal per-source rate is ``x* = min_S B+(S) / |S ∩ GPUs|`` over node sets S that hold at
least one GPU and miss at least one (ForestColl, Thm. 1). With a super source ``s`` feeding every
GPU at rate ``x``, ``x`` is feasible iff every GPU ``v`` has ``maxflow(s → v) ≥ N·x``. We find
``x*`` by Dinkelbach's (Newton's) iteration on the min-ratio cut: start from a cut's ratio, and
while some GPU's min cut is violated, move to the smallest violated ratio. Every ratio is a
rational computed exactly, and every max-flow runs on integers scaled by the current
denominator, so the result is exact, not a tolerance.

Examples
--------
>>> from synth.topologies import named_topology
>>> allgather_rate_gbps(named_topology("ring:4")).rate_gbps
Fraction(800, 3)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from synth.errors import SolverError, TimeLimitError
from synth.maxflow import FlowNetwork
from synth.topologies.model import Link, Topology

__all__ = ["CutRate", "allgather_rate_gbps", "cut_ratio_gbps"]


@dataclass(frozen=True, slots=True)
class CutRate:
    """The optimal rate (Gbit/s per source) and a cut that attains it."""

    rate_gbps: Fraction
    cut_nodes: frozenset[str]  # S: its outgoing live links are the bottleneck
    iterations: int
    maxflows: int
    optimal: bool = True  # False: the solve's time limit stopped Dinkelbach; the rate is an upper bound


def cut_ratio_gbps(topo: Topology, nodes: frozenset[str] | set[str]) -> Fraction:
    """``B+(S) / |S ∩ GPUs|`` for a node set S (exact).

    >>> from synth.topologies import named_topology
    >>> t = named_topology("nvswitch:4")
    >>> cut_ratio_gbps(t, {"gpu0", "gpu1", "gpu2", "nvs0.0"})
    Fraction(960, 1)
    """
    gpus = sum(1 for v in nodes if topo.node(v).is_gpu)
    out = sum((topo.exact_capacity(*lk.key) for lk in topo.live_links if lk.src in nodes and lk.dst not in nodes), Fraction(0))
    return out / gpus


def _start_cut(topo: Topology, gpus: list[str], nodes: list[str], live: Sequence[Link],
               caps: list[Fraction]) -> tuple[Fraction, frozenset[str]]:
    """The starting ratio of two obvious cuts per GPU g: g alone (its out-links over 1 GPU), or everything
    but g (g's in-links over N − 1), as :func:`cut_ratio_gbps` gives them but from the degrees
    (2048 GPUs: 4096 cuts in milliseconds, not a pass over every link each); ties go to the smaller
    sorted node list."""
    n = len(gpus)
    out_cap: dict[str, Fraction] = defaultdict(Fraction)
    in_cap: dict[str, Fraction] = defaultdict(Fraction)
    for lk, c in zip(live, caps):
        out_cap[lk.src] += c
        in_cap[lk.dst] += c
    everything = frozenset(nodes)
    best: Fraction | None = None
    best_cut: frozenset[str] = frozenset()
    best_sorted: list[str] = []
    for g in gpus:
        for alone in (True, False):
            r = out_cap[g] if alone else in_cap[g] / (n - 1)
            if best is not None and r > best:
                continue
            cut = frozenset({g}) if alone else everything - {g}
            if best is None or r < best or sorted(cut) < best_sorted:
                best, best_cut, best_sorted = r, cut, sorted(cut)
    assert best is not None
    return best, best_cut


def allgather_rate_gbps(topo: Topology) -> CutRate:
    """Exact optimal AllGather rate per source in Gbit/s; algbw* = N · rate / 8 GB/s.

    Notes
    -----
    One Dinkelbach round costs N max-flows (OR-Tools push-relabel on one reusable network);
    rounds are few (the ratio drops superlinearly), typically 1–3 on rail-optimised fabrics.
    """
    nodes = [n.id for n in topo.nodes]
    index = {v: i for i, v in enumerate(nodes)}
    gpus = [g.id for g in topo.gpus]
    n = len(gpus)
    if n < 2:
        raise SolverError(f"the AllGather rate needs at least 2 GPUs; topology {topo.name!r} has {n}")
    live = topo.live_links
    caps = [topo.exact_capacity(*lk.key) for lk in live]
    # Integer capacities in units of their rational gcd: at most the grid's units (capacity.py), so
    # a fabric of huge capacities on a coarse grid (10^k Gbit/s steps) stays inside int64.
    lcm = math.lcm(*(c.denominator for c in caps))
    gcd = math.gcd(*(int(c * lcm) for c in caps))
    scale = Fraction(lcm, gcd)
    int_caps = [int(c * scale) for c in caps]

    best, best_cut = _start_cut(topo, gpus, nodes, live, caps)

    source = len(nodes)
    net = FlowNetwork(len(nodes) + 1)
    link_arcs = net.add_arcs([index[lk.src] for lk in live], [index[lk.dst] for lk in live], [0] * len(live))
    src_arcs = net.add_arcs([source] * n, [index[g] for g in gpus], [0] * n)
    iterations = maxflows = 0
    while True:
        iterations += 1
        # In capacity units the ratio is best·scale = p/q with q <= N; scaled by q, link e gets
        # int_cap_e·q and each source arc p, so every integer stays below N·Σ int_cap (no overflow).
        units = best * scale
        p, q = units.numerator, units.denominator
        net.set_capacities(link_arcs, [c * q for c in int_caps])
        net.set_capacities(src_arcs, [p] * n)
        need = n * p
        improved: tuple[Fraction, frozenset[str]] | None = None
        for g in gpus:
            maxflows += 1
            try:
                flow = net.max_flow(source, index[g])
            except TimeLimitError:
                return CutRate(best, best_cut, iterations, maxflows, optimal=False)
            if flow >= need:
                continue
            side = frozenset(nodes[i] for i in net.source_side(source, index[g]) if i != source)
            r = cut_ratio_gbps(topo, side)
            if improved is None or r < improved[0]:
                improved = (r, side)
        if improved is None:
            return CutRate(best, best_cut, iterations, maxflows)
        assert improved[0] < best, "a violated cut must have a smaller ratio"
        best, best_cut = improved
