"""A cheap, necessary check of a tree schedule against an MSCCL runtime's threadblock limits.

Lowering (:func:`msccl_xml.lowering.lower`) places every operation on a channel and a threadblock
and only then finds that a rank needs more XML nodes, or a GPU pair more steps, than the runtime
takes: at 1024 ranks that costs tens of seconds per try. The counts below are lower bounds that any
lowering must meet, read off the routes alone:

* every piece (at most ``max_cnt`` chunks) of a tree route is at least one step on every rank of the
  tree but its root, so a rank's XML nodes are at least ``1 + ngpus + 1 + steps``
  (:func:`msccl_xml._structure.rank_xml_nodes`);
* a hop's piece is one send on its source and one receive on its destination; a channel holds one
  threadblock per send peer and per receive peer, so a GPU pair carries at most
  ``max_channels · max_steps_per_tb`` pieces.

:func:`fit_pressure` reports the tightest of these as a :class:`Pressure`; ``scale < 1`` means no
lowering fits, and ``floor(nchunks · scale)`` chunks per source is what a schedule of the same shape
could hold. AllToAll (path routes) is not checked here (``scale`` is ``inf``).

>>> from synth import load_topology, synthesize
>>> p = fit_pressure(synthesize("allgather", load_topology("ring:4")).schedule)
>>> p.fits, p.limit
(True, 'xml_nodes')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from synth.schedule import Schedule
from synth.schedule.parts import RouteKind

from .limits import runtime_limits

__all__ = ["Pressure", "fit_pressure"]

_TREES = (RouteKind.OUT_TREE, RouteKind.IN_TREE)


@dataclass(frozen=True, slots=True)
class Pressure:
    """The tightest lower bound of :func:`fit_pressure`.

    ``scale``: the factor the schedule's per-rank (or per-pair) load may grow by and still meet
    ``limit`` (``< 1``: over it; ``inf``: not checked); ``message`` names the rank or pair and the
    figures.
    """

    scale: float
    limit: str
    message: str

    @property
    def fits(self) -> bool:
        """Whether the lower bounds allow a lowering (they do not prove one exists)."""
        return self.scale >= 1.0

    def chunk_cap(self, nchunks: int) -> int:
        """Most chunks per source a schedule of this shape could hold (at least 1).

        >>> Pressure(0.45, "xml_nodes", "").chunk_cap(7)
        3
        """
        if not math.isfinite(self.scale):
            return nchunks
        return max(1, math.floor(nchunks * self.scale + 1e-9))


def fit_pressure(schedule: Schedule, runtime: str = "msccl-executor-nccl", *,
                 max_channels: int | None = None, pairs: bool = True) -> Pressure:
    """The lower bounds of the module docstring for ``schedule`` on ``runtime``.

    The XML-node bound costs one pass over the routes; the per-pair bound (``pairs``), one over the
    hops, runs only when the first one passes.
    """
    limits = runtime_limits(runtime)
    channels = limits.max_channels if max_channels is None else max_channels
    routes = [r for r in schedule.routes if r.kind in _TREES]
    if not routes or len(routes) != len(schedule.routes):
        return Pressure(math.inf, "none", "path routes are not checked")
    n = schedule.nranks
    pieces = np.fromiter((-(-r.chunks // limits.max_cnt) for r in routes), dtype=np.int64, count=len(routes))
    roots = np.fromiter((r.root for r in routes), dtype=np.int64, count=len(routes))
    steps = int(pieces.sum()) - np.bincount(roots, weights=pieces, minlength=n).astype(np.int64)
    fixed = 1 + n + 1  # <algo>, the <gpu> elements, at least one threadblock
    rank = int(np.argmax(steps))
    room = limits.max_nodes - fixed
    node_scale = room / int(steps[rank]) if steps[rank] > 0 else math.inf
    if node_scale < 1.0:
        return Pressure(node_scale, "xml_nodes",
                        f"gpu {rank} needs at least {fixed + int(steps[rank])} XML nodes ({int(steps[rank])} "
                        f"steps, one per route piece it receives or relays), {runtime}'s reader allows "
                        f"{limits.max_nodes}")
    if not pairs:
        return Pressure(node_scale, "xml_nodes",
                        f"gpu {rank} needs at least {fixed + int(steps[rank])} XML nodes of {limits.max_nodes}")
    lens = np.fromiter((len(r.hops) for r in routes), dtype=np.int64, count=len(routes))
    total = int(lens.sum())
    src = np.fromiter((h.src for r in routes for h in r.hops), dtype=np.int64, count=total)
    dst = np.fromiter((h.dst for r in routes for h in r.hops), dtype=np.int64, count=total)
    per_pair = np.bincount(src * n + dst, weights=np.repeat(pieces, lens), minlength=n * n)
    pair = int(np.argmax(per_pair))
    most = channels * limits.max_steps_per_tb
    pair_scale = most / per_pair[pair] if per_pair[pair] > 0 else math.inf
    if pair_scale < node_scale:
        return Pressure(pair_scale, "pair_steps",
                        f"gpu {pair // n} -> gpu {pair % n} carries {int(per_pair[pair])} route pieces, but "
                        f"{channels} channels x {limits.max_steps_per_tb} steps per threadblock hold {most}")
    return Pressure(node_scale, "xml_nodes",
                    f"gpu {rank} needs at least {fixed + int(steps[rank])} XML nodes of {limits.max_nodes}")
