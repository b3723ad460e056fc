"""Telling a loopcoll schedule JSON apart from the other files the CLI reads, and reading one with
an error that says what was expected.

``synth --schedule-out`` and ``alltoallv synth --schedule-out`` write schedule JSON documents
(``format`` :data:`~synth.schedule.SCHEDULE_FORMAT`, the old ``loopcoll-schedule/1``, or
:data:`~synth.alltoallv_schedule.ALLTOALLV_FORMAT`); ``check`` and ``synth --warm-from`` meet them
next to MSCCL XML files and MSCCL++ plans.

Examples
--------
>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> xml = os.path.join(d, "ag.xml")
>>> _ = open(xml, "w").write("<algo name='x'/>")
>>> schedule_format(xml) is None
True
>>> try:
...     read_warm_schedule(xml)
... except ScheduleError as exc:
...     print(str(exc).replace(d, "D"))
--warm-from takes a schedule JSON written by `loopcoll synth ... --schedule-out S.json`; D/ag.xml is not one (it looks like an XML file)
"""

from __future__ import annotations

import json
from pathlib import Path

from synth import read_schedule
from synth.alltoallv_schedule import ALLTOALLV_FORMAT
from synth.errors import ScheduleError
from synth.schedule import SCHEDULE_FORMATS_READ, Schedule

__all__ = ["SCHEDULE_FORMATS", "WARM_FROM_HINT", "file_head", "read_warm_schedule", "schedule_format"]

#: The ``format`` values of the schedule documents loopcoll writes (and the old ``loopcoll-schedule/1``, still read).
SCHEDULE_FORMATS = (*SCHEDULE_FORMATS_READ, ALLTOALLV_FORMAT)

#: What ``--warm-from`` expects, in the words of its error messages.
WARM_FROM_HINT = "--warm-from takes a schedule JSON written by `loopcoll synth ... --schedule-out S.json`"


def file_head(path: str | Path) -> bytes:
    """The first bytes of ``path`` without a BOM or leading white space (empty when unreadable)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return b""


def schedule_format(path: str | Path) -> str | None:
    """The schedule ``format`` of the JSON file ``path``, or ``None`` when it is not a loopcoll schedule
    (another JSON document, XML, unreadable). Reads the whole file only when it starts with ``{``."""
    if not file_head(path).startswith(b"{"):
        return None
    try:
        doc = json.loads(Path(path).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    return fmt if fmt in SCHEDULE_FORMATS else None


def read_warm_schedule(path: str) -> Schedule:
    """:func:`~synth.read_schedule` for ``--warm-from``. A file that is no schedule JSON (MSCCL XML, an
    MSCCL++ plan, an AllToAllv schedule, not JSON) gets one error that names it and says what
    ``--warm-from`` takes; a missing file or a damaged schedule keeps the reader's own message."""
    try:
        return read_schedule(path)
    except ScheduleError as exc:
        fmt = schedule_format(path)
        if fmt in SCHEDULE_FORMATS_READ or not Path(path).is_file():
            raise
        if fmt == ALLTOALLV_FORMAT:
            what = "it is an AllToAllv schedule, which cannot warm-start a synthesis"
        elif file_head(path).startswith(b"<"):
            what = "it looks like an XML file"
        else:
            what = str(exc).removeprefix(f"{path}: ")
        raise ScheduleError(f"{WARM_FROM_HINT}; {path} is not one ({what})") from exc
