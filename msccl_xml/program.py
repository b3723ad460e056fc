"""MSCCL program model: one frozen dataclass per XML element, fields named like the attributes.

The model mirrors the schema of the runtimes' XML exactly, including its ``-1``
conventions (``depid="-1"`` means "no dependency"), so that every file the runtimes accept can be
represented and written back unchanged. Attributes the schema does not know (TE-CCL's ``redop``,
RCCL's ``nthreadblocks``, ...) are kept in ``extra`` in document order. Unknown child elements
(TE-CCL's ``<copy>``) and comments are dropped: the runtimes ignore them too.

Examples
--------
>>> step = Step(s=0, type=StepType.SEND, srcbuf=BufferKind.OUTPUT, srcoff=0,
...             dstbuf=BufferKind.OUTPUT, dstoff=0, cnt=1)
>>> step.type.sends, step.type.receives
(True, False)
>>> nop(depid=2, deps=0, s=1).type.value
'nop'
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from synth.errors import XmlError, short_repr

__all__ = [
    "BufferKind",
    "Gpu",
    "Program",
    "Protocol",
    "Step",
    "StepType",
    "Threadblock",
    "nop",
]

Attrs = tuple[tuple[str, str], ...]


class _NoGpu(XmlError, KeyError):
    """No ``<gpu>`` with that id: an XmlError, and a KeyError for callers written against the old API."""

    def __str__(self) -> str:
        return str(self.args[0])


class Protocol(str, Enum):
    """``<algo proto>``: the NCCL protocol the program runs with (case-sensitive in the runtime)."""

    SIMPLE = "Simple"
    LL = "LL"
    LL128 = "LL128"


class BufferKind(str, Enum):
    """``srcbuf`` / ``dstbuf``: the API's send buffer, receive buffer, or the scratch buffer."""

    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


class StepType(str, Enum):
    """``<step type>``; values are the XML tokens."""

    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_COPY_SEND = "rrcs"
    LOCAL_COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"
    RES_ADD = "ra"  # old microsoft/msccl runtime only

    @property
    def sends(self) -> bool:
        """True if the step sends to the threadblock's ``send`` peer."""
        return self in _SENDS

    @property
    def receives(self) -> bool:
        """True if the step receives from the threadblock's ``recv`` peer."""
        return self in _RECEIVES

    @property
    def reduces(self) -> bool:
        """True if the step combines two values with the reduction operator."""
        return self in _REDUCES

    @property
    def reads_src(self) -> bool:
        """True if the step reads local data at ``(srcbuf, srcoff)``."""
        return self in _READS_SRC

    @property
    def writes_dst(self) -> bool:
        """True if the step writes local data at ``(dstbuf, dstoff)``."""
        return self in _WRITES_DST


_SENDS = frozenset(
    {
        StepType.SEND,
        StepType.RECV_COPY_SEND,
        StepType.RECV_REDUCE_SEND,
        StepType.RECV_REDUCE_COPY_SEND,
    }
)
_RECEIVES = frozenset(
    {
        StepType.RECV,
        StepType.RECV_COPY_SEND,
        StepType.RECV_REDUCE_SEND,
        StepType.RECV_REDUCE_COPY,
        StepType.RECV_REDUCE_COPY_SEND,
    }
)
_REDUCES = frozenset(
    {
        StepType.RECV_REDUCE_SEND,
        StepType.RECV_REDUCE_COPY,
        StepType.RECV_REDUCE_COPY_SEND,
        StepType.REDUCE,
        StepType.RES_ADD,
    }
)
_READS_SRC = frozenset(
    {
        StepType.SEND,
        StepType.RECV_REDUCE_SEND,
        StepType.RECV_REDUCE_COPY,
        StepType.RECV_REDUCE_COPY_SEND,
        StepType.LOCAL_COPY,
        StepType.REDUCE,
    }
)
_WRITES_DST = frozenset(
    {
        StepType.RECV,
        StepType.RECV_COPY_SEND,
        StepType.RECV_REDUCE_COPY,
        StepType.RECV_REDUCE_COPY_SEND,
        StepType.LOCAL_COPY,
        StepType.REDUCE,
    }
)


