"""Phase 2: remove switches by directed edge splitting-off, exactly.

Graph ``D``: GPUs and switches with tree capacities ``c(e) = floor(U·b_e)`` plus a super source
``s`` with an arc ``s→g`` of capacity k to every GPU. Invariant: ``λ_D(s, v) ≥ N·k`` for every GPU
v (Edmonds' condition for k out-trees per root). Splitting ``(u,w),(w,t)`` by γ moves γ units onto
a logical arc ``u→t``.

Exact γ in one round (instead of ForestColl's ``2N`` max-flows per triple): after a tentative split
by γ0, every set X has ``d⁺_γ(X) = d⁺(X) − γ·[X affected]`` (affected: ``u,t ∈ X ∌ w`` or
``w ∈ X ∌ u,t``), so ``λ_γ(s,v) = min(A_v, B_v − γ)`` with ``A_v ≥ N·k``. A GPU v violated at γ0
gives ``B_v = λ_γ0(s,v) + γ0`` exactly, hence ``γ* = min_v B_v − N·k`` over the violated v.

Flow certificates: each GPU v keeps a maximum s→v flow. Splitting by γ keeps it valid when the
flow on ``u→w→t`` can be rerouted onto the new arc ``u→t`` (``δ = min(f_uw, f_wt, γ)``) and the rest
fits the lowered capacities. Only GPUs whose certificate breaks get a new max-flow, checked for all
GPUs at once with numpy.

Verify once: phase 3 needs the invariant only on the final switch-free graph, so
:func:`split_switches` first applies the deterministic ring splitting (and a warm start's previous
amounts) without checks and verifies the result with one max-flow per GPU; only if that fails does
it split with the per-split checks above. On every named topology the unchecked splitting passes.

Non-Eulerian switches (ρ(w) ≠ δ(w), e.g. a degradation applied in one direction):

* in-excess ``ρ(w) > δ(w)``: a virtual arc ``w→s`` of the excess. Arcs into the root never carry
  s→v flow, so no λ(s,v) changes and the optimum is kept exactly; splitting ``(u,w),(w,s)`` by γ
  merely lowers ``c(u,w)`` by γ, and the exact γ above guarantees that this lowering removes only
  capacity that no feasible packing needs (every tree unit entering w must leave it: switches do not
  replicate).
* out-excess ``δ(w) > ρ(w)``: a virtual arc ``z→w`` from a node z no flow reaches; splitting
  ``(z,w),(w,t)`` lowers ``c(w,t)`` with the same exactness guarantee. Here a complete splitting can
  fail to exist (the cut bound treats switches as able to replicate); :class:`SplitStuck` is then
  raised and the caller rebalances the topology (documented gap).

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.forestcoll_warm._optimum import IntGraph, exact_optimum
>>> t = named_topology("nvswitch:4")
>>> g = IntGraph.from_topology(t)
>>> res = split_switches(g, exact_optimum(g, t))
>>> sorted(res.arcs)[:3]
[(0, 1), (1, 2), (2, 3)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.figures import SplitFigures
from synth.forestcoll_warm._optimum import IntGraph, Optimum
from synth.forestcoll_warm._split_state import Pool, _State

__all__ = ["Pool", "SplitHint", "SplitResult", "SplitStuck", "split_switches"]

log = logging.getLogger(__name__)


class SplitStuck(Exception):
    """No complete splitting exists at this switch (only possible at a non-Eulerian switch)."""

    def __init__(self, switch: str) -> None:
        super().__init__(switch)
        self.switch = switch


@dataclass
class SplitHint:
    """A previous splitting to try first: per switch, ``(u, t, gbps)`` triples (node ids; ``t`` or
    ``u`` may be ``"$virtual"``) and the switch's incident capacities in Gbit/s when it was split."""

    order: list[str]
    pairs: dict[str, list[tuple[str, str, Fraction]]]
    incident: dict[str, list[tuple[str, str, Fraction]]]


@dataclass(frozen=True)
class SplitResult:
    arcs: dict[tuple[int, int], int]  # GPU->GPU logical arcs with integer tree capacity
    pools: dict[tuple[int, int], Pool]  # the physical paths behind each arc
    record: dict[str, list[tuple[str, str, Fraction]]]  # per switch: (u, t, gbps) split amounts
    incident: dict[str, list[tuple[str, str, Fraction]]]
    order: list[str]
    figures: SplitFigures  # figures of the splitting, its tier included


VIRTUAL = "$virtual"



