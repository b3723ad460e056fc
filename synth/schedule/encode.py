"""Writing a schedule's JSON document: the compact ``loopcoll-schedule/2`` form and the old ``/1`` form.

The ``/2`` form stores every distinct hop once in a top-level ``hops`` table; ``cycles`` lists the
hop cycles that ring-shaped routes are windows of (:mod:`synth.schedule._windows`), as hop indices;
a route carries either ``window: [cycle, start, length]`` (its hops are ``length`` consecutive hops
of that cycle from ``start``, wrapping round) or ``hops: [index, ...]``. Size and time are therefore
O(distinct hops + routes + hops of the routes that are no window), not O(routes × hops) as in
``/1``, where every route spelt out each hop. :func:`legacy_document` still writes ``/1`` (tests of
the old reader, tools that want it); :mod:`synth.schedule.decode` reads both.

Examples
--------
>>> from synth.schedule._windows import ring_windows
>>> from synth.schedule.parts import RouteKind
>>> ring = [Hop(i, (i + 1) % 3, (f"gpu{i}", f"gpu{(i + 1) % 3}")) for i in range(3)] * 2
>>> routes = tuple(Route(RouteKind.OUT_TREE, p, 1, tuple(ring[p:p + 2])) for p in range(3))
>>> doc = compact_document("allgather", 3, 1, routes, ring_windows(routes, 3))
>>> len(doc["hops"]), doc["cycles"], [r.get("window", r.get("hops")) for r in doc["routes"]]
(3, [[0, 1, 2]], [[0, 2, 2], [0, 0, 2], [0, 1, 2]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from synth.schedule._windows import RingWindows
from synth.schedule.parts import LEGACY_SCHEDULE_FORMAT, SCHEDULE_FORMAT, Hop, Route

__all__ = ["compact_document", "legacy_document"]


def _hop_doc(h: Hop) -> dict[str, Any]:
    return {"src": h.src, "dst": h.dst, "path": list(h.path)}


class _HopTable:
    """Distinct hops by value, numbered in order of first appearance (so equal schedules give equal
    tables); ``by_id`` remembers the number of each hop object seen, so shared hops cost no hash."""

    def __init__(self) -> None:
        self.hops: list[Hop] = []
        self.by_value: dict[Hop, int] = {}
        self.by_id: dict[int, int] = {}

    def index(self, h: Hop) -> int:
        i = self.by_value.get(h)
        if i is None:
            i = self.by_value[h] = len(self.hops)
            self.hops.append(h)
        self.by_id[id(h)] = i
        return i

    def indices(self, hops: Sequence[Hop]) -> list[int]:
        try:
            return list(map(self.by_id.__getitem__, map(id, hops)))  # every hop seen: in C
        except KeyError:
            return [self.index(h) for h in hops]


def _route_head(r: Route) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": r.kind.value, "root": r.root, "chunks": r.chunks}
    if r.dest is not None:
        doc["dest"] = r.dest
    return doc


def compact_document(collective: str, nranks: int, nchunks: int, routes: Sequence[Route], windows: RingWindows,
                     ) -> dict[str, Any]:
    """The ``format``, ``hops``, ``cycles`` and ``routes`` keys of a ``/2`` document (module docstring);
    ``windows`` is :func:`~synth.schedule._windows.ring_windows` of ``routes``."""
    table = _HopTable()
    cycles = [[table.index(h) for h in cycle] for cycle in windows.cycles]
    out = []
    for r, at in zip(routes, windows.where):
        doc = _route_head(r)
        if at is not None:
            doc["window"] = [at[0], at[1], len(r.hops)]
        else:
            doc["hops"] = table.indices(r.hops)
        out.append(doc)
    return {"format": SCHEDULE_FORMAT, "collective": str(collective), "nranks": nranks, "nchunks": nchunks,
            "hops": [_hop_doc(h) for h in table.hops], "cycles": cycles, "routes": out}


def legacy_document(collective: str, nranks: int, nchunks: int, routes: Sequence[Route]) -> dict[str, Any]:
    """The same keys in the old ``/1`` form: every route spells out its hops (O(routes × hops)).

    >>> from synth.schedule.parts import RouteKind
    >>> doc = legacy_document("alltoall", 2, 1, (Route(RouteKind.PATH, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1),))
    >>> doc["format"], doc["routes"][0]["hops"]
    ('loopcoll-schedule/1', [{'src': 0, 'dst': 1, 'path': ['gpu0', 'gpu1']}])
    """
    out = []
    for r in routes:
        doc = _route_head(r)
        doc["hops"] = [_hop_doc(h) for h in r.hops]
        out.append(doc)
    return {"format": LEGACY_SCHEDULE_FORMAT, "collective": str(collective), "nranks": nranks, "nchunks": nchunks,
            "routes": out}
