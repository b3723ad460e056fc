"""Array form of a topology and its time-expanded DAG for step-bounded pricing.

The time-expanded graph has a copy ``(v, t)`` of every node for t = 0..m. A link into a switch is
instantaneous, ``(u, t) → (v, t)``; any other link (into a GPU) advances one step,
``(u, t) → (v, t + 1)`` (MCCL §4.2). A path from ``(s, 0)`` to ``(d, t)`` therefore makes ``t``
GPU-to-GPU hops. With ``m = None`` the graph is the physical graph itself (no step bound).

Examples
--------
>>> from synth.topologies import named_topology
>>> net = Network.from_topology(named_topology("hpn:1x2x2"))
>>> net.n_gpus, net.n_links, hop_diameter(net)
(4, 16, 2)
>>> g = ExpandedGraph.build(net, 2)
>>> g.n_layers, g.arc_link.shape
(3, (40,))
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from synth._resources import require_memory
from synth.errors import SolverError
from synth.topologies.model import Topology

__all__ = ["ExpandedGraph", "LayeredArcs", "Network", "hop_diameter"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Network:
    """Nodes and links of a topology as arrays; link ``e`` is ``topology.links[e]`` (dead ones too)."""

    node_ids: tuple[str, ...]
    is_gpu: BoolArray
    gpu_node: IntArray  # node index of rank r
    link_keys: tuple[tuple[str, str], ...]
    tail: IntArray
    head: IntArray
    caps_GBps: FloatArray  # noqa: N815
    name: str

    @classmethod
    def from_topology(cls, topo: Topology) -> Network:
        node_ids = tuple(n.id for n in topo.nodes)
        index = {v: i for i, v in enumerate(node_ids)}
        is_gpu = np.array([n.is_gpu for n in topo.nodes], dtype=bool)
        gpu_node = np.array([index[g.id] for g in topo.gpus], dtype=np.int64)
        tail = np.array([index[lk.src] for lk in topo.links], dtype=np.int64)
        head = np.array([index[lk.dst] for lk in topo.links], dtype=np.int64)
        caps = np.array([float(topo.exact_capacity(*lk.key)) / 8.0 for lk in topo.links], dtype=np.float64)
        return cls(node_ids, is_gpu, gpu_node, tuple(lk.key for lk in topo.links), tail, head, caps, topo.name)

    @property
    def n_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_node)

    @property
    def n_links(self) -> int:
        return len(self.link_keys)

    @property
    def live(self) -> BoolArray:
        return self.caps_GBps > 0

    def rank_of_node(self) -> IntArray:
        """Rank of each node, -1 for switches."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        out[self.gpu_node] = np.arange(self.n_gpus)
        return out


def hop_diameter(net: Network) -> int:
    """Largest number of GPU-to-GPU hops any ordered GPU pair needs (switches relay for free).

    Raises :class:`SolverError` naming a pair that cannot be reached at all.
    """
    live = net.live
    # Arcs into a GPU cost one hop; arcs into a switch cost a sliver so that paths stay finite.
    tiny = 1.0 / (4.0 * (net.n_nodes + 1))
    w = np.where(net.is_gpu[net.head[live]], 1.0, tiny)
    g = csr_matrix((w, (net.tail[live], net.head[live])), shape=(net.n_nodes, net.n_nodes))
    dist = dijkstra(g, indices=net.gpu_node)[:, net.gpu_node]
    if not np.isfinite(dist).all():
        s, d = np.argwhere(~np.isfinite(dist))[0]
        raise SolverError(
            f"topology {net.name!r}: rank {int(d)} cannot be reached from rank {int(s)} over live links; "
            "AllToAll needs every GPU to reach every other"
        )
    return int(np.floor(dist.max() + 0.5))


