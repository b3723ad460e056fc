"""Turn what a user stages (a program, an XML file, a schedule JSON, a Schedule, a SynthResult) into programs.

>>> from msccl_xml import lower
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> ag = Schedule("allgather", 2, 1, (
...     Route(RouteKind.OUT_TREE, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),)),
...     Route(RouteKind.OUT_TREE, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),))))
>>> [p.coll for p in load_programs(ag)]
['allgather']
>>> local_digest(load_programs(ag)) == local_digest(load_programs(ag))
True
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from msccl_xml import Program, lower, parse, read, write
from runtime.formats.identity import sha256_hex, version_digest
from runtime.formats.store import VersionEntry
from synth import LoopcollError, Schedule, read_schedule

from .errors import StagingError

__all__ = ["entry_programs", "load_programs", "local_digest", "program_from_bytes"]


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


def entry_programs(entry: VersionEntry, fetch: Callable[[str], bytes]) -> list[Program]:
    """One program per band of a pushed manifest entry, in band order, each selecting its band's sizes:
    the band's MSCCL XML, or its schedule JSON lowered when it has none; ``fetch(path)`` returns a store
    file's bytes (``runtime.Client.get``), checked against the band's digest. In memory only.

    Raises
    ------
    StagingError, XmlError, ScheduleError
        As :func:`program_from_bytes`; StagingError also when fetched bytes are not the manifest's sha256.
    """
    out: list[Program] = []
    for band in entry.bands:
        name = band.xml or band.schedule
        data = fetch(name)
        if band.digest is not None and sha256_hex(data) != band.digest:
            raise StagingError(f"{name}: fetched bytes do not match the manifest's sha256")
        prog = program_from_bytes(data, name=name)
        out.append(dataclasses.replace(prog, min_bytes=band.min_bytes,
                                       max_bytes=0 if band.max_bytes is None else band.max_bytes))
    return out


def local_digest(programs: Iterable[Program]) -> str:
    """The digest of programs staged locally: over their size bands and the sha256 of their XML."""
    return version_digest((p.min_bytes or 0, p.max_bytes or None, sha256_hex(write(p).encode())) for p in programs)


def program_from_bytes(data: bytes, *, name: str) -> Program:
    """The program in ``data``, the bytes of an MSCCL ``.xml`` or a schedule ``.json`` (by ``name``'s
    suffix; ``name`` also names the source in errors), built in memory: a schedule is lowered as
    :func:`load_programs` lowers it.

    Raises
    ------
    XmlError, ScheduleError
        If the text is not a program or a schedule (the message names ``name``).
    StagingError
        If the bytes are not UTF-8, the lowering fails, or the suffix is neither.

    >>> from synth.schedule import Hop, Route, RouteKind, Schedule
    >>> ag = Schedule("allgather", 2, 1, (
    ...     Route(RouteKind.OUT_TREE, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),)),
    ...     Route(RouteKind.OUT_TREE, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),))))
    >>> program_from_bytes(ag.to_json().encode(), name="v1/b0.schedule.json").ngpus
    2
    """
    suffix = Path(name).suffix.lower()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StagingError(f"{name}: not UTF-8 text ({exc})") from exc
    if suffix == ".xml":
        return parse(text, source=name)
    if suffix == ".json":
        return _lower(Schedule.from_json(text, source=name))
    raise StagingError(f"{name}: expected an MSCCL .xml or a schedule .json")


def _lower(schedule: Schedule) -> Program:
    try:
        return lower(schedule, verify=False)
    except LoopcollError as exc:
        raise StagingError(f"lowering the {schedule.collective} schedule failed: {exc}") from exc
