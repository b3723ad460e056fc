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
import time
from collections import deque
from dataclasses import dataclass, field

from synth._deadline import give_up, remaining_s
from synth.figures import PackFigures
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
) -> tuple[list[TreeClass], PackFigures]:
    """Grow k spanning out-trees per root 0..n-1 within integer arc capacities ``arcs``.

    Returns the finished classes (multiplicities per root sum to k), deterministic for equal
    input, and the packing's figures (:class:`~synth.figures.PackFigures`). ``initial`` replaces the starting classes ``(root, multiplicity[, partial tree edges])``
    (default: k per root with no edges), for a warm start whose other trees are already fixed;
    it must satisfy Lovász's condition. Raises :class:`PackingError` if a class cannot grow (the input violated Edmonds'
    condition).
    """
    packer = _Packer(arcs, n, k)
    prefs = prefs or {}
    starts = [(r, k, []) for r in range(n)] if initial is None else [(s[0], s[1], list(s[2]) if len(s) > 2 else []) for s in initial]
    queue = [packer.new_class(r, m, [r] + [y for _, y in e], e, prefs.get(r, []), 0) for r, m, e in starts]
    packer.active_sum = sum(m for _, m, _ in starts)
    finished: list[TreeClass] = []
    head = 0
    t0 = time.monotonic()
    # Clones (the rest of a class that took an edge with α < C) are grown next, before the queue
    # moves on: a waiting clone keeps a node and arcs to all its tree nodes in every max-flow.
    while packer.clones or head < len(queue):
        if packer.clones:
            c = packer.clones.popleft()
        else:
            c = queue[head]
            head += 1
        packer.grow(c)
        finished.append(c)
        if len(finished) == HOPELESS_AFTER:
            _give_up_if_hopeless(time.monotonic() - t0, len(finished), len(queue) - head + len(packer.clones))
        if len(finished) % 64 == 0:
            log.info("phase 3: %d tree classes done, %d queued, %d max-flows", len(finished),
                     len(queue) - head + len(packer.clones), packer.flows)
    return finished, PackFigures(maxflows=packer.flows, skipped=packer.skipped, tree_classes=len(finished))


#: Classes grown before the packing judges whether it can finish before the deadline.
HOPELESS_AFTER = 4
#: The packing gives up when its estimated time left exceeds this many times the time left.
HOPELESS_FACTOR = 2.0


def _give_up_if_hopeless(elapsed_s: float, done: int, queued: int) -> None:
    """Stop now (:func:`synth._deadline.give_up`) when the classes still queued, at the pace of the
    first ``done``, would take over :data:`HOPELESS_FACTOR` times the time left: a cold 2048-GPU
    AllGather needs ~N² max-flows and cannot use a 60 s limit, its fallback can (issue 31)."""
    left = remaining_s()
    if left is None or done == 0:
        return
    estimate = elapsed_s / done * queued
    if estimate > HOPELESS_FACTOR * max(left, 0.0):
        give_up(f"the packing would need ~{estimate:.3g} s more ({queued} tree classes at the pace of the "
                f"first {done}), {left:.3g} s are left")