@dataclass(frozen=True, slots=True)
class Step:
    """``<step>``: one instruction of a threadblock (all ten attributes).

    ``s`` is the step's index in its threadblock (0, 1, ... in document order). Offsets and
    ``cnt`` are in chunks of ``1/nchunksperloop`` of the collective's buffer. ``depid``/``deps``
    name a threadblock of the same GPU and its step to wait for, ``-1`` for none; ``hasdep`` is 1
    when another threadblock waits on this step.

    Examples
    --------
    >>> Step(s=0, type=StepType.RECV, srcbuf=BufferKind.OUTPUT, srcoff=1,
    ...      dstbuf=BufferKind.OUTPUT, dstoff=1, cnt=1).depid
    -1
    """

    s: int
    type: StepType
    srcbuf: BufferKind
    srcoff: int
    dstbuf: BufferKind
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    extra: Attrs = ()

    @property
    def has_dependency(self) -> bool:
        """True if the step waits on another threadblock (``depid >= 0``)."""
        return self.depid >= 0


def nop(*, depid: int, deps: int, s: int = 0) -> Step:
    """A ``nop`` step carrying one extra dependency, with msccl-tools' filler fields.

    Parameters
    ----------
    depid, deps
        Threadblock (same GPU) and step to wait for.
    s
        Index of the nop in its threadblock.

    Returns
    -------
    Step
        ``srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0"``, ``hasdep=0``.

    Examples
    --------
    >>> nop(depid=1, deps=3).srcoff
    -1
    """
    return Step(
        s=s,
        type=StepType.NOP,
        srcbuf=BufferKind.INPUT,
        srcoff=-1,
        dstbuf=BufferKind.OUTPUT,
        dstoff=-1,
        cnt=0,
        depid=depid,
        deps=deps,
        hasdep=0,
    )


@dataclass(frozen=True, slots=True)
class Threadblock:
    """``<tb>``: a thread block with at most one send peer and one recv peer on one channel.

    Examples
    --------
    >>> Threadblock(id=0, send=1, recv=-1, chan=0, steps=()).send
    1
    """

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    extra: Attrs = ()


@dataclass(frozen=True, slots=True)
class Gpu:
    """``<gpu>``: the threadblocks of one rank and its declared buffer sizes in chunks.

    Examples
    --------
    >>> Gpu(id=0, i_chunks=1, o_chunks=2, s_chunks=0, threadblocks=()).o_chunks
    2
    """

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]
    extra: Attrs = ()


@dataclass(frozen=True, slots=True)
class Program:
    """``<algo>``: a whole MSCCL algorithm (one per file).

    ``outofplace``, ``min_bytes`` and ``max_bytes`` are ``None`` only for programs read from the
    old format (microsoft/msccl-tools before June 2024), which omits them; the writer then omits
    them too. ``name`` is ``None`` when the file has none (the executor never reads it).

    Examples
    --------
    >>> p = Program(name="x", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
    ...             coll="allgather", inplace=0, outofplace=1, min_bytes=0, max_bytes=0, gpus=())
    >>> p.coll, p.proto.value
    ('allgather', 'Simple')
    """

    name: str | None
    proto: Protocol
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int | None
    min_bytes: int | None
    max_bytes: int | None
    gpus: tuple[Gpu, ...]
    extra: Attrs = ()

    def gpu(self, rank: int) -> Gpu:
        """The ``<gpu>`` whose id is ``rank``.

        Raises
        ------
        XmlError
            If no ``<gpu>`` has that id (also a ``KeyError``, as before).

        Examples
        --------
        >>> Program(name=None, proto=Protocol.LL, nchannels=1, nchunksperloop=1, ngpus=1,
        ...         coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
        ...         gpus=(Gpu(0, 1, 0, 0, ()),)).gpu(0).i_chunks
        1
        """
        for gpu in self.gpus:
            if gpu.id == rank:
                return gpu
        raise _NoGpu(f"program has no <gpu> with id {short_repr(rank)}")
