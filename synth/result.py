"""The result object every synthesizer returns (scipy.optimize style: status, message, success).

Every result type of loopcoll has this shape (:class:`Outcome`): a ``status`` from a closed enum,
a one-line ``message``, a derived ``success`` property, then its figures, frozen. Besides
:class:`SynthResult`: :class:`synth.bounds.Bound` (``OPTIMAL`` / ``TIME_LIMIT``),
:class:`synth.simulation.SimResult` and ``msccl_xml.CheckResult``.

A schedule's status follows one rule, :func:`judge`: ``optimal`` only when its algbw reaches the
optimum it is held to (``optimal_algbw_GBps``) within relative :data:`OPTIMAL_RTOL`, else
``feasible`` with ``gap_pct`` against that certified bound; ``time_limit`` when a limit stopped the
run first. :func:`format_status` is the one way text output shows a status and its gap.

Examples
--------
>>> r = SynthResult(status=Status.TIME_LIMIT, message="time limit after 3.0 s, gap 1.2%", schedule=None,
...                 algbw_GBps=0.0, optimal_algbw_GBps=100.0, gap_pct=1.2, solve_time_s=3.0)
>>> r.success, r.status.value
(False, 'time_limit')
>>> status, gap = judge(350.0, 354.13)
>>> status.value, round(gap, 2), format_status(status, gap, "354.13 GB/s")
('feasible', 1.17, 'feasible (gap 1.17 % vs optimum 354.13 GB/s)')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from synth.figures import Figures
from synth.schedule import Schedule

__all__ = ["OPTIMAL_RTOL", "Outcome", "Status", "SynthResult", "format_status", "gap_pct", "gap_pct_time",
           "judge", "judge_time"]

#: Relative tolerance within which a delivered schedule counts as reaching its optimum.
OPTIMAL_RTOL = 1e-9


class Status(Enum):
    """Closed set of outcomes."""

    OPTIMAL = "optimal"  # the schedule reaches the optimum it is held to (relative OPTIMAL_RTOL); an LP: solved
    FEASIBLE = "feasible"  # a valid schedule below that optimum: gap_pct > 0 against a certified bound
    TIME_LIMIT = "time_limit"  # a limit stopped the run: incumbent returned, gap_pct against a proven bound
    INFEASIBLE = "infeasible"
    FAILED = "failed"  # solver error, unknown native status, or loopcoll's re-check disagreed


@runtime_checkable
class Outcome(Protocol):
    """The shape every result shares: ``status`` (an :class:`~enum.Enum` member), ``message``, ``success``.

    >>> isinstance(_example(Status.OPTIMAL, 1.0, 1.0, 0.0), Outcome)
    True
    """

    @property
    def status(self) -> Enum: ...

    @property
    def message(self) -> str: ...

    @property
    def success(self) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthResult:
    """Outcome of one synthesis (built by keyword only).

    Attributes
    ----------
    status, message
        What happened, in a closed set and in words (backend's native status kept in the text).
    schedule
        The schedule, validated on the topology, or ``None`` when there is none.
    algbw_GBps
        The schedule's bandwidth-term algbw on the topology.
    optimal_algbw_GBps
        The bound it is judged against (exact for tree collectives, LP optimum for AllToAll).
    gap_pct
        ``100 · (1 − algbw / optimal)``; 0.0 when ``OPTIMAL`` (see :func:`judge`).
    solve_time_s
        Wall time of the synthesis.
    warm
        Whether a warm start was used.
    figures
        The synthesizer family's figures (:mod:`synth.figures`: iterations, reuse fractions, phase
        times, ...), frozen; ``None`` when the run produced none (a failed re-check, a time limit
        before any schedule).
    warm_state
        Opaque in-memory state a later warm start can reuse (not serialised, not compared).
    """

    status: Status
    message: str
    schedule: Schedule | None
    algbw_GBps: float  # noqa: N815
    optimal_algbw_GBps: float  # noqa: N815
    gap_pct: float
    solve_time_s: float
    warm: bool = False
    figures: Figures | None = None
    warm_state: Any = field(default=None, compare=False, repr=False)

    @property
    def success(self) -> bool:
        """True for a schedule that ran to the end: ``OPTIMAL`` or ``FEASIBLE``."""
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)

    def status_text(self, bound: str = "optimum") -> str:
        """The status with its gap, for text output: ``feasible (gap 1.17 % vs optimum 354.13 GB/s)``.

        ``bound`` names what ``optimal_algbw_GBps`` is (``"depth-2 bound"``); a time-limited run's is
        always a ``"proven bound"``.

        >>> _example(Status.OPTIMAL, 1.0, 1.0, 0.0).status_text()
        'optimal'
        >>> _example(Status.FEASIBLE, 99.0, 100.0, 1.0).status_text("depth-2 bound")
        'feasible (gap 1.00 % vs depth-2 bound 100.00 GB/s)'
        """
        return format_status(self.status, self.gap_pct, f"{self.optimal_algbw_GBps:.2f} GB/s", bound)


def judge(algbw_GBps: float, optimum_GBps: float) -> tuple[Status, float]:  # noqa: N803
    """The status of a finished schedule and its ``gap_pct`` against the optimum it is held to.

    ``(OPTIMAL, 0.0)`` when ``algbw_GBps`` reaches ``optimum_GBps`` within relative
    :data:`OPTIMAL_RTOL` (or exceeds it, or nothing is to move: ``optimum_GBps <= 0``); else
    ``(FEASIBLE, gap_pct(algbw, optimum))`` (:func:`gap_pct`). This is the
    one place the rule lives: every synthesizer calls it (a run a limit stopped is ``TIME_LIMIT``
    instead, not judged here).

    >>> judge(480.0, 480.0 * (1 + 1e-12))
    (<Status.OPTIMAL: 'optimal'>, 0.0)
    >>> status, gap = judge(99.0, 100.0)
    >>> status.value, round(gap, 9)
    ('feasible', 1.0)
    """
    if optimum_GBps <= 0 or algbw_GBps >= optimum_GBps * (1.0 - OPTIMAL_RTOL):
        return Status.OPTIMAL, 0.0
    return Status.FEASIBLE, gap_pct(algbw_GBps, optimum_GBps)


def gap_pct(algbw_GBps: float, bound_GBps: float) -> float:  # noqa: N803
    """``100 · (1 − algbw / bound)``, at least 0; 100 when the bound is not finite, 0 when it is <= 0.

    >>> gap_pct(50.0, 200.0), gap_pct(1.0, float("inf"))
    (75.0, 100.0)
    """
    if bound_GBps <= 0:
        return 0.0
    if not math.isfinite(bound_GBps):
        return 100.0
    return max(0.0, 100.0 * (1.0 - algbw_GBps / bound_GBps))


def judge_time(completion_s: float, optimum_s: float) -> tuple[Status, float]:
    """:func:`judge` for a completion time against the optimal (least) time: the same rule, as
    algbw is inversely proportional to time (``gap_pct = 100 · (1 − optimum / completion)``).

    >>> judge_time(0.025, 0.025), judge_time(0.0, 0.0)[0].value
    ((<Status.OPTIMAL: 'optimal'>, 0.0), 'optimal')
    >>> judge_time(0.1, 0.099)[0].value
    'feasible'
    """
    if completion_s <= 0:
        return Status.OPTIMAL, 0.0
    return judge(1.0 / completion_s, _per_s(optimum_s))


def gap_pct_time(completion_s: float, bound_s: float) -> float:
    """:func:`gap_pct` for a completion time against a lower bound on it: ``100 · (1 − bound / completion)``.

    >>> gap_pct_time(0.2, 0.1), gap_pct_time(0.0, 0.0)
    (50.0, 0.0)
    """
    return gap_pct(_per_s(completion_s), _per_s(bound_s)) if completion_s > 0 else 0.0


def _per_s(time_s: float) -> float:
    return 1.0 / time_s if time_s > 0 else math.inf


def format_status(status: Status, gap_pct: float, bound: str, name: str = "optimum") -> str:
    """A status as text output shows it: the word, and for ``feasible`` / ``time_limit`` the gap
    against ``bound`` (the figure, e.g. ``"354.13 GB/s"``), named ``name`` (a time-limited run's
    bound is always a ``proven bound``).

    >>> format_status(Status.TIME_LIMIT, 2.5, "100.00 GB/s")
    'time_limit (gap 2.50 % vs proven bound 100.00 GB/s)'
    >>> format_status(Status.OPTIMAL, 0.0, "100.00 GB/s")
    'optimal'
    """
    if status is Status.TIME_LIMIT:
        name = "proven bound"
    if status in (Status.FEASIBLE, Status.TIME_LIMIT):
        return f"{status.value} (gap {gap_pct:.2f} % vs {name} {bound})"
    return str(status.value)


def _example(status: Status, algbw_GBps: float, optimal_GBps: float, gap: float) -> SynthResult:  # noqa: N803
    """A schedule-less result for the examples above."""
    return SynthResult(status=status, message="ok", schedule=None, algbw_GBps=algbw_GBps,
                       optimal_algbw_GBps=optimal_GBps, gap_pct=gap, solve_time_s=0.1)