def _order(graph: IntGraph) -> list[int]:
    # Switches with fewer incident links first: splitting them creates fewest new arcs.
    deg = np.bincount(np.concatenate([graph.tails, graph.heads]), minlength=graph.n_nodes)
    sw = range(graph.n_gpus, graph.n_nodes)
    return sorted(sw, key=lambda w: (int(deg[w]), graph.names[w]))


def _split_one(
    st: _State,
    w: int,
    hint: list[tuple[str, str, Fraction]] | None,
    record: dict[tuple[str, str], int] | None = None,
    *,
    checked: bool = True,
) -> list[tuple[str, str, Fraction]]:
    names = st.g.names
    index = st.index
    unit = st.g.unit_gbps / st.U
    record = {} if record is None else record

    def do(u: int | None, t: int | None, g0: int) -> None:
        if g0 <= 0:
            return
        if checked:
            got = st.split(u, w, t, g0)
        else:
            st.force(u, w, t, g0)
            got = g0
        if got:
            key = (VIRTUAL if u is None else names[u], VIRTUAL if t is None else names[t])
            record[key] = record.get(key, 0) + got

    def c_in(u: int) -> int:
        return st.cap[st.out[u][w]]

    def c_out(t: int) -> int:
        return st.cap[st.out[w][t]]

    rho = sum(c_in(u) for u in st.inn[w])
    delta = sum(c_out(t) for t in st.out[w])
    virt_out = max(0, rho - delta)  # capacity of the virtual w->s arc
    virt_in = max(0, delta - rho)  # capacity of the virtual z->w arc

    if hint:
        for a, b, gbps in hint:
            u = None if a == VIRTUAL else index.get(a)
            t = None if b == VIRTUAL else index.get(b)
            if (a != VIRTUAL and (u is None or w not in st.out[u])) or (b != VIRTUAL and (t is None or t not in st.out[w])):
                continue
            amount = int(gbps / unit)  # floor of the previous amount at the new scale
            cu = c_in(u) if u is not None else virt_in
            ct = c_out(t) if t is not None else virt_out
            g0 = min(amount, cu, ct)
            before = record.get((a, b), 0)
            do(u, t, g0)
            got = record.get((a, b), 0) - before
            if u is None:
                virt_in -= got
            if t is None:
                virt_out -= got

    ins = sorted(st.inn[w])
    outs = sorted(st.out[w])
    ring = sorted(set(ins) | set(outs))
    pos = {v: i for i, v in enumerate(ring)}
    for u in ins:
        i = pos[u]
        cyc = [ring[(i + j) % len(ring)] for j in range(1, len(ring))]
        for t in cyc:
            if c_in(u) == 0:
                break
            if t in st.out[w]:
                do(u, t, min(c_in(u), c_out(t)))
        if c_in(u) and u in st.out[w]:
            do(u, u, min(c_in(u), c_out(u)))
        if c_in(u) and virt_out:
            before = record.get((names[u], VIRTUAL), 0)
            do(u, None, min(c_in(u), virt_out))
            virt_out -= record.get((names[u], VIRTUAL), 0) - before
    for t in outs:
        if c_out(t) and virt_in:
            before = record.get((VIRTUAL, names[t]), 0)
            do(None, t, min(c_out(t), virt_in))
            virt_in -= record.get((VIRTUAL, names[t]), 0) - before
    if any(c_in(u) for u in st.inn[w]) or any(c_out(t) for t in st.out[w]):
        raise SplitStuck(names[w])
    # Drop the switch's arcs from the graph (capacity 0 already).
    for u in list(st.inn[w]):
        del st.out[u][w]
        st.pools.pop((u, w), None)
    for t in list(st.out[w]):
        del st.inn[t][w]
        st.pools.pop((w, t), None)
    st.inn[w].clear()
    st.out[w].clear()
    return [(a, b, Fraction(c) * unit) for (a, b), c in sorted(record.items())]


def _switch_order(graph: IntGraph, hint: SplitHint | None) -> list[int]:
    order = _order(graph)
    if hint is not None:
        index = {v: i for i, v in enumerate(graph.names)}
        known = [index[v] for v in hint.order if v in index and index[v] >= graph.n_gpus]
        seen = set(known)
        order = known + [w for w in order if w not in seen]
    return order


