"""Warm starts: from a previous result (pool + basis) or a schedule; same optimum as cold."""

from __future__ import annotations

import pytest

from synth.alltoall_cg import WarmState, synthesize_alltoall
from synth.result import SynthResult
from synth.schedule import Schedule
from synth.topologies import load_topology
from tests.synth.alltoall_cg._helpers import assert_valid_alltoall

SOLVERS = ["highs", "ortools"]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("start", ["cold", "state", "result", "schedule"])
@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_warm_and_cold_reach_the_same_lp_optimum(solver: str, start: str, failure: str) -> None:
    base = load_topology("hpn:1x2x8")
    topo = load_topology("hpn:1x2x8", [failure])
    prev = synthesize_alltoall(base, solver=solver)
    warm: SynthResult | WarmState | Schedule | None = {
        "cold": None, "state": prev.warm_state, "result": prev, "schedule": prev.schedule}[start]
    cold = synthesize_alltoall(topo, solver=solver)
    res = synthesize_alltoall(topo, solver=solver, warm_start=warm)
    assert res.figures.lp_algbw_GBps == pytest.approx(cold.figures.lp_algbw_GBps, rel=1e-6)
    assert res.warm is (start != "cold")
    assert_valid_alltoall(res, topo, 10)
    assert res.figures.gap <= 0.01


def test_warm_state_is_not_modified_and_can_be_reused() -> None:
    base = load_topology("hpn:1x2x8")
    prev = synthesize_alltoall(base)
    state = prev.warm_state
    n_trees, n_paths = len(state.trees), len(state.paths)
    assert state.rounded is not None
    routes, route_pid = state.rounded.schedule.routes, state.rounded.route_pid.copy()
    for local_repair, mode in ((True, "repair"), (False, "state")):
        a = synthesize_alltoall(load_topology("hpn:1x2x8", ["fail2"]), warm_start=prev, local_repair=local_repair)
        b = synthesize_alltoall(load_topology("hpn:1x2x8", ["fail1"]), warm_start=prev, local_repair=local_repair)
        assert (len(state.trees), len(state.paths)) == (n_trees, n_paths)
        assert state.rounded.schedule.routes is routes and (state.rounded.route_pid == route_pid).all()
        assert a.figures.warm_mode == b.figures.warm_mode == mode


def test_dead_link_drops_trees_through_it() -> None:
    base = load_topology("hpn:1x2x8")
    dead = base.scaled("gpu1", "tor0.1", 0.0)
    prev = synthesize_alltoall(base)
    res = synthesize_alltoall(dead, warm_start=prev)
    assert res.figures.trees_dropped > 0
    assert_valid_alltoall(res, dead, 10)
    cold = synthesize_alltoall(dead)
    assert res.figures.lp_algbw_GBps == pytest.approx(cold.figures.lp_algbw_GBps, rel=1e-6)


def test_warm_from_schedule_json_round_trip() -> None:
    base = load_topology("hpn:1x2x8")
    prev = synthesize_alltoall(base)
    assert prev.schedule is not None
    sched = Schedule.from_json(prev.schedule.to_json())
    topo = load_topology("hpn:1x2x8", ["fail2"])
    res = synthesize_alltoall(topo, warm_start=sched)
    assert res.figures.warm_mode == "schedule"
    assert_valid_alltoall(res, topo, 10)


def test_a_schedule_too_large_to_seed_starts_cold_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SEED_MAX_ROUTES`` a warm-start schedule is not seeded (at 1024 GPUs the baseline's 1.05M routes
    kept a 30 s solve at the baseline): the result is cold, as good as cold, and its message names the cap."""
    import synth.alltoall_cg.synthesize as a2a

    base, topo = load_topology("hpn:1x4x8"), load_topology("hpn:1x4x8", ["fail2"])
    sched = synthesize_alltoall(base).schedule
    assert sched is not None
    cold = synthesize_alltoall(topo)
    monkeypatch.setattr(a2a, "SEED_MAX_ROUTES", len(sched.routes) - 1)
    res = synthesize_alltoall(topo, warm_start=sched)
    assert (res.figures.warm_mode, res.warm) == ("cold", False)
    assert f"schedule's {len(sched.routes)} routes were not seeded" in res.message
    assert res.algbw_GBps == cold.algbw_GBps and res.schedule == cold.schedule  # exactly the cold solve
    assert_valid_alltoall(res, topo, 10)
    monkeypatch.setattr(a2a, "SEED_MAX_ROUTES", len(sched.routes))
    assert synthesize_alltoall(topo, warm_start=sched).figures.warm_mode == "schedule"


def test_warm_state_on_other_topology_falls_back_to_pool_paths() -> None:
    prev = synthesize_alltoall(load_topology("hpn:1x2x8"))
    other = load_topology("hpn:1x2x8,nic=200")  # same nodes and links, other capacities: state reused
    assert synthesize_alltoall(other, warm_start=prev, local_repair=False).figures.warm_mode == "state"
    ring = load_topology("ring:8")
    res = synthesize_alltoall(ring, warm_start=prev)
    assert res.figures.warm_mode == "pool-paths"
    assert_valid_alltoall(res, ring, 10)


@pytest.mark.parametrize("spec", ["hpn:1x4x8", "hpn:2x2x4"])
@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_warm_state_reaches_the_cold_lp_optimum_tightly(spec: str, failure: str) -> None:
    prev = synthesize_alltoall(load_topology(spec))
    topo = load_topology(spec, [failure])
    cold = synthesize_alltoall(topo)
    warm = synthesize_alltoall(topo, warm_start=prev, local_repair=False)
    assert warm.figures.warm_mode == "state"
    assert warm.figures.lp_algbw_GBps == pytest.approx(cold.figures.lp_algbw_GBps, rel=1e-9)
    assert warm.figures.hop_diameter == cold.figures.hop_diameter
    assert_valid_alltoall(warm, topo, 10)
    assert warm.figures.gap <= 0.01
    # Chained warm starts (from a warm result) keep working and stay exact.
    again = synthesize_alltoall(load_topology(spec), warm_start=warm)
    assert again.figures.lp_algbw_GBps == pytest.approx(prev.figures.lp_algbw_GBps, rel=1e-9)
    assert_valid_alltoall(again, load_topology(spec), 10)


def test_schedule_routes_are_shared_and_rebuilt_identically() -> None:
    topo = load_topology("hpn:1x4x8", ["fail2"])
    prev = synthesize_alltoall(load_topology("hpn:1x4x8"))
    warm = synthesize_alltoall(topo, warm_start=prev)
    cold = synthesize_alltoall(topo)
    assert warm.schedule is not None and cold.schedule is not None
    # Hops of one GPU pair and switch route are one object, whichever path they belong to.
    hops = {}
    for route in cold.schedule.routes:
        for hop in route.hops:
            assert hops.setdefault((hop.src, hop.dst, hop.path), hop) is hop
    # Reused routes (warm) equal freshly built ones on the same blocks.
    fresh = {(r.root, r.dest, r.hops, r.chunks) for r in cold.schedule.routes}
    reused = {(r.root, r.dest, r.hops, r.chunks) for r in warm.schedule.routes}
    assert len(fresh & reused) > 0.5 * len(fresh)
