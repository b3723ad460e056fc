"""Buffer layouts, initial contents and postconditions of the collectives.

A chunk's symbolic value is a sorted tuple of contributions ``(origin rank, origin input index)``
with multiplicity, so a reduction that counts a rank twice or misses one is visible; ``None`` is
uninitialised data. With N ranks and ``C = nchunksperloop``, ``c = C / N``:

=============  =============  ==============  ===========================================
collective     input chunks   output chunks   output chunk of rank r must hold
=============  =============  ==============  ===========================================
allgather      c              C               o[q·c+k] = {(q, k)}
reducescatter  C              c               o[k] = {(q, r·c+k) for every q}
alltoall       C              C               o[q·c+k] = {(q, r·c+k)}
allreduce      C              C               o[k] = {(q, k) for every q}
=============  =============  ==============  ===========================================

In place, the buffers alias as the API defines it: allgather ``i[k] = o[r·c+k]``, reducescatter
``o[k] = i[r·c+k]``, allreduce and alltoall ``o[k] = i[k]``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from synth.collective import COLLECTIVES

from .program import BufferKind, Program

__all__ = ["Contribution", "Layout", "Slot", "Value", "combine", "describe_mismatch", "layout_for"]

Contribution = tuple[int, int]
Value = tuple[Contribution, ...] | None
Slot = tuple[str, int]

_CANONICAL = {"reduce_scatter": "reducescatter"}
POSTCONDITION_COLLS = frozenset(COLLECTIVES)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a rank's chunks live in one mode (in place or out of place) of one collective.

    ``collective`` is ``None`` when the program's ``coll`` has no postcondition here; buffer sizes
    then come from the declared ``i_chunks``/``o_chunks``.
    """

    collective: str | None
    inplace: bool
    nranks: int
    per_rank: int
    input_chunks: int
    output_chunks: int

    def size(self, rank_s_chunks: int, buf: BufferKind) -> int:
        """Chunks in ``buf`` (scratch: the rank's declared ``s_chunks``)."""
        if buf is BufferKind.INPUT:
            return self.input_chunks
        if buf is BufferKind.OUTPUT:
            return self.output_chunks
        return rank_s_chunks

    def slot(self, rank: int, buf: BufferKind, index: int) -> Slot:
        """The canonical memory slot of ``buf[index]`` on ``rank`` (resolving in-place aliasing)."""
        if self.inplace:
            c = self.per_rank
            if self.collective == "allgather" and buf is BufferKind.INPUT:
                return ("o", rank * c + index)
            if self.collective == "reducescatter" and buf is BufferKind.OUTPUT:
                return ("i", rank * c + index)
            if self.collective in ("allreduce", "alltoall") and buf is BufferKind.OUTPUT:
                return ("i", index)
        return (buf._value_, index)  # the enum's value without its (slow) property

    def base(self, rank: int, buf: BufferKind) -> tuple[str, int]:
        """``(name, shift)`` such that :meth:`slot` of ``buf[index]`` is ``(name, index + shift)``.

        >>> Layout("allgather", True, 4, 2, 2, 8).base(3, BufferKind.INPUT)
        ('o', 6)
        """
        name, shift = self.slot(rank, buf, 0)
        return name, shift

    def initial(self, rank: int) -> dict[Slot, Value]:
        """The rank's initialised slots: every input chunk holds its own contribution."""
        return {
            self.slot(rank, BufferKind.INPUT, k): ((rank, k),) for k in range(self.input_chunks)
        }

    def expected(self, rank: int) -> dict[Slot, Value]:
        """Output slots and the contributions they must hold at the end (empty without a coll)."""
        n, c, out = self.nranks, self.per_rank, BufferKind.OUTPUT
        if self.collective == "allgather":
            return {
                self.slot(rank, out, q * c + k): ((q, k),) for q in range(n) for k in range(c)
            }
        if self.collective == "alltoall":
            return {
                self.slot(rank, out, q * c + k): ((q, rank * c + k),)
                for q in range(n)
                for k in range(c)
            }
        if self.collective == "reducescatter":
            return {
                self.slot(rank, out, k): tuple((q, rank * c + k) for q in range(n))
                for k in range(c)
            }
        if self.collective == "allreduce":
            return {
                self.slot(rank, out, k): tuple((q, k) for q in range(n))
                for k in range(self.output_chunks)
            }
        return {}


def canonical_coll(coll: str) -> str:
    """``coll`` with old spellings mapped to the executor's (``reduce_scatter``)."""
    return _CANONICAL.get(coll, coll)


def layout_for(program: Program, inplace: bool) -> tuple[Layout, str | None]:
    """The layout of ``program`` in one mode, and a problem message if it is inconsistent.

    Without a known postcondition, or when ``nchunksperloop`` is not a multiple of ``ngpus``
    where it must be, the layout falls back to the declared chunk counts of gpu 0.
    """
    coll = canonical_coll(program.coll)
    n, total = program.ngpus, program.nchunksperloop
    declared_i = max((g.i_chunks for g in program.gpus), default=0)
    declared_o = max((g.o_chunks for g in program.gpus), default=0)
    fallback = Layout(None, False, n, 0, declared_i, declared_o)
    if coll not in POSTCONDITION_COLLS or n < 1 or total < 1:
        return fallback, None
    if coll == "allreduce":
        return Layout(coll, inplace, n, total, total, total), None
    if total % n:
        return fallback, (
            f"algo: nchunksperloop {total} is not a multiple of ngpus {n}, "
            f"as {coll} needs (every rank owns nchunksperloop/ngpus chunks)"
        )
    c = total // n
    sizes = {"allgather": (c, total), "reducescatter": (total, c), "alltoall": (total, total)}
    i_size, o_size = sizes[coll]
    return Layout(coll, inplace, n, c, i_size, o_size), None


def combine(a: Value, b: Value) -> Value:
    """The reduction of two symbolic values (uninitialised data poisons the result)."""
    if a is None or b is None:
        return None
    return tuple(sorted(a + b))


def describe_mismatch(expected: Value, actual: Value) -> str:
    """A short human description of how ``actual`` differs from ``expected``."""
    if actual is None:
        return "holds uninitialised data"
    assert expected is not None
    missing = Counter(expected) - Counter(actual)
    extra = Counter(actual) - Counter(expected)
    parts = []
    if missing:
        parts.append("misses " + _list(missing))
    if extra:
        parts.append("wrongly holds " + _list(extra))
    return "; ".join(parts)


def _list(counter: Counter[Contribution]) -> str:
    items = sorted(counter.items())
    words = [f"rank {r} i[{k}]" + (f" x{m}" if m > 1 else "") for (r, k), m in items[:4]]
    if len(items) > 4:
        words.append(f"... ({len(items)} in all)")
    return ", ".join(words)
