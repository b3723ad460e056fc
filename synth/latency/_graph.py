"""The logical GPU graph of a topology under link weights: switch-only shortest paths between GPUs.

With ``routing="fixed"`` (the default) every GPU pair has the one path a peer-addressed executor
(MSCCL, torch P2P) uses (:func:`synth.routing.pair_route`), so schedules lower to XML. With ``"free"``
every GPU is split into an *out* node (its sending side) and an *in* node (its receiving side), so a
shortest path from ``u_out`` to ``v_in`` can only cross switches in between: exactly the physical path
of one schedule hop. :class:`LinkGraph` builds the split graph once; :meth:`LinkGraph.costs` runs one
Dijkstra per GPU (scipy, C) under the current weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from synth._types import NodeId
from synth.routing import route_table
from synth.topologies.model import Topology

__all__ = ["LinkGraph", "PairCosts"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PairCosts:
    """Switch-path costs between GPUs under one weighting: ``cost[u, v]`` (``inf``: unreachable,
    and on the diagonal) and the predecessor matrix to recover each path."""

    cost: FloatArray
    pred: npt.NDArray[np.int32]


class LinkGraph:
    """The split graph of ``topo``'s live links (see the module docstring).

    >>> from synth.topologies import named_topology
    >>> g = LinkGraph(named_topology("hpn:1x2x2"))
    >>> pc = g.costs(np.ones(g.nlinks))
    >>> float(pc.cost[0, 1]), g.path(pc, 0, 1)
    (2.0, ('gpu0', 'nvs0.0', 'gpu1'))
    """

    def __init__(self, topo: Topology, *, routing: str = "fixed") -> None:
        if routing not in ("fixed", "free"):
            raise ValueError(f"routing must be 'fixed' or 'free', got {routing!r}")
        self.topo = topo
        self.routing = routing
        self.n = topo.nranks
        gpu_ids = [topo.gpu_id(r) for r in range(self.n)]
        rank_of = {g: r for r, g in enumerate(gpu_ids)}
        others = sorted(nd.id for nd in topo.nodes if nd.id not in rank_of)
        self.switch_index = {s: 2 * self.n + i for i, s in enumerate(others)}
        self.names: list[NodeId] = gpu_ids + gpu_ids + others
        self.nnodes = 2 * self.n + len(others)
        links = [lk for lk in topo.links if lk.gbps > 0]
        self.links = links
        self.nlinks = len(links)
        self.cap_GBps = np.array([lk.gbps / 8.0 for lk in links], dtype=np.float64)
        src = np.empty(self.nlinks, dtype=np.int64)
        dst = np.empty(self.nlinks, dtype=np.int64)
        for i, lk in enumerate(links):
            src[i] = rank_of[lk.src] if lk.src in rank_of else self.switch_index[lk.src]
            dst[i] = self.n + rank_of[lk.dst] if lk.dst in rank_of else self.switch_index[lk.dst]
        self.src, self.dst = src, dst
        self.link_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist()))}
        self.key_index = {lk.key: i for i, lk in enumerate(links)}
        self._fixed: dict[tuple[int, int], list[int]] = {}
        self._entries: dict[tuple[int, int], tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]] = {}
        self._incidence: csr_matrix | None = None
        if routing == "fixed":
            self._build_fixed(gpu_ids)

    def _build_fixed(self, gpu_ids: list[NodeId]) -> None:
        """The one path the executor uses per GPU pair (:func:`synth.routing.route_table`)."""
        n = self.n
        rows, cols = [], []
        for (u, v), path in sorted(route_table(self.topo).items()):
            if u == v:
                continue
            idx = [self.key_index.get((a, b)) for a, b in zip(path[:-1], path[1:])]
            if any(i is None for i in idx):
                continue  # a route over a down link is no route
            links = [int(i) for i in idx if i is not None]
            self._fixed[(u, v)] = links
            rows.extend([u * n + v] * len(links))
            cols.extend(links)
        self._incidence = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n * n, self.nlinks))
        self._reachable = np.zeros(n * n, dtype=bool)
        self._reachable[[u * n + v for u, v in self._fixed]] = True

    def costs(self, weights: FloatArray) -> PairCosts:
        """All GPU-pair switch-path costs under ``weights`` (one per live link, all > 0)."""
        if self._incidence is not None:
            flat = np.where(self._reachable, self._incidence @ weights, np.inf)
            return PairCosts(flat.reshape(self.n, self.n), np.zeros((0, 0), dtype=np.int32))
        mat = csr_matrix((weights, (self.src, self.dst)), shape=(self.nnodes, self.nnodes))
        dist, pred = dijkstra(mat, directed=True, indices=np.arange(self.n), return_predecessors=True)
        cost = np.array(dist[:, self.n:2 * self.n], dtype=np.float64)
        np.fill_diagonal(cost, np.inf)
        return PairCosts(cost, pred.astype(np.int32))

    def path_links(self, pc: PairCosts, u: int, v: int) -> list[int]:
        """Link indices of the switch path ``u -> v`` in ``pc`` (data order)."""
        if self._incidence is not None:
            if (u, v) not in self._fixed:
                raise ValueError(f"no switch path from rank {u} to rank {v}")
            return list(self._fixed[(u, v)])
        out: list[int] = []
        node = self.n + v
        row = pc.pred[u]
        while node != u:
            p = int(row[node])
            if p < 0:
                raise ValueError(f"no switch path from rank {u} to rank {v}")
            out.append(self.link_of[(p, node)])
            node = p
        out.reverse()
        return out

    def path_entry(self, pc: PairCosts, u: int, v: int) -> tuple[npt.NDArray[np.int64], tuple[NodeId, ...]]:
        """``(link indices, node ids)`` of the switch path ``u -> v`` in ``pc``; with fixed routing the
        path does not depend on the weights, so each pair's entry is built once and shared."""
        hit = self._entries.get((u, v)) if self._incidence is not None else None
        if hit is None:
            links = self.path_links(pc, u, v)
            hit = (np.array(links, dtype=np.int64), (self.links[links[0]].src, *(self.links[i].dst for i in links)))
            if self._incidence is not None:
                self._entries[(u, v)] = hit
        return hit

    def path(self, pc: PairCosts, u: int, v: int) -> tuple[NodeId, ...]:
        """Node ids of the switch path ``u -> v`` in ``pc``."""
        links = self.path_links(pc, u, v)
        return (self.links[links[0]].src, *(self.links[i].dst for i in links))
