"""loopcoll: closed-loop collective-communication synthesis.

The face of the project: the ``loopcoll`` CLI (:mod:`loopcoll.cli`) and the public API
re-exported from :mod:`synth` (and, as they land, :mod:`msccl_xml` and :mod:`runtime`).

Examples
--------
>>> import loopcoll
>>> round(loopcoll.optimal_bound("allgather", loopcoll.load_topology("dgx-a100:2")).algbw_GBps, 3)
346.667
"""

from __future__ import annotations

from msccl_xml import export
from synth import (
    COLLECTIVES,
    AllToAllFigures,
    AllToAllvFigures,
    DepthFigures,
    Figures,
    ReductionFigures,
    RoutedAllToAllFigures,
    RoutedTreeFigures,
    RoutingFigures,
    TreeFigures,
    Bound,
    Collective,
    CutLink,
    Hop,
    Link,
    LoopcollError,
    Node,
    NodeKind,
    Route,
    RouteKind,
    Schedule,
    ScheduleError,
    SolverError,
    Status,
    SynthResult,
    Topology,
    TopologyError,
    XmlError,
    busbw_GBps,
    load_topology,
    named_topology,
    optimal_bound,
    read_schedule,
    synthesize,
    write_schedule,
)

__all__ = [
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
    "COLLECTIVES",
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
    "export",
    "read_schedule",
    "synthesize",
    "write_schedule",
]
__version__ = "0.1.0"
