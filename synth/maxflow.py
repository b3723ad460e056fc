"""A reusable integer max-flow network on OR-Tools' ``SimpleMaxFlow`` (C++ push-relabel).

Build the arcs once, change capacities in place, and solve many (source, sink) pairs: the pattern
every exact bound and every ForestColl feasibility test needs.

Examples
--------
>>> net = FlowNetwork(3)
>>> a = net.add_arc(0, 1, 5)
>>> b = net.add_arc(1, 2, 3)
>>> net.max_flow(0, 2)
3
>>> net.set_capacity(b, 7)
>>> net.max_flow(0, 2), sorted(net.source_side(0, 2))
(5, [0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.graph.python import max_flow

from synth._deadline import tick
from synth.errors import SolverError

__all__ = ["FlowNetwork"]

INT64_MAX = 2**63 - 1


def _int64_caps(capacities: Sequence[int] | np.ndarray) -> np.ndarray:
    try:
        caps = np.asarray(capacities, dtype=np.int64)
    except OverflowError:
        caps = np.zeros(0, dtype=np.int64)
        bad = True
    else:
        bad = bool(caps.size and (caps.min() < 0 or caps.max() > INT64_MAX // 4))
    if bad:
        raise SolverError("max-flow capacities outside 0..2^61: rescale the network")
    return caps


class FlowNetwork:
    """An integer-capacity network over nodes ``0..n-1`` whose capacities can change between solves."""

    def __init__(self, n_nodes: int) -> None:
        self.n_nodes = n_nodes
        self._smf = max_flow.SimpleMaxFlow()
        self._tails: list[int] = []
        self._heads: list[int] = []
        self._solved: tuple[int, int] | None = None

    @property
    def n_arcs(self) -> int:
        return len(self._tails)

    def add_arc(self, tail: int, head: int, capacity: int) -> int:
        """Add one arc and return its index."""
        self._check_cap(capacity)
        arc = self._smf.add_arc_with_capacity(tail, head, int(capacity))
        self._tails.append(tail)
        self._heads.append(head)
        self._solved = None
        return int(arc)

    def add_arcs(self, tails: Sequence[int] | np.ndarray, heads: Sequence[int] | np.ndarray,
                 capacities: Sequence[int] | np.ndarray) -> np.ndarray:
        """Add many arcs at once; returns their indices."""
        caps = _int64_caps(capacities)
        arcs = self._smf.add_arcs_with_capacity(
            np.asarray(tails, dtype=np.int32), np.asarray(heads, dtype=np.int32), caps
        )
        self._tails.extend(np.asarray(tails, dtype=np.int64).tolist())
        self._heads.extend(np.asarray(heads, dtype=np.int64).tolist())
        self._solved = None
        return np.asarray(arcs)

    @staticmethod
    def _check_cap(capacity: int) -> None:
        if capacity < 0 or capacity > INT64_MAX // 4:
            raise SolverError(f"max-flow capacity {capacity} outside 0..2^61: rescale the network")

    def set_capacity(self, arc: int, capacity: int) -> None:
        self._check_cap(capacity)
        self._smf.set_arc_capacity(arc, int(capacity))
        self._solved = None

    def set_capacities(self, arcs: np.ndarray, capacities: Sequence[int] | np.ndarray) -> None:
        caps = _int64_caps(capacities)
        self._smf.set_arcs_capacity(np.asarray(arcs, dtype=np.int32), caps)
        self._solved = None

    def capacity(self, arc: int) -> int:
        return int(self._smf.capacity(arc))

    def _touches_no_arc(self, *nodes: int) -> bool:
        # OR-Tools knows only the nodes some arc touches; for any other it returns an empty cut.
        return max(nodes) >= self._smf.num_nodes()

    def max_flow(self, source: int, sink: int) -> int:
        """Maximum flow value from ``source`` to ``sink`` (checks the solve's deadline first)."""
        tick()
        if self._touches_no_arc(source, sink):
            self._solved = (source, sink)
            return 0
        status = self._smf.solve(source, sink)
        if status != self._smf.OPTIMAL:
            raise SolverError(f"OR-Tools SimpleMaxFlow failed on {source}->{sink} with status {status}")
        self._solved = (source, sink)
        return int(self._smf.optimal_flow())

    def source_side(self, source: int, sink: int) -> set[int]:
        """Nodes on the source side of a minimum cut (solving first if needed)."""
        if self._solved != (source, sink):
            self.max_flow(source, sink)
        if self._touches_no_arc(source, sink):
            # No flow: the source side is everything the source reaches over arcs of capacity > 0.
            side, stack = {source}, [source]
            while stack:
                v = stack.pop()
                for arc, (tail, head) in enumerate(zip(self._tails, self._heads)):
                    if tail == v and head not in side and self.capacity(arc) > 0:
                        side.add(head)
                        stack.append(head)
            return side
        return {int(v) for v in self._smf.get_source_side_min_cut()}

    def source_mask(self, source: int, sink: int) -> np.ndarray:
        """:meth:`source_side` as a boolean array over the nodes."""
        mask = np.zeros(self.n_nodes, dtype=bool)
        if self._solved == (source, sink) and not self._touches_no_arc(source, sink):
            mask[self._smf.get_source_side_min_cut()] = True
        else:
            mask[list(self.source_side(source, sink))] = True
        return mask

    def flows(self, arcs: np.ndarray) -> np.ndarray:
        """Flow on the given arcs in the last solve."""
        return np.asarray(self._smf.flows(np.asarray(arcs, dtype=np.int32)))
