"""Turn what a user stages (a program, an XML file, a schedule JSON, a Schedule, a SynthResult) into programs.

>>> from msccl_xml import lower
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> ag = Schedule("allgather", 2, 1, (
...     Route(RouteKind.OUT_TREE, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),)),
...     Route(RouteKind.OUT_TREE, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),))))
>>> [p.coll for p in load_programs(ag)]
['allgather']
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msccl_xml import Program, lower, read
from synth import LoopcollError, Schedule, read_schedule

from .errors import StagingError

__all__ = ["load_programs"]


def load_programs(source: Any) -> list[Program]:
    """Programs from ``source``: a Program, Schedule, SynthResult, ``.xml``/``.json`` path, or an iterable of those.

    Schedules are lowered with :func:`msccl_xml.lower` (out of place, Simple protocol).

    Raises
    ------
    StagingError
        If a file cannot be read or the source is of an unknown kind.
    """
    if isinstance(source, Program):
        return [source]
    if isinstance(source, Schedule):
        return [_lower(source)]
    if hasattr(source, "schedule") and hasattr(source, "status"):  # SynthResult
        if source.schedule is None:
            raise StagingError(f"synthesis result has no schedule: {getattr(source, 'message', '')}")
        return [_lower(source.schedule)]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            if path.suffix.lower() == ".xml":
                return [read(path)]
            if path.suffix.lower() == ".json":
                return [_lower(read_schedule(str(path)))]
        except (OSError, LoopcollError) as exc:
            raise StagingError(f"{path}: {exc}") from exc
        raise StagingError(f"{path}: expected an MSCCL .xml or a schedule .json file")
    if isinstance(source, Iterable):
        out: list[Program] = []
        for item in source:
            out.extend(load_programs(item))
        return out
    raise StagingError(f"cannot stage a {type(source).__name__}: give a Program, Schedule, SynthResult or file path")


def _lower(schedule: Schedule) -> Program:
    try:
        return lower(schedule, verify=False)
    except LoopcollError as exc:
        raise StagingError(f"lowering the {schedule.collective} schedule failed: {exc}") from exc
