"""The executor's errors (members of loopcoll's :class:`synth.LoopcollError` family).

>>> from synth import LoopcollError
>>> issubclass(SwapTimeoutError, ExecutorError) and issubclass(ExecutorError, LoopcollError)
True
>>> SwapTimeoutError("comm 'dp0': ranks [3] did not reach sync point 2", ranks=(3,)).ranks
(3,)
"""

from __future__ import annotations

from collections.abc import Sequence

from synth import LoopcollError

__all__ = ["ExecutorError", "StagingError", "SwapTimeoutError"]


class ExecutorError(LoopcollError):
    """A program cannot run, a call is malformed, or the ranks disagree."""


class StagingError(ExecutorError):
    """A version was refused while staging (invalid program, wrong rank count, unreadable file)."""


class SwapTimeoutError(ExecutorError):
    """The out-of-band version agreement timed out; ``ranks`` are the ranks that did not answer."""

    def __init__(self, message: str, *, ranks: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)
