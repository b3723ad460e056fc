"""Warm-start state: what a previous schedule tells the next synthesis, and tree reuse.

A ForestColl schedule carries, in ``meta["forestcoll"]``, its bottleneck cut, its switch order and
per-switch split amounts in Gbit/s (small, JSON). Its routes give the previous GPU-level trees.
Everything taken from it is a *hint*: the new optimum is recomputed exactly (the old cut only
brackets it), the reused splitting is verified (one max-flow per GPU) before it is kept, and reused
trees are accepted only within the new capacities: each root's main old tree, as many units as fit
whole and the rest repaired around arcs without room; trees left partial are accepted only after
Lovász's condition is verified for everything still to grow.

Examples
--------
>>> hint_from_meta({}) is None
True
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synth.figures import WarmTreeFigures
from synth.kernels.packing import TreeClass
from synth.forestcoll_warm._splitting import SplitHint
from synth.maxflow import FlowNetwork
from synth.schedule import RouteKind, Schedule

__all__ = ["Accepted", "WarmHint", "accept_old_trees", "hint_from_meta", "hint_to_meta", "old_trees"]

#: What :func:`accept_old_trees` keeps: residual capacities, finished classes, classes to grow.
Accepted = tuple[dict[tuple[int, int], int], list[TreeClass], list[tuple[int, int, list[tuple[int, int]]]]]


@dataclass(frozen=True)
class WarmHint:
    cut: frozenset[str]
    split: SplitHint
    trees: dict[int, list[tuple[list[tuple[int, int]], int]]]  # root -> [(edges parents first, chunks)]
    k: int


def hint_to_meta(cut: frozenset[str], order: list[str], record: Mapping[str, list[tuple[str, str, Fraction]]]) -> dict[str, Any]:
    """The JSON-able warm-start state stored in a schedule's meta."""
    return {
        "cut": sorted(cut),
        "split_order": list(order),
        "splits": {w: [[a, b, str(g)] for a, b, g in rec] for w, rec in sorted(record.items())},
    }


def hint_from_meta(doc: Mapping[str, Any]) -> SplitHint | None:
    """Parse :func:`hint_to_meta` output; ``None`` if absent or malformed (warm start then degrades to cold)."""
    try:
        pairs = {w: [(str(a), str(b), _fraction(g)) for a, b, g in rec] for w, rec in doc["splits"].items()}
        return SplitHint(order=[str(w) for w in doc["split_order"]], pairs=pairs, incident={})
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _fraction(text: Any) -> Fraction:
    """``Fraction(text)`` for ``"p"`` or ``"p/q"`` without the regular-expression parser."""
    if isinstance(text, str):
        num, sep, den = text.partition("/")
        if num.lstrip("-").isdigit() and (not sep or den.isdigit()):
            return Fraction(int(num), int(den) if sep else 1)
    return Fraction(text)


def old_trees(sched: Schedule, kind: RouteKind) -> dict[int, list[tuple[list[tuple[int, int]], int]]]:
    """GPU-level trees of a schedule per root (out-trees as is, in-trees turned into out-trees)."""
    merged: dict[int, dict[tuple[tuple[int, int], ...], int]] = {}
    for r in sched.routes:
        if r.kind is not kind:
            continue
        if kind is RouteKind.OUT_TREE:
            edges = tuple((h.src, h.dst) for h in r.hops)
        else:
            edges = tuple((h.dst, h.src) for h in reversed(r.hops))
        per = merged.setdefault(r.root, {})
        per[edges] = per.get(edges, 0) + r.chunks
    return {
        root: [(list(e), m) for e, m in sorted(per.items(), key=lambda it: (-it[1], it[0]))]
        for root, per in sorted(merged.items())
    }


def _lovasz_ok(cap: Mapping[tuple[int, int], int], n: int, classes: list[tuple[int, int, list[int]]]) -> tuple[bool, int]:
    """Edmonds/Lovász condition ``ρ(X) ≥ Σ_{classes disjoint from X} C`` for unfinished classes
    ``(root, C, nodes)``: one max-flow per GPU from a source feeding every class (ForestColl §3.3)."""
    need = sum(m for _, m, _ in classes)
    net = FlowNetwork(n + 1)
    keys = sorted(key for key, c in cap.items() if c > 0)
    net.add_arcs([a for a, _ in keys], [b for _, b in keys], [cap[key] for key in keys])
    per_root = [0] * n
    big = sum(cap[key] for key in keys) + need + 1
    node = n + 1
    for r, m, nodes in classes:
        if len(nodes) == 1:
            per_root[r] += m
        else:
            net.add_arc(n, node, m)
            net.add_arcs([node] * len(nodes), nodes, [big] * len(nodes))
            node += 1
    roots = [r for r in range(n) if per_root[r] > 0]
    net.add_arcs([n] * len(roots), roots, [per_root[r] for r in roots])
    for v in range(n):
        if net.max_flow(n, v) < need:
            return False, v + 1
    return True, n


