"""The memory of the checker's first, vectorised run (:mod:`msccl_xml._simulate`): numpy per buffer.

:func:`msccl_xml._simulate.simulate` runs a program first with this memory, which makes every
check the full run makes (bounds, uninitialised reads, write/read, read/write and write/write
races under the same vector clocks, overwrites of unread data, writes to a read-only input,
scratch stores nothing reads, the postcondition) on whole step ranges at once, but keeps no
messages: it only raises :attr:`FastMemory.flagged`. A flagged run is run again with the full
per-chunk memory, which names every problem, so the verdict and the messages are the full run's.

Per ``(rank, canonical buffer)`` (:meth:`msccl_xml._layout.Layout.base`) it holds each chunk's
value, the last writer ``(clock position, step ordinal)`` and every reader since that write. A value
is exact: a chunk index ``k`` (``-1``: never written, ``-2``: ``None``) and the ranks whose ``(q, k)``
it sums, as bit words; a program without reducing steps holds one contribution per chunk, and one
word holds its rank. Sums are kept only while they add disjoint ranks of one chunk index (what a
program meeting its postcondition does); any other sum flags the run.

An ordering test is one gather: the step's clock holds its own ordinal at its own position and ends
with an entry at its type's maximum, which "no access" (``-1``) indexes. Out of place with a
postcondition, a write to the input and a read of a never-written chunk flag the run, so input reads
keep no bookkeeping (they cannot race) and a chunk without a writer has no readers to test.

>>> import numpy as np
>>> m = FastMemory(Layout("allgather", False, 2, 1, 1, 2), {0: 0, 1: 0}, reduces=False)
>>> out = m.execute(0, 0, 0, 1, np.array([1, 0, 255], dtype=np.uint8), Step(0, StepType.SEND, BufferKind.INPUT, 0,
...                 BufferKind.OUTPUT, 0, 1, -1, -1, 0), None)
>>> m.value(out, 0), m.flagged
(((0, 0),), False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._layout import Layout, Value
from ._readers import Readers
from .program import BufferKind, Step, StepType

__all__ = ["FastMemory"]

_REDUCE_INTO_DST = frozenset({StepType.REDUCE, StepType.RES_ADD})
_STORE_ONLY = frozenset({StepType.RECV, StepType.RECV_REDUCE_COPY, StepType.LOCAL_COPY, StepType.REDUCE})
#: Per step type, what :meth:`FastMemory.execute` asks of it (one lookup rather than an enum
#: property per question): nop, reads src, reduces into dst, send, local copy, reduces, writes dst, sends.
_TRAITS = {t: (t is StepType.NOP, t.reads_src, t in _REDUCE_INTO_DST, t is StepType.SEND, t is StepType.LOCAL_COPY,
               t.reduces, t.writes_dst, t.sends) for t in StepType}
_INPUT, _SCRATCH = BufferKind.INPUT, BufferKind.SCRATCH
_NEVER, _NONE = -1, -2  # chunk index of a slot never written / of the value None
Values = tuple[np.ndarray, np.ndarray]  # (chunk index k, (words, n) rank words): see the module docstring


@dataclass(slots=True)
class _Buffer:
    """One canonical buffer of one rank: values, last writer and the readers since."""

    vk: np.ndarray
    vm: np.ndarray
    lw_u: np.ndarray
    lw_ord: np.ndarray
    readers: Readers
    unread: np.ndarray

    @classmethod
    def empty(cls, size: int, words: int) -> _Buffer:
        return cls(np.full(size, _NEVER, np.int64), np.zeros((words, size), np.uint64), np.full(size, -1, np.int64),
                   np.zeros(size, np.int64), Readers.empty(size), np.zeros(size, bool))


def _ordered(us: np.ndarray, ords: np.ndarray, clock: np.ndarray) -> bool:
    """Whether every access ``(us, ords)`` happens before the step at ``clock`` (``us == -1``: none).

    ``clock`` holds the running step's own ordinal at its own position (so its own accesses are
    ordered) and ends with an entry at its type's maximum, which ``us == -1`` indexes (no access)."""
    return bool((clock[us] >= ords).all())


