"""ReduceScatter and AllReduce from ForestColl trees, by reversal.

ReduceScatter on ``topo`` is AllGather on ``topo.reversed()`` with every tree turned around: an
out-tree rooted at r on the reversed links is an in-tree into r on the real links (hops listed
leaves first). AllReduce is ReduceScatter followed by AllGather, both sets of routes in one
schedule; its rate is ``1/(1/RS + 1/AG)``, half the AllGather optimum on symmetric links.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("nvswitch:4")
>>> round(synthesize_allreduce(t).algbw_GBps, 3) == round(synthesize_allgather(t).algbw_GBps / 2, 3)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
import time
from fractions import Fraction

from synth.forestcoll_warm.allgather import (
    Solved,
    _cut_links,
    _validate_args,
    _warm_doc,
    finish,
    solve_out_trees,
    synthesize_allgather,
)
from synth.figures import ReductionFigures
from synth.result import SynthResult
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies.model import Topology

__all__ = ["synthesize_allgather", "synthesize_allreduce", "synthesize_reducescatter"]


def _in_trees(routes: Sequence[Route]) -> list[Route]:
    return [
        Route(RouteKind.IN_TREE, r.root, r.chunks, tuple(Hop(h.dst, h.src, tuple(reversed(h.path))) for h in reversed(r.hops)))
        for r in routes
    ]


def _reduce_side(topo: Topology, max_chunks: int | None, warm_start: Schedule | None) -> Solved:
    return solve_out_trees(
        topo.reversed(), max_chunks=max_chunks, hint_doc=_warm_doc(warm_start, "in"), prev=warm_start,
        prev_kind=RouteKind.IN_TREE,
    )


def _rs_cut_links(topo: Topology, cut: frozenset[str]) -> list[tuple[str, str]]:
    # Links leaving S on the reversed topology are the real links entering S.
    return sorted(lk.key for lk in topo.live_links if lk.dst in cut and lk.src not in cut)


def synthesize_reducescatter(
    topology: Topology,
    *,
    max_chunks: int | None = None,
    warm_start: Schedule | None = None,
) -> SynthResult:
    """Throughput-optimal ReduceScatter: the reversed trees of AllGather on the reversed topology.

    Parameters and result as :func:`synthesize_allgather`; the bound is the AllGather bound of
    ``topology.reversed()`` (equal to the AllGather bound on symmetric links).

    Examples
    --------
    >>> from synth.topologies import named_topology
    >>> synthesize_reducescatter(named_topology("ring:4")).schedule.routes[0].kind.value
    'in_tree'
    """
    _validate_args(topology, max_chunks, warm_start)
    start = time.perf_counter()
    solved = _reduce_side(topology, max_chunks, warm_start)
    optimal = float(topology.nranks * solved.bound_gbps / 8)
    return finish(topology, "reducescatter", _in_trees(solved.routes), [solved],
                  _rs_cut_links(topology, solved.cut), optimal, solved.bound_gbps / 8, start,
                  warm_start is not None, {"in": solved.hint_meta}, figures=solved.figures, u_meta=str(solved.U))


def _scale(routes: Sequence[Route], factor: int) -> list[Route]:
    return [Route(r.kind, r.root, r.chunks * factor, r.hops) for r in routes]


def synthesize_allreduce(
    topology: Topology,
    *,
    max_chunks: int | None = None,
    warm_start: Schedule | None = None,
) -> SynthResult:
    """AllReduce as ReduceScatter (in-trees) then AllGather (out-trees) in one schedule.

    Each phase carries every chunk once, so both use a common chunk count ``lcm(k_RS, k_AG)``
    (with ``max_chunks``, each phase is limited so that the common count stays within it where
    possible). The rate is ``1/(1/RS + 1/AG)`` of the two phases, optimal among RS+AG schedules.

    Examples
    --------
    >>> from synth.topologies import named_topology
    >>> synthesize_allreduce(named_topology("ring:4")).schedule.collective
    'allreduce'
    """
    _validate_args(topology, max_chunks, warm_start)
    start = time.perf_counter()
    rs = _reduce_side(topology, max_chunks, warm_start)
    ag = solve_out_trees(topology, max_chunks=max_chunks, hint_doc=_warm_doc(warm_start, "out"),
                         prev=warm_start, prev_kind=RouteKind.OUT_TREE)
    common = math.lcm(rs.k, ag.k)
    routes = _scale(_in_trees(rs.routes), common // rs.k) + _scale(ag.routes, common // ag.k)
    bound = 1 / (1 / rs.bound_gbps + 1 / ag.bound_gbps) / 8
    optimal = float(topology.nranks * bound)
    cut = sorted(set(_cut_links(topology, ag.cut)) | set(_rs_cut_links(topology, rs.cut)))
    merged = Solved(tuple(routes), common, ag.U, 1 / (1 / rs.rate_gbps + 1 / ag.rate_gbps),
                    1 / (1 / rs.bound_gbps + 1 / ag.bound_gbps), ag.cut, {}, None,
                    "; ".join(m for m in (rs.message, ag.message) if m))
    assert rs.figures is not None and ag.figures is not None
    figures = ReductionFigures(reducescatter=rs.figures, allgather=ag.figures, k=common, trees=len(routes))
    return finish(topology, "allreduce", routes, [merged], cut, optimal, Fraction(bound), start,
                  warm_start is not None, {"in": rs.hint_meta, "out": ag.hint_meta},
                  figures=figures, u_meta=[str(rs.U), str(ag.U)])



