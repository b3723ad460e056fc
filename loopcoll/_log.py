"""The CLI's log handling: the library's INFO progress on stderr after a short delay, ``--quiet`` silence.

Every command calls :func:`configure_progress` when it starts; ``loopcoll.cli.main`` calls
:func:`reset_progress` when it ends.

>>> import logging
>>> configure_progress(quiet=True)
>>> logging.getLogger("synth").level == logging.WARNING
True
>>> reset_progress()
>>> logging.getLogger("synth").level == logging.NOTSET
True
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["PROGRESS_AFTER_S", "QUIET_LOGGERS", "configure_progress", "reset_progress"]

PROGRESS_AFTER_S = 2.0


class _AfterDelay(logging.Filter):
    """Drop progress records during the first seconds: only long runs report progress."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self._start = time.monotonic()
        self._delay_s = delay_s

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or time.monotonic() - self._start >= self._delay_s


class _Prefix(logging.Formatter):
    """``loopcoll: MESSAGE`` for progress, ``loopcoll: warning: MESSAGE`` for warnings."""

    def format(self, record: logging.LogRecord) -> str:
        tag = "warning: " if record.levelno >= logging.WARNING else ""
        return f"loopcoll: {tag}{record.getMessage()}"


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (tests swap it)."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


#: The packages whose log records a ``--quiet`` command keeps off stderr.
QUIET_LOGGERS = ("synth", "msccl_xml", "mscclpp_plan", "runtime", "loopcoll")


def configure_progress(quiet: bool) -> None:
    """Send the library's INFO progress to stderr (after a short delay), unless ``quiet``.

    ``quiet`` (``--quiet``, ``--json``) keeps every log record of the loopcoll packages off stderr,
    warnings included (Python's last-resort handler would print them): what a warning says, e.g.
    that the XML export re-synthesized with fewer chunks, is in the command's own output too.
    """
    reset_progress()
    root = logging.getLogger("synth")
    if quiet:
        for name in QUIET_LOGGERS:
            sink = logging.NullHandler()
            sink._loopcoll = True  # type: ignore[attr-defined]
            logging.getLogger(name).addHandler(sink)
        root.setLevel(logging.WARNING)
        return
    handler = _CurrentStderr()
    handler._loopcoll = True  # type: ignore[attr-defined]
    handler.setFormatter(_Prefix())
    handler.addFilter(_AfterDelay(PROGRESS_AFTER_S))
    for name in QUIET_LOGGERS:  # progress comes from synth; warnings from any of them
        logging.getLogger(name).addHandler(handler)
    root.setLevel(logging.INFO)


def reset_progress() -> None:
    """Undo :func:`configure_progress` (the CLI calls it when a command ends)."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            if getattr(h, "_loopcoll", False):
                logger.removeHandler(h)
    logging.getLogger("synth").setLevel(logging.NOTSET)