def _regrow(
    r: int,
    edges: list[tuple[int, int]],
    m: int,
    used: int,
    cap: Mapping[tuple[int, int], int],
    ins: Mapping[int, list[int]],
    outs: Mapping[int, list[int]],
    mode: str,
) -> list[tuple[int, int]]:
    """The part of an old tree (parents first) that carries ``m`` more units on top of ``used``
    units already taken from its own edges.

    ``partial``: truncated below every edge without room. ``repair``: a node whose old edge has
    no room hangs from the first tree node (by index) with an arc with room, scanning the old
    order until nothing changes.
    """
    need_old = m + used  # an old edge also carries the ``used`` units
    have = {r}
    part: list[tuple[int, int]] = []
    if mode != "repair":
        for x, y in edges:
            if x in have and cap.get((x, y), 0) >= need_old:
                part.append((x, y))
                have.add(y)
        return part
    # Passes over the old order, as (pass, index) on a heap: a node that fails is retried, in the
    # next pass or later in this one, only once one of its in-neighbours has joined the tree.
    index = {y: i for i, (_, y) in enumerate(edges)}
    heap: list[tuple[int, int]] = []  # retries; the first pass is ``first``
    first = 0
    waiting: set[int] = set()
    while True:
        if heap and (first == len(edges) or heap[0] < (1, first)):
            p, i = heapq.heappop(heap)
        elif first < len(edges):
            p, i = 1, first
            first += 1
        else:
            break
        x, y = edges[i]
        if y in have:
            continue
        src = x if x in have and cap.get((x, y), 0) >= need_old else None
        if src is None:
            for a in ins.get(y, ()):
                if a != x and a in have and cap.get((a, y), 0) >= m:
                    src = a
                    break
        if src is None:
            waiting.add(y)
            continue
        part.append((src, y))
        have.add(y)
        for z in outs.get(y, ()):
            if z in waiting:
                waiting.discard(z)
                heapq.heappush(heap, (p if index[z] > i else p + 1, index[z]))
    return part


def accept_old_trees(
    arcs: dict[tuple[int, int], int],
    n: int,
    k: int,
    trees: Mapping[int, list[tuple[list[tuple[int, int]], int]]],
    k_old: int,
) -> tuple[Accepted | None, WarmTreeFigures]:
    """Keep previous trees that still fit, with k units per root (``k_old`` is informational).

    Returns the accepted set and the figures of the attempt. The set is residual capacities, the
    kept (finished) classes and the classes still to grow as ``(root, units, edges of the kept
    partial tree)``; ``None`` when no kept set passes Lovász's check (the caller then packs from
    scratch, still guided by the previous trees). The figures (:class:`~synth.figures.WarmTreeFigures`):
    the check's max-flows (when a check ran) and, for an accepted set, the attempt, the fraction of
    the plan's edges reused and the tree units kept.

    Attempts, each verified by Lovász's condition (one max-flow per GPU): ``repair`` is
    ``partial`` where a node whose old in-edge does not fit may hang from another tree node by
    any arc with room (old edges first); ``partial`` keeps every
    tree's edges that fit, truncating a tree below an edge that does not (its root part is grown
    on); ``all`` keeps only trees that fit whole; ``none`` keeps nothing.
    """
    # All k units of a root go to its main old tree (the one with most chunks): as many as fit on
    # it whole, the rest repaired or truncated. One tree per root where possible keeps the
    # schedule as small as a cold one.
    plan = {r: [(trees[r][0][0], k)] if trees.get(r) else [] for r in range(n)}
    edges_total = sum(m * len(e) for r in plan for e, m in plan[r])
    ins: dict[int, list[int]] = {}
    outs: dict[int, list[int]] = {}
    for a, b in sorted(arcs):
        ins.setdefault(b, []).append(a)
        outs.setdefault(a, []).append(b)
    check_maxflows: int | None = None
    for attempt in ("repair", "partial", "all", "none"):
        cap = dict(arcs)
        kept: list[TreeClass] = []
        todo: list[tuple[int, int, list[tuple[int, int]]]] = []
        reused = 0
        for r in range(n):
            left = k
            if attempt != "none":
                for edges, m_tree in plan[r]:
                    if len(edges) != n - 1:
                        continue
                    for m, part in _pieces(r, edges, m_tree, cap, ins, outs, attempt):
                        for e in part:
                            cap[e] -= m
                        reused += m * len(part)
                        left -= m
                        if len(part) == n - 1:
                            kept.append(TreeClass(r, m, [r] + [y for _, y in part], part, -1 - len(kept)))
                        else:
                            todo.append((r, m, part))
            if left > 0:
                todo.append((r, left, []))
        if todo and (kept or any(part for _, _, part in todo)):
            ok, flows = _lovasz_ok(cap, n, [(r, m, [r] + [y for _, y in part]) for r, m, part in todo])
            check_maxflows = (check_maxflows or 0) + flows
            if not ok:
                continue
        figures = WarmTreeFigures(check_maxflows=check_maxflows, accept=attempt,
                                  reused_edges_frac=reused / edges_total if edges_total else 0.0,
                                  reused_tree_units=sum(c.mult for c in kept))
        return (cap, kept, sorted(todo, key=lambda t: (t[0], len(t[2]) == 0))), figures
    return None, WarmTreeFigures(check_maxflows=check_maxflows, accept=None, reused_edges_frac=None,
                                 reused_tree_units=None)


def _pieces(r: int, edges: list[tuple[int, int]], m_tree: int, cap: dict[tuple[int, int], int],
            ins: dict[int, list[int]], outs: dict[int, list[int]],
            attempt: str) -> list[tuple[int, list[tuple[int, int]]]]:
    """What of root ``r``'s old tree (``m_tree`` units of ``edges``) fits ``cap`` under ``attempt``:
    ``(units, edges)`` pieces, whole trees first."""
    pieces: list[tuple[int, list[tuple[int, int]]]] = []
    if attempt == "all":
        if all(cap.get(e, 0) >= m_tree for e in edges):
            pieces.append((m_tree, list(edges)))
    else:
        # As many units of the whole tree as fit, then the rest truncated below
        # every edge that cannot carry it.
        whole = min(m_tree, min(cap.get(e, 0) for e in edges))
        if whole > 0:
            pieces.append((whole, list(edges)))
        rest = m_tree - whole
        part = []
        if rest > 0:
            part = _regrow(r, edges, rest, whole, cap, ins, outs, attempt)
        if rest > 0 and part:
            pieces.append((rest, part))
    return pieces
