"""Latency-aware tree schedules: depth-bounded synthesis, the depth/throughput Pareto set, and the
choice of a schedule per message-size band under a calibrated cost profile (``docs/latency.md``).

>>> from synth import load_topology
>>> r = synthesize_depth_bounded("allgather", load_topology("hpn:1x2x4"), 2)
>>> r.figures.depth
2
"""

from __future__ import annotations

from synth.latency.bounded import DEFAULT_CHUNKS, synthesize_depth_bounded
from synth.latency.depth import route_depths, schedule_depth

__all__ = ["DEFAULT_CHUNKS", "route_depths", "schedule_depth", "synthesize_depth_bounded"]
