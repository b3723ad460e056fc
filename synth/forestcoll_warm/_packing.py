"""Phase 3: pack k out-arborescences per GPU into the switch-free graph (Lovász/Edmonds).

Tree classes ``(root, partial tree, multiplicity C)`` grow one edge at a time. Adding ``x→y`` to a
class with multiplicity α keeps Lovász's invariant ``ρ_c(X) ≥ Σ_{classes disjoint from X} C`` iff
``α ≤ maxflow(x→y) − Σ_{other classes} C`` in the auxiliary network where every other class has a
node ``s_c`` (arcs ``s_c→v`` of infinite capacity for v in its tree) fed from x with capacity C
(ForestColl §3.3). Here x feeds the class nodes through one hub node, so toggling x costs one arc,
and finished classes (which intersect every set) leave the network.

Warm start: each class may carry preferred edges (the previous schedule's tree for its root),
tried before the breadth-first scan; the α test is the same, so the packing stays exact.

Examples
--------
>>> pack({(0, 1): 1, (1, 0): 1}, n=2, k=1)[0].edges
[(0, 1)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from synth.maxflow import FlowNetwork

__all__ = ["TreeClass", "pack"]

log = logging.getLogger(__name__)


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
    stats: dict[str, object] | None = None,
    initial: list[tuple[int, int]] | None = None,
) -> list[TreeClass]:
    """Grow k spanning out-trees per root 0..n-1 within integer arc capacities ``arcs``.

    Returns the finished classes (multiplicities per root sum to k), deterministic for equal
    input. ``initial`` replaces the starting classes ``(root, multiplicity)`` (default: k per root),
    for a warm start whose other trees are already fixed. Raises :class:`PackingError` if a class cannot grow (the input violated Edmonds'
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
    next_node = n + 1
    live: list[TreeClass] = []
    dead_arcs = 0
    net = FlowNetwork(n + 1)
    arc_idx: dict[tuple[int, int], int] = {}
    x_hub: list[int] = []
    hub_arc: dict[int, int] = {}

    def build() -> None:
        # OR-Tools rebuilds its graph on every solve, so arcs of finished classes cost time even at
        # capacity 0: start a fresh network holding only the live classes.
        nonlocal net, x_hub, dead_arcs
        net = FlowNetwork(n + 1)
        arc_idx.clear()
        hub_arc.clear()
        for (a, b), i in zip(keys, net.add_arcs([a for a, _ in keys], [b for _, b in keys], [cap[key] for key in keys])):
            arc_idx[(a, b)] = int(i)
        x_hub = [int(i) for i in net.add_arcs(list(range(n)), [hub] * n, [0] * n)]
        for c in live:
            add_class_arcs(c)
        dead_arcs = 0

    def add_class_arcs(c: TreeClass) -> None:
        hub_arc[c.node_id] = net.add_arc(hub, c.node_id, c.mult)
        net.add_arcs([c.node_id] * len(c.nodes), c.nodes, [big] * len(c.nodes))

    def new_class(root: int, mult: int, nodes: list[int], edges: list[tuple[int, int]], pr, pi) -> TreeClass:
        nonlocal next_node
        c = TreeClass(root, mult, list(nodes), list(edges), next_node, pr, pi)
        next_node += 1
        live.append(c)
        add_class_arcs(c)
        return c

    build()
    prefs = prefs or {}
    starts = [(r, k) for r in range(n)] if initial is None else initial
    queue = [new_class(r, m, [r], [], prefs.get(r, []), 0) for r, m in starts]
    active_sum = sum(m for _, m in starts)
    finished: list[TreeClass] = []
    flows = 0
    head = 0
    while head < len(queue):
        c = queue[head]
        head += 1
        member = [False] * n
        for v in c.nodes:
            member[v] = True
        if dead_arcs > n * n // 2 + len(keys):
            build()

        def try_edge(x: int, y: int) -> bool:
            nonlocal flows, active_sum
            cxy = cap.get((x, y), 0)
            if cxy <= 0 or member[y]:
                return False
            net.set_capacity(x_hub[x], big)
            net.set_capacity(hub_arc[c.node_id], 0)
            f = net.max_flow(x, y)
            flows += 1
            net.set_capacity(x_hub[x], 0)
            alpha = min(c.mult, cxy, f - (active_sum - c.mult))
            if alpha <= 0:
                net.set_capacity(hub_arc[c.node_id], c.mult)
                return False
            if alpha < c.mult:
                pi = (c.pref_idx + 1) % len(c.prefs) if c.prefs else 0
                queue.append(new_class(c.root, c.mult - alpha, c.nodes, c.edges, c.prefs, pi))
                c.mult = alpha
            net.set_capacity(hub_arc[c.node_id], c.mult)
            cap[(x, y)] = cxy - alpha
            net.set_capacity(arc_idx[(x, y)], cxy - alpha)
            net.add_arc(c.node_id, y, big)
            c.nodes.append(y)
            c.edges.append((x, y))
            member[y] = True
            return True

        if c.prefs:
            pref = c.prefs[c.pref_idx % len(c.prefs)]
            progress = True
            while progress and len(c.nodes) < n:
                progress = False
                for x, y in pref:
                    if member[x] and not member[y] and try_edge(x, y):
                        progress = True
        for _attempt in range(2):
            i = 0
            while i < len(c.nodes) and len(c.nodes) < n:
                x = c.nodes[i]
                for y in out[x]:
                    if not member[y]:
                        try_edge(x, y)
                i += 1
            if len(c.nodes) == n:
                break
        if len(c.nodes) != n:
            raise PackingError(f"tree class of root {c.root} stuck at {len(c.nodes)}/{n} GPUs")
        net.set_capacity(hub_arc[c.node_id], 0)
        active_sum -= c.mult
        finished.append(c)
        live.remove(c)
        dead_arcs += len(c.nodes) + 1
        if len(finished) % 64 == 0:
            log.info("phase 3: %d tree classes done, %d queued, %d max-flows", len(finished), len(queue) - head, flows)
    if stats is not None:
        stats["pack_maxflows"] = flows
        stats["tree_classes"] = len(finished)
    return finished
