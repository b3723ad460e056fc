"""Optimal bounds (the physical limit) of every collective on any topology.

* AllGather: exact, by the cut characterisation (:mod:`synth.bounds.allgather`).
* ReduceScatter: the AllGather bound of the reversed topology (equal on symmetric links).
* AllReduce (ReduceScatter then AllGather): ``1 / (1/RS + 1/AG)``, half the AllGather bound on
  symmetric links.
* AllToAll: maximum concurrent multicommodity flow LP on HiGHS: the compact aggregated LP
  (:mod:`synth.bounds.alltoall`) up to 32 GPUs, column generation (:mod:`synth.alltoall_cg`) above.

Bandwidths follow nccl-tests: algbw in GB/s, busbw = algbw·(N−1)/N (AllReduce ×2).

Examples
--------
>>> from synth.topologies import named_topology
>>> b = optimal_bound("allgather", named_topology("hpn:1x2x8"))
>>> round(b.algbw_GBps, 3), b.exact
(437.333, True)
>>> round(optimal_bound("allreduce", named_topology("hpn:1x2x8")).algbw_GBps, 3)
218.667
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from collections.abc import Sequence

from synth._types import Collective, NodeId, Rank
from synth._deadline import check_time_limit, solving
from synth.bounds.allgather import allgather_rate_gbps
from synth.bounds.alltoall import alltoall_rate_GBps
from synth.errors import SolverError, expect_type
from synth.result import Status
from synth.routing import has_route_choice
from synth.topologies.capacity import certify_rate
from synth.topologies.communicator import communicator
from synth.topologies.model import Topology

__all__ = ["COMPACT_LP_MAX_RANKS", "Bound", "busbw_GBps", "optimal_bound"]

#: Above this many GPUs the AllToAll bound comes from column generation (same LP optimum, far
#: faster than the compact aggregated LP, whose size grows as N × links).
COMPACT_LP_MAX_RANKS = 32


@dataclass(frozen=True, slots=True)
class Bound:
    """An optimal bound: algbw, busbw and the bottleneck that sets it.

    ``status`` and ``message`` follow :class:`~synth.result.SynthResult`: ``OPTIMAL`` when the
    bound is proven; ``TIME_LIMIT`` when an AllToAll LP stopped at ``time_limit_s`` first, and then
    ``algbw_GBps`` is the best proven upper bound (``inf`` when none was proven) and ``message``
    says so. ``success`` is derived from ``status``.

    ``rate_GBps`` is exact (a :class:`~fractions.Fraction`) for the tree collectives and a float
    from the LP for AllToAll (``exact`` says which). ``bottleneck`` lists the cut's links
    ``(src, dst)``; ``cut_nodes`` is the AllGather cut S (empty for AllToAll).
    """

    status: Status
    message: str
    collective: Collective
    topology: str
    nranks: int
    rate_GBps: Fraction | float  # noqa: N815 - per source (per pair for AllToAll)
    algbw_GBps: float  # noqa: N815
    busbw_GBps: float  # noqa: N815
    bottleneck: tuple[tuple[NodeId, NodeId], ...]
    cut_nodes: frozenset[NodeId]
    exact: bool
    solve_time_s: float
    #: The routed optimum (schedules whose every hop is its pair's route, :mod:`synth.routed`), when
    #: asked for (``optimal_bound(..., routed=True)``); equal to ``algbw_GBps`` where no GPU pair
    #: has several switch-only paths.
    routed_algbw_GBps: float | None = None  # noqa: N815

    @property
    def routing_gap_pct(self) -> float | None:
        """What a peer-addressed executor loses on this fabric: ``100 · (1 − routed / free)``."""
        if self.routed_algbw_GBps is None or not math.isfinite(self.algbw_GBps) or self.algbw_GBps <= 0:
            return None
        gap = 100.0 * (1.0 - self.routed_algbw_GBps / self.algbw_GBps)
        return 0.0 if gap < 1e-7 else gap

    @property
    def success(self) -> bool:
        """True when the bound is proven (``status`` is ``OPTIMAL``)."""
        return self.status is Status.OPTIMAL

    def to_json_dict(self) -> dict[str, object]:
        """The CLI's ``--json`` object (an unproven ``inf`` bound is ``null``)."""
        finite = math.isfinite(self.algbw_GBps)
        return {
            "collective": self.collective,
            "topology": self.topology,
            "nranks": self.nranks,
            "algbw_GBps": self.algbw_GBps if finite else None,
            "busbw_GBps": self.busbw_GBps if finite else None,
            "bottleneck": [list(k) for k in self.bottleneck],
            "status": self.status.value,
            "message": self.message,
            **({} if self.routed_algbw_GBps is None else {
                "routed_algbw_GBps": self.routed_algbw_GBps, "routing_gap_pct": self.routing_gap_pct}),
        }


def busbw_GBps(collective: Collective | str, algbw_GBps: float, nranks: int) -> float:  # noqa: N802, N803
    """nccl-tests bus bandwidth.

    >>> busbw_GBps("allreduce", 100.0, 4)
    150.0
    """
    expect_type(collective, str, "collective", SolverError)
    expect_type(algbw_GBps, (int, float), "algbw_GBps", SolverError)
    expect_type(nranks, int, "nranks", SolverError)
    if nranks < 1:
        raise SolverError(f"nranks must be >= 1, got {nranks}")
    return algbw_GBps * Collective.parse(collective).busbw_multiplier * (nranks - 1) / nranks


def _cut_links(topo: Topology, nodes: frozenset[NodeId]) -> tuple[tuple[NodeId, NodeId], ...]:
    return tuple(sorted(lk.key for lk in topo.live_links if lk.src in nodes and lk.dst not in nodes))


