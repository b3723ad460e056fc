"""Failed-authentication rate limiting for the daemon, per peer host, in fixed windows.

Private to :mod:`runtime.service.daemon` (``docs/controller.md``, "Limits and timeouts"). Each host that fails
a ``hello`` opens a window of ``window_s`` seconds; past ``budget`` failures in it, every further ``hello`` from
that host is refused, without comparing its token, until the window ends. The first failure of a window is
logged on its own; when the window ends one ``auth_failures`` record carries the window's counts, so a guessing
client costs two log lines per window, not one per guess. Lives on the daemon's event-loop thread.

Examples
--------
>>> import asyncio
>>> loop = asyncio.new_event_loop(); records = []
>>> guard = AuthGuard(budget=2, window_s=0.05, loop=loop, log=records.append)
>>> [guard.failed("10.0.0.1") for _ in range(3)], guard.blocked_s("10.0.0.1") > 0, guard.blocked_s("10.0.0.2")
([True, False, False], True, 0.0)
>>> guard.refused("10.0.0.1"); loop.run_until_complete(asyncio.sleep(0.1)); loop.close()
>>> records
[{'event': 'auth_failures', 'peer': '10.0.0.1', 'failures': 3, 'refused': 1, 'window_s': 0.05}]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AuthGuard"]


@dataclass(slots=True)
class _Window:
    start_s: float
    timer: asyncio.TimerHandle
    failures: int = 0
    refused: int = 0


class AuthGuard:
    """Counts failed ``hello``s per host; :meth:`blocked_s` says how long a host over its budget must wait."""

    def __init__(self, *, budget: int, window_s: float, loop: asyncio.AbstractEventLoop,
                 log: Callable[[Mapping[str, Any]], None]) -> None:
        self.budget = budget
        self.window_s = window_s
        self._loop = loop
        self._log = log
        self._windows: dict[str, _Window] = {}

    def blocked_s(self, host: str) -> float:
        """Seconds until ``host`` may try a token again (0.0: it may now)."""
        w = self._windows.get(host)
        if w is None or w.failures < self.budget:
            return 0.0
        return max(0.0, w.start_s + self.window_s - self._loop.time())

    def failed(self, host: str) -> bool:
        """Count a wrong token from ``host``; ``True`` when it is the first of its window (log it on its own)."""
        w = self._windows.get(host)
        first = w is None
        if w is None:
            w = self._windows[host] = _Window(self._loop.time(), self._loop.call_later(self.window_s, self._end, host))
        w.failures += 1
        return first

    def refused(self, host: str) -> None:
        """Count a ``hello`` refused unread because ``host`` is over its budget."""
        w = self._windows.get(host)
        if w is not None:
            w.refused += 1

    def close(self) -> None:
        """End every open window now (its record is logged); the daemon calls it when stopping."""
        for host in list(self._windows):
            self._windows[host].timer.cancel()
            self._end(host)

    def _end(self, host: str) -> None:
        w = self._windows.pop(host, None)
        if w is not None:
            self._log({"event": "auth_failures", "peer": host, "failures": w.failures, "refused": w.refused,
                       "window_s": self.window_s})