class FastMemory:
    """Chunk memory of all ranks as numpy arrays; :attr:`flagged` once anything needs a message.

    ``reduces``: the program has reducing steps, so values are rank sets (``ceil(nranks / 64)``
    words); otherwise every value is one contribution and one word holds its rank.
    """

    def __init__(self, layout: Layout, s_chunks: dict[int, int], *, reduces: bool = True) -> None:
        self.layout = layout
        self.flagged = False
        # Out of place with a postcondition, any write to the input and any read of a never-written
        # chunk flag the run: input reads cannot race, and a chunk without a writer has no readers.
        self.strict = layout.collective is not None and not layout.inplace
        self.single = not reduces
        self.words = 1 if self.single else max(1, (layout.nranks + 63) // 64)
        self._bufs: dict[tuple[int, str], _Buffer] = {}
        self._where: dict[tuple[int, BufferKind, int], tuple[_Buffer, int, int]] = {}
        self._empty = self._blank(0)
        for rank, scratch in s_chunks.items():
            sizes: dict[str, int] = {}  # canonical buffer -> chunks (aliased buffers share one)
            for kind, size in ((BufferKind.INPUT, layout.input_chunks), (BufferKind.OUTPUT, layout.output_chunks),
                               (BufferKind.SCRATCH, scratch)):
                name, shift = layout.base(rank, kind)
                sizes[name] = max(sizes.get(name, 0), shift + size)
            for name, size in sizes.items():
                self._bufs[(rank, name)] = _Buffer.empty(size, self.words)
            name, shift = layout.base(rank, BufferKind.INPUT)
            k = np.arange(layout.input_chunks)
            b = self._bufs[(rank, name)]
            b.vk[k + shift] = k
            b.vm[:, k + shift] = self._ranks(np.full(len(k), rank))

    # -- values ------------------------------------------------------------------------------
    def _ranks(self, ranks: np.ndarray) -> np.ndarray:
        """The rank words of single contributions of ``ranks``: the rank itself, or its bit."""
        if self.single:
            return ranks.astype(np.uint64)[None, :]
        out = np.zeros((self.words, len(ranks)), np.uint64)
        out[ranks // 64, np.arange(len(ranks))] = np.left_shift(np.uint64(1), (ranks % 64).astype(np.uint64))
        return out

    def _all_ranks(self, n: int) -> np.ndarray:
        """The rank words of a sum over every rank (one contribution each), for ``n`` chunks."""
        full = np.zeros((self.words, 1), np.uint64)
        for w in range(self.words):
            bits = min(64, self.layout.nranks - 64 * w)
            full[w] = np.uint64(0xFFFFFFFFFFFFFFFF) if bits == 64 else np.uint64((1 << bits) - 1)
        return np.repeat(full, n, axis=1)

    def value(self, vals: Values, i: int) -> Value:
        """The symbolic value of chunk ``i`` of ``vals``."""
        k = int(vals[0][i])
        if k < 0:
            return None
        words = [int(w) for w in vals[1][:, i]]
        if self.single:
            return ((words[0], k),)
        return tuple((64 * w + b, k) for w, word in enumerate(words) for b in range(64) if word >> b & 1)

    def _combine(self, a: Values, b: Values) -> Values:
        """The sums of ``a`` and ``b``; flags unless every pair sums disjoint ranks of one chunk index
        (what a program that meets a postcondition adds: it never counts a rank twice or mixes chunks)."""
        n = min(len(a[0]), len(b[0]))
        ka, kb, ma, mb = a[0][:n], b[0][:n], a[1][:, :n], b[1][:, :n]
        if not self.single and (ka == kb).all() and not (ma & mb).any():
            return ka, ma | mb  # the common case, a subset of the general rule below (values are never mutated)
        none = (ka == _NONE) | (kb == _NONE)
        if self.single or not ((none | ((ka == kb) & ~(ma & mb).any(axis=0))).all()):
            self.flagged = True
        return np.where(none, _NONE, ka), ma | mb

    # -- steps -------------------------------------------------------------------------------
    def execute(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, step: Step,
                received: Values | None) -> Values | None:
        """Apply ``step`` (as :func:`msccl_xml._simulate._execute`); the values it sends, if any.

        ``clock`` is the step's vector clock with ``ordinal`` at position ``u`` and, last, an entry at
        its type's maximum (see :func:`_ordered`)."""
        t, cnt = step.type, step.cnt
        is_nop, reads_src, into_dst, is_send, is_copy, reduces, writes_dst, sends = _TRAITS[t]
        if is_nop:
            return None
        got = self._empty
        if received is not None:
            got = received
            if len(received[0]) != cnt:  # pad (with None) or cut to the step's count
                got = self._blank(cnt)
                n = min(cnt, len(received[0]))
                got[0][:n] = received[0][:n]
                got[1][:, :n] = received[1][:, :n]
        src = self._read(rank, s_chunks, u, ordinal, clock, step.srcbuf, step.srcoff, cnt) if reads_src \
            else self._empty
        if into_dst:
            old = self._read(rank, s_chunks, u, ordinal, clock, step.dstbuf, step.dstoff, cnt)
            self._write(rank, s_chunks, u, ordinal, clock, step, self._combine(old, src))
            return None
        if is_send:
            return src
        if is_copy:
            self._write(rank, s_chunks, u, ordinal, clock, step, src)
            return None
        value = self._combine(got, src) if reduces else got
        if writes_dst:
            self._write(rank, s_chunks, u, ordinal, clock, step, value)
        return value if sends else None

    def _blank(self, n: int) -> Values:
        return np.full(n, _NONE, np.int64), np.zeros((self.words, n), np.uint64)

    def _range(self, rank: int, s_chunks: int, buf: BufferKind, off: int, cnt: int) -> tuple[_Buffer, int] | None:
        key = (rank, buf, s_chunks)
        where = self._where.get(key)
        if where is None:  # once per rank and buffer: the canonical buffer, its shift and the size
            name, shift = self.layout.base(rank, buf)
            where = self._where[key] = (self._bufs[(rank, name)], shift, self.layout.size(s_chunks, buf))
        b, shift, size = where
        if off < 0 or off + cnt > size:
            self.flagged = True
            return None
        return b, off + shift

    def _read(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, buf: BufferKind,
              off: int, cnt: int) -> Values:
        where = self._range(rank, s_chunks, buf, off, cnt)
        if where is None:
            return self._blank(cnt)
        b, a = where
        e = a + cnt
        if self.strict and buf is _INPUT:
            # read-only and initialised (see __init__); values are never changed in place, so views do
            return b.vk[a:e], b.vm[:, a:e]
        if not _ordered(b.lw_u[a:e], b.lw_ord[a:e], clock):
            self.flagged = True
        ks = b.vk[a:e]
        never = ks == _NEVER
        if self.layout.collective is not None and never.any():
            self.flagged = True
        b.readers.add(a, e, who=u, ordinal=ordinal)
        b.unread[a:e] = False
        return np.where(never, _NONE, ks), b.vm[:, a:e].copy()

    def _write(self, rank: int, s_chunks: int, u: int, ordinal: int, clock: np.ndarray, step: Step,
               values: Values) -> None:
        buf = step.dstbuf
        where = self._range(rank, s_chunks, buf, step.dstoff, step.cnt)
        if where is None:
            return
        if self.strict and buf is _INPUT:
            self.flagged = True
        b, a = where
        e = a + min(step.cnt, len(values[0]))
        lu, lo = b.lw_u[a:e], b.lw_ord[a:e]
        has_last = lu >= 0
        written = bool(has_last.any())
        if written:
            if not _ordered(lu, lo, clock):
                self.flagged = True
            if (has_last & (b.readers.count[a:e] == 0) & ~((lu == u) & (lo == ordinal))).any():
                self.flagged = True  # overwrites data nothing read
        if written or not self.strict:  # strict: no writer, no readers (see __init__)
            for _, active, who, when in b.readers.rows(a, e):
                if not _ordered(np.where(active, who, -1), when, clock):
                    self.flagged = True
            b.readers.clear(a, e)
        b.lw_u[a:e] = u
        b.lw_ord[a:e] = ordinal
        if buf is _SCRATCH and step.type in _STORE_ONLY:
            b.unread[a:e] = True
        b.vk[a:e] = values[0][: e - a]
        b.vm[:, a:e] = values[1][:, : e - a]

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
            b = self._bufs[(rank, name)]
            want_k, want_m = self._expected(rank)
            n = len(want_k)
            if not (np.array_equal(b.vk[shift:shift + n], want_k) and np.array_equal(b.vm[:, shift:shift + n], want_m)):
                self.flagged = True
                return

    def _expected(self, rank: int) -> Values:
        """What the output buffer of ``rank`` must hold, by output index (:meth:`Layout.expected`)."""
        layout = self.layout
        n, c = layout.nranks, layout.per_rank
        j = np.arange(layout.output_chunks, dtype=np.int64)
        if layout.collective == "allgather":  # o[q·c+k] = (q, k)
            return j % c, self._ranks(j // c)
        if layout.collective == "alltoall":  # o[q·c+k] = (q, r·c+k)
            return rank * c + j % c, self._ranks(j // c)
        if self.single:  # a sum of every rank without a reducing step: only with one rank
            if n != 1:
                self.flagged = True
            return (rank * c + j if layout.collective == "reducescatter" else j), self._ranks(np.zeros_like(j))
        if layout.collective == "reducescatter":  # o[k] = {(q, r·c+k)}
            return rank * c + j, self._all_ranks(len(j))
        return j, self._all_ranks(len(j))  # allreduce: o[k] = {(q, k)}
