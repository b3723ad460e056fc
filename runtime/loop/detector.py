"""Bottleneck-cut drift detector: MCCL Algorithm 1, exactly.

For a deployed schedule ``s`` with ``n_a`` chunks on link ``a`` and smoothed capacities ``M_a``:

1. ``x_min(s) = min_{a: n_a > 0} M_a / n_a`` (the per-chunk rate the most congested link allows);
2. for each ``a`` in the bottleneck cut ``K_s``: ``slack_a = (M_a − n_a · x_min) / M_a`` and
   ``δ_a = |slack_a − base_slack_{s,a}|``;
3. flag ``s`` when ``max_{a ∈ K_s} δ_a > Γ``.

Uniform scaling of every link leaves every slack unchanged (no flag); degrading a link off the cut
that stays non-binding leaves ``x_min`` and the cut's slacks unchanged (no flag); degrading a cut
link, or any link until it binds, lowers ``x_min`` below what the other cut links allow and opens
slack on them (flag). A schedule crossing a link of capacity 0 is always flagged.

Examples
--------
Two cut links with 4 and 2 chunks, each saturated at 100 and 50 Gbit/s (x_min = 25):

>>> loads = {("a", "b"): 4, ("c", "d"): 2, ("e", "f"): 1}
>>> from synth import CutLink
>>> cut = (CutLink("a", "b", 0.0), CutLink("c", "d", 0.0))
>>> caps = {("a", "b"): 100.0, ("c", "d"): 50.0, ("e", "f"): 400.0}
>>> detect(loads, cut, caps, gamma=0.1).flagged
False
>>> v = detect(loads, cut, {**caps, ("c", "d"): 40.0}, gamma=0.1)   # x_min = 20: a->b has slack 0.2
>>> v.flagged, round(v.max_delta, 3), v.deciding
(True, 0.2, (('a', 'b'),))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synth import CutLink, LoopcollError, Schedule, Topology

__all__ = ["CutDeviation", "Verdict", "VerdictCache", "detect", "verdict_for_schedule", "watched_cut"]

LinkKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CutDeviation:
    """One cut link's figures in a verdict."""

    src: str
    dst: str
    chunks: int
    capacity_gbps: float
    slack: float
    base_slack: float
    delta: float

    def to_dict(self) -> dict[str, Any]:
        return {"link": f"{self.src}->{self.dst}", "n_a": self.chunks, "M_a_gbps": self.capacity_gbps,
                "slack": self.slack, "base_slack": self.base_slack, "delta": self.delta}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The detector's decision for one schedule.

    ``flagged`` when ``max_delta > gamma`` (or a used link is down); ``deciding`` lists the cut links
    whose deviation exceeds ``gamma``; ``x_min_gbps`` is the per-chunk bottleneck rate and
    ``x_min_link`` the link attaining it; ``predicted_rate_ratio`` is ``x_min`` over the ``x_min`` the
    schedule had when it was made (``< 1``: slower than at synthesis).
    """

    flagged: bool
    gamma: float
    max_delta: float
    x_min_gbps: float
    x_min_link: LinkKey | None
    deviations: tuple[CutDeviation, ...]
    deciding: tuple[LinkKey, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "flagged": self.flagged, "gamma": self.gamma, "max_delta": self.max_delta,
            "x_min_gbps": self.x_min_gbps,
            "x_min_link": None if self.x_min_link is None else f"{self.x_min_link[0]}->{self.x_min_link[1]}",
            "deviations": [d.to_dict() for d in self.deviations],
            "deciding": [f"{a}->{b}" for a, b in self.deciding], "message": self.message,
        }


def detect(
    loads: Mapping[LinkKey, int],
    cut: Sequence[CutLink],
    capacities_gbps: Mapping[LinkKey, float],
    *,
    gamma: float,
) -> Verdict:
    """Algorithm 1 on explicit inputs: ``n_a`` (``loads``), ``K_s`` with base slacks, ``M_a``.

    ``capacities_gbps`` must hold every link with ``n_a > 0``. ``gamma`` is Γ (a fraction).
    """
    if not (math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    used = sorted((k, n) for k, n in loads.items() if n > 0)
    if not used:
        return Verdict(False, gamma, 0.0, math.inf, None, (), (), "schedule moves no data")
    down = [k for k, _ in used if capacities_gbps[k] <= 0]
    if down:
        a, b = down[0]
        return Verdict(True, gamma, math.inf, 0.0, down[0], (), tuple(down), f"link {a}->{b} is down (0 Gbit/s)")
    x_min, x_link = min((capacities_gbps[k] / n, k) for k, n in used)
    devs = []
    for link in cut:
        a, b, base = link.src, link.dst, link.base_slack
        m = capacities_gbps.get((a, b))
        n = loads.get((a, b), 0)
        if m is None or m <= 0:
            continue
        slack = (m - n * x_min) / m
        devs.append(CutDeviation(a, b, n, m, slack, base, abs(slack - base)))
    max_delta = max((d.delta for d in devs), default=0.0)
    deciding = tuple((d.src, d.dst) for d in devs if d.delta > gamma)
    flagged = max_delta > gamma
    msg = (f"max delta {max_delta:.4f} {'>' if flagged else '<='} gamma {gamma:.4g}; x_min {x_min:.6g} Gbit/s "
           f"per chunk on {x_link[0]}->{x_link[1]}")
    return Verdict(flagged, gamma, max_delta, x_min, x_link, tuple(devs), deciding, msg)


def verdict_for_schedule(schedule: Schedule, capacities_gbps: Mapping[LinkKey, float], *, gamma: float) -> Verdict:
    """Algorithm 1 for a :class:`synth.Schedule`: its ``link_loads()`` and ``bottleneck`` (``K_s``).

    >>> from synth import load_topology, synthesize
    >>> topo = load_topology("hpn:1x2x4")
    >>> s = synthesize("allgather", topo).schedule
    >>> caps = {lk.key: lk.gbps for lk in topo.links}
    >>> verdict_for_schedule(s, caps, gamma=0.1).flagged
    False
    >>> verdict_for_schedule(s, {k: 0.5 * v for k, v in caps.items()}, gamma=0.1).flagged  # uniform scaling
    False
    >>> verdict_for_schedule(s, {**caps, ("gpu0", "tor0.0"): 200.0}, gamma=0.1).flagged  # a cut link halves
    True
    """
    return detect(schedule.link_loads(), schedule.bottleneck, capacities_gbps, gamma=gamma)


def watched_cut(cut: Sequence[CutLink], schedule: Schedule, topology: Topology) -> tuple[CutLink, ...]:
    """The cut ``K_s`` to watch for a deployed schedule: ``cut`` (the version's), else the links ``schedule``
    saturates on ``topology`` (:meth:`synth.Schedule.bottleneck_for`).

    A schedule the synthesizer did not make (the NCCL-like baseline, a deployed transform) carries no cut;
    with an empty cut Algorithm 1 has no slack to watch and never flags, so a degradation would be seen only
    by the periodic recovery check (docs/controller.md §4).

    >>> from synth import load_topology
    >>> from runtime.loop.bootstrap import fallback_schedule
    >>> topo = load_topology("hpn:1x2x4")
    >>> ring = fallback_schedule("allgather", topo)
    >>> ring.bottleneck, len(watched_cut((), ring, topo)) > 0
    ((), True)
    """
    if cut:
        return tuple(cut)
    try:
        return schedule.bottleneck_for(topology)
    except LoopcollError:
        return ()


class VerdictCache:
    """:func:`detect`'s last verdict per key, recomputed only when the schedule, the cut, the estimator (by
    identity), its ``revision`` (any change of an estimate) or ``gamma`` changed: a poll without new telemetry
    costs no detector pass (at 1024 ranks one costs tens of ms, and the daemon polls every 50 ms).

    >>> from types import SimpleNamespace
    >>> from synth import load_topology, synthesize
    >>> topo = load_topology("hpn:1x2x4")
    >>> sched = synthesize("allgather", topo).schedule
    >>> est = SimpleNamespace(revision=0, capacities_gbps=lambda keys: {k: topo.link(*k).gbps for k in keys})
    >>> cache = VerdictCache()
    >>> cut = sched.bottleneck_for(topo)
    >>> v = cache.verdict("k", sched, cut, est, 0.9)
    >>> again = cache.verdict("k", sched, cut, est, 0.9)
    >>> est.revision += 1  # an estimate moved
    >>> again is v, cache.verdict("k", sched, cut, est, 0.9) is v, v.flagged
    (True, False, False)
    """

    def __init__(self) -> None:
        self._last: dict[Any, tuple[tuple[Any, ...], Verdict]] = {}
        self._loads: dict[Any, tuple[Schedule, Mapping[LinkKey, int]]] = {}  # n_a per key, of its schedule

    def verdict(self, key: Any, schedule: Schedule, cut: Sequence[CutLink], estimator: Any, gamma: float) -> Verdict:
        """Algorithm 1 for ``schedule`` and its ``cut`` under ``estimator.capacities_gbps``."""
        stamp = (schedule, cut, estimator, estimator.revision, gamma)
        hit = self._last.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0][:3], stamp[:3])) and hit[0][3:] == stamp[3:]:
            return hit[1]
        held = self._loads.get(key)
        if held is None or held[0] is not schedule:  # n_a changes only with the schedule
            held = self._loads[key] = (schedule, schedule.link_loads())
        loads = held[1]
        v = detect(loads, cut, estimator.capacities_gbps(loads), gamma=gamma)
        self._last[key] = (stamp, v)
        return v
