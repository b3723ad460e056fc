"""The depth of a schedule: the most GPU hops any chunk takes from its source (the latency proxy).

>>> from synth import load_topology, synthesize
>>> schedule_depth(synthesize("allgather", load_topology("ring:4")).schedule)
3
"""

from __future__ import annotations

from synth.schedule import RouteKind, Schedule

__all__ = ["route_depths", "schedule_depth"]


def route_depths(schedule: Schedule) -> list[int]:
    """Height of every route (a tree's longest root-leaf chain of hops, a path's hop count)."""
    out = []
    for route in schedule.routes:
        level: dict[int, int] = {}
        for h in route.hops:
            if route.kind is RouteKind.IN_TREE:
                level[h.dst] = max(level.get(h.dst, 0), level.get(h.src, 0) + 1)
            else:
                level[h.dst] = level.get(h.src, 0) + 1
        out.append(max(level.values(), default=0))
    return out


def schedule_depth(schedule: Schedule) -> int:
    """The largest route height (0 for a schedule without hops)."""
    return max(route_depths(schedule), default=0)
