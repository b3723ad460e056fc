"""Synthesis under the executor's pair routing: every hop is its GPU pair's route.

A peer-addressed executor (MSCCL XML, the torch executor) sends every GPU→GPU transfer along the
route :func:`synth.routing.pair_route` names, whatever other paths the fabric has. The schedules
made here use only such hops, so they run at exactly their stated algbw; their optimum (the
*routed* optimum) is at most the free-routing optimum of :func:`synth.optimal_bound`, and the gap
between the two is what the executor loses on the fabric. :func:`synth.synthesize` calls in here
whenever a topology has a GPU pair with several switch-only paths
(:func:`synth.routing.has_route_choice`); elsewhere the two optima coincide and the free
synthesizers' schedules already follow the routes.

Examples
--------
>>> from synth.routed.fabrics import forestcoll_dgx_a100
>>> b = routed_bound("allgather", forestcoll_dgx_a100(1))
>>> round(b, 3)  # 8 GPUs at 300 GB/s into the NVSwitch: 8 * 300 / 7
342.857
"""

from __future__ import annotations

from typing import Any

from synth.collective import Collective
from synth.errors import SolverError
from synth.result import SynthResult
from synth.routed._cutlp import cut_lp
from synth.routed._logical import Logical
from synth.routed.alltoall import RoutedAllToAllWarm, routed_alltoall_lp, synthesize_routed_alltoall
from synth.routed.trees import DEFAULT_MAX_CHUNKS, synthesize_routed_trees
from synth.schedule import Schedule
from synth.topologies.capacity import refuse_adjusted
from synth.topologies.model import Topology

__all__ = [
    "DEFAULT_MAX_CHUNKS",
    "RoutedAllToAllWarm",
    "routed_bound",
    "synthesize_routed",
    "synthesize_routed_alltoall",
    "synthesize_routed_trees",
]


def synthesize_routed(
    collective: str,
    topo: Topology,
    *,
    chunks: int | None = None,
    warm_from: Any = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
) -> SynthResult:
    """Routed synthesis of ``collective``; arguments as :func:`synth.synthesize` (AllToAll relay paths
    are priced on the logical graph without a step bound, so there is no ``max_steps``)."""
    if collective == "alltoall":
        return synthesize_routed_alltoall(topo, nchunks=chunks, solver=solver,
                                          time_limit_s=time_limit_s, warm_start=warm_from)
    # Rule 0 (docs/exactness.md) is proven for routed AllToAll, not for routed trees (a tree's routes
    # may cross one link N - 1 times).
    refuse_adjusted(topo, f"routed {collective}", lifted=False)
    warm = warm_from.schedule if isinstance(warm_from, SynthResult) else warm_from
    if warm is not None and not isinstance(warm, Schedule):
        raise SolverError(f"warm_start must be a Schedule or a SynthResult, got {type(warm).__name__}")
    return synthesize_routed_trees(collective, topo, max_chunks=chunks, warm_start=warm, solver=solver,
                                   time_limit_s=time_limit_s)


def routed_bound(collective: Collective | str, topo: Topology, *, solver: str = "highs") -> float:
    """The routed optimum algbw (GB/s): the LP optimum over schedules of routed hops."""
    kind = Collective.parse(collective)
    if kind is Collective.ALLTOALL:
        cg, sol, _ = routed_alltoall_lp(topo, solver=solver)
        return topo.nranks * cg.scale / float(sol.objective)
    refuse_adjusted(topo, f"the routed {collective} bound", lifted=False)
    lg = Logical.build(topo)
    lg.check_connected(topo.name)
    total_T = 0.0  # noqa: N806
    if kind.in_trees:
        total_T += cut_lp(lg.transposed())[1]  # noqa: N806
    if kind.out_trees:
        total_T += cut_lp(lg)[1]  # noqa: N806
    return topo.nranks / total_T
