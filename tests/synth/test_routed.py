"""Routed synthesis (issue 16): every hop on its pair's route, at the routed optimum within its gap.

Property tests draw random fabrics with several switch-only paths per pair. CI runs a few
examples; ``LOOPCOLL_ROUTED_EXAMPLES=200 python -m pytest tests/synth/test_routed.py`` runs the
acceptance run. The routed LP optima are checked against independent formulations solved by
scipy's HiGHS: every spanning arborescence enumerated (trees) and the arc-flow multicommodity LP
(AllToAll) on the logical graph; the tree LP's two solvers (cutting planes, column generation)
agree.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from msccl_xml import check, lower, parse, program_algbw_GBps, write
from synth import optimal_bound, synthesize
from synth.figures import routing_of
from synth.routed import routed_bound
from synth.routed._arborescence import min_arborescence
from synth.routed._logical import Logical
from synth.routed._treelp import solve_tree_lp
from synth.routed.trees import _seeds
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like, random_fabric
from synth.routing import has_route_choice, pair_route
from synth.schedule import RouteKind, Schedule
from synth.topologies import Topology, named_topology

from tests.strategies import random_topologies

EXAMPLES = int(os.environ.get("LOOPCOLL_ROUTED_EXAMPLES", "5"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 10,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@st.composite
def multipath_topologies(draw: st.DrawFn) -> Topology:
    """Random fabrics (:func:`random_fabric`) or random graphs, with some pair on two switch paths."""
    if draw(st.booleans(), label="kind"):
        topo = random_fabric(draw(st.integers(0, 10**6), label="seed"), draw(st.integers(3, 8), label="gpus"))
    else:
        topo = draw(random_topologies(min_gpus=2, max_gpus=5, max_switches=3))
    assume(has_route_choice(topo))
    return topo


def _assert_routed(topo: Topology, sched: Schedule) -> None:
    for route in sched.routes:
        for hop in route.hops:
            assert hop.path == pair_route(topo, topo.gpu_id(hop.src), topo.gpu_id(hop.dst))


def _assert_exports_at_its_rate(topo: Topology, sched: Schedule) -> None:
    program = parse(write(lower(sched)))
    verdict = check(program)
    assert verdict.valid, verdict.errors[:3]
    assert program_algbw_GBps(program, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)


def _assert_result(topo: Topology, coll: str, chunks: int | None) -> None:
    r = synthesize(coll, topo, chunks=chunks)
    assert r.success and r.schedule is not None, r.message
    assert routing_of(r.figures) is not None
    sched = r.schedule
    sched.validate(topo)
    _assert_routed(topo, sched)
    routed, free = r.figures.routing.routed_optimal_algbw_GBps, r.figures.routing.free_optimal_algbw_GBps
    assert r.algbw_GBps == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)
    assert r.algbw_GBps <= routed * (1 + 1e-7)
    assert routed <= free * (1 + 1e-7)
    # its algbw is its LP value within its stated rounding gap
    assert r.algbw_GBps == pytest.approx(routed * (1 - r.gap_pct / 100), rel=1e-6)
    assert r.figures.routing.routing_gap_pct == pytest.approx(max(0.0, 100 * (1 - routed / free)), abs=1e-6)
    _assert_exports_at_its_rate(topo, sched)


@SETTINGS
@given(topo=multipath_topologies(), coll=st.sampled_from(["allgather", "reducescatter", "allreduce"]),
       chunks=st.sampled_from([None, 1, 3]))
def test_routed_trees_on_random_multipath_fabrics(topo: Topology, coll: str, chunks: int | None) -> None:
    _assert_result(topo, coll, chunks)


@SETTINGS
@given(topo=multipath_topologies(), chunks=st.sampled_from([1, 4]))
def test_routed_alltoall_on_random_multipath_fabrics(topo: Topology, chunks: int) -> None:
    _assert_result(topo, "alltoall", chunks)


# -- the LP optima against independent formulations ------------------------------------------


def _arborescences(lg: Logical, root: int) -> list[tuple[int, ...]]:
    """Every spanning out-arborescence rooted at ``root`` as a tuple of arc ids (brute force)."""
    n = lg.n
    others = [v for v in range(n) if v != root]
    choices = [[u for u in range(n) if u != v and lg.index[u, v] >= 0] for v in others]
    out = []
    for parents in itertools.product(*choices):
        par = dict(zip(others, parents))
        ok = True
        for v in others:
            seen, x = set(), v
            while x != root:
                if x in seen:
                    ok = False
                    break
                seen.add(x)
                x = par[x]
            if not ok:
                break
        if ok:
            out.append(tuple(int(lg.index[par[v], v]) for v in others))
    return out


def _enumerated_tree_optimum(topo: Topology) -> float:
    """max x with x spanning trees per root, link loads <= capacity (all trees enumerated)."""
    lg = Logical.build(topo)
    cols = [(r, t) for r in range(lg.n) for t in _arborescences(lg, r)]
    inc = lg.incidence.toarray()
    live = np.flatnonzero(lg.caps_GBps > 0)
    # variables: y_t per tree, then x; maximise x
    a_ub = np.zeros((len(live), len(cols) + 1))
    for j, (_, arcs) in enumerate(cols):
        a_ub[:, j] = inc[list(arcs)][:, live].sum(axis=0)
    a_eq = np.zeros((lg.n, len(cols) + 1))
    for j, (r, _) in enumerate(cols):
        a_eq[r, j] = 1.0
    a_eq[:, -1] = -1.0
    c = np.zeros(len(cols) + 1)
    c[-1] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=lg.caps_GBps[live], A_eq=a_eq, b_eq=np.zeros(lg.n), method="highs")
    assert res.status == 0
    return lg.n * -res.fun


def _arc_flow_alltoall_optimum(topo: Topology) -> float:
    """max z: every ordered pair ships z over routed arcs (arc-flow multicommodity LP)."""
    lg = Logical.build(topo)
    n, m = lg.n, len(lg.pairs)
    inc = lg.incidence.toarray()
    live = np.flatnonzero(lg.caps_GBps > 0)
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    nv = len(pairs) * m + 1
    a_eq, b_eq = [], []
    for k, (s, d) in enumerate(pairs):
        for v in range(n):
            row = np.zeros(nv)
            row[k * m + np.flatnonzero(lg.pairs[:, 0] == v)] += 1.0
            row[k * m + np.flatnonzero(lg.pairs[:, 1] == v)] -= 1.0
            row[-1] = -1.0 if v == s else (1.0 if v == d else 0.0)
            a_eq.append(row)
            b_eq.append(0.0)
    a_ub = np.zeros((len(live), nv))
    for k in range(len(pairs)):
        a_ub[:, k * m:(k + 1) * m] = inc[:, live].T
    c = np.zeros(nv)
    c[-1] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=lg.caps_GBps[live], A_eq=np.array(a_eq), b_eq=np.array(b_eq), method="highs")
    assert res.status == 0
    return n * -res.fun


@settings(max_examples=max(3, EXAMPLES // 2), deadline=None, derandomize=EXAMPLES <= 10,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10**6), n=st.integers(3, 4))
def test_routed_optima_match_independent_formulations(seed: int, n: int) -> None:
    topo = random_fabric(seed, n)
    assert routed_bound("allgather", topo) == pytest.approx(_enumerated_tree_optimum(topo), rel=1e-7)
    assert routed_bound("reducescatter", topo) == pytest.approx(_enumerated_tree_optimum(topo.reversed()), rel=1e-7)
    assert routed_bound("alltoall", topo) == pytest.approx(_arc_flow_alltoall_optimum(topo), rel=1e-7)
    # the tree LP by column generation (Edmonds pricing) agrees with the cutting-plane form
    assert solve_tree_lp(Logical.build(topo)).algbw_GBps == pytest.approx(routed_bound("allgather", topo), rel=1e-7)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(n=st.integers(2, 9), seed=st.integers(0, 10**6), root=st.integers(0, 8))
def test_min_arborescence_is_optimal(n: int, seed: int, root: int) -> None:
    import networkx as nx

    rng = np.random.default_rng(seed)
    c = rng.integers(0, 5, size=(n, n)).astype(float)
    c[rng.random((n, n)) < 0.3] = np.inf
    root %= n
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from((u, v, c[u, v]) for u in range(n) for v in range(n)
                              if u != v and v != root and np.isfinite(c[u, v]))
    try:
        ref = sum(d["weight"] for _, _, d in nx.minimum_spanning_arborescence(g).edges(data=True))
    except nx.NetworkXException:
        with pytest.raises(ValueError):
            min_arborescence(c, root)
        return
    p = min_arborescence(c, root)
    assert p[root] == root
    assert sum(c[p[v], v] for v in range(n) if v != root) == pytest.approx(ref)


# -- the fabrics, warm starts, the auto fast path -------------------------------------


def test_dgx_a100_model_keeps_the_free_optimum_under_routing() -> None:
    topo = forestcoll_dgx_a100(2)
    r = synthesize("allgather", topo)
    assert r.figures.routing.free_optimal_algbw_GBps == pytest.approx(1040 / 3)
    assert r.figures.routing.routed_optimal_algbw_GBps == pytest.approx(1040 / 3)  # the issue: relay, not loop through IB
    assert r.algbw_GBps >= 0.98 * 1040 / 3
    _assert_routed(topo, r.schedule)
    free = synthesize("allgather", topo, routing="free").schedule
    assert program_algbw_GBps(lower(free), topo) < free.algbw_GBps(topo)  # what the refusal guarded against


def test_mi250_like_allgather_reaches_the_routed_optimum() -> None:
    topo = mi250_like(2)
    r = synthesize("allgather", topo)
    assert r.gap_pct == 0.0 and r.algbw_GBps == pytest.approx(r.figures.routing.routed_optimal_algbw_GBps)
    _assert_exports_at_its_rate(topo, r.schedule)


def test_warm_starts_reuse_columns_and_keep_the_optimum() -> None:
    topo = random_fabric(11, 8)
    cold = synthesize("allgather", topo)
    warm = synthesize("allgather", topo, warm_from=cold)
    assert warm.warm and warm.success
    assert warm.figures.routing.routed_optimal_algbw_GBps == pytest.approx(cold.figures.routing.routed_optimal_algbw_GBps)
    # The column generation (small fabrics, rounding short of the optimum) seeds the previous trees.
    lg = Logical.build(topo)
    seeded = solve_tree_lp(lg, seeds=_seeds(cold.schedule, lg, RouteKind.OUT_TREE))
    assert seeded.seeded > 0 and topo.nranks / seeded.T == pytest.approx(routed_bound("allgather", topo), rel=1e-7)
    slower = topo.scaled("gpu0", "net" + topo.link("gpu0", "net0").dst[-1] if topo.has_link("gpu0", "net0")
                         else "net1", 0.5)
    a2a = synthesize("alltoall", topo, chunks=4)
    again = synthesize("alltoall", slower, chunks=4, warm_from=a2a)
    fresh = synthesize("alltoall", slower, chunks=4)
    assert again.warm and again.figures.seeded_columns > 0
    assert again.figures.routing.routed_optimal_algbw_GBps == pytest.approx(fresh.figures.routing.routed_optimal_algbw_GBps,
                                                                      rel=1e-7)
    _assert_routed(slower, again.schedule)


@pytest.mark.parametrize("coll", ["allgather", "alltoall"])
def test_auto_takes_the_free_path_where_routes_are_unique(coll: str) -> None:
    topo = named_topology("hpn:1x2x4")
    auto, free = synthesize(coll, topo, chunks=2), synthesize(coll, topo, chunks=2, routing="free")
    assert routing_of(auto.figures) is None and auto.algbw_GBps == free.algbw_GBps
    assert auto.schedule.routes == free.schedule.routes
    b = optimal_bound(coll, topo, routed=True)
    assert b.routed_algbw_GBps == b.algbw_GBps and b.routing_gap_pct == 0.0


def test_routed_mode_on_a_unique_path_fabric_matches_the_free_optimum() -> None:
    topo = named_topology("ring:4")
    r = synthesize("allgather", topo, routing="routed")
    assert routing_of(r.figures) is not None and r.algbw_GBps == pytest.approx(synthesize("allgather", topo).algbw_GBps)