def _bulk(st: _State, order: list[int], hint: SplitHint) -> dict[str, dict[tuple[str, str], int]]:
    """Apply the hint's split amounts (floored at the new scale, capped by capacity) unchecked."""
    names = st.g.names
    index = {v: i for i, v in enumerate(names)}
    unit = st.g.unit_gbps / st.U
    done: dict[str, dict[tuple[str, str], int]] = {}
    for w in order:
        rec = hint.pairs.get(names[w])
        if not rec:
            continue
        got = done.setdefault(names[w], {})
        rho = sum(st.cap[i] for i in st.inn[w].values())
        delta = sum(st.cap[i] for i in st.out[w].values())
        virt = {"in": max(0, delta - rho), "out": max(0, rho - delta)}
        for a, b, gbps in rec:
            u = None if a == VIRTUAL else index.get(a)
            t = None if b == VIRTUAL else index.get(b)
            if (a != VIRTUAL and (u is None or w not in st.out[u])) or (b != VIRTUAL and (t is None or t not in st.out[w])):
                continue
            if u is None and t is None:
                continue
            cu = st.cap[st.out[u][w]] if u is not None else virt["in"]
            ct = st.cap[st.out[w][t]] if t is not None else virt["out"]
            # floor(gbps / unit) in integers
            g = min((gbps.numerator * unit.denominator) // (gbps.denominator * unit.numerator), cu, ct)
            if g <= 0:
                continue
            st.force(u, w, t, g)
            st.bulk += 1
            got[(a, b)] = got.get((a, b), 0) + g
            if u is None:
                virt["in"] -= g
            if t is None:
                virt["out"] -= g
    return done


def split_switches(graph: IntGraph, opt: Optimum, hint: SplitHint | None = None) -> SplitResult:
    """Remove every switch by exact splitting-off; see the module docstring.

    Phase 3 needs only the invariant ``λ(s,v) ≥ N·k`` on the final switch-free graph, so a
    splitting may be proposed unchecked and verified once (one max-flow per GPU). Tiers, each
    falling back to the next when its check fails or a switch cannot be split:

    1. ``optimistic``: the hint's split amounts (a warm start; floored at the new scale and capped
       by the capacities), then the deterministic ring splitting of everything left, all unchecked;
       one verification at the end.
    2. ``hinted`` (warm start only): the hint's amounts unchecked, one verification, then the rest
       split with every split checked.
    3. ``checked``: every split checked (hinted splits first); always valid.
    """
    modes = ["optimistic", "hinted", "checked"] if hint is not None else ["optimistic", "checked"]
    for mode in modes:
        try:
            res = _split(graph, opt, hint, mode)
        except SplitStuck:
            if mode == "checked":
                raise
            res = None
        if res is not None:
            return res
        log.info("phase 2: %s splitting failed its check; falling back", mode)
    raise AssertionError("the checked splitting always returns")


def _split(graph: IntGraph, opt: Optimum, hint: SplitHint | None, mode: str) -> SplitResult | None:
    st = _State(graph, opt)
    order = _switch_order(graph, hint)
    record: dict[str, list[tuple[str, str, Fraction]]] = {}
    incident: dict[str, list[tuple[str, str, Fraction]]] = {}
    reused = 0
    pre: dict[str, dict[tuple[str, str], int]] = {}
    if mode != "checked":
        if hint is not None and hint.incident:
            incident = {graph.names[w]: st.incident(w) for w in order}
        if hint is not None:
            pre = _bulk(st, order, hint)
        if mode == "hinted" and not st.verify():
            return None
    for i, w in enumerate(order):
        name = graph.names[w]
        h = None
        if mode == "checked":
            incident[name] = st.incident(w)
            if hint is not None and name in hint.pairs:
                h = hint.pairs[name]
        reused += hint is not None and name in hint.incident and hint.incident[name] == incident.get(name)
        record[name] = _split_one(st, w, h, pre.get(name), checked=mode != "optimistic")
        log.debug("phase 2: switch %s split (%d/%d), %d max-flows so far", name, i + 1, len(order), st.maxflows)
    if mode == "optimistic" and not st.verify(certify=False):
        return None
    arcs: dict[tuple[int, int], int] = {}
    pools: dict[tuple[int, int], Pool] = {}
    n = graph.n_gpus
    for (a, b), idx in sorted(st.arc.items()):
        if a < n and b < n and st.cap[idx] > 0:
            arcs[(a, b)] = st.cap[idx]
            pools[(a, b)] = st.pools[(a, b)]
            assert sum(p[1] for p in pools[(a, b)]) == st.cap[idx]
    figures = SplitFigures(maxflows=st.maxflows, probes=st.probes, switches_same_incident=reused, bulk=st.bulk,
                           mode=mode)
    return SplitResult(arcs, pools, record, incident, [graph.names[w] for w in order], figures)
