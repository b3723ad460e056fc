"""The result object every synthesizer returns (scipy.optimize style: status, message, success).

Every result type of loopcoll has this shape (:class:`Outcome`): a ``status`` from a closed enum,
a one-line ``message``, a derived ``success`` property, then its figures, frozen. Besides
:class:`SynthResult`: :class:`synth.bounds.Bound` (``OPTIMAL`` / ``TIME_LIMIT``),
:class:`synth.simulation.SimResult` and ``msccl_xml.CheckResult``.

Examples
--------
>>> r = SynthResult(Status.TIME_LIMIT, "time limit after 3.0 s, gap 1.2%", None, 0.0, 100.0, 1.2, 3.0)
>>> r.success, r.status.value
(False, 'time_limit')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from synth.schedule import Schedule

__all__ = ["Outcome", "Status", "SynthResult"]


class Status(Enum):
    """Closed set of outcomes."""

    OPTIMAL = "optimal"  # the schedule reaches the stated optimum (or its stated rounding gap)
    TIME_LIMIT = "time_limit"  # incumbent returned, gap_pct > 0 is proven
    INFEASIBLE = "infeasible"
    FAILED = "failed"  # solver error, unknown native status, or loopcoll's re-check disagreed


@runtime_checkable
class Outcome(Protocol):
    """The shape every result shares: ``status`` (an :class:`~enum.Enum` member), ``message``, ``success``.

    >>> isinstance(SynthResult(Status.OPTIMAL, "ok", None, 1.0, 1.0, 0.0, 0.1), Outcome)
    True
    """

    @property
    def status(self) -> Enum: ...

    @property
    def message(self) -> str: ...

    @property
    def success(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class SynthResult:
    """Outcome of one synthesis.

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
        ``100 · (1 − algbw / optimal)``; 0.0 when the optimum is reached exactly.
    solve_time_s
        Wall time of the synthesis.
    warm
        Whether a warm start was used.
    stats
        Synthesizer-specific figures (iterations, reuse fractions, phase times, ...), JSON-able.
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
    stats: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    warm_state: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Results are immutable all the way down: a caller cannot edit another's figures.
        object.__setattr__(self, "stats", _frozen(self.stats))

    @property
    def success(self) -> bool:
        return self.status is Status.OPTIMAL


def _frozen(stats: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy, nested mappings included."""
    return MappingProxyType({k: _frozen(v) if isinstance(v, Mapping) else v for k, v in stats.items()})
