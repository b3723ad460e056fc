"""The executor's pair routing: the one physical path a GPU→GPU transfer takes.

MSCCL XML (and the torch executor) name a peer, not a path, so the transport decides the path of
every transfer from GPU u to GPU v. :func:`pair_route` is that decision, used by synthesis
(:mod:`synth.routed`), export and the checker's algbw (``msccl_xml``) and the runtime's link
estimator. The policy (docs/topology.md, "Routing"):

1. a route override of the topology's ``routes`` section for the pair, if it has one;
2. else among the switch-only paths (every node between u and v a switch) over live links, the
   fewest links; so a direct link u→v wins, then a 2-link path;
3. among those, a path through a host switch (role ``nvswitch``) before a network path;
4. then the widest (largest bottleneck capacity: for a GPU with several NICs, the wider one);
5. then the smallest sequence of node ids.

A pair with no switch-only path has no route: data between them is relayed by GPUs, as hops of
the schedule (a PXN-like relay is such a hop). A route over a link that is down is no route.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("hpn:2x1x2")
>>> pair_route(t, "gpu0", "gpu2")
('gpu0', 'tor0.0', 'agg0', 'tor1.0', 'gpu2')
>>> pair_route(named_topology("ring:4"), "gpu0", "gpu2") is None
True
>>> has_route_choice(t)
False
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from synth._types import NodeId, Rank
from synth.topologies.model import Topology
from synth.topologies.structure import switch_roles

__all__ = ["PairRoutes", "has_route_choice", "pair_route", "route_table"]

#: Shortest switch-only paths compared per pair at most (beyond, the first ones found in id order).
_TIE_LIMIT = 4096


def pair_route(topo: Topology, src: NodeId, dst: NodeId) -> tuple[NodeId, ...] | None:
    """The node path a transfer ``src`` → ``dst`` (GPU node ids) takes, or ``None`` if there is none.

    >>> from synth.topologies import named_topology
    >>> pair_route(named_topology("nvswitch:3"), "gpu0", "gpu2")
    ('gpu0', 'nvs0.0', 'gpu2')
    """
    if src == dst:
        return (src,)
    return _source_routes(topo, src).get(dst)


def route_table(topo: Topology) -> Mapping[tuple[Rank, Rank], tuple[NodeId, ...]]:
    """Every ordered GPU pair ``(u, v)`` (ranks) that has a route, with its path.

    >>> from synth.topologies import named_topology
    >>> sorted(route_table(named_topology("ring:3")))[:2]
    [(0, 1), (0, 2)]
    """
    return _route_table(topo)


@lru_cache(maxsize=16)
def _route_table(topo: Topology) -> Mapping[tuple[Rank, Rank], tuple[NodeId, ...]]:
    out: dict[tuple[Rank, Rank], tuple[NodeId, ...]] = {}
    rank = {g.id: topo.rank_of(g.id) for g in topo.gpus}
    for g in topo.gpus:
        for dst, path in _source_routes(topo, g.id).items():
            out[(rank[g.id], rank[dst])] = path
    return MappingProxyType(dict(sorted(out.items())))


class PairRoutes:
    """:func:`pair_route` for single GPU pairs (by rank), without the routes from a source to every
    GPU that :func:`route_table` finds: one breadth-first search in C per destination (its hop
    distances over the links out of switches, reversed), then a walk down those distances from the
    source. Same answers as :func:`route_table` (a pair with more shortest paths than it compares
    falls back to it); a 2048-GPU ring needs ~16 k pairs, not 4 M.

    >>> from synth.topologies import named_topology
    >>> r = PairRoutes(named_topology("hpn:2x1x2"))
    >>> r.route(0, 2), r.route(0, 2) == route_table(named_topology("hpn:2x1x2"))[(0, 2)]
    (('gpu0', 'tor0.0', 'agg0', 'tor1.0', 'gpu2'), True)
    """

    def __init__(self, topo: Topology) -> None:
        import numpy as np
        from scipy.sparse import csr_matrix

        self.topo = topo
        self._ids = [nd.id for nd in topo.nodes]
        self._index = {v: i for i, v in enumerate(self._ids)}
        self._is_gpu = [nd.is_gpu for nd in topo.nodes]
        # Reversed links out of switches: a GPU other than the ends is never inside a route.
        live = [(self._index[lk.dst], self._index[lk.src]) for lk in topo.links
                if lk.gbps > 0 and not self._is_gpu[self._index[lk.src]]]
        rows = np.array([a for a, _ in live], dtype=np.int64)
        cols = np.array([b for _, b in live], dtype=np.int64)
        n = len(self._ids)
        self._reverse = csr_matrix((np.ones(len(live)), (rows, cols)), shape=(n, n))
        # Live out-links by node index (a topology lookup per step costs µs: seconds at 2048 GPUs).
        self._out: list[list[int]] = [[] for _ in self._ids]
        for lk in topo.links:
            if lk.gbps > 0:
                self._out[self._index[lk.src]].append(self._index[lk.dst])
        self._gpu_col = {self._index[g.id]: i for i, g in enumerate(topo.gpus)}
        self._matrix: Any = None
        self._dist: dict[int, list[int]] = {}
        self._memo: dict[tuple[Rank, Rank], tuple[NodeId, ...] | None] = {}
        # Once per finder: a cache lookup keyed by the topology compares it field by field with an equal
        # topology it holds (another object of the same fingerprint), milliseconds at 1024 GPUs.
        self._forced = _overrides(topo)
        self._roles: Mapping[NodeId, str] | None = None

    def _to(self, dst: int) -> list[int]:
        """Links from every node to GPU node ``dst`` over switches (-1: none). The first call runs
        the searches to every GPU at once (one call into C; 2048 GPUs: ~11 MB of int16); a row is
        kept as a list once asked for (2048 GPUs: at most ~45 MB)."""
        got = self._dist.get(dst)
        if got is None:
            if self._matrix is None:
                import numpy as np
                from scipy.sparse.csgraph import shortest_path

                ends = np.array(sorted(self._gpu_col), dtype=np.int64)
                dist = shortest_path(self._reverse, directed=True, unweighted=True, indices=ends)
                self._matrix = np.where(np.isfinite(dist), dist, -1).astype(np.int16)
                self._gpu_col = {int(e): i for i, e in enumerate(ends)}
            got = self._matrix[self._gpu_col[dst]].tolist()  # small ints: shared objects, ~8 bytes each
            self._dist[dst] = got
        return got

    def route(self, a: Rank, b: Rank) -> tuple[NodeId, ...] | None:
        """The route of ranks ``a`` → ``b`` (``a != b``), or ``None``, as ``route_table(topo).get((a, b))``."""
        key = (a, b)
        if key not in self._memo:
            self._memo[key] = self._find(self.topo.gpu_id(a), self.topo.gpu_id(b))
        return self._memo[key]

    def _find(self, src: NodeId, dst: NodeId) -> tuple[NodeId, ...] | None:
        topo = self.topo
        forced = self._forced.get((src, dst))
        if forced is not None:
            return forced if all(topo.link(a, b).gbps > 0 for a, b in zip(forced[:-1], forced[1:])) else None
        d, s = self._index[dst], self._index[src]
        dist, is_gpu, ids = self._to(d), self._is_gpu, self._ids
        firsts = [dist[j] for j in self._out[s] if (j == d or not is_gpu[j]) and dist[j] >= 0]
        if not firsts:
            return None
        found: list[tuple[int, ...]] = []
        stack: list[tuple[int, ...]] = [(s,)]
        while stack:
            path = stack.pop()
            left = min(firsts) if len(path) == 1 else dist[path[-1]] - 1
            if left < 0:
                found.append(path)
                if len(found) > _TIE_LIMIT:
                    return _source_routes(topo, src).get(dst)  # beyond the tie limit: its own order
                continue
            stack += [(*path, j) for j in self._out[path[-1]] if dist[j] == left and (j == d or not is_gpu[j])]
        paths = [tuple(ids[j] for j in p) for p in found]
        if len(paths) == 1:
            return paths[0]
        if self._roles is None:
            self._roles = _roles(topo)
        roles, caps = self._roles, topo.capacity_grid.caps
        return min(paths, key=lambda p: (0 if len(p) == 3 and roles.get(p[1]) == "nvswitch" else 1,
                                         -min(caps[(x, y)] for x, y in zip(p[:-1], p[1:])), p))


@lru_cache(maxsize=4096)
def _source_routes(topo: Topology, src: NodeId) -> Mapping[NodeId, tuple[NodeId, ...]]:
    """Routes from GPU ``src`` to every GPU it reaches through switches only."""
    overrides = _overrides(topo)
    dist, preds = _switch_bfs(topo, src)
    roles = _roles(topo)
    caps = topo.capacity_grid.caps  # BFS paths use existing links only: no per-link lookup checks
    out: dict[NodeId, tuple[NodeId, ...]] = {}
    for g in topo.gpus:
        v = g.id
        if v == src:
            continue
        forced = overrides.get((src, v))
        if forced is not None:
            if all(topo.link(a, b).gbps > 0 for a, b in zip(forced[:-1], forced[1:])):
                out[v] = forced
            continue
        if v not in dist:
            continue
        paths = _shortest_paths(preds, src, v)
        if len(paths) == 1:  # the only shortest path (most pairs): no tie to break
            out[v] = paths[0]
            continue
        best: tuple[tuple[int, Fraction, tuple[NodeId, ...]], tuple[NodeId, ...]] | None = None
        for path in paths:
            host = 0 if len(path) == 3 and roles.get(path[1]) == "nvswitch" else 1
            width = min(caps[(a, b)] for a, b in zip(path[:-1], path[1:]))
            key = (host, -width, path)
            if best is None or key < best[0]:
                best = (key, path)
        if best is not None:
            out[v] = best[1]
    return MappingProxyType(out)


def _switch_bfs(topo: Topology, src: NodeId) -> tuple[dict[NodeId, int], dict[NodeId, list[NodeId]]]:
    """Hop distances from ``src`` over live links whose inner nodes are switches, and every
    predecessor on a shortest such path (GPUs are reached but never expanded)."""
    dist: dict[NodeId, int] = {src: 0}
    preds: dict[NodeId, list[NodeId]] = {}
    queue = deque([src])
    while queue:
        u = queue.popleft()
        for lk in topo.out_links(u):
            v = lk.dst
            if lk.gbps <= 0 or v == src:
                continue
            if v not in dist:
                dist[v] = dist[u] + 1
                preds[v] = [u]
                if not topo.node(v).is_gpu:
                    queue.append(v)
            elif dist[v] == dist[u] + 1:
                preds[v].append(u)
    return dist, preds


def _shortest_paths(preds: dict[NodeId, list[NodeId]], src: NodeId, dst: NodeId) -> list[tuple[NodeId, ...]]:
    """Shortest switch-only paths src → dst from the BFS predecessor DAG (at most ``_TIE_LIMIT``)."""
    out: list[tuple[NodeId, ...]] = []
    stack: list[tuple[NodeId, tuple[NodeId, ...]]] = [(dst, (dst,))]
    while stack and len(out) < _TIE_LIMIT:
        v, tail = stack.pop()
        if v == src:
            out.append(tail)
            continue
        for u in sorted(preds.get(v, ()), reverse=True):
            stack.append((u, (u, *tail)))
    return out


@lru_cache(maxsize=16)
def _overrides(topo: Topology) -> Mapping[tuple[NodeId, NodeId], tuple[NodeId, ...]]:
    return MappingProxyType({(r[0], r[-1]): r for r in topo.routes})


@lru_cache(maxsize=16)
def _roles(topo: Topology) -> Mapping[NodeId, str]:
    return MappingProxyType(switch_roles(topo))


@lru_cache(maxsize=64)
def has_route_choice(topo: Topology) -> bool:
    """Whether some ordered GPU pair has two or more switch-only paths over live links.

    A switch-only path is a simple path whose inner nodes are all switches. Where no pair has two
    (every named spec), the route of a pair is its only switch-only path, so every schedule any
    synthesizer makes already runs as routed, and routed and free-routing optima coincide:
    synthesis takes the free (ForestColl / AllToAll column generation) path.

    The answer is exact and enumerates no paths. Per source GPU, a breadth-first tree over the
    switches it reaches (one sparse BFS) settles most fabrics: when every live link out of a reached
    switch is a tree link or the reverse of one, the tree path is the only simple path to every node.
    Otherwise each reached GPU is checked exactly by :func:`_has_two_paths`.

    >>> from synth.topologies import named_topology
    >>> has_route_choice(named_topology("dgx-a100:2")), has_route_choice(named_topology("torus:3x3"))
    (False, False)
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    index = {n.id: i for i, n in enumerate(topo.nodes)}
    n = len(index)
    root = n  # a virtual copy of the source: the only GPU whose out-links are followed
    is_gpu = np.array([nd.is_gpu for nd in topo.nodes] + [False])
    live = [lk for lk in topo.links if lk.gbps > 0]
    src_idx = np.array([index[lk.src] for lk in live if not is_gpu[index[lk.src]]], dtype=np.int64)
    dst_idx = np.array([index[lk.dst] for lk in live if not is_gpu[index[lk.src]]], dtype=np.int64)
    order = np.lexsort((dst_idx, src_idx))
    src_idx, dst_idx = src_idx[order], dst_idx[order]
    base_ptr = np.searchsorted(src_idx, np.arange(n + 1))
    gpu_out = {g.id: sorted(index[lk.dst] for lk in topo.out_links(g.id) if lk.gbps > 0) for g in topo.gpus}
    for g in topo.gpus:
        s = index[g.id]
        out_s = np.array([d for d in gpu_out[g.id] if d != s], dtype=np.int64)
        indices = np.concatenate([dst_idx, out_s])
        indptr = np.append(base_ptr, len(indices))
        graph = csr_matrix((np.ones(len(indices), dtype=np.int8), indices, indptr), shape=(n + 1, n + 1))
        _, pred = breadth_first_order(graph, root, directed=True, return_predecessors=True)
        pred = np.asarray(pred, dtype=np.int64)
        pred[root] = root
        reached = pred >= 0
        check = reached[src_idx] & (dst_idx != s)
        a, b = src_idx[check], dst_idx[check]
        if bool(np.all((pred[b] == a) | (pred[a] == b))):
            continue  # the BFS tree holds every simple path from this source
        if any(_has_two_paths(topo, g.id, t.id) for t in topo.gpus if t.id != g.id and reached[index[t.id]]):
            return True
    return False


