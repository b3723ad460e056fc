"""Phase 3: pack k out-arborescences per GPU into the switch-free graph (Lovász/Edmonds).

Tree classes ``(root, partial tree, multiplicity C)`` grow one edge at a time. Adding ``x→y`` to a
class with multiplicity α keeps Lovász's invariant ``ρ_c(X) ≥ Σ_{classes disjoint from X} C`` iff
``α ≤ maxflow(x→y) − Σ_{other classes} C`` in the auxiliary network where every other class has a
node ``s_c`` (arcs ``s_c→v`` of infinite capacity for v in its tree) fed from x with capacity C
(ForestColl §3.3). The max-flow runs from a hub with one arc per GPU: capacity ∞ to x (equivalent
to x feeding the hub), plus, per root, the multiplicities of the classes that hold only that root
(``hub→s_c→r`` is one arc); only classes with more nodes get a node ``s_c``. The class being grown
and finished classes (which intersect every set) leave the network, which is rebuilt once dead
arcs outnumber live ones (OR-Tools re-reads every arc on each solve).

Tests decided without a max-flow, exactly:

* the first edge of a class holding only its root x: no set contains y and a tree node but not x,
  so ``α = min(C, c(x,y))``;
* an edge entering a known tight set: a failed test's minimum cut gives a set X ∋ y, ∌ x with
  slack ``ρ(X) − Σ_{other classes disjoint from X} C = 0`` that meets the tree. While the class
  grows, slacks only fall (capacities drop, clones join the others) and stay ≥ 0, so every later
  edge into X from outside fails too. At the next class, X stays tight iff it meets that class.

Warm start: each class may carry preferred edges (the previous schedule's tree for its root),
tried before the breadth-first scan; the α test is the same, so the packing stays exact.

Examples
--------
>>> pack({(0, 1): 1, (1, 0): 1}, n=2, k=1)[0].edges
[(0, 1)]
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from synth.maxflow import FlowNetwork

__all__ = ["TreeClass", "pack", "pack_with_figures"]

log = logging.getLogger(__name__)

#: Tests set this to re-run the max-flow for every test decided without one and assert agreement.
VERIFY_SHORTCUTS = False


@dataclass
class TreeClass:
    root: int
    mult: int
    nodes: list[int]
    edges: list[tuple[int, int]]
    node_id: int
    prefs: list[list[tuple[int, int]]] = field(default_factory=list)
    pref_idx: int = 0


class PackingError(Exception):
    """A class could not be grown; impossible while the invariant holds."""


def pack(
    arcs: dict[tuple[int, int], int],
    n: int,
    k: int,
    prefs: dict[int, list[list[tuple[int, int]]]] | None = None,
    initial: list[tuple[int, int]] | list[tuple[int, int, list[tuple[int, int]]]] | None = None,
) -> list[TreeClass]:
    """The classes of :func:`pack_with_figures`, without its figures."""
    return pack_with_figures(arcs, n, k, prefs=prefs, initial=initial)[0]


def pack_with_figures(
    arcs: dict[tuple[int, int], int],
    n: int,
    k: int,
    prefs: dict[int, list[list[tuple[int, int]]]] | None = None,
    initial: list[tuple[int, int]] | list[tuple[int, int, list[tuple[int, int]]]] | None = None,
) -> tuple[list[TreeClass], dict[str, int]]:
    """Grow k spanning out-trees per root 0..n-1 within integer arc capacities ``arcs``.

    Returns the finished classes (multiplicities per root sum to k), deterministic for equal
    input, and the packing's figures (``pack_maxflows``, ``pack_skipped``, ``tree_classes``). ``initial`` replaces the starting classes ``(root, multiplicity[, partial tree edges])``
    (default: k per root with no edges), for a warm start whose other trees are already fixed;
    it must satisfy Lovász's condition. Raises :class:`PackingError` if a class cannot grow (the input violated Edmonds'
    condition).
    """
    cap = dict(arcs)
    total = sum(cap.values())
    big = total + n * k + 1
    hub = n
    keys = sorted(cap)
    out: list[list[int]] = [[] for _ in range(n)]
    for a, b in keys:
        out[a].append(b)
    next_id = n + 1
    # Live classes other than the one being grown. A class holding only its root needs no node of
    # its own: hub→s_c→root is one arc hub→root, shared by all such classes of that root.
    root_mult = [0] * n
    gadgets: dict[int, TreeClass] = {}  # classes with more nodes, by id, in creation order
    hub_arc: dict[int, int] = {}
    dead_arcs = 0
    net = FlowNetwork(n + 1)
    arc_idx: dict[tuple[int, int], int] = {}
    root_arc: list[int] = []
    gadget_node = n + 1

    def build() -> None:
        # OR-Tools rebuilds its graph on every solve, so dead arcs (capacity 0) still cost time:
        # start a fresh network holding only the live classes, with compact node ids.
        nonlocal net, root_arc, dead_arcs, gadget_node
        net = FlowNetwork(n + 1)
        arc_idx.clear()
        hub_arc.clear()
        live_keys = [key for key in keys if cap[key] > 0]  # capacities only fall: 0 stays 0
        for (a, b), i in zip(live_keys, net.add_arcs([a for a, _ in live_keys], [b for _, b in live_keys], [cap[key] for key in live_keys])):
            arc_idx[(a, b)] = int(i)
        root_arc = [int(i) for i in net.add_arcs([hub] * n, list(range(n)), root_mult)]
        gadget_node = n + 1
        for c in gadgets.values():
            add_gadget(c)
        dead_arcs = 0

    def add_gadget(c: TreeClass) -> None:
        nonlocal gadget_node
        node = gadget_node
        gadget_node += 1
        hub_arc[c.node_id] = net.add_arc(hub, node, c.mult)
        net.add_arcs([node] * len(c.nodes), c.nodes, [big] * len(c.nodes))

    def new_class(root: int, mult: int, nodes: list[int], edges: list[tuple[int, int]], pr, pi) -> TreeClass:
        nonlocal next_id
        c = TreeClass(root, mult, list(nodes), list(edges), next_id, pr, pi)
        next_id += 1
        if len(c.nodes) == 1:
            root_mult[root] += mult
            net.set_capacity(root_arc[root], root_mult[root])
        else:
            gadgets[c.node_id] = c
            add_gadget(c)
        return c

    def leave(c: TreeClass) -> None:
        """Take the class to be grown out of the network: it is never an "other" class again."""
        nonlocal dead_arcs
        if c.node_id in gadgets:
            del gadgets[c.node_id]
            net.set_capacity(hub_arc.pop(c.node_id), 0)
            dead_arcs += len(c.nodes) + 1
        else:
            root_mult[c.root] -= c.mult
            net.set_capacity(root_arc[c.root], root_mult[c.root])

    build()
    prefs = prefs or {}
    starts = [(r, k, []) for r in range(n)] if initial is None else [(s[0], s[1], list(s[2]) if len(s) > 2 else []) for s in initial]
    queue = [new_class(r, m, [r] + [y for _, y in e], e, prefs.get(r, []), 0) for r, m, e in starts]
    active_sum = sum(m for _, m, _ in starts)
    finished: list[TreeClass] = []
    flows = 0
    skipped = 0
    head = 0
    # Tight sets (bitmasks of GPUs): X with slack ρ(X) − Σ_{other classes disjoint from X} C = 0
    # that meets the class being grown; any edge entering X from outside then has α = 0.
    tight: list[int] = []
    # Clones (the rest of a class that took an edge with α < C) are grown next, before the queue
    # moves on: a waiting clone keeps a node and arcs to all its tree nodes in every max-flow.
    clones: deque[TreeClass] = deque()
    while clones or head < len(queue):
        if clones:
            c = clones.popleft()
        else:
            c = queue[head]
            head += 1
        member = [False] * n
        mask = 0
        for v in c.nodes:
            member[v] = True
            mask |= 1 << v
        leave(c)
        if dead_arcs > max(256, net.n_arcs - dead_arcs):
            build()
        # A tight set stays tight for the next class iff it meets that class (the slack of X
        # changes by the class's C only when the class is disjoint from X); within one class's
        # growth slacks only decrease (capacities drop, clones join the others), so tight sets stay.
        tight = [X for X in tight if X & mask]

        def try_edge(x: int, y: int) -> bool:
            nonlocal flows, active_sum, skipped
            cxy = cap.get((x, y), 0)
            if cxy <= 0 or member[y]:
                return False
            if len(c.nodes) == 1:
                # No set holds y and a tree node but not the root x: α = min(C, c(x,y)).
                alpha = min(c.mult, cxy)
                skipped += 1
                if VERIFY_SHORTCUTS:
                    assert alpha == min(c.mult, cxy, flow_alpha(x, y)[0])
            elif any((X >> y) & 1 and not (X >> x) & 1 for X in tight):
                skipped += 1
                if VERIFY_SHORTCUTS:
                    assert flow_alpha(x, y)[0] <= 0
                return False
            else:
                alpha, blocked = flow_alpha(x, y)
                flows += 1
                if alpha <= 0:
                    tight.append(blocked)
                    return False
            if alpha < c.mult:
                pi = (c.pref_idx + 1) % len(c.prefs) if c.prefs else 0
                clones.append(new_class(c.root, c.mult - alpha, c.nodes, c.edges, c.prefs, pi))
                c.mult = alpha
            cap[(x, y)] = cxy - alpha
            net.set_capacity(arc_idx[(x, y)], cxy - alpha)
            c.nodes.append(y)
            c.edges.append((x, y))
            member[y] = True
            return True

        def flow_alpha(x: int, y: int) -> tuple[int, int]:
            """α by max-flow, and the GPUs on the sink side of a minimum cut when α ≤ 0."""
            cxy = cap[(x, y)]
            net.set_capacity(root_arc[x], big + root_mult[x])
            f = net.max_flow(hub, y)
            alpha = min(c.mult, cxy, f - (active_sum - c.mult))
            blocked = 0
            if alpha <= 0:
                blocked = (1 << n) - 1
                for v in net.source_side(hub, y):
                    if v < n:
                        blocked &= ~(1 << v)
            net.set_capacity(root_arc[x], root_mult[x])
            return alpha, blocked

        if c.prefs:
            pref = c.prefs[c.pref_idx % len(c.prefs)]
            progress = True
            while progress and len(c.nodes) < n:
                progress = False
                for x, y in pref:
                    if member[x] and not member[y] and try_edge(x, y):
                        progress = True
        # One breadth-first pass suffices: an edge that fails stays failed while this class grows
        # (its slack only decreases), and Lovász's theorem guarantees a feasible edge leaves any
        # partial tree.
        i = 0
        while i < len(c.nodes) and len(c.nodes) < n:
            x = c.nodes[i]
            for y in out[x]:
                if not member[y]:
                    try_edge(x, y)
            i += 1
        if len(c.nodes) != n:
            raise PackingError(f"tree class of root {c.root} stuck at {len(c.nodes)}/{n} GPUs")
        active_sum -= c.mult
        finished.append(c)
        if len(finished) % 64 == 0:
            log.info("phase 3: %d tree classes done, %d queued, %d max-flows", len(finished), len(queue) - head + len(clones), flows)
    return finished, {"pack_maxflows": flows, "pack_skipped": skipped, "tree_classes": len(finished)}
