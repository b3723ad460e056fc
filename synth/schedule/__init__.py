"""The schedule IR: :class:`Schedule` and its parts, their validation and their JSON files.

Owns ``parts`` (hops, routes, cut links: plain data), ``decode``, ``encode`` and ``validate`` (which take
those parts), ``model`` (the :class:`Schedule` dataclass, calling both) and ``io`` (schedule files). It may
import ``synth._types``, ``synth.errors``, ``synth._atomic`` and ``synth.topologies``; nothing else in
synth, so every synthesizer, exporter and simulator can import it.

Examples
--------
>>> from synth.schedule import Schedule, read_schedule
>>> Schedule.__module__, read_schedule.__module__
('synth.schedule.model', 'synth.schedule.io')
"""

from __future__ import annotations

from synth.schedule.io import read_schedule, schedule_from_dict, write_schedule
from synth.schedule.model import Schedule
from synth.schedule.parts import LEGACY_SCHEDULE_FORMAT, SCHEDULE_FORMAT, SCHEDULE_FORMATS_READ, CutLink, Hop, Route, RouteKind

__all__ = [
    "CutLink", "Hop", "LEGACY_SCHEDULE_FORMAT", "Route", "RouteKind", "Schedule", "SCHEDULE_FORMAT", "SCHEDULE_FORMATS_READ", "read_schedule", "schedule_from_dict", "write_schedule",
]
