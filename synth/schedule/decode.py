"""Reading a schedule's fields back from its JSON document, validating every one.

:func:`schedule_fields` returns the keyword arguments of :class:`~synth.schedule.model.Schedule`
(which checks the collective and the counts), built from :mod:`synth.schedule.parts`. It reads the
compact ``loopcoll-schedule/2`` form (:mod:`synth.schedule.encode`: one :class:`Hop` object per entry
of the hop table, shared by every route that uses it) and the old ``/1`` form.

Examples
--------
>>> doc = {"format": SCHEDULE_FORMATS_READ[0], "collective": "allgather", "nranks": 2, "nchunks": 1, "hops": [], "routes": []}
>>> sorted(schedule_fields(doc))
['bottleneck', 'collective', 'meta', 'nchunks', 'nranks', 'routes', 'topology_fingerprint']
"""

from __future__ import annotations

from typing import Any

from synth._types import Collective
from synth.errors import ScheduleError, short_repr
from synth.schedule.parts import LEGACY_SCHEDULE_FORMAT, SCHEDULE_FORMATS_READ, CutLink, Hop, Route, RouteKind

__all__ = ["MAX_INT", "schedule_fields"]


#: Integers in a schedule document (ranks, chunk counts) must lie in -1 .. 2^62.
MAX_INT = 2**62


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{what} must be an integer, got {short_repr(value)}")
    if not -1 <= value <= MAX_INT:
        raise ScheduleError(f"{what} must be in -1..2^62, got {short_repr(value)}")
    return value


def _route_head(doc: Any, where: str) -> tuple[RouteKind, int, int, int | None]:
    if not isinstance(doc, dict):
        raise ScheduleError(f"{where} must be an object")
    try:
        kind = RouteKind(doc.get("kind"))
    except ValueError:
        raise ScheduleError(f"{where}: unknown route kind {short_repr(doc.get('kind'))}") from None
    root = _int(doc.get("root"), f"{where}.root")
    chunks = _int(doc.get("chunks"), f"{where}.chunks")
    dest = doc.get("dest")
    return kind, root, chunks, None if dest is None else _int(dest, f"{where}.dest")


def _hop(h: Any, where: str) -> Hop:
    if not isinstance(h, dict) or not isinstance(h.get("path"), list):
        raise ScheduleError(f"{where} must be an object with a 'path' list")
    if not all(isinstance(p, str) for p in h["path"]):
        raise ScheduleError(f"{where}.path must hold node id strings")
    return Hop(_int(h.get("src"), f"{where}.src"), _int(h.get("dst"), f"{where}.dst"), tuple(h["path"]))


def _route(doc: Any, i: int, source: str, seen: dict[Hop, Hop]) -> Route:
    """A ``/1`` route: its hops spelt out (equal hops become one object, through ``seen``)."""
    where = f"{source}: routes[{i}]"
    kind, root, chunks, dest = _route_head(doc, where)
    hops = doc.get("hops", [])
    if not isinstance(hops, list):
        raise ScheduleError(f"{where}.hops must be a list")
    got = (_hop(h, f"{where}.hops[{j}]") for j, h in enumerate(hops))
    return Route(kind, root, chunks, tuple(seen.setdefault(h, h) for h in got), dest)


def _indices(value: Any, size: int, what: str, table: str) -> list[int]:
    """``value`` as a list of indices into a table of ``size`` entries (checked in C when all is well)."""
    if not isinstance(value, list):
        raise ScheduleError(f"{what} must be a list of {table} indices, got {short_repr(value)}")
    if not all(type(v) is int for v in value) or (value and (min(value) < 0 or max(value) >= size)):
        for j, v in enumerate(value):
            if type(v) is not int:
                raise ScheduleError(f"{what}[{j}] must be an integer {table} index, got {short_repr(v)}")
            if not 0 <= v < size:
                raise ScheduleError(f"{what}[{j}] = {v} is out of range: the {table} table has {size} entries")
    return value


