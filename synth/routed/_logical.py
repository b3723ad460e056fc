"""The logical GPU graph under routing: one arc per routed GPU pair, loading its route's links.

Arc ``i`` is the ordered pair ``pairs[i] = (u, v)`` (ranks) whose route (:func:`synth.routing.pair_route`)
is ``paths[i]``; ``incidence[i, a]`` is 1 when that route crosses physical link ``a``
(``topology.links[a]``). A schedule hop u → v is exactly arc (u, v), so the load an arc puts on
link ``a`` is the load its route puts there, whatever else the fabric offers.

Examples
--------
>>> from synth.topologies import named_topology
>>> lg = Logical.build(named_topology("nvswitch:3"))
>>> lg.n, len(lg.pairs), lg.paths[0]
(3, 6, ('gpu0', 'nvs0.0', 'gpu1'))
>>> lg.transposed().pairs[0].tolist()
[1, 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.sparse import csc_matrix, csr_matrix

from synth._types import NodeId
from synth.errors import SolverError
from synth.routing import route_table
from synth.topologies.model import Topology

__all__ = ["Logical"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Logical:
    """Arrays of the logical graph (see the module docstring); ``index[u, v]`` is the arc of (u, v), -1 if none.

    A transposed graph (:meth:`transposed`, for in-trees) lists arc ``(v, u)`` for the real pair
    ``(u, v)``: its rows, paths and incidence stay those of the real transfer.
    """

    n: int
    pairs: IntArray
    paths: tuple[tuple[NodeId, ...], ...]
    incidence: csr_matrix
    caps_GBps: FloatArray  # noqa: N815
    link_keys: tuple[tuple[NodeId, NodeId], ...]
    index: IntArray
    flipped: bool = False

    @classmethod
    def build(cls, topo: Topology) -> Logical:
        table = route_table(topo)
        n = topo.nranks
        link_of = {lk.key: a for a, lk in enumerate(topo.links)}
        pairs = np.array(list(table), dtype=np.int64).reshape(-1, 2)
        paths = tuple(table.values())
        rows, cols = [], []
        for i, path in enumerate(paths):
            for key in zip(path[:-1], path[1:]):
                rows.append(i)
                cols.append(link_of[key])
        inc = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(paths), len(topo.links)))
        caps = np.array([float(topo.exact_capacity(*lk.key)) / 8.0 for lk in topo.links], dtype=np.float64)
        index = np.full((n, n), -1, dtype=np.int64)
        index[pairs[:, 0], pairs[:, 1]] = np.arange(len(pairs))
        return cls(n, pairs, paths, inc, caps, tuple(lk.key for lk in topo.links), index)

    def transposed(self) -> Logical:
        """The graph whose out-trees are this graph's in-trees (arcs turned, routes kept)."""
        return Logical(self.n, self.pairs[:, ::-1].copy(), self.paths, self.incidence, self.caps_GBps,
                       self.link_keys, self.index.T.copy(), not self.flipped)

    @cached_property
    def incidence_csc(self) -> csc_matrix:
        """:attr:`incidence` by columns (links)."""
        return self.incidence.tocsc()

    @cached_property
    def tails(self) -> IntArray:
        """``pairs[:, 0]``, contiguous."""
        return np.ascontiguousarray(self.pairs[:, 0])

    @cached_property
    def heads(self) -> IntArray:
        """``pairs[:, 1]``, contiguous."""
        return np.ascontiguousarray(self.pairs[:, 1])

    @cached_property
    def route_links(self) -> IntArray:
        """``route_links[i]``: the links of arc i's route, padded with ``len(caps_GBps)`` (a dummy link)."""
        inc = self.incidence.tocsr()
        counts = np.diff(inc.indptr)
        out = np.full((len(self.pairs), int(counts.max(initial=1))), len(self.caps_GBps), dtype=np.int64)
        rows = np.repeat(np.arange(len(self.pairs)), counts)
        cols = np.arange(len(inc.indices)) - np.repeat(inc.indptr[:-1], counts)
        out[rows, cols] = inc.indices
        return out

    @cached_property
    def head_links(self) -> csr_matrix:
        """``head_links[v, a]`` is 1 when some arc into GPU v (in this graph's orientation) ends its
        route with link a: the last link of a real transfer to v or, transposed, the first of one from v."""
        link_of = {key: a for a, key in enumerate(self.link_keys)}
        ends = [link_of[(p[0], p[1])] if self.flipped else link_of[(p[-2], p[-1])] for p in self.paths]
        m = csr_matrix((np.ones(len(ends)), (self.pairs[:, 1], ends)), shape=(self.n, len(self.link_keys)))
        m.data[:] = 1.0  # duplicates summed: one entry per (GPU, link)
        return m

    @cached_property
    def _incidence_t(self) -> csr_matrix:
        return self.incidence.T

    def arc_cost(self, w: FloatArray) -> FloatArray:
        """Cost of every arc: the sum of ``w`` over its route's links."""
        return np.asarray(self.incidence @ w, dtype=np.float64)

    def cost_matrix(self, w: FloatArray) -> FloatArray:
        """Dense ``n × n`` arc costs under link weights ``w`` (``inf`` where no arc)."""
        c = np.full((self.n, self.n), np.inf)
        c[self.pairs[:, 0], self.pairs[:, 1]] = self.arc_cost(w)
        return c

    def loads(self, arc_counts: FloatArray) -> FloatArray:
        """Physical link loads of ``arc_counts[i]`` units on every arc i."""
        return np.asarray(self._incidence_t @ arc_counts, dtype=np.float64)

    def arc(self, u: int, v: int) -> int:
        """The arc of (u, v); :class:`SolverError` if the pair has no route."""
        i = int(self.index[u, v])
        if i < 0:
            raise SolverError(f"GPU pair {u}->{v} has no route")
        return i

    def check_connected(self, name: str) -> None:
        """Raise :class:`SolverError` unless every GPU reaches every other along routed arcs."""
        from scipy.sparse.csgraph import connected_components

        g = csr_matrix((np.ones(len(self.pairs)), (self.pairs[:, 0], self.pairs[:, 1])), shape=(self.n, self.n))
        ncomp, _ = connected_components(g, directed=True, connection="strong")
        if ncomp != 1:
            raise SolverError(f"topology {name!r}: the GPUs do not all reach each other along routed hops")
