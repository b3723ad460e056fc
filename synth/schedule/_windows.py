"""Ring-shaped routes found as windows of Hamiltonian hop cycles, so that validation and link loads
of ring schedules (NCCL-like rings: N² × channels hops at 2048 GPUs) need no per-hop Python work.

A *cycle* is a tuple of ``n`` hops ``c_0 … c_{n-1}`` with ``c_k.dst == c_{k+1}.src`` (indices mod n)
whose sources are the ``n`` ranks ``0..n-1``, each once. A route *is a window* of a cycle when its
hops are the hops ``c_p … c_{p+n-2}`` (compared as tuples: identity first, in C; candidates are looked
up by hop value, so equal schedules find the same windows whether or not they share hop objects) and
its root is the window's first source (out-tree) or its last destination (in-tree). Such a window
is a valid spanning out-tree (a chain from the root through every rank) or in-tree (a chain of
partial sums ending at the root), so its tree checks can be skipped; its hops' physical paths are
the cycle's, checked once per cycle.

Cycles are found from the routes themselves: a route whose hops form a chain through all ``n``
ranks is closed by a hop ``last.dst → first.src`` taken from another such route (the two neighbours
of a ring position share all but one hop). Nothing is trusted: a route that matches no window is
checked in full by the caller.

Examples
--------
>>> from synth.schedule.parts import Hop, Route, RouteKind
>>> ring = [Hop(i, (i + 1) % 3, (f"gpu{i}", f"gpu{(i + 1) % 3}")) for i in range(3)] * 2
>>> routes = tuple(Route(RouteKind.OUT_TREE, p, 1, tuple(ring[p:p + 2])) for p in range(3))
>>> w = ring_windows(routes, 3)
>>> len(w.cycles), w.where
(1, ((0, 2), (0, 0), (0, 1)))
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.schedule.parts import Hop, Route, RouteKind

__all__ = ["RingWindows", "ring_windows"]

#: Chain routes kept as candidates to close a cycle, at most (a schedule of chains that are no
#: ring's windows then costs at most this many extra passes over a route).
_MAX_CANDIDATES = 64


@dataclass(frozen=True, slots=True)
class RingWindows:
    """The cycles found and, per route, ``(cycle index, start position)`` or ``None`` (not a window)."""

    cycles: tuple[tuple[Hop, ...], ...]
    where: tuple[tuple[int, int] | None, ...]


def _chain_ranks_ok(hops: tuple[Hop, ...], n: int) -> bool:
    """Whether ``hops`` (``n - 1`` of them) chain through ``n`` distinct ranks of ``0..n-1``."""
    if len(hops) != n - 1 or n < 2:
        return False
    if n > 2 and (hops[0].dst != hops[1].src or hops[-2].dst != hops[-1].src):
        return False  # most trees fail here, before the pass over every hop
    if any(a.dst != b.src for a, b in zip(hops, hops[1:])):
        return False
    ranks = [h.src for h in hops]
    ranks.append(hops[-1].dst)
    try:
        return len(set(ranks)) == n and min(ranks) >= 0 and max(ranks) < n
    except TypeError:
        return False


def _window_at(route: Route, cycle: tuple[Hop, ...], doubled: tuple[Hop, ...], p: int, n: int) -> bool:
    if route.hops != doubled[p:p + n - 1]:
        return False
    if route.kind is RouteKind.OUT_TREE:
        return route.root == cycle[p].src
    if route.kind is RouteKind.IN_TREE:
        return route.root == cycle[(p + n - 2) % n].dst
    return False


def _hashable(hops: tuple[Hop, ...]) -> bool:
    try:
        return all(hash(h) is not None for h in hops)
    except TypeError:  # a hand-built hop with a list path: no window, checked in full
        return False


def _lookup(at: dict[Hop, list[tuple[int, int]]], hop: Hop) -> list[tuple[int, int]]:
    try:
        return at.get(hop, [])
    except TypeError:
        return []


def ring_windows(routes: tuple[Route, ...], n: int) -> RingWindows:
    """Find the cycles of ``routes`` (``n`` ranks) and which routes are their windows (module docstring).

    A chain route met before the cycle it belongs to was closed is matched again once it is, so
    every window of a found cycle is marked, whichever route came first.
    """
    cycles: list[tuple[Hop, ...]] = []
    doubled: list[tuple[Hop, ...]] = []
    at: dict[Hop, list[tuple[int, int]]] = {}  # hop (by value: equal schedules find equal windows) -> (cycle, position)
    by_pair: dict[tuple[int, int], Hop] = {}
    pending: list[int] = []  # the candidates not (yet) matched to a window
    where: list[tuple[int, int] | None] = []

    def match(route: Route, only: int | None = None) -> tuple[int, int] | None:
        for ci, p in _lookup(at, route.hops[0]):
            if (only is None or ci == only) and _window_at(route, cycles[ci], doubled[ci], p, n):
                return (ci, p)
        return None

    for route in routes:
        found: tuple[int, int] | None = None
        closed: int | None = None
        if route.kind in (RouteKind.OUT_TREE, RouteKind.IN_TREE) and route.hops:
            found = match(route)
            if found is None and len(pending) < _MAX_CANDIDATES and _chain_ranks_ok(route.hops, n):
                pending.append(len(where))
                for h in route.hops:
                    by_pair.setdefault((h.src, h.dst), h)
                closing = by_pair.get((route.hops[-1].dst, route.hops[0].src))
                if closing is not None and _hashable(route.hops) and _hashable((closing,)):
                    cycle = (*route.hops, closing)
                    ci = closed = len(cycles)
                    cycles.append(cycle)
                    doubled.append(cycle + cycle)
                    for k, h in enumerate(cycle):
                        at.setdefault(h, []).append((ci, k))
        where.append(found)
        if closed is not None:  # the candidates so far may be windows of the new cycle
            for i in pending:
                where[i] = match(routes[i], closed)
            pending = [i for i in pending if where[i] is None]
    return RingWindows(tuple(cycles), tuple(where))
