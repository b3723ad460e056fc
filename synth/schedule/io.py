"""Schedule files: read and write the JSON document of :meth:`Schedule.to_json`, atomically.

Examples
--------
>>> import tempfile, pathlib
>>> from synth.schedule.parts import Hop, Route, RouteKind
>>> s = Schedule("alltoall", 2, 1, tuple(Route(RouteKind.PATH, a, 1, (Hop(a, 1 - a, (f"gpu{a}", f"gpu{1 - a}")),), dest=1 - a)
...                                      for a in (0, 1)))
>>> with tempfile.TemporaryDirectory() as d:
...     write_schedule(s, str(pathlib.Path(d) / "s.json"))
...     read_schedule(str(pathlib.Path(d) / "s.json")) == s
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from synth._atomic import write_text_atomic
from synth.errors import ScheduleError, expect_type
from synth.schedule.model import Schedule

__all__ = ["read_schedule", "schedule_from_dict", "write_schedule"]


def schedule_from_dict(doc: Any, *, source: str = "<dict>") -> Schedule:
    """Build a :class:`Schedule` from its JSON document (:meth:`Schedule.from_dict`)."""
    return Schedule.from_dict(doc, source=source)


def read_schedule(path: str) -> Schedule:
    """Read a schedule JSON file written by :func:`write_schedule`."""
    expect_type(path, (str, os.PathLike), "path", ScheduleError)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"{p}: cannot read schedule file: {exc}") from exc
    return Schedule.from_json(text, source=str(p))


def write_schedule(sched: Schedule, path: str) -> None:
    """Write a schedule as JSON, atomically."""
    expect_type(sched, Schedule, "sched", ScheduleError)
    expect_type(path, (str, os.PathLike), "path", ScheduleError)
    write_text_atomic(path, sched.to_json())
