"""The four synthesizable collectives and the facts that follow from each (buffer sizes, busbw factor).

A :class:`Collective` is a ``str``: ``Collective.ALLGATHER == "allgather"``, it hashes like its name, and
``str``, ``format``, ``repr`` and JSON give the name (``repr`` quoted, like the string's), so schedule JSON,
MSCCL XML and messages that quote a collective read exactly as when it was a plain string.
Strings from users are turned into members at the boundary with :meth:`Collective.parse`.

Sizes follow nccl-tests: the *message* of AllGather is its output, of ReduceScatter its input; AllReduce
and AllToAll have one size for both buffers.

Examples
--------
>>> c = Collective.parse("allgather")
>>> c is Collective.ALLGATHER, c == "allgather", f"{c}", c.in_bytes(1024, 4), c.out_bytes(1024, 4)
(True, True, 'allgather', 256, 1024)
>>> Collective.ALLREDUCE.busbw_factor(4), Collective.ALLTOALL.is_tree, Collective.REDUCESCATTER.reversed
(1.5, False, 'allgather')
"""

from __future__ import annotations

from enum import Enum

from synth.errors import LoopcollError, SolverError, short_repr

__all__ = ["Collective", "COLLECTIVES", "TREE_COLLECTIVES"]


class Collective(str, Enum):
    """A collective loopcoll synthesizes (``str``-valued: compares, hashes and prints as its name)."""

    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    def __repr__(self) -> str:
        return repr(str(self.value))

    @classmethod
    def parse(cls, text: object, *, error: type[LoopcollError] = SolverError) -> Collective:
        """The member named ``text``; ``error`` naming the bad value and the known names otherwise.

        >>> Collective.parse("bcast")
        Traceback (most recent call last):
        ...
        synth.errors.SolverError: unknown collective 'bcast'; known: allgather, reducescatter, allreduce, alltoall
        """
        if isinstance(text, str):
            try:
                return cls(text)
            except ValueError:
                pass
        raise error(f"unknown collective {short_repr(text)}; known: {', '.join(COLLECTIVES)}")

    @property
    def is_tree(self) -> bool:
        """Whether schedules are spanning trees (every collective but AllToAll)."""
        return self is not Collective.ALLTOALL

    @property
    def out_trees(self) -> bool:
        """Whether a tree schedule has out-trees (broadcasts from each root): AllGather and AllReduce."""
        return self in (Collective.ALLGATHER, Collective.ALLREDUCE)

    @property
    def in_trees(self) -> bool:
        """Whether a tree schedule has in-trees (reductions to each root): ReduceScatter and AllReduce."""
        return self in (Collective.REDUCESCATTER, Collective.ALLREDUCE)

    @property
    def reversed(self) -> Collective:
        """The collective on the reversed topology (ReduceScatter ↔ AllGather; the others are their own).

        >>> Collective.ALLGATHER.reversed, Collective.ALLREDUCE.reversed
        ('reducescatter', 'allreduce')
        """
        return {Collective.ALLGATHER: Collective.REDUCESCATTER,
                Collective.REDUCESCATTER: Collective.ALLGATHER}.get(self, self)

    @property
    def busbw_multiplier(self) -> int:
        """nccl-tests' busbw is ``algbw × multiplier × (n−1)/n``: 2 for AllReduce, 1 otherwise."""
        return 2 if self is Collective.ALLREDUCE else 1

    def busbw_factor(self, nranks: int) -> float:
        """busbw / algbw on ``nranks`` ranks: (n−1)/n, AllReduce 2(n−1)/n (nccl-tests).

        >>> Collective.ALLGATHER.busbw_factor(8)
        0.875
        """
        return self.busbw_multiplier * (nranks - 1) / nranks

    def in_bytes(self, message_bytes: int, nranks: int) -> int:
        """Bytes of one rank's input buffer for a message of ``message_bytes`` (AllGather: a 1/n shard).

        >>> [c.in_bytes(800, 8) for c in Collective]
        [100, 800, 800, 800]
        """
        return message_bytes // nranks if self is Collective.ALLGATHER else message_bytes

    def out_bytes(self, message_bytes: int, nranks: int) -> int:
        """Bytes of one rank's output buffer for a message of ``message_bytes`` (ReduceScatter: a 1/n shard).

        >>> [c.out_bytes(800, 8) for c in Collective]
        [800, 100, 800, 800]
        """
        return message_bytes // nranks if self is Collective.REDUCESCATTER else message_bytes

    def message_bytes(self, shard_bytes: int, nranks: int) -> int:
        """The nccl-tests message from NCCL's per-rank size (``count × type size``: the shard for AllGather and
        ReduceScatter, the whole buffer otherwise); the inverse of the shard side of :meth:`in_bytes`/:meth:`out_bytes`.

        >>> Collective.REDUCESCATTER.message_bytes(100, 8), Collective.ALLTOALL.message_bytes(100, 8)
        (800, 100)
        """
        return shard_bytes * nranks if self in (Collective.ALLGATHER, Collective.REDUCESCATTER) else shard_bytes


#: The collectives' names, in the members' order (argparse ``choices`` and messages show them bare).
COLLECTIVES: tuple[str, ...] = tuple(c.value for c in Collective)
#: The names of the collectives whose schedules are spanning trees (:attr:`Collective.is_tree`).
TREE_COLLECTIVES: tuple[str, ...] = tuple(c.value for c in Collective if c.is_tree)
