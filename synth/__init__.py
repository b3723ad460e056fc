"""loopcoll's synthesis core: topologies, the schedule IR, optimal bounds and synthesizers.

Pure Python over networkx/scipy/OR-Tools/HiGHS; no GPU and no torch.

Examples
--------
>>> from synth import load_topology, optimal_bound
>>> round(optimal_bound("alltoall", load_topology("hpn:1x2x8")).algbw_GBps, 6)
100.0
"""

from __future__ import annotations

from synth.schedule.io import read_schedule, write_schedule
from synth._types import COLLECTIVES, Collective
from synth.bounds import Bound, busbw_GBps, optimal_bound
from synth.errors import LoopcollError, ScheduleError, SolverError, TopologyError, XmlError
from synth.figures import (
    AllToAllFigures,
    AllToAllvFigures,
    DepthFigures,
    Figures,
    ReductionFigures,
    RoutedAllToAllFigures,
    RoutedTreeFigures,
    RoutingFigures,
    TreeFigures,
)
from synth.result import Status, SynthResult
from synth.schedule import CutLink, Hop, Route, RouteKind, Schedule
from synth.synthesis import synthesize
from synth.topologies import Link, Node, NodeKind, Topology, load_topology, named_topology

__all__ = [
    "COLLECTIVES",
    "AllToAllFigures",
    "AllToAllvFigures",
    "DepthFigures",
    "Figures",
    "ReductionFigures",
    "RoutedAllToAllFigures",
    "RoutedTreeFigures",
    "RoutingFigures",
    "TreeFigures",
    "Bound",
    "Collective",
    "CutLink",
    "Hop",
    "Link",
    "LoopcollError",
    "Node",
    "NodeKind",
    "Route",
    "RouteKind",
    "Schedule",
    "ScheduleError",
    "SolverError",
    "Status",
    "SynthResult",
    "Topology",
    "TopologyError",
    "XmlError",
    "busbw_GBps",
    "load_topology",
    "named_topology",
    "optimal_bound",
    "read_schedule",
    "synthesize",
    "write_schedule",
]
