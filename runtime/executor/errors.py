"""The executor's errors (members of loopcoll's :class:`synth.LoopcollError` family).

>>> from synth import LoopcollError
>>> issubclass(SwapTimeoutError, ExecutorError) and issubclass(ExecutorError, LoopcollError)
True
>>> SwapTimeoutError("comm 'dp0': ranks [3] did not reach sync point 2", ranks=(3,)).ranks
(3,)
>>> e = CollectiveTimeoutError("dp0", "allgather", seq=7, version=2, ranks=(2,), timeout_s=3.0, cause="timed out")
>>> str(e)
"comm 'dp0': allgather seq 7 (version 2): transfers with rank(s) [2] did not complete within 3 s: timed out"
>>> (e.ranks, e.collective, e.seq, e.version)
((2,), 'allgather', 7, 2)
"""

from __future__ import annotations

from collections.abc import Sequence

from synth import LoopcollError

__all__ = ["CollectiveTimeoutError", "ExecutorError", "StagingError", "SwapTimeoutError"]


class ExecutorError(LoopcollError):
    """A program cannot run, a call is malformed, or the ranks disagree."""


class StagingError(ExecutorError):
    """A version was refused while staging (invalid program, wrong rank count, unreadable file)."""


class SwapTimeoutError(ExecutorError):
    """The out-of-band version agreement timed out; ``ranks`` are the ranks that did not answer."""

    def __init__(self, message: str, *, ranks: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)


class CollectiveTimeoutError(ExecutorError):
    """A collective's transfers did not complete within the executor's timeout, or a peer's connection broke.

    ``ranks`` are the global ranks of the pending transfers' peers; ``comm``, ``collective``, ``seq`` and
    ``version`` (None: no program) say which call; ``timeout_s`` is the bound of each wait.
    """

    def __init__(self, comm: str, collective: str, *, seq: int, version: int | None, ranks: Sequence[int],
                 timeout_s: float, cause: str) -> None:
        self.comm, self.collective, self.seq, self.version = comm, collective, seq, version
        self.ranks = tuple(ranks)
        self.timeout_s = timeout_s
        super().__init__(f"comm {comm!r}: {collective} seq {seq} (version {version}): transfers with rank(s) "
                         f"{list(self.ranks)} did not complete within {timeout_s:g} s: {cause}")
