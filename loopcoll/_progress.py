"""Progress of long CLI commands on stderr: a live line on a terminal, a plain line now and then otherwise.

Library functions take a callback ``progress(fraction, what)`` (``synth.simulation.calibration.Progress``);
:class:`ProgressLine` is the CLI's one. On a TTY it rewrites one line (``\\r``) at most every
:data:`TTY_EVERY_S` seconds and clears it when closed; on a pipe or file it prints a whole line
every :data:`PLAIN_EVERY_S` seconds (the first one after that long, so short runs stay silent);
``quiet`` silences it. stdout is never touched.

>>> import io
>>> buf = io.StringIO()
>>> with ProgressLine("calibrate", stream=buf, every_s=0.0) as bar:
...     bar(0.5, "leave-one-out 3/6")
>>> buf.getvalue()
'loopcoll: calibrate  50% leave-one-out 3/6 (0 s)\\n'
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["PLAIN_EVERY_S", "TTY_EVERY_S", "ProgressLine"]

PLAIN_EVERY_S = 5.0
TTY_EVERY_S = 0.2


class ProgressLine:
    """A progress callback ``(fraction, what)`` writing to ``stream`` (default: the current ``sys.stderr``)."""

    def __init__(self, label: str, *, quiet: bool = False, stream: TextIO | None = None, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._label = label
        self._quiet = quiet
        self._stream = stream
        self._clock = clock
        self._start = clock()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._every_s = every_s if every_s is not None else (TTY_EVERY_S if self._tty else PLAIN_EVERY_S)
        self._last = self._start if not self._tty else self._start - self._every_s
        self._width = 0

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, fraction: float, what: str) -> None:
        if self._quiet:
            return
        now = self._clock()
        if now - self._last < self._every_s:
            return
        self._last = now
        pct = 100 * min(max(fraction, 0.0), 1.0)
        text = f"loopcoll: {self._label} {pct:3.0f}% {what} ({now - self._start:.0f} s)"
        if self._tty:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = max(self._width, len(text))  # what the terminal line shows
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Clear the live line (TTY); a plain stream keeps its lines."""
        if self._tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
