"""Reading a schedule's fields back from its JSON document, validating every one.

:func:`schedule_fields` returns the keyword arguments of :class:`~synth.schedule.model.Schedule`
(which checks the collective and the counts), built from :mod:`synth.schedule.parts`.

Examples
--------
>>> doc = {"format": SCHEDULE_FORMAT, "collective": "allgather", "nranks": 2, "nchunks": 1, "routes": []}
>>> sorted(schedule_fields(doc))
['bottleneck', 'collective', 'meta', 'nchunks', 'nranks', 'routes', 'topology_fingerprint']
"""

from __future__ import annotations

from typing import Any

from synth._types import Collective
from synth.errors import ScheduleError, short_repr
from synth.schedule.parts import SCHEDULE_FORMAT, CutLink, Hop, Route, RouteKind

__all__ = ["MAX_INT", "schedule_fields"]


#: Integers in a schedule document (ranks, chunk counts) must lie in -1 .. 2^62.
MAX_INT = 2**62


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{what} must be an integer, got {short_repr(value)}")
    if not -1 <= value <= MAX_INT:
        raise ScheduleError(f"{what} must be in -1..2^62, got {short_repr(value)}")
    return value


def _route(doc: Any, i: int, source: str) -> Route:
    where = f"{source}: routes[{i}]"
    if not isinstance(doc, dict):
        raise ScheduleError(f"{where} must be an object")
    try:
        kind = RouteKind(doc.get("kind"))
    except ValueError:
        raise ScheduleError(f"{where}: unknown route kind {short_repr(doc.get('kind'))}") from None
    hops = []
    for j, h in enumerate(doc.get("hops", [])):
        if not isinstance(h, dict) or not isinstance(h.get("path"), list):
            raise ScheduleError(f"{where}.hops[{j}] must be an object with a 'path' list")
        if not all(isinstance(p, str) for p in h["path"]):
            raise ScheduleError(f"{where}.hops[{j}].path must hold node id strings")
        hops.append(Hop(_int(h.get("src"), f"{where}.hops[{j}].src"), _int(h.get("dst"), f"{where}.hops[{j}].dst"), tuple(h["path"])))
    dest = doc.get("dest")
    return Route(
        kind=kind,
        root=_int(doc.get("root"), f"{where}.root"),
        chunks=_int(doc.get("chunks"), f"{where}.chunks"),
        hops=tuple(hops),
        dest=None if dest is None else _int(dest, f"{where}.dest"),
    )


def schedule_fields(doc: Any, *, source: str = "<dict>") -> dict[str, Any]:
    """The fields of the schedule a JSON document describes; :class:`ScheduleError` naming the first bad one."""
    if not isinstance(doc, dict):
        raise ScheduleError(f"{source}: a schedule must be a JSON object")
    if doc.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(f"{source}: not a loopcoll schedule (format {short_repr(doc.get('format'))}, expected {short_repr(SCHEDULE_FORMAT)})")
    if not isinstance(doc.get("routes"), list):
        raise ScheduleError(f"{source}: 'routes' must be a list")
    cut = [CutLink.from_dict(c, source=source) for c in doc.get("bottleneck", [])]
    fingerprint = doc.get("topology_fingerprint")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ScheduleError(f"{source}: 'meta' must be an object")
    return dict(
        collective=Collective.parse(doc.get("collective"), error=ScheduleError),
        nranks=_int(doc.get("nranks"), f"{source}: nranks"),
        nchunks=_int(doc.get("nchunks"), f"{source}: nchunks"),
        routes=tuple(_route(r, i, source) for i, r in enumerate(doc["routes"])),
        bottleneck=tuple(cut),
        topology_fingerprint=None if fingerprint is None else str(fingerprint),
        meta=meta,
    )