class _Tables:
    """The ``/2`` document's hop table and cycles, each cycle also doubled (a window may wrap round)."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        raw = doc.get("hops")
        if not isinstance(raw, list):
            raise ScheduleError(f"{source}: 'hops' must be a list (the hop table)")
        self.hops = [_hop(h, f"{source}: hops[{j}]") for j, h in enumerate(raw)]
        cycles = doc.get("cycles", [])
        if not isinstance(cycles, list):
            raise ScheduleError(f"{source}: 'cycles' must be a list")
        self.doubled: list[tuple[Hop, ...]] = []
        for c, ids in enumerate(cycles):
            got = _indices(ids, len(self.hops), f"{source}: cycles[{c}]", "hop")
            if not got:
                raise ScheduleError(f"{source}: cycles[{c}] is empty")
            cycle = tuple(map(self.hops.__getitem__, got))
            self.doubled.append(cycle + cycle)

    def route(self, doc: Any, i: int, source: str) -> Route:
        where = f"{source}: routes[{i}]"
        kind, root, chunks, dest = _route_head(doc, where)
        window = doc.get("window")
        if window is None:
            ids = _indices(doc.get("hops", []), len(self.hops), f"{where}.hops", "hop")
            return Route(kind, root, chunks, tuple(map(self.hops.__getitem__, ids)), dest)
        if "hops" in doc:
            raise ScheduleError(f"{where} has both 'window' and 'hops'")
        if not isinstance(window, list) or len(window) != 3 or not all(type(v) is int for v in window):
            raise ScheduleError(f"{where}.window must be [cycle, start, length] integers, got {short_repr(window)}")
        c, start, length = window
        if not 0 <= c < len(self.doubled):
            raise ScheduleError(f"{where}.window[0] = {c} is out of range: there are {len(self.doubled)} cycles")
        n = len(self.doubled[c]) // 2
        if not 0 <= start < n:
            raise ScheduleError(f"{where}.window[1] = {start} is out of range: cycles[{c}] has {n} hops")
        if not 1 <= length <= n:
            raise ScheduleError(f"{where}.window[2] = {length} runs past the cycle: cycles[{c}] has {n} hops")
        return Route(kind, root, chunks, self.doubled[c][start:start + length], dest)


def schedule_fields(doc: Any, *, source: str = "<dict>") -> dict[str, Any]:
    """The fields of the schedule a JSON document describes; :class:`ScheduleError` naming the first bad one."""
    if not isinstance(doc, dict):
        raise ScheduleError(f"{source}: a schedule must be a JSON object")
    fmt = doc.get("format")
    if fmt not in SCHEDULE_FORMATS_READ:
        raise ScheduleError(f"{source}: not a loopcoll schedule (format {short_repr(fmt)}, expected "
                            f"{' or '.join(map(short_repr, SCHEDULE_FORMATS_READ))})")
    if not isinstance(doc.get("routes"), list):
        raise ScheduleError(f"{source}: 'routes' must be a list")
    if fmt == LEGACY_SCHEDULE_FORMAT:
        seen: dict[Hop, Hop] = {}
        routes = tuple(_route(r, i, source, seen) for i, r in enumerate(doc["routes"]))
    else:
        tables = _Tables(doc, source)
        routes = tuple(tables.route(r, i, source) for i, r in enumerate(doc["routes"]))
    cut = [CutLink.from_dict(c, source=source) for c in doc.get("bottleneck", [])]
    fingerprint = doc.get("topology_fingerprint")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ScheduleError(f"{source}: 'meta' must be an object")
    return dict(
        collective=Collective.parse(doc.get("collective"), error=ScheduleError),
        nranks=_int(doc.get("nranks"), f"{source}: nranks"),
        nchunks=_int(doc.get("nchunks"), f"{source}: nchunks"),
        routes=routes,
        bottleneck=tuple(cut),
        topology_fingerprint=None if fingerprint is None else str(fingerprint),
        meta=meta,
    )

