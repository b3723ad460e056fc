"""Errors of the MSCCL++ plan package (members of the :class:`~synth.errors.LoopcollError` family).

>>> issubclass(PlanLimitError, PlanError), issubclass(PlanError, LoopcollError)
(True, True)
"""

from __future__ import annotations

from synth.errors import LoopcollError, RuntimeLimitError

__all__ = ["PlanError", "PlanLimitError"]


class PlanError(LoopcollError):
    """An MSCCL++ execution plan is unreadable or malformed, or a program cannot be lowered to one."""


class PlanLimitError(PlanError, RuntimeLimitError):
    """A schedule does not fit one of the MSCCL++ executor's limits (the message names the limit;
    fewer chunks may fit, as for :class:`~synth.errors.RuntimeLimitError`)."""
