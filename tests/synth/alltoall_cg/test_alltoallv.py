"""AllToAllv: property tests on random topologies and skewed matrices, warm re-synthesis, baselines, I/O.

``LOOPCOLL_HEAVY=1`` runs ten times as many random examples.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import load_topology, synthesize
from synth.alltoall_cg import alltoallv_lp_bound, synthesize_alltoallv
from synth.alltoallv_schedule import AllToAllvSchedule, check_demand, read_demand
from synth.baselines.alltoallv import direct_alltoallv, two_phase_alltoallv
from synth.bounds.alltoallv import alltoallv_compact_time_s
from synth.errors import ScheduleError, SolverError
from synth.topologies import Topology
from tests.strategies import random_topologies

SCALE = 10 if os.environ.get("LOOPCOLL_HEAVY") == "1" else 1


@st.composite
def skewed_matrices(draw: st.DrawFn, n: int) -> np.ndarray:
    """Bytes per pair: Zipf-like destination (expert) popularity, optional hot experts, zeros."""
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    s = draw(st.sampled_from([0.0, 0.8, 1.2, 2.0]), label="zipf exponent")
    pop = 1.0 / np.arange(1, n + 1) ** s
    rng.shuffle(pop)
    m = rng.gamma(2.0, 1.0, (n, n)) * pop[None, :]
    if draw(st.booleans(), label="hot expert"):
        m[:, int(rng.integers(n))] *= draw(st.sampled_from([5.0, 30.0]))
    zeros = draw(st.sampled_from([0.0, 0.3, 0.7]), label="zero fraction")
    m[rng.random((n, n)) < zeros] = 0.0
    if draw(st.booleans(), label="idle rank"):
        m[int(rng.integers(n))] = 0.0
    np.fill_diagonal(m, 0.0)
    return np.round(m * 1e6)


def _check(topo: Topology, demand: np.ndarray, solver: str = "highs", nchunks: int = 4) -> float:
    res = synthesize_alltoallv(topo, demand, nchunks=nchunks, solver=solver)
    assert res.success, res.message
    sched = res.schedule
    assert sched is not None
    sched.validate(topo)
    exact = sched.completion_time_s(topo)
    assert exact == pytest.approx(res.completion_time_s, rel=1e-9, abs=1e-15)
    # The LP optimum is a lower bound on any schedule; the gap is certified against it.
    assert res.optimal_time_s <= exact * (1 + 1e-9)
    assert exact * (1 - res.gap_pct / 100) == pytest.approx(res.optimal_time_s, rel=1e-7, abs=1e-15)
    return res.optimal_time_s


@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_topologies_and_skewed_matrices(data: st.DataObject) -> None:
    topo = data.draw(random_topologies(min_gpus=2, max_gpus=6, max_switches=3), label="topology")
    demand = data.draw(skewed_matrices(topo.nranks), label="demand")
    if not (demand > 0).any():
        res = synthesize_alltoallv(topo, demand)
        assert res.completion_time_s == 0 and res.schedule is not None and not res.schedule.routes
        return
    lp = _check(topo, demand)
    compact = alltoallv_compact_time_s(topo, demand)
    assert lp == pytest.approx(compact, rel=1e-6)
    assert alltoallv_lp_bound(topo, demand).time_s == pytest.approx(compact, rel=1e-6)
    # Baselines are valid schedules and never beat the LP optimum.
    for base in (direct_alltoallv(topo, demand), two_phase_alltoallv(topo, demand)):
        base.validate(topo)
        assert base.completion_time_s(topo) >= compact * (1 - 1e-9)


@settings(max_examples=25 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_both_backends_match_the_compact_lp(data: st.DataObject) -> None:
    topo = data.draw(random_topologies(min_gpus=2, max_gpus=5, max_switches=2), label="topology")
    demand = data.draw(skewed_matrices(topo.nranks), label="demand")
    if not (demand > 0).any():
        return
    compact = {s: alltoallv_compact_time_s(topo, demand, solver=s) for s in ("highs", "ortools")}
    assert compact["highs"] == pytest.approx(compact["ortools"], rel=1e-6)
    assert _check(topo, demand, solver="ortools") == pytest.approx(compact["highs"], rel=1e-6)


@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skewed_matrices(16), st.integers(0, 2**32 - 1))
def test_warm_after_a_shift_equals_cold_on_hpn(demand: np.ndarray, seed: int) -> None:
    topo = load_topology("hpn:1x2x8")
    if not (demand > 0).any():
        return
    first = synthesize_alltoallv(topo, demand)
    rng = np.random.default_rng(seed)
    shifted = np.round(demand * rng.uniform(0.8, 1.2, demand.shape))
    shifted[:, int(rng.integers(16))] *= 3  # an expert turns hot
    warm = synthesize_alltoallv(topo, shifted, warm_start=first)
    cold = synthesize_alltoallv(topo, shifted)
    assert warm.warm and warm.figures.warm_mode in ("reweighted", "reweighted-support")
    assert warm.schedule is not None
    warm.schedule.validate(topo)
    assert warm.optimal_time_s == pytest.approx(cold.optimal_time_s, rel=1e-7)
    assert warm.schedule.demand_bytes == check_demand(shifted)


def test_skewed_demand_beats_both_baselines_after_fail2() -> None:
    topo = load_topology("hpn:1x2x8", ["fail2"])
    rng = np.random.default_rng(7)
    pop = 1.0 / np.arange(1, 17) ** 1.2
    demand = np.round(rng.gamma(2.0, 1.0, (16, 16)) * pop[None, :] * 1e7)
    np.fill_diagonal(demand, 0)
    res = synthesize_alltoallv(topo, demand)
    direct = direct_alltoallv(topo, demand).completion_time_s(topo)
    two = two_phase_alltoallv(topo, demand).completion_time_s(topo)
    assert res.completion_time_s < min(direct, two)
    assert res.gap_pct < 1.0


def test_uniform_demand_matches_alltoall() -> None:
    topo = load_topology("hpn:1x2x4")
    n = topo.nranks
    block = 1e9
    demand = np.full((n, n), block)
    res = synthesize("alltoallv", topo, demand=demand)
    a2a = synthesize("alltoall", topo)
    # AllToAll algbw = N·rate: one block of B/N per pair moves in (B/N) / rate seconds.
    assert res.optimal_time_s == pytest.approx(block / (a2a.optimal_algbw_GBps / n * 1e9), rel=1e-7)


def test_single_block_and_json_round_trip(tmp_path) -> None:
    topo = load_topology("ring:4")
    demand = [[0, 0, 8e9, 0], [0] * 4, [0] * 4, [0] * 4]
    res = synthesize_alltoallv(topo, demand, nchunks=2)
    # 8 GB from rank 0 to rank 2: half each way round the ring at 50 GB/s.
    assert res.completion_time_s == pytest.approx(0.08) and res.gap_pct == pytest.approx(0.0, abs=1e-9)
    sched = res.schedule
    assert sched is not None
    back = AllToAllvSchedule.from_json(sched.to_json())
    assert back == sched and back.to_json() == sched.to_json()
    again = synthesize_alltoallv(topo, demand, nchunks=2)
    assert again.schedule is not None and again.schedule.to_json() == sched.to_json()  # deterministic


def test_validate_rejects_broken_schedules() -> None:
    topo = load_topology("ring:3")
    res = synthesize_alltoallv(topo, [[0, 1e6, 2e6], [3e6, 0, 0], [0, 0, 0]], nchunks=2)
    sched = res.schedule
    assert sched is not None
    short = AllToAllvSchedule(3, 2, sched.demand_bytes, sched.routes[1:])
    with pytest.raises(ScheduleError, match="chunks, needs 2"):
        short.validate(topo)
    zero = AllToAllvSchedule(3, 2, [[0, 0, 2e6], [3e6, 0, 0], [0, 0, 0]], sched.routes)
    with pytest.raises(ScheduleError, match="demand is 0"):
        zero.validate(topo)


@pytest.mark.parametrize("demand, culprit", [
    ([[0, -1], [0, 0]], "demand[0][1]"),
    ([[0, float("nan")], [0, 0]], "demand[0][1]"),
    ([[0, 1, 2], [0, 0, 0]], "square"),
    ([[0, 1], [1, 0], [0, 0]], "square"),
    ("abc", "square"),
    ([[0, True], [0, 0]], "demand[0][1]"),
])
def test_bad_demand_names_the_culprit(demand: object, culprit: str) -> None:
    with pytest.raises(SolverError, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        synthesize_alltoallv(load_topology("ring:2"), demand)


def test_wrong_size_and_args() -> None:
    with pytest.raises(SolverError, match="3x3 but the topology has 2"):
        synthesize_alltoallv(load_topology("ring:2"), np.ones((3, 3)))
    with pytest.raises(SolverError, match="nchunks"):
        synthesize_alltoallv(load_topology("ring:2"), np.ones((2, 2)), nchunks=0)
    with pytest.raises(SolverError, match="demand="):
        synthesize("alltoallv", load_topology("ring:2"))
    with pytest.raises(SolverError, match="alltoallv only"):
        synthesize("alltoall", load_topology("ring:2"), demand=np.ones((2, 2)))


def test_read_demand_npy_and_json(tmp_path) -> None:
    m = np.arange(9, dtype=np.int64).reshape(3, 3)
    np.save(tmp_path / "m.npy", m)
    (tmp_path / "m.json").write_text("[[0, 1, 2], [3, 4, 5], [6, 7, 8]]")
    assert read_demand(tmp_path / "m.npy") == read_demand(tmp_path / "m.json")
    assert read_demand(tmp_path / "m.npy")[1] == (3.0, 0.0, 5.0)
    (tmp_path / "bad.json").write_text("{\"x\": 1}")
    with pytest.raises(ScheduleError, match="demand_bytes"):
        read_demand(tmp_path / "bad.json")


@pytest.mark.parametrize("pool", ["full", "support"])
def test_warm_pool_choices_reach_the_same_optimum(pool: str) -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    rng = np.random.default_rng(11)
    m = np.round(rng.gamma(1.0, 1.0, (8, 8)) * 1e8)
    first = synthesize_alltoallv(topo, m)
    m2 = m.copy()
    m2[:, 5] *= 6
    warm = synthesize_alltoallv(topo, m2, warm_start=first, warm_pool=pool)
    assert warm.figures.warm_mode == ("reweighted" if pool == "full" else "reweighted-support")
    assert warm.optimal_time_s == pytest.approx(alltoallv_compact_time_s(topo, m2), rel=1e-7)
    with pytest.raises(SolverError, match="warm_pool"):
        synthesize_alltoallv(topo, m2, warm_start=first, warm_pool="none")


def test_time_limit_returns_a_valid_schedule_with_a_proven_bound() -> None:
    topo = load_topology("hpn:1x4x8", ["fail2"])
    rng = np.random.default_rng(2)
    m = np.round(rng.gamma(1.0, 1.0, (32, 32)) * 1e7)
    res = synthesize_alltoallv(topo, m, time_limit_s=1e-3)
    assert res.status.value in ("time_limit", "optimal") and res.schedule is not None
    res.schedule.validate(topo)
    lp = alltoallv_lp_bound(topo, m).time_s
    assert 0 < res.optimal_time_s <= lp * (1 + 1e-9) <= res.completion_time_s * (1 + 1e-9)


def test_communicator_demand_is_local() -> None:
    topo = load_topology("hpn:1x2x4")
    demand = [[0, 1e8, 2e8, 0], [0, 0, 3e8, 0], [1e8, 0, 0, 4e8], [0, 0, 0, 0]]
    res = synthesize("alltoallv", topo, demand=demand, ranks=[0, 1, 4, 5])
    assert res.schedule is not None and res.schedule.meta["global_ranks"] == [0, 1, 4, 5]
    res.schedule.validate(topo.communicator([0, 1, 4, 5]))
    with pytest.raises(SolverError, match="4x4 but the topology has 8"):
        synthesize("alltoallv", topo, demand=demand)