class _Packer:
    """One packing's state: residual capacities, the live classes other than the one being grown,
    and the max-flow network that holds them (module docstring)."""

    def __init__(self, arcs: dict[tuple[int, int], int], n: int, k: int) -> None:
        self.cap = dict(arcs)
        self.n = n
        self.big = sum(self.cap.values()) + n * k + 1
        self.hub = n
        self.keys = sorted(self.cap)
        self.out: list[list[int]] = [[] for _ in range(n)]
        for a, b in self.keys:
            self.out[a].append(b)
        self.next_id = n + 1
        # A class holding only its root needs no node of its own: hub→s_c→root is one arc hub→root,
        # shared by all such classes of that root.
        self.root_mult = [0] * n
        self.gadgets: dict[int, TreeClass] = {}  # classes with more nodes, by id, in creation order
        self.hub_arc: dict[int, int] = {}
        self.arc_idx: dict[tuple[int, int], int] = {}
        self.active_sum = 0
        self.flows = 0
        self.skipped = 0
        # Tight sets (bitmasks of GPUs): X with slack ρ(X) − Σ_{other classes disjoint from X} C = 0
        # that meets the class being grown; any edge entering X from outside then has α = 0.
        self.tight: list[int] = []
        self.clones: deque[TreeClass] = deque()
        self.build()

    def build(self) -> None:
        """A fresh network holding only the live classes, with compact node ids (OR-Tools rebuilds
        its graph on every solve, so dead arcs of capacity 0 still cost time)."""
        n = self.n
        self.net = FlowNetwork(n + 1)
        self.arc_idx.clear()
        self.hub_arc.clear()
        live_keys = [key for key in self.keys if self.cap[key] > 0]  # capacities only fall: 0 stays 0
        for (a, b), i in zip(live_keys, self.net.add_arcs([a for a, _ in live_keys], [b for _, b in live_keys],
                                                          [self.cap[key] for key in live_keys])):
            self.arc_idx[(a, b)] = int(i)
        self.root_arc = [int(i) for i in self.net.add_arcs([self.hub] * n, list(range(n)), self.root_mult)]
        self.gadget_node = n + 1
        for c in self.gadgets.values():
            self.add_gadget(c)
        self.dead_arcs = 0

    def add_gadget(self, c: TreeClass) -> None:
        node = self.gadget_node
        self.gadget_node += 1
        self.hub_arc[c.node_id] = self.net.add_arc(self.hub, node, c.mult)
        self.net.add_arcs([node] * len(c.nodes), c.nodes, [self.big] * len(c.nodes))

    def new_class(self, root: int, mult: int, nodes: list[int], edges: list[tuple[int, int]],
                  pr: list[list[tuple[int, int]]], pi: int) -> TreeClass:
        c = TreeClass(root, mult, list(nodes), list(edges), self.next_id, pr, pi)
        self.next_id += 1
        if len(c.nodes) == 1:
            self.root_mult[root] += mult
            self.net.set_capacity(self.root_arc[root], self.root_mult[root])
        else:
            self.gadgets[c.node_id] = c
            self.add_gadget(c)
        return c

    def leave(self, c: TreeClass) -> None:
        """Take the class to be grown out of the network: it is never an "other" class again."""
        if c.node_id in self.gadgets:
            del self.gadgets[c.node_id]
            self.net.set_capacity(self.hub_arc.pop(c.node_id), 0)
            self.dead_arcs += len(c.nodes) + 1
        else:
            self.root_mult[c.root] -= c.mult
            self.net.set_capacity(self.root_arc[c.root], self.root_mult[c.root])

    def grow(self, c: TreeClass) -> None:
        """Grow ``c`` to a spanning tree: its preferred edges first, then one breadth-first pass."""
        n = self.n
        member = [False] * n
        mask = 0
        for v in c.nodes:
            member[v] = True
            mask |= 1 << v
        self.leave(c)
        if self.dead_arcs > max(256, self.net.n_arcs - self.dead_arcs):
            self.build()
        # A tight set stays tight for the next class iff it meets that class (the slack of X
        # changes by the class's C only when the class is disjoint from X); within one class's
        # growth slacks only decrease (capacities drop, clones join the others), so tight sets stay.
        self.tight = [X for X in self.tight if X & mask]
        if c.prefs:
            pref = c.prefs[c.pref_idx % len(c.prefs)]
            progress = True
            while progress and len(c.nodes) < n:
                progress = False
                for x, y in pref:
                    if member[x] and not member[y] and self.try_edge(c, member, x, y):
                        progress = True
        # One breadth-first pass suffices: an edge that fails stays failed while this class grows
        # (its slack only decreases), and Lovász's theorem guarantees a feasible edge leaves any
        # partial tree.
        i = 0
        while i < len(c.nodes) and len(c.nodes) < n:
            x = c.nodes[i]
            for y in self.out[x]:
                if not member[y]:
                    self.try_edge(c, member, x, y)
            i += 1
        if len(c.nodes) != n:
            raise PackingError(f"tree class of root {c.root} stuck at {len(c.nodes)}/{n} GPUs")
        self.active_sum -= c.mult

    def try_edge(self, c: TreeClass, member: list[bool], x: int, y: int) -> bool:
        """Add ``x→y`` to ``c`` with the largest multiplicity α that keeps Lovász's invariant (the
        rest of ``c`` becomes a clone); False when α = 0."""
        cxy = self.cap.get((x, y), 0)
        if cxy <= 0 or member[y]:
            return False
        if len(c.nodes) == 1:
            # No set holds y and a tree node but not the root x: α = min(C, c(x,y)).
            alpha = min(c.mult, cxy)
            self.skipped += 1
            if VERIFY_SHORTCUTS:
                assert alpha == min(c.mult, cxy, self.flow_alpha(c, x, y)[0])
        elif any((X >> y) & 1 and not (X >> x) & 1 for X in self.tight):
            self.skipped += 1
            if VERIFY_SHORTCUTS:
                assert self.flow_alpha(c, x, y)[0] <= 0
            return False
        else:
            alpha, blocked = self.flow_alpha(c, x, y)
            self.flows += 1
            if alpha <= 0:
                self.tight.append(blocked)
                return False
        if alpha < c.mult:
            pi = (c.pref_idx + 1) % len(c.prefs) if c.prefs else 0
            self.clones.append(self.new_class(c.root, c.mult - alpha, c.nodes, c.edges, c.prefs, pi))
            c.mult = alpha
        self.cap[(x, y)] = cxy - alpha
        self.net.set_capacity(self.arc_idx[(x, y)], cxy - alpha)
        c.nodes.append(y)
        c.edges.append((x, y))
        member[y] = True
        return True

    def flow_alpha(self, c: TreeClass, x: int, y: int) -> tuple[int, int]:
        """α by max-flow, and the GPUs on the sink side of a minimum cut when α ≤ 0."""
        n = self.n
        cxy = self.cap[(x, y)]
        self.net.set_capacity(self.root_arc[x], self.big + self.root_mult[x])
        f = self.net.max_flow(self.hub, y)
        alpha = min(c.mult, cxy, f - (self.active_sum - c.mult))
        blocked = 0
        if alpha <= 0:
            blocked = (1 << n) - 1
            for v in self.net.source_side(self.hub, y):
                if v < n:
                    blocked &= ~(1 << v)
        self.net.set_capacity(self.root_arc[x], self.root_mult[x])
        return alpha, blocked
