"""Warm-start state: what a previous schedule tells the next synthesis, and tree reuse.

A ForestColl schedule carries, in ``meta["forestcoll"]``, its bottleneck cut, its switch order and
per-switch split amounts in Gbit/s (small, JSON). Its routes give the previous GPU-level trees.
Everything taken from it is a *hint*: the new optimum is recomputed exactly (the old cut only
brackets it), every reused split is re-checked by the exact splitting step, and reused trees are
accepted only within the new capacities and after Lovász's condition is verified for the rest.

Examples
--------
>>> hint_from_meta({}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synth.forestcoll_warm._packing import TreeClass
from synth.forestcoll_warm._splitting import SplitHint
from synth.maxflow import FlowNetwork
from synth.schedule import RouteKind, Schedule

__all__ = ["WarmHint", "accept_old_trees", "hint_from_meta", "hint_to_meta", "old_trees"]


@dataclass
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
        pairs = {w: [(str(a), str(b), Fraction(g)) for a, b, g in rec] for w, rec in doc["splits"].items()}
        return SplitHint(order=[str(w) for w in doc["split_order"]], pairs=pairs, incident={})
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


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


def _apportion(trees: list[tuple[list[tuple[int, int]], int]], k: int) -> list[tuple[list[tuple[int, int]], int]]:
    total = sum(m for _, m in trees)
    if total <= 0:
        return []
    shares = [Fraction(m * k, total) for _, m in trees]
    base = [int(s) for s in shares]
    order = sorted(range(len(trees)), key=lambda i: (-(shares[i] - base[i]), i))
    for i in order[: k - sum(base)]:
        base[i] += 1
    return [(trees[i][0], base[i]) for i in range(len(trees)) if base[i] > 0]


def _lovasz_ok(cap: Mapping[tuple[int, int], int], n: int, left: Mapping[int, int]) -> tuple[bool, int]:
    """Edmonds/Lovász condition for fresh classes ``left[r]`` rooted at r: N max-flows."""
    need = sum(left.values())
    net = FlowNetwork(n + 1)
    keys = sorted(key for key, c in cap.items() if c > 0)
    net.add_arcs([a for a, _ in keys], [b for _, b in keys], [cap[key] for key in keys])
    roots = sorted(r for r, m in left.items() if m > 0)
    net.add_arcs([n] * len(roots), roots, [left[r] for r in roots])
    for v in range(n):
        if net.max_flow(n, v) < need:
            return False, v + 1
    return True, n


def accept_old_trees(
    arcs: dict[tuple[int, int], int],
    n: int,
    k: int,
    trees: Mapping[int, list[tuple[list[tuple[int, int]], int]]],
    k_old: int,
    stats: dict[str, Any],
) -> tuple[dict[tuple[int, int], int], list[TreeClass], list[tuple[int, int]]] | None:
    """Keep previous trees that still fit, rescaled from ``k_old`` to k units per root.

    Returns residual capacities, the kept (finished) classes and the ``(root, units)`` still to
    grow; ``None`` when no kept set passes Lovász's check (the caller then packs from scratch,
    still guided by the previous trees).
    """
    plan = {r: _apportion(trees.get(r, []), k) for r in range(n)}
    edges_total = sum(m * len(e) for r in plan for e, m in plan[r])
    for attempt in ("all", "none"):
        cap = dict(arcs)
        kept: list[TreeClass] = []
        left = {r: k for r in range(n)}
        reused = 0
        if attempt == "all":
            for r in range(n):
                for edges, m in plan[r]:
                    if len(edges) != n - 1 or any(cap.get(e, 0) < m for e in edges):
                        continue
                    for e in edges:
                        cap[e] -= m
                    kept.append(TreeClass(r, m, [r] + [y for _, y in edges], list(edges), -1 - len(kept)))
                    left[r] -= m
                    reused += m * len(edges)
        todo = [(r, m) for r, m in sorted(left.items()) if m > 0]
        if todo and kept:
            ok, flows = _lovasz_ok(cap, n, left)
            stats["warm_check_maxflows"] = stats.get("warm_check_maxflows", 0) + flows
            if not ok:
                continue
        stats["reused_edges_frac"] = reused / edges_total if edges_total else 0.0
        stats["reused_tree_units"] = sum(c.mult for c in kept)
        return cap, kept, todo
    return None
