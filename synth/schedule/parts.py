"""The plain parts of a schedule: hops, routes, the bottleneck cut's links and the format tag.

Validation (:mod:`synth.schedule.validate`) and decoding (:mod:`synth.schedule.decode`) take these
parts, not the :class:`~synth.schedule.model.Schedule` that calls them, so nothing here imports it.

Examples
--------
>>> hop = Hop(0, 1, ("gpu0", "sw", "gpu1"))
>>> hop.links
(('gpu0', 'sw'), ('sw', 'gpu1'))
>>> Route(RouteKind.PATH, 0, 2, (hop,), dest=1).kind.value
'path'
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from synth._types import NodeId, Rank

__all__ = ["SCHEDULE_FORMAT", "CutLink", "Hop", "Route", "RouteKind"]

SCHEDULE_FORMAT = "loopcoll-schedule/1"


class RouteKind(str, Enum):
    """Shape of a route; the value is the JSON token."""

    OUT_TREE = "out_tree"  # broadcast from root to every GPU
    IN_TREE = "in_tree"  # reduction from every GPU into root
    PATH = "path"  # point to point, root -> dest


@dataclass(frozen=True, slots=True)
class Hop:
    """One GPU→GPU edge of a route in data-flow direction, with its physical node path.

    ``path`` starts at the GPU of ``src``, ends at the GPU of ``dst``; every node in between is
    a switch.
    """

    src: Rank
    dst: Rank
    path: tuple[NodeId, ...]

    @property
    def links(self) -> tuple[tuple[NodeId, NodeId], ...]:
        """The physical links ``(a, b)`` the hop crosses, in order."""
        return tuple(zip(self.path[:-1], self.path[1:]))


@dataclass(frozen=True, slots=True)
class Route:
    """``chunks`` chunks moved along a tree or path.

    For ``OUT_TREE`` and ``PATH`` routes ``root`` is the source; for ``IN_TREE`` it is the GPU the
    reduction ends at. ``dest`` is set for ``PATH`` routes only. Hops are listed parents first
    (out-tree, path) or leaves first (in-tree): the order data can move in.
    """

    kind: RouteKind
    root: Rank
    chunks: int
    hops: tuple[Hop, ...]
    dest: Rank | None = None


@dataclass(frozen=True, slots=True)
class CutLink:
    """A link of a schedule's bottleneck cut ``K_s`` with its ``base_slack`` (MCCL Algorithm 1)."""

    src: NodeId
    dst: NodeId
    base_slack: float