def optimal_bound(
    collective: Collective | str,
    topo: Topology,
    *,
    time_limit_s: float | None = None,
    ranks: Sequence[Rank] | None = None,
    relay: bool = False,
    routed: bool = False,
) -> Bound:
    """The optimal algbw of ``collective`` on ``topo`` with its bottleneck (see module docstring).

    ``ranks`` bounds the collective on the communicator of these global ranks (as passing
    ``topo.communicator(ranks, relay=relay)``). ``routed`` also computes the routed optimum
    (:attr:`Bound.routed_algbw_GBps`; an LP only where some GPU pair has several switch-only paths).

    >>> from synth.topologies import named_topology
    >>> t = named_topology("ring:6")
    >>> b, r = optimal_bound("allgather", t, ranks=[0, 1, 2]), optimal_bound("allgather", t, ranks=[0, 1, 2], relay=True)
    >>> b.nranks, round(b.algbw_GBps, 3), round(r.algbw_GBps, 3)
    (3, 75.0, 150.0)
    """
    bound = _free_bound(collective, topo, time_limit_s, ranks, relay)
    if not routed:
        return bound
    if ranks is not None:
        topo = communicator(topo, ranks, relay=relay)
    if not has_route_choice(topo):
        return replace(bound, routed_algbw_GBps=bound.algbw_GBps)
    if bound.collective.is_tree and topo.capacity_grid.clamped:
        # Rule 0 is not proven for routed trees (docs/exactness.md): no routed figure, not a wrong one.
        return replace(bound, message=f"{bound.message}; no routed optimum: clamped dominant link(s)")
    from synth.routed import routed_bound

    value = min(routed_bound(bound.collective, topo), bound.algbw_GBps)  # equal up to LP round-off at most
    return replace(bound, routed_algbw_GBps=value)


def _free_bound(
    name: Collective | str, topo: Topology, time_limit_s: float | None, ranks: Sequence[Rank] | None, relay: bool
) -> Bound:
    import time

    expect_type(name, str, "collective", SolverError)
    collective = Collective.parse(name)
    expect_type(topo, Topology, "topo", SolverError)
    if ranks is not None:
        topo = communicator(topo, ranks, relay=relay)
    elif relay:
        raise SolverError("relay=True needs ranks (the communicator whose non-members relay)")
    start = time.perf_counter()
    n = topo.nranks
    if n < 2:
        raise SolverError(f"the {collective} bound needs at least 2 GPUs; topology {topo.name!r} has {n}")
    rate: Fraction | float
    if collective == "alltoall":
        if n > COMPACT_LP_MAX_RANKS:
            from synth.alltoall_cg import alltoall_lp_bound

            cg = alltoall_lp_bound(topo, time_limit_s=time_limit_s)
            proven, rate, saturated = cg.optimal, cg.rate_GBps, cg.saturated
            how = f"column generation, {cg.cg_iterations} iterations"
            stopped = (f"AllToAll bound on {topo.name!r}: column generation stopped at the time limit before "
                       f"proving optimality; {cg.algbw_GBps:.6g} GB/s is the best proven upper bound")
        else:
            flow = alltoall_rate_GBps(topo, time_limit_s=time_limit_s)
            proven, rate, saturated = flow.optimal, flow.rate_GBps, flow.saturated
            how = "compact LP"
            stopped = (f"AllToAll bound on {topo.name!r}: the compact LP stopped at the time limit before proving "
                       "any upper bound")
        algbw = n * rate
        if proven:
            certify_rate(topo, 8 * rate, saturated, f"{collective} bound")
        status, message = (Status.OPTIMAL, f"LP optimum ({how}): {algbw:.6g} GB/s") if proven else (
            Status.TIME_LIMIT, stopped)
        return Bound(status, message, collective, topo.name, n, rate, algbw, busbw_GBps(collective, algbw, n),
                     saturated, frozenset(), False, time.perf_counter() - start)
    with solving(check_time_limit(time_limit_s), f"{collective} bound on {topo.name}"):
        ag = allgather_rate_gbps(topo)
        rs = ag if collective == "allgather" or topo.is_symmetric else allgather_rate_gbps(topo.reversed())
    if collective == "allgather":
        rate = ag.rate_gbps / 8
        cut = ag.cut_nodes
        links = _cut_links(topo, cut)
    else:
        # On the reversed graph, links leaving S are the original links entering S.
        rs_links = tuple(sorted((b, a) for a, b in _cut_links(topo.reversed(), rs.cut_nodes)))
        if collective == "reducescatter":
            rate, cut, links = rs.rate_gbps / 8, rs.cut_nodes, rs_links
        else:
            rate = 1 / (8 / ag.rate_gbps + 8 / rs.rate_gbps)
            cut = ag.cut_nodes
            links = tuple(sorted(set(_cut_links(topo, ag.cut_nodes)) | set(rs_links)))
    algbw = float(n * rate)
    if not (ag.optimal and rs.optimal):
        return Bound(Status.TIME_LIMIT, f"{collective} bound on {topo.name!r}: the time limit stopped the exact cut "
                     f"search; {algbw:.6g} GB/s is the best proven upper bound (a cut's ratio)", collective,
                     topo.name, n, rate, algbw, busbw_GBps(collective, algbw, n), links, cut, True,
                     time.perf_counter() - start)
    # Rule 0 and the floor of docs/exactness.md: the cut is the true one, or the bound is refused.
    certify_rate(topo, min(ag.rate_gbps, rs.rate_gbps), links, f"{collective} bound")
    return Bound(Status.OPTIMAL, f"exact cut bound: {algbw:.6g} GB/s", collective, topo.name, n, rate, algbw,
                 busbw_GBps(collective, algbw, n), links, cut, True, time.perf_counter() - start)
