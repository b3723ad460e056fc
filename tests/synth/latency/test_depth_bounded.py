"""Depth-bounded tree synthesis: validity, the depth bound, LP value vs rounding, the certified bound
against a brute-force LP over every depth-bounded tree, and D = inf = today's optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from synth import load_topology, synthesize
from synth.errors import SolverError
from synth.latency import schedule_depth, synthesize_depth_bounded
from synth.latency._graph import LinkGraph
from synth.latency.pareto import pareto_set
from tests.strategies import random_topologies

REL = 1e-9


def _brute_lp_algbw(topo, max_depth: int) -> float | None:
    """N / U*_D by enumerating every spanning out-tree of depth <= D on the fixed switch paths."""
    g = LinkGraph(topo)
    pc = g.costs(np.ones(g.nlinks))
    n = g.n
    cols, roots = [], []
    for r in range(n):
        others = [v for v in range(n) if v != r]
        for parents in itertools.product(range(n), repeat=len(others)):
            par = dict(zip(others, parents))
            if any(p == v or not np.isfinite(pc.cost[p, v]) for v, p in par.items()):
                continue
            depth, okay = {}, True
            for v in others:
                seen, d, u = set(), 0, v
                while u != r and okay:
                    if u in seen:
                        okay = False
                    seen.add(u)
                    u = par[u]
                    d += 1
                if not okay or d > max_depth:
                    okay = False
                    break
                depth[v] = d
            if not okay:
                continue
            load = np.zeros(g.nlinks)
            for v, p in par.items():
                for li in g.path_links(pc, p, v):
                    load[li] += 1
            cols.append(load)
            roots.append(r)
    if sorted(set(roots)) != list(range(n)):
        return None
    m = len(cols)
    # variables: y (m), U; minimise U
    c = np.zeros(m + 1)
    c[-1] = 1.0
    a_eq = np.zeros((n, m + 1))
    for j, r in enumerate(roots):
        a_eq[r, j] = 1.0
    a_ub = np.hstack([np.array(cols).T, -g.cap_GBps[:, None]])
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(g.nlinks), A_eq=a_eq, b_eq=np.ones(n), bounds=(0, None), method="highs")
    assert res.status == 0
    return n / res.fun


def _check_result(topo, res, max_depth: int) -> None:
    sched = res.schedule
    assert sched is not None
    sched.validate(topo)
    assert schedule_depth(sched) <= max_depth
    assert res.figures.depth == schedule_depth(sched)
    st_ = res.figures
    algbw = sched.algbw_GBps(topo)
    assert algbw == pytest.approx(res.algbw_GBps, rel=REL)
    # rounding: never above the LP, never below the a-priori rounding guarantee
    assert algbw <= st_.lp_algbw_GBps * (1 + REL)
    assert algbw >= st_.lp.rounding_bound_algbw_GBps * (1 - REL)
    # the certified bound is above the LP and never above the unbounded optimum
    assert st_.lp_algbw_GBps <= st_.depth_bound_algbw_GBps * (1 + 1e-7)
    assert st_.depth_bound_algbw_GBps <= st_.unbounded_optimal_algbw_GBps * (1 + 1e-7)


@settings(max_examples=12)
@given(topo=random_topologies(min_gpus=2, max_gpus=4, max_switches=2, symmetric=True), d=st.integers(1, 3),
       chunks=st.integers(1, 6))
def test_allgather_valid_bounded_and_certified_against_brute_force(topo, d, chunks) -> None:
    brute = _brute_lp_algbw(topo, d)
    try:
        res = synthesize_depth_bounded("allgather", topo, d, chunks=chunks)
    except SolverError as exc:
        assert "no spanning tree" in str(exc)
        # greedy found no tree: the brute force must agree that none exists for some root
        assert brute is None
        return
    assert brute is not None
    _check_result(topo, res, d)
    assert res.schedule.nchunks <= chunks
    # the LP value is achievable (<= true optimum) and the certified bound really bounds it
    assert res.figures.lp_algbw_GBps <= brute * (1 + 1e-7)
    assert brute <= res.figures.depth_bound_algbw_GBps * (1 + 1e-7)


@settings(max_examples=6)
@given(topo=random_topologies(min_gpus=3, max_gpus=5, max_switches=2, symmetric=True),
       coll=st.sampled_from(["reducescatter", "allreduce"]), d=st.integers(2, 4))
def test_reduction_collectives_valid_and_bounded(topo, coll, d) -> None:
    try:
        res = synthesize_depth_bounded(coll, topo, d)
    except SolverError as exc:
        assert "no spanning tree" in str(exc)
        return
    assert res.schedule.collective == coll
    _check_result(topo, res, d)


@settings(max_examples=5)
@given(topo=random_topologies(min_gpus=2, max_gpus=5, max_switches=2, symmetric=True),
       coll=st.sampled_from(["allgather", "reducescatter", "allreduce"]))
def test_unbounded_is_todays_optimum_exactly(topo, coll) -> None:
    today = synthesize(coll, topo)
    res = synthesize_depth_bounded(coll, topo, None)
    assert res.status is today.status
    assert res.algbw_GBps == today.algbw_GBps
    assert res.optimal_algbw_GBps == today.optimal_algbw_GBps
    assert res.schedule.routes == today.schedule.routes and res.schedule.nchunks == today.schedule.nchunks
    assert res.figures.depth == schedule_depth(today.schedule)


def test_known_values_on_hpn() -> None:
    # healthy 2 hosts x 8: depth 2 (rail, then NVLink) reaches the unbounded optimum in the LP
    topo = load_topology("hpn:1x2x8")
    res = synthesize_depth_bounded("allgather", topo, 2)
    assert res.figures.lp_algbw_GBps == pytest.approx(res.figures.unbounded_optimal_algbw_GBps, rel=1e-9)
    assert res.figures.lp_gap_pct < 1e-6
    # fail2: rank 0's NIC at 50 Gbit/s; at depth 2 rank 0's data must cross it to rank 8: 16 / (1 / 6.25)
    bad = load_topology("hpn:1x2x8", ["fail2"])
    r2 = synthesize_depth_bounded("allgather", bad, 2)
    assert r2.algbw_GBps == pytest.approx(100.0, rel=1e-9)
    assert r2.figures.depth_bound_algbw_GBps == pytest.approx(100.0, rel=1e-6)  # certified: the bound is tight
    with pytest.raises(SolverError, match="no spanning tree of depth <= 1"):
        synthesize_depth_bounded("allgather", bad, 1)  # rails: other hosts' other rails need a relay


def test_warm_start_reuses_trees_and_keeps_the_value() -> None:
    topo = load_topology("hpn:1x2x4")
    cold = synthesize_depth_bounded("allgather", topo, 2)
    bad = topo.scaled("gpu1", "tor0.1", 0.5).scaled("tor0.1", "gpu1", 0.5)
    warm = synthesize_depth_bounded("allgather", bad, 2, warm_from=cold)
    again = synthesize_depth_bounded("allgather", bad, 2)
    assert warm.warm and not again.warm
    _check_result(bad, warm, 2)
    assert warm.figures.lp_algbw_GBps == pytest.approx(again.figures.lp_algbw_GBps, rel=1e-6)


def test_deterministic() -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    a = synthesize_depth_bounded("allgather", topo, 3)
    b = synthesize_depth_bounded("allgather", topo, 3)
    assert a.schedule.to_json() == b.schedule.to_json()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_depth_rejected(bad) -> None:
    with pytest.raises(SolverError, match="max-depth"):
        synthesize_depth_bounded("allgather", load_topology("ring:4"), bad)


def test_alltoall_rejected() -> None:
    with pytest.raises(SolverError, match="max_steps"):
        synthesize_depth_bounded("alltoall", load_topology("ring:4"), 2)


def test_pareto_set_is_a_pareto_front() -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    pts = pareto_set("allgather", topo, depths=(1, 2, 3, None), chunks=4)
    assert pts
    depths = [p.depth for p in pts]
    bws = [p.algbw_GBps for p in pts]
    assert depths == sorted(depths) and len(set(depths)) == len(depths)
    assert all(a < b for a, b in zip(bws, bws[1:]))
    for p in pts:
        assert schedule_depth(p.schedule) == p.depth
        if p.max_depth is not None:
            assert p.depth <= p.max_depth


def test_alltoall_pareto_uses_step_bounds() -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    pts = pareto_set("alltoall", topo, depths=(1, 2, 3, None), chunks=2)
    assert [p.max_depth for p in pts][:1] == [2]  # one step cannot cross rails: skipped
    bws = [p.algbw_GBps for p in pts]
    assert all(a < b for a, b in zip(bws, bws[1:]))
    for p in pts:
        p.schedule.validate(topo)
        if p.max_depth is not None:
            assert schedule_depth(p.schedule) <= p.max_depth


def test_long_runs_log_progress(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from synth import _deadline

    monkeypatch.setattr(_deadline, "PROGRESS_EVERY_S", 0.0)  # report every iteration, as a long run would
    with caplog.at_level(logging.INFO, logger="synth.latency"):
        pts = pareto_set("allgather", load_topology("hpn:1x2x4", ["fail2"]), depths=(2, None), chunks=4)
    lines = [r.getMessage() for r in caplog.records]
    lp = [m for m in lines if m.startswith("depth-2 tree LP: iteration ")]
    assert lp and "certified bound" in lp[-1]
    done = [m for m in lines if m.startswith("pareto set of allgather on ")]
    assert [m.split("depth bound ")[1].split(" ")[0] for m in done] == ["2", "inf"]
    assert len(pts) >= 1


@pytest.mark.parametrize(("spec", "fail", "d"), [("hpn:1x4x8", [], 3), ("hpn:1x4x8", ["fail2"], 3), ("hpn:1x2x8", ["fail2"], 3)])
def test_a_purged_master_reaches_the_same_certified_lp(spec, fail, d, monkeypatch: pytest.MonkeyPatch) -> None:
    # Large masters drop unused columns; forced here on small fabrics, the LP must still close its gap
    # to the same value as a master that keeps every column.
    from synth.latency import _lp

    topo = load_topology(spec, fail)
    full = synthesize_depth_bounded("allgather", topo, d)
    assert full.figures.lp.columns_dropped == 0
    monkeypatch.setattr(_lp, "_PURGE_ROWS", 3)
    purged = synthesize_depth_bounded("allgather", topo, d)
    assert purged.figures.lp.columns_dropped > 0
    assert purged.figures.lp_gap_pct < 1e-4 and full.figures.lp_gap_pct < 1e-4
    assert purged.figures.lp_algbw_GBps == pytest.approx(full.figures.lp_algbw_GBps, rel=1e-7)
    _check_result(topo, purged, d)
