"""Size-aware selection: for each message-size band, the Pareto point with the least predicted time.

The predicted time is the calibrated simulator (:func:`synth.simulation.simulate` under a cost
profile: launch, per-hop and link-efficiency terms) at the band's representative size, with the
slice count :func:`~synth.simulation.auto_slices` picks. Given representative sizes
``s_1 < ... < s_m`` (nccl-tests ``S``), band ``i`` covers ``[b_i, b_{i+1} - 1]`` where ``b_1 = 0``
and ``b_i`` is the geometric mean of ``s_{i-1}`` and ``s_i`` (the last band has no upper end);
neighbouring bands that pick the same point are merged.

>>> bands_from_sizes([1 << 20, 16 << 20])
[(0, 4194303), (4194304, None)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from synth.errors import SolverError, short_repr
from synth.latency.pareto import ParetoPoint
from synth.simulation import CostProfile, auto_slices, load_profile, simulate
from synth.topologies.model import Topology

__all__ = ["BandChoice", "bands_from_sizes", "choose_bands", "predict_time_s"]


@dataclass(frozen=True)
class BandChoice:
    """One band ``min_bytes <= S <= max_bytes`` (``None``: no upper end) and its chosen point.

    ``predicted_s`` lists every point's predicted time at ``size_bytes`` (index = point);
    ``evaluated`` holds ``(size, predicted_s)`` for every representative size merged into the band.
    """

    min_bytes: int
    max_bytes: int | None
    size_bytes: int
    point: int
    predicted_s: tuple[float, ...]
    evaluated: tuple[tuple[int, tuple[float, ...]], ...] = ()


def bands_from_sizes(sizes: Sequence[int]) -> list[tuple[int, int | None]]:
    """Band edges around representative sizes (module docstring)."""
    ss = sorted(set(int(s) for s in sizes))
    if not ss or ss[0] <= 0:
        raise SolverError(f"sizes must be positive byte counts, got {short_repr(list(sizes))}")
    lows = [0] + [math.ceil(math.sqrt(a * b)) for a, b in zip(ss[:-1], ss[1:])]
    return [(lo, (lows[i + 1] - 1) if i + 1 < len(lows) else None) for i, lo in enumerate(lows)]


def predict_time_s(point: ParetoPoint, topo: Topology, nbytes: float, profile: CostProfile | str | None) -> float:
    """The calibrated simulator's completion time of ``point`` for ``S = nbytes``."""
    sched = point.schedule
    return simulate(sched, topo, nbytes, slices_per_chunk=auto_slices(sched, nbytes), check=False,
                    profile=profile).time_s


def choose_bands(
    points: Sequence[ParetoPoint], topo: Topology, sizes: Sequence[int], profile: CostProfile | str | None = "h200"
) -> list[BandChoice]:
    """The least-predicted-time point per band of ``sizes`` (merged where the choice repeats)."""
    if not points:
        raise SolverError("choose_bands needs at least one schedule")
    prof = load_profile(profile)
    ss = sorted(set(int(s) for s in sizes))
    edges = bands_from_sizes(ss)
    out: list[BandChoice] = []
    for (lo, hi), s in zip(edges, ss):
        times = tuple(predict_time_s(p, topo, s, prof) for p in points)
        best = min(range(len(points)), key=lambda i: (times[i], i))
        if out and out[-1].point == best:
            prev = out[-1]
            out[-1] = BandChoice(prev.min_bytes, hi, prev.size_bytes, best, prev.predicted_s, (*prev.evaluated, (s, times)))
        else:
            out.append(BandChoice(lo, hi, s, best, times, ((s, times),)))
    return out
