"""The memory of the checker's first, vectorised run (:mod:`msccl_xml._simulate`): numpy per buffer.

:func:`msccl_xml._simulate.simulate` runs a program first with this memory, which makes every
check the full run makes (bounds, uninitialised reads, write/read, read/write and write/write
races under the same vector clocks, overwrites of unread data, writes to a read-only input,
scratch stores nothing reads, the postcondition) on whole step ranges at once, but keeps no
messages: it only raises :attr:`FastMemory.flagged`. A flagged run is run again with the full
per-chunk memory, which names every problem, so the verdict and the messages are the full run's.

Per ``(rank, canonical buffer)`` (:meth:`msccl_xml._layout.Layout.base`) it holds the value id of
each chunk (``-1``: never written, ``0``: ``None``), the last writer ``(clock position, step
ordinal)`` and every reader since that write. Values are interned exactly: a single contribution
``(q, k)`` has id ``1 + q * input_chunks + k``, any other value an id from a table, so comparing
ids compares the symbolic values.

>>> import numpy as np
>>> m = FastMemory(Layout("allgather", False, 2, 1, 1, 2), {0: 0, 1: 0})
>>> out = m.execute(0, 0, 0, 1, np.zeros(2, dtype=np.uint8), Step(0, StepType.SEND, BufferKind.INPUT, 0,
...                 BufferKind.OUTPUT, 0, 1, -1, -1, 0), None)
>>> [m.value(int(i)) for i in out], m.flagged
([((0, 0),)], False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._layout import Layout, Value, combine
from .program import BufferKind, Step, StepType

__all__ = ["FastMemory"]

_REDUCE_INTO_DST = frozenset({StepType.REDUCE, StepType.RES_ADD})
_STORE_ONLY = frozenset({StepType.RECV, StepType.RECV_REDUCE_COPY, StepType.LOCAL_COPY, StepType.REDUCE})
_NO_VALUES = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class _Buffer:
    """One canonical buffer of one rank: values, last writer and the readers since."""

    val: np.ndarray
    lw_u: np.ndarray
    lw_ord: np.ndarray
    rd_u: np.ndarray  # (readers, size)
    rd_ord: np.ndarray
    rd_n: np.ndarray
    unread: np.ndarray

    @classmethod
    def empty(cls, size: int) -> _Buffer:
        return cls(np.full(size, -1, np.int64), np.full(size, -1, np.int64), np.zeros(size, np.int64),
                   np.zeros((2, size), np.int64), np.zeros((2, size), np.int64), np.zeros(size, np.int64),
                   np.zeros(size, bool))

    def add_reader(self, a: int, e: int, u: int, ordinal: int) -> None:
        n = self.rd_n[a:e]
        if e > a and int(n.max()) >= self.rd_u.shape[0]:
            grow = self.rd_u.shape[0]
            self.rd_u = np.concatenate([self.rd_u, np.zeros_like(self.rd_u[:grow])])
            self.rd_ord = np.concatenate([self.rd_ord, np.zeros_like(self.rd_ord[:grow])])
        cols = np.arange(a, e)
        self.rd_u[n, cols] = u
        self.rd_ord[n, cols] = ordinal
        self.rd_n[a:e] += 1


def _ordered(us: np.ndarray, ords: np.ndarray, u: int, clock: np.ndarray) -> np.ndarray:
    """Whether each access ``(us, ords)`` (``us >= 0``) happens before a step of ``u`` at ``clock``."""
    return (us == u) | (clock[np.maximum(us, 0)] >= ords)


class FastMemory:
    """Chunk memory of all ranks as numpy arrays; :attr:`flagged` once anything needs a message."""

    def __init__(self, layout: Layout, s_chunks: dict[int, int]) -> None:
        self.layout = layout
        self.flagged = False
        self._single = layout.nranks * layout.input_chunks  # ids 1..single: one contribution
        self._table: list[Value] = []
        self._ids: dict[Value, int] = {}
        self._combined: dict[tuple[int, int], int] = {}
        self._bufs: dict[tuple[int, str], _Buffer] = {}
        for rank, scratch in s_chunks.items():
            sizes: dict[str, int] = {}  # canonical buffer -> chunks (aliased buffers share one)
            for kind, size in ((BufferKind.INPUT, layout.input_chunks), (BufferKind.OUTPUT, layout.output_chunks),
                               (BufferKind.SCRATCH, scratch)):
                name, shift = layout.base(rank, kind)
                sizes[name] = max(sizes.get(name, 0), shift + size)
            for name, size in sizes.items():
                self._bufs[(rank, name)] = _Buffer.empty(size)
            name, shift = layout.base(rank, BufferKind.INPUT)
            k = np.arange(layout.input_chunks)
            self._bufs[(rank, name)].val[k + shift] = 1 + rank * layout.input_chunks + k

    # -- values ------------------------------------------------------------------------------
    def value(self, vid: int) -> Value:
        """The symbolic value of id ``vid``."""
        if vid <= 0:
            return None
        if vid <= self._single:
            return (divmod(vid - 1, self.layout.input_chunks),)
        return self._table[vid - self._single - 1]

    def intern(self, value: Value) -> int:
        """The id of ``value``."""
        if value is None:
            return 0
        if len(value) == 1:
            q, k = value[0]
            if 0 <= q < self.layout.nranks and 0 <= k < self.layout.input_chunks:
                return 1 + q * self.layout.input_chunks + k
        vid = self._ids.get(value)
        if vid is None:
            self._table.append(value)
            vid = self._ids[value] = self._single + len(self._table)
        return vid

    def _combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
        out = np.zeros(n, np.int64)
        for i in range(n):
            x, y = int(a[i]), int(b[i])
            if x == 0 or y == 0:
                continue
            vid = self._combined.get((x, y))
            if vid is None:
                vid = self._combined[(x, y)] = self.intern(combine(self.value(x), self.value(y)))
            out[i] = vid
        return out

    # -- steps -------------------------------------------------------------------------------
    def execute(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, step: Step,
                received: np.ndarray | None) -> np.ndarray | None:
        """Apply ``step`` (as :func:`msccl_xml._simulate._execute`); the value ids it sends, if any."""
        t, cnt = step.type, step.cnt
        if t is StepType.NOP:
            return None
        got = _NO_VALUES
        if received is not None:
            got = np.zeros(cnt, np.int64)
            got[:min(cnt, len(received))] = received[:cnt]
        src = self._read(rank, s_chunks, u, ordinal, clock, step.srcbuf, step.srcoff, cnt) if t.reads_src \
            else _NO_VALUES
        if t in _REDUCE_INTO_DST:
            old = self._read(rank, s_chunks, u, ordinal, clock, step.dstbuf, step.dstoff, cnt)
            self._write(rank, s_chunks, u, ordinal, clock, step, self._combine(old, src))
            return None
        if t is StepType.SEND:
            return src
        if t is StepType.LOCAL_COPY:
            self._write(rank, s_chunks, u, ordinal, clock, step, src)
            return None
        value = self._combine(got, src) if t.reduces else got
        if t.writes_dst:
            self._write(rank, s_chunks, u, ordinal, clock, step, value)
        return value if t.sends else None

    def _range(self, rank: int, s_chunks: int, buf: BufferKind, off: int, cnt: int) -> tuple[_Buffer, int] | None:
        if off < 0 or off + cnt > self.layout.size(s_chunks, buf):
            self.flagged = True
            return None
        name, shift = self.layout.base(rank, buf)
        return self._bufs[(rank, name)], off + shift

    def _read(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, buf: BufferKind,
              off: int, cnt: int) -> np.ndarray:
        where = self._range(rank, s_chunks, buf, off, cnt)
        if where is None:
            return np.zeros(cnt, np.int64)
        b, a = where
        e = a + cnt
        lu = b.lw_u[a:e]
        if not _ordered(lu, b.lw_ord[a:e], u, clock)[lu >= 0].all():
            self.flagged = True
        vals = b.val[a:e]
        if self.layout.collective is not None and (vals < 0).any():
            self.flagged = True
        b.add_reader(a, e, u, ordinal)
        b.unread[a:e] = False
        return np.maximum(vals, 0)

    def _write(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, step: Step,
               values: np.ndarray) -> None:
        buf = step.dstbuf
        where = self._range(rank, s_chunks, buf, step.dstoff, step.cnt)
        if where is None:
            return
        if self.layout.collective is not None and not self.layout.inplace and buf is BufferKind.INPUT:
            self.flagged = True
        b, a = where
        e = a + min(step.cnt, len(values))
        lu, lo, rn = b.lw_u[a:e], b.lw_ord[a:e], b.rd_n[a:e]
        has_last = lu >= 0
        if not _ordered(lu, lo, u, clock)[has_last].all():
            self.flagged = True
        for j in range(int(rn.max()) if e > a else 0):
            active = rn > j
            if not _ordered(b.rd_u[j, a:e], b.rd_ord[j, a:e], u, clock)[active].all():
                self.flagged = True
        if (has_last & (rn == 0) & ~((lu == u) & (lo == ordinal))).any():
            self.flagged = True  # overwrites data nothing read
        b.rd_n[a:e] = 0
        b.lw_u[a:e] = u
        b.lw_ord[a:e] = ordinal
        if buf is BufferKind.SCRATCH and step.type in _STORE_ONLY:
            b.unread[a:e] = True
        b.val[a:e] = values[: e - a]

    # -- the end -----------------------------------------------------------------------------
    def finish(self, s_chunks: dict[int, int]) -> None:
        """Flag scratch stores nothing read and (with a collective) any output against the postcondition."""
        if any(b.unread.any() for b in self._bufs.values()):
            self.flagged = True
        layout = self.layout
        if layout.collective is None or self.flagged:
            return
        for rank in s_chunks:
            name, shift = layout.base(rank, BufferKind.OUTPUT)
            got = self._bufs[(rank, name)].val
            want = self._expected(rank)
            if not np.array_equal(got[shift:shift + len(want)], want):
                self.flagged = True
                return

    def _expected(self, rank: int) -> np.ndarray:
        """Value ids the output buffer of ``rank`` must hold, by output index."""
        layout = self.layout
        n, c, total = layout.nranks, layout.per_rank, layout.input_chunks
        if layout.collective == "allgather":
            return 1 + np.arange(n * c, dtype=np.int64)  # o[q·c+k] = (q, k), input_chunks = c
        if layout.collective == "alltoall":
            q, k = np.divmod(np.arange(n * c, dtype=np.int64), c)
            return 1 + q * total + rank * c + k
        expected = layout.expected(rank)
        out = np.zeros(layout.output_chunks, np.int64)
        for j in range(layout.output_chunks):
            out[j] = self.intern(expected[layout.slot(rank, BufferKind.OUTPUT, j)])
        return out
