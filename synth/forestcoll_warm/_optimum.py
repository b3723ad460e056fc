"""Phase 1: the exact optimum as ForestColl's ``(U, k)``, and the fixed-k search.

Capacities are normalised to coprime integers ``b_e`` (``gbps = b_e · unit_gbps``). With
``x* = P/Q`` (reduced) the exact optimal rate per source in those units, ``k = P`` trees per root
and ``U = Q`` give edge capacities ``U·b_e`` and ``k/U = x*`` (ForestColl §3.1: ``g = gcd(b) = 1``
after normalisation, so no further reduction is possible).

Examples
--------
>>> from synth.topologies import named_topology
>>> g = IntGraph.from_topology(named_topology("dgx-a100:2"))
>>> opt = exact_optimum(g)
>>> opt.k, str(opt.U)
(13, '15')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.bounds.allgather import allgather_rate_gbps
from synth.errors import TimeLimitError
from synth.maxflow import FlowNetwork
from synth.topologies.model import Topology

__all__ = ["IntGraph", "Optimum", "dinkelbach", "exact_optimum", "fixed_k_optimum"]


@dataclass(frozen=True)
class IntGraph:
    """A topology as integer arrays: nodes ``0..N-1`` are GPUs by rank, then switches."""

    names: tuple[str, ...]
    n_gpus: int
    tails: np.ndarray  # physical live links
    heads: np.ndarray
    caps: np.ndarray  # normalised integer capacities, gcd 1
    unit_gbps: Fraction  # one capacity unit in Gbit/s

    @classmethod
    def from_topology(cls, topo: Topology) -> IntGraph:
        gpus = [g.id for g in topo.gpus]
        names = tuple(gpus + [s.id for s in topo.switches])
        index = {v: i for i, v in enumerate(names)}
        links = sorted(topo.live_links, key=lambda lk: (index[lk.src], index[lk.dst]))
        exact = [topo.exact_capacity(*lk.key) for lk in links]
        scale = math.lcm(*(c.denominator for c in exact)) if exact else 1
        ints = [int(c * scale) for c in exact]
        g = math.gcd(*ints) if ints else 1
        return cls(
            names=names,
            n_gpus=len(gpus),
            tails=np.array([index[lk.src] for lk in links], dtype=np.int64),
            heads=np.array([index[lk.dst] for lk in links], dtype=np.int64),
            caps=np.array([c // g for c in ints], dtype=np.int64),
            unit_gbps=Fraction(g, scale),
        )

    @property
    def n_nodes(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Optimum:
    """Rate ``k/U`` per source in capacity units; ``cut`` is a bottleneck set S (node ids)."""

    U: Fraction  # noqa: N815 - the paper's name
    k: int
    cut: frozenset[str]
    maxflows: int

    @property
    def rate_units(self) -> Fraction:
        return Fraction(self.k) / self.U

    def edge_caps(self, caps: np.ndarray) -> np.ndarray:
        """Integer tree capacities ``floor(U·b_e)`` (exact ``U·b_e`` at the optimum)."""
        p, q = self.U.numerator, self.U.denominator
        return (caps * p) // q


def exact_optimum(graph: IntGraph, topo: Topology | None = None, *, start_cut: frozenset[str] | None = None) -> Optimum:
    """Exact ``(U, k)`` by Dinkelbach on min-ratio cuts (see :mod:`synth.bounds.allgather`).

    ``start_cut`` (a warm start's previous bottleneck) only tightens the first bracket; the result
    does not depend on it.
    """
    if topo is not None and start_cut is None:
        cr = allgather_rate_gbps(topo)
        if not cr.optimal:
            raise TimeLimitError(f"AllGather optimum on {topo.name!r}: time limit reached")
        x = cr.rate_gbps / graph.unit_gbps
        return Optimum(U=Fraction(x.denominator), k=x.numerator, cut=cr.cut_nodes, maxflows=cr.maxflows)
    return dinkelbach(graph, start_cut)


def _cut_ratio(graph: IntGraph, side: np.ndarray) -> Fraction:
    out = int(graph.caps[side[graph.tails] & ~side[graph.heads]].sum())
    return Fraction(out, int(side[: graph.n_gpus].sum()))


def dinkelbach(graph: IntGraph, start_cut: frozenset[str] | None) -> Optimum:
    """Exact ``(U, k)`` by Dinkelbach iterations from ``start_cut`` (a previous optimum's cut, or None)."""
    n, nn = graph.n_gpus, graph.n_nodes
    index = {v: i for i, v in enumerate(graph.names)}
    # Starting cuts: each GPU alone (ratio: its out-capacity) and all but one GPU (its
    # in-capacity over N-1), plus the warm start's cut; the least ratio, ties by node tuple.
    out_cap = np.zeros(nn, dtype=object)  # exact integers
    in_cap = np.zeros(nn, dtype=object)
    for a, b, c in zip(graph.tails.tolist(), graph.heads.tolist(), graph.caps.tolist()):
        out_cap[a] += c
        in_cap[b] += c
    ratios: list[tuple[Fraction, int, bool]] = []  # (ratio, gpu, complement)
    for g in range(n):
        ratios.append((Fraction(int(out_cap[g])), g, False))
        ratios.append((Fraction(int(in_cap[g]), n - 1), g, True))
    candidates = []
    low = min(r for r, _, _ in ratios)
    for r, g, comp in ratios:
        if r == low:
            one = np.zeros(nn, dtype=bool)
            one[g] = True
            candidates.append(~one if comp else one)
    if start_cut is not None:
        side = np.zeros(nn, dtype=bool)
        for v in start_cut:
            if v in index:
                side[index[v]] = True
        if 0 < side[:n].sum() < n and _cut_ratio(graph, side) <= low:
            candidates.append(side)
    best_side = min(candidates, key=lambda s: (_cut_ratio(graph, s), tuple(np.flatnonzero(s))))
    best = _cut_ratio(graph, best_side)
    source = nn
    net = FlowNetwork(nn + 1)
    link_arcs = net.add_arcs(graph.tails.tolist(), graph.heads.tolist(), [0] * len(graph.tails))
    src_arcs = net.add_arcs([source] * n, list(range(n)), [0] * n)
    flows = 0
    while True:
        p, q = best.numerator, best.denominator
        net.set_capacities(link_arcs, graph.caps * q)
        net.set_capacities(src_arcs, [p] * n)
        improved: tuple[Fraction, np.ndarray] | None = None
        for g in range(n):
            flows += 1
            if net.max_flow(source, g) >= n * p:
                continue
            side = np.zeros(nn, dtype=bool)
            side[[v for v in net.source_side(source, g) if v != source]] = True
            r = _cut_ratio(graph, side)
            if improved is None or r < improved[0]:
                improved = (r, side)
        if improved is None:
            cut = frozenset(graph.names[i] for i in np.flatnonzero(best_side))
            return Optimum(U=Fraction(best.denominator), k=best.numerator, cut=cut, maxflows=flows)
        best, best_side = improved


def _floor_cut_u(weights: list[int], target: int, u: Fraction) -> Fraction:
    """Smallest ``U' >= u`` with ``sum(floor(U'·w)) >= target`` (w positive integers)."""
    while sum((u.numerator * w) // u.denominator for w in weights) < target:
        # The next breakpoint: the smallest m/w above u over all weights.
        u = min(Fraction((u.numerator * w) // u.denominator + 1, w) for w in weights)
    return u


def fixed_k_optimum(graph: IntGraph, k: int, u_start: Fraction) -> Optimum:
    """Smallest rational U whose capacities ``floor(U·b_e)`` carry k trees per root (ForestColl §3.1).

    Starts at the lower bound ``u_start`` (``k / x*``) and raises U to the least value that repairs
    each violated cut: every raise is forced, so the final U is the minimum.
    """
    n, nn = graph.n_gpus, graph.n_nodes
    source = nn
    net = FlowNetwork(nn + 1)
    link_arcs = net.add_arcs(graph.tails.tolist(), graph.heads.tolist(), [0] * len(graph.tails))
    net.add_arcs([source] * n, list(range(n)), [k] * n)
    u = u_start
    flows = 0
    while True:
        caps = (graph.caps * u.numerator) // u.denominator
        net.set_capacities(link_arcs, caps)
        raised = u
        cut_side: np.ndarray | None = None
        for g in range(n):
            flows += 1
            if net.max_flow(source, g) >= n * k:
                continue
            side = np.zeros(nn, dtype=bool)
            side[[v for v in net.source_side(source, g) if v != source]] = True
            out = side[graph.tails] & ~side[graph.heads]
            need = k * int(side[:n].sum())
            weights = [int(w) for w in graph.caps[out]]
            if not weights:
                raise AssertionError("a GPU is unreachable; topology validation should prevent this")
            cand = _floor_cut_u(weights, need, u)
            if cand > raised:
                raised, cut_side = cand, side
        if raised == u:
            cut = frozenset() if cut_side is None else frozenset(graph.names[i] for i in np.flatnonzero(cut_side))
            return Optimum(U=u, k=k, cut=cut, maxflows=flows)
        u = raised
