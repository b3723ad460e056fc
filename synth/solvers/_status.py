"""Native LP status → loopcoll :class:`~synth.result.Status`, one table per backend.

Every native status maps through a dict with a fallback to ``FAILED``; the native name is kept
for messages.

Examples
--------
>>> status_from_highs("kOptimal"), status_from_highs("kSomethingNew")
(<Status.OPTIMAL: 'optimal'>, <Status.FAILED: 'failed'>)
>>> status_from_mathopt("OPTIMAL", "UNDETERMINED")
<Status.OPTIMAL: 'optimal'>
"""

from __future__ import annotations

from synth.result import Status

__all__ = ["status_from_highs", "status_from_mathopt"]

_FROM_HIGHS: dict[str, Status] = {
    "kOptimal": Status.OPTIMAL,
    "kTimeLimit": Status.TIME_LIMIT,
    "kIterationLimit": Status.TIME_LIMIT,
    "kInfeasible": Status.INFEASIBLE,
    "kUnboundedOrInfeasible": Status.INFEASIBLE,
    "kUnbounded": Status.FAILED,
    "kNotset": Status.FAILED,
    "kLoadError": Status.FAILED,
    "kModelError": Status.FAILED,
    "kPresolveError": Status.FAILED,
    "kSolveError": Status.FAILED,
    "kPostsolveError": Status.FAILED,
    "kModelEmpty": Status.FAILED,
    "kObjectiveBound": Status.FAILED,
    "kObjectiveTarget": Status.FAILED,
    "kSolutionLimit": Status.FAILED,
    "kInterrupt": Status.FAILED,
    "kHighsInterrupt": Status.FAILED,
    "kMemoryLimit": Status.FAILED,
    "kUnknown": Status.FAILED,
}

_FROM_MATHOPT: dict[str, Status] = {
    "OPTIMAL": Status.OPTIMAL,
    "INFEASIBLE": Status.INFEASIBLE,
    "INFEASIBLE_OR_UNBOUNDED": Status.INFEASIBLE,
    "UNBOUNDED": Status.FAILED,
    "IMPRECISE": Status.FAILED,
    "FEASIBLE": Status.FAILED,  # refined below: a time/iteration limit is TIME_LIMIT
    "NO_SOLUTION_FOUND": Status.FAILED,
    "NUMERICAL_ERROR": Status.FAILED,
    "OTHER_ERROR": Status.FAILED,
}

_MATHOPT_LIMITS = {"TIME", "ITERATION"}


def status_from_highs(native: str) -> Status:
    """Map a ``HighsModelStatus`` name (``"kOptimal"``, ...) to :class:`Status`."""
    return _FROM_HIGHS.get(native, Status.FAILED)


def status_from_mathopt(reason: str, limit: str) -> Status:
    """Map a MathOpt ``TerminationReason`` name (and its ``Limit`` name) to :class:`Status`."""
    if reason in ("FEASIBLE", "NO_SOLUTION_FOUND") and limit in _MATHOPT_LIMITS:
        return Status.TIME_LIMIT
    return _FROM_MATHOPT.get(reason, Status.FAILED)
