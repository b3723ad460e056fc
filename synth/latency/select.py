"""Size-aware selection: for each message-size band, the Pareto point with the least predicted time.

The predicted time is the calibrated simulator (:func:`synth.simulation.simulate` under a cost
profile: launch, per-hop and link-efficiency terms) at the band's representative size, with the
slice count :func:`~synth.simulation.auto_slices` picks. Given representative sizes
``s_1 < ... < s_m`` (nccl-tests ``S``), band ``i`` covers ``[b_i, b_{i+1} - 1]`` where ``b_1 = 0``
and ``b_i`` is the geometric mean of ``s_{i-1}`` and ``s_i`` (the last band has no upper end);
neighbouring bands that pick the same point are merged.

A time limit bounds the choice: a size whose simulations have not started by then is decided on
the α–β estimate of every point instead (:func:`estimate_time_s`: the executor's launch and per-hop
costs over the point's depth, plus ``S`` over its algbw at the executor's worst link efficiency),
and its band says so (``method="estimated"``). A size once started is simulated for every point,
so the points of one size are always compared by one method.

>>> bands_from_sizes([1 << 20, 16 << 20])
[(0, 4194303), (4194304, None)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from synth._deadline import check_time_limit
from synth.errors import SolverError, short_repr
from synth.latency.pareto import ParetoPoint
from synth.simulation import CostProfile, auto_slices, load_profile, simulate
from synth.simulation.costmodel import executor_for
from synth.topologies.model import Topology

__all__ = ["BandChoice", "bands_from_sizes", "choose_bands", "estimate_time_s", "predict_time_s"]


@dataclass(frozen=True)
class BandChoice:
    """One band ``min_bytes <= S <= max_bytes`` (``None``: no upper end) and its chosen point.

    ``predicted_s`` lists every point's predicted time at ``size_bytes`` (index = point);
    ``evaluated`` holds ``(size, predicted_s)`` for every representative size merged into the band;
    ``method`` is ``"simulated"`` (the calibrated simulator) or ``"estimated"`` (the α–β estimate, for
    sizes the time limit left no time to simulate; a band merging both says ``"simulated+estimated"``).
    """

    min_bytes: int
    max_bytes: int | None
    size_bytes: int
    point: int
    predicted_s: tuple[float, ...]
    evaluated: tuple[tuple[int, tuple[float, ...]], ...] = ()
    method: str = "simulated"


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


def estimate_time_s(point: ParetoPoint, nbytes: float, profile: CostProfile | str | None) -> float:
    """The α–β estimate of ``point``'s time for ``S = nbytes``: launch + per-hop cost × depth, plus
    ``S`` over its algbw scaled by the executor's worst link efficiency (module docstring).

    >>> from synth import synthesize
    >>> from synth.latency.pareto import ParetoPoint
    >>> from synth.topologies import named_topology
    >>> r = synthesize("allgather", named_topology("nvswitch:4"))
    >>> p = ParetoPoint(None, 1, r.algbw_GBps, r)
    >>> estimate_time_s(p, 1 << 30, "ideal") == (1 << 30) / (r.algbw_GBps * 1e9)
    True
    """
    prof = load_profile(profile)
    cost = prof.executors.get(executor_for(point.schedule))
    alpha_s = 0.0 if cost is None else (cost.launch_us + cost.hop_us * point.depth) * 1e-6
    eff = min(cost.efficiency.values(), default=1.0) if cost is not None else 1.0
    if point.algbw_GBps <= 0:
        return math.inf
    return alpha_s + nbytes / (point.algbw_GBps * 1e9 * eff)


def choose_bands(
    points: Sequence[ParetoPoint], topo: Topology, sizes: Sequence[int], profile: CostProfile | str | None = "h200",
    *, time_limit_s: float | None = None,
) -> list[BandChoice]:
    """The least-predicted-time point per band of ``sizes`` (merged where the choice repeats); with
    ``time_limit_s``, sizes not started by then are decided on :func:`estimate_time_s` (module docstring)."""
    if not points:
        raise SolverError("choose_bands needs at least one schedule")
    time_limit_s = check_time_limit(time_limit_s)
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    prof = load_profile(profile)
    ss = sorted(set(int(s) for s in sizes))
    edges = bands_from_sizes(ss)
    out: list[BandChoice] = []
    for (lo, hi), s in zip(edges, ss):
        if deadline is None or time.perf_counter() < deadline:
            times, method = tuple(predict_time_s(p, topo, s, prof) for p in points), "simulated"
        else:
            times, method = tuple(estimate_time_s(p, s, prof) for p in points), "estimated"
        best = min(range(len(points)), key=lambda i: (times[i], i))
        if out and out[-1].point == best:
            prev = out[-1]
            merged = prev.method if prev.method == method else "simulated+estimated"
            out[-1] = BandChoice(prev.min_bytes, hi, prev.size_bytes, best, prev.predicted_s,
                                 (*prev.evaluated, (s, times)), merged)
        else:
            out.append(BandChoice(lo, hi, s, best, times, ((s, times),), method))
    return out
