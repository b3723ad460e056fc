"""The readers of each chunk since its last write, as numpy rows (the checker's first run).

>>> r = Readers.empty(4)
>>> r.add(1, 3, who=7, ordinal=2); r.add(2, 4, who=5, ordinal=1)
>>> [(j, active.tolist(), who.tolist()) for j, active, who, _ in r.rows(0, 4)]
[(0, [False, True, True, True], [0, 7, 7, 5]), (1, [False, False, True, False], [0, 0, 5, 0])]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["Readers"]


@dataclass(slots=True)
class Readers:
    """Per chunk of a buffer: every read ``(who, ordinal)`` since its last write; ``count`` per chunk,
    row ``j`` of ``who``/``ordinal`` the ``j``-th read (rows double when a chunk needs more)."""

    who: np.ndarray
    ordinal: np.ndarray
    count: np.ndarray
    _cols: np.ndarray  # 0, 1, ..., size - 1 (column indices, sliced rather than made per read)

    @classmethod
    def empty(cls, size: int) -> Readers:
        """No reads yet, for ``size`` chunks."""
        return cls(np.zeros((2, size), np.int64), np.zeros((2, size), np.int64), np.zeros(size, np.int64),
                   np.arange(size, dtype=np.int64))

    def add(self, a: int, e: int, *, who: int, ordinal: int) -> None:
        """Record a read of chunks ``[a, e)``."""
        if e <= a:
            return
        n = self.count[a:e]
        if int(n.max()) >= self.who.shape[0]:
            self.who = np.concatenate([self.who, np.zeros_like(self.who)])
            self.ordinal = np.concatenate([self.ordinal, np.zeros_like(self.ordinal)])
        flat = n * self.count.shape[0] + self._cols[a:e]  # row-major positions of (n[i], a + i)
        np.put(self.who, flat, who)
        np.put(self.ordinal, flat, ordinal)
        self.count[a:e] += 1

    def rows(self, a: int, e: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Per row ``j`` with a read in ``[a, e)``: ``(j, active, who, ordinal)`` over those chunks."""
        n = self.count[a:e]
        for j in range(int(n.max()) if e > a else 0):
            yield j, n > j, self.who[j, a:e], self.ordinal[j, a:e]

    def clear(self, a: int, e: int) -> None:
        """Forget the reads of ``[a, e)`` (they were written)."""
        self.count[a:e] = 0
