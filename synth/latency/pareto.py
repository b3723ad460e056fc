"""The depth/throughput Pareto set of a tree collective: schedules for a few depth bounds.

Each point is a schedule with its depth (GPU hops, the latency proxy) and bandwidth-term algbw; a
point is kept only when no shallower point is at least as fast. Finite bounds are tried in
increasing order and stop once the LP reaches the unbounded optimum (a deeper bound cannot beat
it); ``None`` (ForestColl, the exact optimum) closes the set.

>>> from synth import load_topology
>>> pts = pareto_set("allgather", load_topology("hpn:1x2x4"), depths=(1, 2, None))
>>> [(p.max_depth, p.depth) for p in pts][:1]
[(2, 2)]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from synth._deadline import check_time_limit
from synth._types import Collective
from synth.errors import SolverError, short_repr
from synth.figures import DepthFigures
from synth.latency.bounded import synthesize_depth_bounded, time_share
from synth.latency.depth import schedule_depth
from synth.result import SynthResult
from synth.schedule import Schedule
from synth.synthesis import synthesize
from synth.topologies.model import Topology

__all__ = ["DEFAULT_DEPTHS", "ParetoPoint", "pareto_set"]

DEFAULT_DEPTHS: tuple[int | None, ...] = (1, 2, 3, 4, None)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParetoPoint:
    """One schedule of the set: its bound (``None``: unbounded), actual depth, algbw and result."""

    max_depth: int | None
    depth: int
    algbw_GBps: float  # noqa: N815
    result: SynthResult
    name: str = ""

    @property
    def schedule(self) -> Schedule:
        assert self.result.schedule is not None
        return self.result.schedule

    @property
    def label(self) -> str:
        """``D<=2`` or ``D=inf`` (or ``name`` for another candidate, e.g. a baseline)."""
        if self.name:
            return self.name
        return "D=inf" if self.max_depth is None else f"D<={self.max_depth}"


def _check_depths(depths: Sequence[int | None]) -> list[int | None]:
    out: list[int | None] = []
    for d in depths:
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
            raise SolverError(f"depth bounds must be integers >= 1 or None, got {short_repr(d)}")
        if d not in out:
            out.append(d)
    if not out:
        raise SolverError("pareto_set needs at least one depth bound")
    return sorted((d for d in out if d is not None)) + ([None] if None in out else [])  # type: ignore[return-value]


def pareto_set(
    collective: Collective,
    topo: Topology,
    *,
    depths: Sequence[int | None] = DEFAULT_DEPTHS,
    chunks: int | None = None,
    unbounded_chunks: int | None = None,
    time_limit_s: float | None = None,
) -> list[ParetoPoint]:
    """Schedules of ``collective`` for the depth bounds ``depths``, dominated ones dropped, by depth.

    For AllToAll a bound is column generation's ``max_steps`` (GPU hops per path; ``None``: the
    smallest that keeps the optimum) and ``chunks`` its ``nchunks``.

    ``chunks`` caps the depth-bounded schedules' chunks per source; ``unbounded_chunks`` is
    ForestColl's ``max_chunks`` for ``None`` (default: uncapped, the exact optimum). A finite bound
    with no tree at all (switch paths need more hops) is skipped.

    ``time_limit_s`` bounds the whole set: the bounds are solved in turn, each with an equal share
    of the time left (:func:`~synth.latency.bounded.time_share`); a point whose solve the limit
    stopped has status ``TIME_LIMIT`` and its certified gap.
    """
    time_limit_s = check_time_limit(time_limit_s)
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    if collective == "alltoall":
        return _alltoall_set(topo, _check_depths(depths), chunks, deadline)
    points: list[ParetoPoint] = []
    reached = False
    bounds = _check_depths(depths)
    for i, d in enumerate(bounds):
        if d is not None and reached:
            continue
        start = time.perf_counter()
        try:
            res = synthesize_depth_bounded(collective, topo, d, chunks=unbounded_chunks if d is None else chunks,
                                           time_limit_s=time_share(deadline, len(bounds) - i))
        except SolverError as exc:
            if d is not None and "no spanning tree" in str(exc):
                continue
            raise
        log.info("pareto set of %s on %s: depth bound %s done in %.1f s: %s", collective, topo.name,
                 "inf" if d is None else d, time.perf_counter() - start, res.message)
        if res.schedule is None:
            continue
        figures = res.figures
        assert isinstance(figures, DepthFigures)
        if d is not None:
            opt = figures.unbounded_optimal_algbw_GBps
            reached = figures.lp_algbw_GBps >= opt * (1 - 1e-9)
        points.append(ParetoPoint(d, figures.depth, res.algbw_GBps, res))
    return _front(points)


def _alltoall_set(topo: Topology, steps: list[int | None], chunks: int | None,
                  deadline: float | None) -> list[ParetoPoint]:
    """AllToAll: the step bound is column generation's ``max_steps`` (GPU hops per path), each
    bound with its share of the time left to ``deadline``."""
    points: list[ParetoPoint] = []
    for i, s in enumerate(steps):
        try:
            res = synthesize("alltoall", topo, chunks=chunks, max_steps=s,
                             time_limit_s=time_share(deadline, len(steps) - i))
        except SolverError as exc:
            if s is not None and "max_steps" in str(exc):
                continue  # below the hop diameter
            raise
        if res.schedule is None:
            continue
        points.append(ParetoPoint(s, schedule_depth(res.schedule), res.algbw_GBps, res))
    return _front(points)


def _front(points: list[ParetoPoint]) -> list[ParetoPoint]:
    points.sort(key=lambda p: (p.depth, -p.algbw_GBps))
    kept: list[ParetoPoint] = []
    for p in points:
        if not kept or p.algbw_GBps > kept[-1].algbw_GBps * (1 + 1e-9):
            kept.append(p)
    return kept
