"""The one exception family of loopcoll.

Every error raised on purpose by loopcoll is a :class:`LoopcollError`; its message names the
culprit (a node, a link ``src->dst``, a rank, a file, an option) and shows the bad value.

Examples
--------
>>> try:
...     raise TopologyError("link gpu0->nvs0.0: gbps must be finite and >= 0, got -1.0")
... except LoopcollError as exc:
...     print(exc)
link gpu0->nvs0.0: gbps must be finite and >= 0, got -1.0
"""

from __future__ import annotations

import numbers

__all__ = [
    "LoopcollError",
    "RuntimeLimitError",
    "ScheduleError",
    "SolverError",
    "TimeLimitError",
    "TopologyError",
    "TopologyWarning",
    "XmlError",
    "expect_type",
    "short_repr",
]


class LoopcollError(Exception):
    """Base class of every error loopcoll raises on purpose."""


class TopologyError(LoopcollError):
    """A topology (file, named spec, failure scenario or builder option) is invalid."""


class TopologyWarning(UserWarning):
    """A topology is valid but probably not what was meant (e.g. links without their reverse)."""


class ScheduleError(LoopcollError):
    """A schedule is malformed or does not deliver its collective on a topology."""


class SolverError(LoopcollError):
    """A solver backend failed, is unknown, or was given an infeasible request."""


class TimeLimitError(SolverError):
    """A solve passed its time limit before it had a result to return.

    ``upper_algbw_GBps`` is a proven upper bound on the optimum the solve had computed by then
    (``None`` when it had none), so that a caller's fallback can state a certified gap.

    >>> TimeLimitError("demo", upper_algbw_GBps=50.0).upper_algbw_GBps
    50.0
    """

    def __init__(self, message: str, *, upper_algbw_GBps: float | None = None) -> None:  # noqa: N803
        super().__init__(message)
        self.upper_algbw_GBps = upper_algbw_GBps


class XmlError(LoopcollError):
    """An MSCCL XML program is unreadable, malformed or violates a runtime limit."""


class RuntimeLimitError(XmlError):
    """A valid schedule cannot be lowered within an MSCCL runtime's limits (fewer chunks may fit)."""


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, so that an error message stays one short line.

    >>> short_repr("x" * 500, 12)
    "'xxxxxxxxxx… (502 characters)"
    """
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile or too deep __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text)} characters)"


def expect_type(value: object, types: type | tuple[type, ...], what: str, error: type[LoopcollError]) -> None:
    """Raise ``error`` naming ``what`` unless ``value`` is an instance of ``types`` (bool is no number).

    >>> expect_type(3, int, "nranks", SolverError)
    >>> expect_type("3", int, "nranks", SolverError)
    Traceback (most recent call last):
    ...
    synth.errors.SolverError: nranks must be int, got str '3'
    """
    wanted = types if isinstance(types, tuple) else (types,)
    # int and float accept every integral / real number (numpy scalars included), never a bool.
    accept = wanted + ((numbers.Integral,) if int in wanted else ()) + ((numbers.Real,) if float in wanted else ())
    if isinstance(value, bool) and bool not in wanted:
        ok = False
    else:
        ok = isinstance(value, accept)
    if not ok:
        names = " or ".join(t.__name__ for t in wanted)
        raise error(f"{what} must be {names}, got {type(value).__name__} {short_repr(value, 40)}")
