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

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from synth._types import NodeId, Rank
from synth.errors import ScheduleError, short_repr

__all__ = ["LEGACY_SCHEDULE_FORMAT", "SCHEDULE_FORMAT", "SCHEDULE_FORMATS_READ", "CutLink", "Hop", "Route", "RouteKind"]

#: The format tag the writer emits (compact: a shared hop table, routes as windows or hop indices).
SCHEDULE_FORMAT = "loopcoll-schedule/2"
#: The old tag (every route spells out its hops), still read.
LEGACY_SCHEDULE_FORMAT = "loopcoll-schedule/1"
#: Every format tag :mod:`synth.schedule.decode` reads.
SCHEDULE_FORMATS_READ = (SCHEDULE_FORMAT, LEGACY_SCHEDULE_FORMAT)


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

    def to_dict(self) -> dict[str, Any]:
        """The link as JSON data (schedule ``bottleneck`` and store manifest ``cut`` entries).

        >>> CutLink.from_dict(CutLink("gpu0", "tor0.0", 0.25).to_dict())
        CutLink(src='gpu0', dst='tor0.0', base_slack=0.25)
        """
        return {"src": self.src, "dst": self.dst, "base_slack": self.base_slack}

    @classmethod
    def from_dict(cls, doc: object, *, source: str = "<dict>") -> CutLink:
        """Read :meth:`to_dict`'s form back; :class:`ScheduleError` naming ``source`` and the field otherwise.

        >>> CutLink.from_dict({"src": "a", "dst": "b"}, source="s.json")
        Traceback (most recent call last):
        ...
        synth.errors.ScheduleError: s.json: bottleneck entry a->b needs a numeric 'base_slack', got None
        """
        if not isinstance(doc, Mapping):
            raise ScheduleError(f"{source}: bottleneck entries must be objects")
        src, dst, slack = doc.get("src"), doc.get("dst"), doc.get("base_slack")
        if not isinstance(src, str) or not isinstance(dst, str):
            raise ScheduleError(f"{source}: bottleneck entry {short_repr(doc)} needs string 'src' and 'dst'")
        if isinstance(slack, bool) or not isinstance(slack, (int, float)):
            raise ScheduleError(f"{source}: bottleneck entry {src}->{dst} needs a numeric 'base_slack', got {short_repr(slack)}")
        return cls(src, dst, float(slack))
