"""The AllToAll bound LP (synth/bounds_alltoall.py) against a different formulation.

The library aggregates the flows of one source into one commodity. Here every ordered GPU pair
(s, d) is its own commodity with its own flow variables (scipy linprog / HiGHS): both must give the
same maximum concurrent flow z*. Independent checks: the cut bound z* <= B+(S)/(|S∩G|·|G∖S|) for
every node set S, and the reported bottleneck is a set of links that really bind: raising the
capacity of every *other* link leaves z* unchanged.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from scipy.optimize import linprog

from synth.bounds.alltoall import ConcurrentFlow, alltoall_rate_GBps
from synth.topologies import Link, Topology, load_topology, named_topology
from tests.strategies import random_topologies

REL = 1e-6


def per_pair_lp_rate_GBps(topo: Topology) -> float:
    """max z s.t. every ordered pair (s, d) routes z units on its own flow, links shared."""
    nodes = [n.id for n in topo.nodes]
    idx = {v: i for i, v in enumerate(nodes)}
    live = [lk for lk in topo.links if lk.gbps > 0]
    gpus = [idx[g.id] for g in topo.gpus]
    pairs = [(s, d) for s in gpus for d in gpus if s != d]
    nv, ne, npairs = len(nodes), len(live), len(pairs)
    ncols = 1 + npairs * ne
    a_eq = np.zeros((npairs * nv, ncols))
    for p, (s, d) in enumerate(pairs):
        for e, lk in enumerate(live):
            a_eq[p * nv + idx[lk.dst], 1 + p * ne + e] += 1
            a_eq[p * nv + idx[lk.src], 1 + p * ne + e] -= 1
        a_eq[p * nv + d, 0] = -1  # net inflow at d equals z
        a_eq[p * nv + s, 0] = 1  # net inflow at s equals -z
    a_ub = np.zeros((ne, ncols))
    for p in range(npairs):
        for e in range(ne):
            a_ub[e, 1 + p * ne + e] = 1
    c = np.zeros(ncols)
    c[0] = -1
    res = linprog(c, A_ub=a_ub, b_ub=[lk.gbps / 8 for lk in live], A_eq=a_eq, b_eq=np.zeros(npairs * nv),
                  bounds=[(0, None)] * ncols, method="highs")
    assert res.status == 0, res.message
    return float(res.x[0])


def cut_upper_bound_GBps(topo: Topology) -> float:
    """min over node sets S splitting the GPUs of B+(S) / (|S ∩ G| · |G \\ S|)."""
    ids = [n.id for n in topo.nodes]
    gpus = {g.id for g in topo.gpus}
    best = float("inf")
    for size in range(1, len(ids)):
        for combo in itertools.combinations(ids, size):
            s = set(combo)
            inside = len(s & gpus)
            if inside in (0, len(gpus)):
                continue
            out = sum(lk.gbps / 8 for lk in topo.links if lk.src in s and lk.dst not in s)
            best = min(best, out / (inside * (len(gpus) - inside)))
    return best


@settings(max_examples=80)
@given(random_topologies(min_gpus=2, max_gpus=4, max_switches=2))
def test_aggregated_lp_equals_per_pair_lp(topo: Topology) -> None:
    assert alltoall_rate_GBps(topo).rate_GBps == pytest.approx(per_pair_lp_rate_GBps(topo), rel=REL)


@settings(max_examples=60)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=3))
def test_rate_never_exceeds_any_cut_bound(topo: Topology) -> None:
    assert alltoall_rate_GBps(topo).rate_GBps <= cut_upper_bound_GBps(topo) * (1 + REL)


@settings(max_examples=60)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=3))
def test_relaxing_links_off_the_bottleneck_does_not_raise_the_rate(topo: Topology) -> None:
    flow = alltoall_rate_GBps(topo)
    binding = set(flow.saturated)
    assert binding and binding <= {lk.key for lk in topo.links if lk.gbps > 0}
    relaxed = topo.with_links([lk if lk.key in binding else Link(lk.src, lk.dst, lk.gbps * 2, lk.latency_us)
                               for lk in topo.links])
    assert alltoall_rate_GBps(relaxed).rate_GBps == pytest.approx(flow.rate_GBps, rel=REL)


@pytest.mark.parametrize("spec", ["nvswitch:3", "ring:4", "ring:5", "hpn:1x2x2", "torus:2x3"])
def test_named_topologies_match_per_pair_lp(spec: str) -> None:
    topo = named_topology(spec)
    assert alltoall_rate_GBps(topo).rate_GBps == pytest.approx(per_pair_lp_rate_GBps(topo), rel=REL)


@pytest.mark.parametrize("solver", ["ipm", "simplex"])
def test_both_highs_solvers_agree(solver: str) -> None:
    flow = alltoall_rate_GBps(named_topology("hpn:1x2x4"), solver=solver)
    assert isinstance(flow, ConcurrentFlow)
    assert flow.rate_GBps == pytest.approx(50 / 4, rel=REL)  # 4 NICs x 50 GB/s carry 16 blocks per host
    assert flow.solve_time_s >= 0


def test_relays_through_gpus_are_allowed() -> None:
    # A line gpu0 - gpu1 - gpu2: gpu0 and gpu2 talk only through gpu1.
    line = named_topology("ring:3").with_links(
        [lk for lk in named_topology("ring:3").links if {lk.src, lk.dst} != {"gpu0", "gpu2"}]
    )
    # Link gpu0->gpu1 carries blocks 0->1 and 0->2: z = 50 / 2.
    assert alltoall_rate_GBps(line).rate_GBps == pytest.approx(25.0, rel=REL)


@pytest.mark.parametrize("spec,fail", [("hpn:1x8x8", []), ("hpn:1x8x8", ["fail2"]), ("dgx-a100:5", ["fail1"])])
def test_large_alltoall_bound_uses_column_generation_and_matches_the_compact_lp(spec: str, fail: list[str]) -> None:
    from synth.bounds import COMPACT_LP_MAX_RANKS, optimal_bound
    from synth.bounds.alltoall import alltoall_rate_GBps

    topo = load_topology(spec, fail)
    assert topo.nranks > COMPACT_LP_MAX_RANKS
    via_cg = optimal_bound("alltoall", topo)
    compact = alltoall_rate_GBps(topo)
    assert via_cg.algbw_GBps == pytest.approx(topo.nranks * compact.rate_GBps, rel=1e-6)