def _has_two_paths(topo: Topology, src: NodeId, dst: NodeId) -> bool:
    """Whether GPU ``src`` has two or more switch-only paths to GPU ``dst`` (exact, no enumeration).

    Walks back from ``dst``: with the path's tail ``removed`` fixed, the node ``cur`` before it is
    entered from every in-neighbour that ``src`` reaches avoiding ``removed`` and ``cur``; two such
    in-neighbours give two paths, one continues the walk, none leaves no path.

    >>> from synth.topologies import named_topology
    >>> _has_two_paths(named_topology("nvswitch:3"), "gpu0", "gpu1")
    False
    """
    removed = {dst}
    cur = dst
    while cur != src:
        reach = _reach_avoiding(topo, src, removed | {cur})
        preds = {lk.src for lk in topo.in_links(cur) if lk.gbps > 0 and lk.src in reach}
        if len(preds) != 1:
            return len(preds) > 1
        cur = preds.pop()
        removed.add(cur)
    return False


def _reach_avoiding(topo: Topology, src: NodeId, avoid: set[NodeId]) -> set[NodeId]:
    """Nodes ``src`` reaches over live links through switches only, never entering ``avoid``,
    that can continue a path (``src`` and switches; GPUs are ends of paths)."""
    seen = {src}
    stack = [src]
    while stack:
        u = stack.pop()
        for lk in topo.out_links(u):
            v = lk.dst
            if lk.gbps > 0 and v not in seen and v not in avoid and not topo.node(v).is_gpu:
                seen.add(v)
                stack.append(v)
    return seen
