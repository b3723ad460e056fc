"""Physical paths between GPUs through switches only (the path of one schedule hop).

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("hpn:2x1x2")
>>> switch_path(t, "gpu0", "gpu2")
('gpu0', 'tor0.0', 'agg0', 'tor1.0', 'gpu2')
>>> switch_path(named_topology("ring:4"), "gpu0", "gpu2") is None
True
"""

from __future__ import annotations

from collections import deque

from synth._types import NodeId
from synth.topologies.model import Topology

__all__ = ["switch_path", "switch_reachable"]


def switch_path(topo: Topology, src: NodeId, dst: NodeId) -> tuple[NodeId, ...] | None:
    """Fewest-link path ``src -> ... -> dst`` whose inner nodes are all switches, over live links.

    Ties are broken by node id (BFS visits neighbours in sorted order), so the result is
    deterministic. ``None`` when there is no such path.
    """
    if src == dst:
        return (src,)
    return switch_reachable(topo, src, stop_at=dst).get(dst)


def switch_reachable(
    topo: Topology, src: NodeId, *, stop_at: NodeId | None = None
) -> dict[NodeId, tuple[NodeId, ...]]:
    """Switch-only paths from ``src`` to every GPU it reaches that way (same tie-breaks).

    With ``stop_at``, the search ends as soon as that GPU is reached.
    """
    out: dict[NodeId, tuple[NodeId, ...]] = {}
    parent: dict[NodeId, NodeId] = {src: src}
    queue = deque([src])
    while queue:
        u = queue.popleft()
        for lk in sorted(topo.out_links(u), key=lambda lk: lk.dst):
            v = lk.dst
            if lk.gbps <= 0 or v in parent:
                continue
            parent[v] = u
            if not topo.node(v).is_gpu:
                queue.append(v)
                continue
            path = [v]
            while path[-1] != src:
                path.append(parent[path[-1]])
            out[v] = tuple(reversed(path))
            if v == stop_at:
                return out
    return out
