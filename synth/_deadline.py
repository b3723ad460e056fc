"""A solve's wall-clock deadline and progress heartbeat, shared by the exact (max-flow) algorithms.

:func:`solving` sets the deadline for the current context; :func:`tick` — called by every
:meth:`synth.maxflow.FlowNetwork.max_flow`, the unit of work of the cut bounds and ForestColl —
raises :class:`~synth.errors.TimeLimitError` once it has passed and logs a progress line (INFO on
``synth.progress``) every :data:`PROGRESS_EVERY_S` seconds.

Examples
--------
>>> with solving(None, "demo"):
...     tick()
>>> with solving(1e-9, "demo"):
...     import time; time.sleep(0.001); tick()
Traceback (most recent call last):
...
synth.errors.TimeLimitError: demo: time limit of 1e-09 s reached
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from synth.errors import SolverError, TimeLimitError

__all__ = ["FALLBACK_GRACE_S", "FALLBACK_SHARE", "PROGRESS_EVERY_S", "check_time_limit", "fallback_grace_s",
           "fallback_reserve_s", "give_up", "note_upper_bound", "remaining_s", "solving", "tick"]

PROGRESS_EVERY_S = 5.0
#: The largest share of a time limit kept from the solve for the fallback that replaces it (the
#: solve keeps the rest: its first phase is the exact bound the fallback is certified against).
FALLBACK_SHARE = 2 / 3
#: Seconds a fallback may run past the time limit at least (or a tenth of the limit, if longer):
#: a deployable schedule is worth them. A fallback that runs longer says so in its message.
FALLBACK_GRACE_S = 1.0
log = logging.getLogger("synth.progress")


@dataclass
class _Solve:
    label: str
    limit_s: float | None
    start: float
    deadline: float
    next_report: float
    ticks: int = 0
    upper_algbw_GBps: float | None = None  # noqa: N815


_CURRENT: ContextVar[_Solve | None] = ContextVar("loopcoll_solve", default=None)


def check_time_limit(time_limit_s: object, what: str = "time_limit_s") -> float | None:
    """``time_limit_s`` validated: ``None`` or a finite number of seconds > 0."""
    if time_limit_s is None:
        return None
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) \
            or not math.isfinite(time_limit_s) or time_limit_s <= 0:
        raise SolverError(f"{what} must be None or a finite number of seconds > 0, got {time_limit_s!r}")
    return float(time_limit_s)


@contextmanager
def solving(time_limit_s: float | None, label: str) -> Iterator[None]:
    """Run the body under a deadline (``None``: none); an enclosing, earlier deadline still applies."""
    now = time.monotonic()
    outer = _CURRENT.get()
    deadline = math.inf if time_limit_s is None else now + float(time_limit_s)
    if outer is not None and outer.deadline <= deadline:
        deadline, time_limit_s, label = outer.deadline, outer.limit_s, outer.label
    token = _CURRENT.set(_Solve(label, time_limit_s, now, deadline, now + PROGRESS_EVERY_S))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def tick() -> None:
    """One unit of work done: raise :class:`TimeLimitError` past the deadline, report progress."""
    cur = _CURRENT.get()
    if cur is None:
        return
    cur.ticks += 1
    now = time.monotonic()
    if now >= cur.deadline:
        raise TimeLimitError(f"{cur.label}: time limit of {cur.limit_s:g} s reached",
                             upper_algbw_GBps=cur.upper_algbw_GBps)
    if now >= cur.next_report:
        cur.next_report = now + PROGRESS_EVERY_S
        log.info("%s: still solving, %.0f s, %d max-flows", cur.label, now - cur.start, cur.ticks)


def note_upper_bound(algbw_GBps: float) -> None:  # noqa: N803
    """Record a proven upper bound on the current solve's optimum (algbw, GB/s); a later
    :class:`TimeLimitError` of this solve carries it. No-op outside :func:`solving`.

    >>> with solving(1e-9, "demo"):
    ...     note_upper_bound(50.0)
    ...     import time; time.sleep(0.001)
    ...     try:
    ...         tick()
    ...     except TimeLimitError as exc:
    ...         print(exc.upper_algbw_GBps)
    50.0
    """
    cur = _CURRENT.get()
    if cur is not None:
        cur.upper_algbw_GBps = float(algbw_GBps)


def fallback_reserve_s(time_limit_s: float, estimate_s: float) -> float:
    """Seconds of ``time_limit_s`` kept for a fallback that is estimated to take ``estimate_s``:
    the estimate, at most :data:`FALLBACK_SHARE` of the limit (the one rule of every synthesizer
    that keeps time for its fallback).

    >>> fallback_reserve_s(60.0, 4.0), fallback_reserve_s(3.0, 4.0)
    (4.0, 2.0)
    """
    return min(max(estimate_s, 0.0), FALLBACK_SHARE * time_limit_s)


def fallback_grace_s(time_limit_s: float) -> float:
    """Seconds a fallback may run past ``time_limit_s``: :data:`FALLBACK_GRACE_S` or a tenth of the limit.

    >>> fallback_grace_s(5.0), fallback_grace_s(60.0)
    (1.0, 6.0)
    """
    return max(FALLBACK_GRACE_S, 0.1 * time_limit_s)


def remaining_s() -> float | None:
    """Seconds left before the current solve's deadline (``None``: no deadline, or outside :func:`solving`).

    >>> remaining_s() is None
    True
    """
    cur = _CURRENT.get()
    if cur is None or math.isinf(cur.deadline):
        return None
    return cur.deadline - time.monotonic()


def give_up(why: str) -> None:
    """Stop the current solve now, as its deadline would later: raise :class:`TimeLimitError` with
    ``why`` and the noted upper bound (a solve that cannot finish in time need not run until then)."""
    cur = _CURRENT.get()
    label, limit = (cur.label, cur.limit_s) if cur is not None else ("solve", None)
    raise TimeLimitError(f"{label}: {why} (time limit {limit:g} s)" if limit is not None else f"{label}: {why}",
                         upper_algbw_GBps=cur.upper_algbw_GBps if cur is not None else None)