@dataclass(frozen=True, eq=False)
class ExpandedGraph:
    """CSR skeleton of the (time-expanded) graph; arc weights are set per pricing call.

    ``arc_link[a]`` is the physical link of CSR arc ``a``; node ``(v, t)`` is ``v + t·n_nodes``.
    ``steps`` is the step bound m, or ``None`` for the plain physical graph.
    """

    net: Network
    steps: int | None
    n_layers: int
    indptr: IntArray
    indices: IntArray
    arc_link: IntArray
    arc_keys: IntArray  # sorted (physical tail · n_nodes + physical head) of live links
    arc_key_link: IntArray  # link of each sorted key

    @classmethod
    def build(cls, net: Network, steps: int | None) -> ExpandedGraph:
        nv = net.n_nodes
        live_links = np.flatnonzero(net.live)
        tails = net.tail[live_links]
        heads = net.head[live_links]
        if steps is None:
            layers = 1
            src, dst, link = tails, heads, live_links
        else:
            layers = steps + 1
            # Pricing's layered DP holds distances and predecessors for every (layer, node,
            # source); measured peaks are about 4x those two arrays (ring:200-300).
            require_memory(64.0 * layers * nv * net.n_gpus,
                           f"AllToAll on {net.name!r} ({steps}-step time-expanded pricing, {nv} nodes, "
                           f"{net.n_gpus} GPUs)",
                           "its memory grows with the hop diameter times N^2; use fewer ranks or a "
                           "lower-diameter topology")
            into_gpu = net.is_gpu[heads]
            src_l, dst_l, link_l = [], [], []
            for t in range(layers):
                inst = ~into_gpu
                src_l.append(tails[inst] + t * nv)
                dst_l.append(heads[inst] + t * nv)
                link_l.append(live_links[inst])
                if t + 1 < layers:
                    src_l.append(tails[into_gpu] + t * nv)
                    dst_l.append(heads[into_gpu] + (t + 1) * nv)
                    link_l.append(live_links[into_gpu])
            src, dst, link = np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(link_l)
        order = np.lexsort((dst, src))
        src, dst, link = src[order], dst[order], link[order]
        indptr = np.zeros(nv * layers + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=nv * layers), out=indptr[1:])
        keys = tails * nv + heads
        korder = np.argsort(keys)
        return cls(net, steps, layers, indptr, dst.astype(np.int64), link.astype(np.int64), keys[korder],
                   live_links[korder])

    @cached_property
    def all_arcs(self) -> ArcGroup:
        """Every live link grouped by head (Bellman-Ford rounds on the plain graph)."""
        return ArcGroup.of(self.net, np.flatnonzero(self.net.live))

    @cached_property
    def layered(self) -> LayeredArcs:
        """Arcs grouped by head for the layered min-plus DP (step-bounded graphs only)."""
        return LayeredArcs.build(self.net)

    @cached_property
    def _skeleton(self) -> csr_matrix:
        n = self.net.n_nodes * self.n_layers
        return csr_matrix((np.ones(len(self.arc_link)), self.indices, self.indptr), shape=(n, n))

    def matrix(self, link_weight: FloatArray) -> csr_matrix:
        """The graph with arc weights ``link_weight[arc_link]`` (weights must be > 0).

        One matrix per graph whose weights each call overwrites (building a fresh one costs more
        than a shortest-path run on a few roots): use it before the next call."""
        mat = self._skeleton
        mat.data = np.asarray(link_weight, dtype=np.float64)[self.arc_link]
        return mat

    def link_of(self, tail_node: IntArray, head_node: IntArray) -> IntArray:
        """Physical link id of arcs given by (expanded) tail and head node indices."""
        nv = self.net.n_nodes
        keys = (tail_node % nv) * nv + (head_node % nv)
        pos = np.searchsorted(self.arc_keys, keys)
        return self.arc_key_link[pos]


@dataclass(frozen=True, eq=False)
class ArcGroup:
    """Live links grouped by head node, in slots for a vectorised segment minimum.

    Heads are ordered by decreasing in-degree, so slot j (the j-th link into each head) covers the
    prefix ``heads[:len(slot_tail[j])]``; ``slot_tail[j]`` / ``slot_link[j]`` are its tails and links.
    """

    heads: IntArray
    slot_tail: tuple[IntArray, ...]
    slot_link: tuple[IntArray, ...]
    n_arcs: int

    @classmethod
    def of(cls, net: Network, links: IntArray) -> ArcGroup:
        links = np.asarray(links, dtype=np.int64)
        if len(links) == 0:
            return cls(np.zeros(0, np.int64), (), (), 0)
        heads, counts = np.unique(net.head[links], return_counts=True)
        order = np.lexsort((heads, -counts))
        heads, counts = heads[order], counts[order]
        pos = np.empty(net.n_nodes, dtype=np.int64)
        pos[heads] = np.arange(len(heads))
        by_head = links[np.lexsort((links, pos[net.head[links]]))]
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        slot_link = tuple(by_head[starts[: int((counts > j).sum())] + j] for j in range(int(counts.max())))
        return cls(heads, tuple(net.tail[sl] for sl in slot_link), slot_link, len(links))

    def __len__(self) -> int:
        return self.n_arcs

    def segmin(self, dist: FloatArray, wt: FloatArray, *, track: bool = True) -> tuple[FloatArray, IntArray | None]:
        """Per head (rows, in ``heads`` order) and source (columns): min over in-links of
        ``dist[tail] + wt[link]``, and (``track``) the link reaching it, the last listed on ties
        (-1 where unreachable). ``wt`` is one weight per link or a (links × sources) matrix."""
        per_source = wt.ndim == 2
        best = dist[self.slot_tail[0]]
        best += wt[self.slot_link[0]] if per_source else wt[self.slot_link[0]][:, None]
        arg = None
        if track:
            arg = np.empty(best.shape, dtype=np.int64)
            arg[:] = self.slot_link[0][:, None]
        for tail, link in zip(self.slot_tail[1:], self.slot_link[1:]):
            k = len(tail)
            cand = dist[tail]
            cand += wt[link] if per_source else wt[link][:, None]
            b = best[:k]
            if arg is None:
                np.minimum(b, cand, out=b)
                continue
            better = cand <= b
            np.copyto(b, cand, where=better)
            np.copyto(arg[:k], np.broadcast_to(link[:, None], (k, b.shape[1])), where=better)
        if arg is not None:
            arg[best == np.inf] = -1
        return best, arg


@dataclass(frozen=True, eq=False)
class LayeredArcs:
    """The arc kinds of the time-expanded graph, for a DP layer by layer.

    ``step``: links into GPUs (layer t − 1 → t); ``flat``: GPU → switch links (same layer);
    ``chain``: switch → switch links (same layer, relaxed to a fixed point; switch chains are short).
    """

    step: ArcGroup
    flat: ArcGroup
    chain: ArcGroup

    @classmethod
    def build(cls, net: Network) -> LayeredArcs:
        live = np.flatnonzero(net.live)
        into_gpu = net.is_gpu[net.head[live]]
        from_gpu = net.is_gpu[net.tail[live]]
        return cls(ArcGroup.of(net, live[into_gpu]), ArcGroup.of(net, live[~into_gpu & from_gpu]),
                   ArcGroup.of(net, live[~into_gpu & ~from_gpu]))
