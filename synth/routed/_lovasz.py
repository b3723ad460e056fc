"""Integral routed tree packings with k chunks per root: integer arc capacities, then Edmonds/Lovász.

By Edmonds' branching theorem in Lovász's form (ForestColl §3.3), integer capacities ``g`` on the
logical arcs hold ``k`` spanning out-trees per root, all at once, iff every nonempty GPU set X has
``ρ_g(X) ≥ k · |V ∖ X|`` (as many units enter X as there are trees rooted outside it); ForestColl's
packing (:func:`synth.kernels.packing.pack_with_figures`) then finds the trees. The
fractional LP optimum ``g*`` (each arc's total tree weight) meets the condition for k = 1, so
``k·g*`` meets it for k. :func:`integral_capacities` starts from ``⌊k·g*⌋`` and, while some set X
is short (a max-flow from a hub feeding every GPU k units to a GPU v carries less than ``k·N``;
its minimum cut names X), adds one unit to the arc entering X whose route keeps the largest link
utilisation lowest. The result is exact integers; its utilisation is what the schedule measures.

Examples
--------
>>> import numpy as np
>>> from synth.topologies import named_topology
>>> from synth.routed._logical import Logical
>>> lg = Logical.build(named_topology("ring:3"))
>>> g = integral_capacities(lg, np.full(len(lg.pairs), 0.5), 1)
>>> int(g.sum()) >= 2 * (lg.n - 1)
True
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from synth.kernels.packing import TreeClass, pack_with_figures
from synth.maxflow import FlowNetwork
from synth.routed._logical import Logical

__all__ = ["integral_capacities", "may_reach", "pack_trees"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def integral_capacities(lg: Logical, g_star: FloatArray, k: int, *, start: str = "floor",
                        deadline: float | None = None) -> IntArray:
    """Integer arc capacities holding ``k`` trees per root, near ``k·g_star`` (module docstring).

    ``start`` is where the repair begins: ``"floor"`` (``⌊k·g*⌋``), ``"round"`` (nearest) or
    ``"zero"`` (pure greedy, g* only breaking ties). Past ``deadline`` (``time.perf_counter()``)
    each repair step adds a short set's whole deficit to its chosen arc at once (fewer max-flows,
    a coarser balance)."""
    n = lg.n
    want = k * np.asarray(g_star, dtype=np.float64)
    g = {"floor": np.floor(want + 1e-9), "round": np.floor(want + 0.5), "zero": np.zeros_like(want)}[start]
    g = g.astype(np.int64)
    frac = want - np.floor(want + 1e-9)
    caps = lg.caps_GBps
    live = caps > 0
    inv = np.zeros(len(caps) + 1)  # last: the dummy pad link of route_links
    inv[:-1] = np.where(live, 1.0 / np.where(live, caps, 1.0), 0.0)
    util = np.full(len(caps) + 1, -np.inf)
    util[:-1] = lg.loads(g.astype(np.float64)) * inv[:-1]
    links, tails, heads = lg.route_links, lg.tails, lg.heads
    net = FlowNetwork(n + 1)
    hub = n
    # Only arcs of positive capacity enter the network (arcs of capacity 0 change no max-flow and no
    # minimal minimum cut); an arc joins it when the repair first gives it a unit.
    arc_ids = np.full(len(g), -1, dtype=np.int64)
    pos = np.flatnonzero(g > 0)
    arc_ids[pos] = net.add_arcs(tails[pos], heads[pos], g[pos])
    net.add_arcs(np.full(n, hub), np.arange(n), np.full(n, k))
    for v in range(n):
        while (flow := net.max_flow(hub, v)) < k * n:
            side = net.source_mask(hub, v)
            entering = np.flatnonzero(side[tails] & ~side[heads])
            if len(entering) == 0:  # cannot happen: the logical graph is strongly connected
                raise ValueError(f"no routed arc enters the set short of trees at GPU {v}")
            # Cost of one more unit: the largest utilisation along the arc's route afterwards; ties
            # to the largest fractional part, then the lowest arc.
            after = np.maximum((util + inv)[links[entering]].max(axis=1), 0.0)
            order = entering[np.lexsort((entering, -frac[entering], after))]
            # Past the deadline the whole deficit at once, one unit to each of the best arcs in turn.
            units = 1 if deadline is None or time.perf_counter() <= deadline else k * n - flow
            for i, best in enumerate(order[:units].tolist()):
                add = units // len(order) + (i < units % len(order))
                g[best] += add
                frac[best] = 0.0
                row = links[best]
                util[row] += add * inv[row]
                if arc_ids[best] < 0:
                    arc_ids[best] = net.add_arc(int(tails[best]), int(heads[best]), int(g[best]))
                else:
                    net.set_capacity(int(arc_ids[best]), int(g[best]))
    return g


def may_reach(lg: Logical, t_phase: float, k: int, *, slack: float = 1e-6) -> bool:
    """A necessary condition for integral capacities with ``k`` trees per root at phase ratio
    ``t_phase`` per chunk (the LP optimum): every GPU v must be entered ``k·(N−1)`` times
    (Lovász's condition for X = {v}), every arc into v ends on one of v's head links
    (:attr:`Logical.head_links`), and each link a carries at most ``⌊k·t·c_a⌋`` units, so the
    head links of v must hold ``k·(N−1)``. False proves that no ``k``-rounding reaches the optimum.

    >>> from synth.topologies import named_topology
    >>> lg = Logical.build(named_topology("nvswitch:4"))  # T = 3/360 per unit: 3 chunks fit at k = 1
    >>> may_reach(lg, 3 / 360, 1), may_reach(lg, 3 / 360 * 0.99, 1)
    (True, False)
    """
    cap = np.floor(k * t_phase * lg.caps_GBps * (1 + slack) + 1e-9)
    return bool((lg.head_links @ cap >= k * (lg.n - 1)).all())


def pack_trees(lg: Logical, g: IntArray, k: int) -> list[TreeClass]:
    """``k`` spanning out-trees per root within capacities ``g`` (ForestColl's exact packing)."""
    pos = np.flatnonzero(np.asarray(g) > 0)  # arc order kept: the packing's choices follow it
    arcs = {(u, v): c for (u, v), c in zip(lg.pairs[pos].tolist(), np.asarray(g)[pos].tolist())}
    classes, _ = pack_with_figures(arcs, lg.n, k)
    return classes
