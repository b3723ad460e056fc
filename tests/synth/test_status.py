"""One status vocabulary (issue 28): ``optimal`` only when the schedule reaches its optimum.

Properties over random fabrics, for every synthesizer: a result says ``optimal`` only when its
algbw equals the *independent* bound (``synth.optimal_bound``: exact cuts for the tree collectives,
the compact LP for AllToAll; ``synth.routed.routed_bound`` for routed schedules) within relative
1e-9, and ``feasible`` only with ``gap_pct > 0`` against that same bound. Examples per property:
``LOOPCOLL_STATUS_EXAMPLES`` (default 12; e.g. 500 for a long run).
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import optimal_bound, synthesize
from synth.figures import routing_of
from synth.alltoall_cg import alltoallv_lp_bound, synthesize_alltoallv
from synth.latency import synthesize_depth_bounded
from synth.result import OPTIMAL_RTOL, Status, SynthResult, judge, judge_time
from synth.routed import routed_bound
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like
from synth.topologies import Topology, load_topology
from tests.strategies import random_topologies, switch_fabrics
from tests.synth._judged import assert_judged

SETTINGS = settings(max_examples=int(os.environ.get("LOOPCOLL_STATUS_EXAMPLES", "12")), deadline=None)
TREES = ("allgather", "reducescatter", "allreduce")


def _check_against(res: SynthResult, bound_GBps: float, collective: str) -> None:  # noqa: N803
    """The status rule, with the result's optimum equal to the independent ``bound_GBps``."""
    assert res.schedule is not None and res.success, res.message
    assert math.isclose(res.optimal_algbw_GBps, bound_GBps, rel_tol=OPTIMAL_RTOL), (res.optimal_algbw_GBps, bound_GBps)
    assert_judged(res.status, res.algbw_GBps, bound_GBps, res.gap_pct, res.message)
    if res.status is Status.OPTIMAL and collective != "allreduce":  # RS+AG trees may beat the sequential bound
        assert res.algbw_GBps <= bound_GBps * (1 + OPTIMAL_RTOL)


@SETTINGS
@given(topo=random_topologies(max_gpus=5, symmetric=None), collective=st.sampled_from(TREES),
       chunks=st.sampled_from([None, 1, 2]))
def test_free_tree_collective_is_optimal_only_at_the_exact_bound(topo: Topology, collective: str,
                                                                 chunks: int | None) -> None:
    res = synthesize(collective, topo, chunks=chunks, routing="free")  # type: ignore[arg-type]
    _check_against(res, float(optimal_bound(collective, topo).algbw_GBps), collective)  # type: ignore[arg-type]


@SETTINGS
@given(topo=switch_fabrics(max_hosts=3), collective=st.sampled_from(TREES), chunks=st.sampled_from([1, 2, 3]))
def test_routed_tree_collective_is_optimal_only_at_the_routed_bound(topo: Topology, collective: str,
                                                                    chunks: int) -> None:
    res = synthesize(collective, topo, chunks=chunks, routing="routed")  # type: ignore[arg-type]
    bound = routed_bound(collective, topo)
    _check_against(res, bound, collective)
    assert bound <= float(optimal_bound(collective, topo).algbw_GBps) * (1 + OPTIMAL_RTOL)  # type: ignore[arg-type]


@SETTINGS
@given(topo=random_topologies(max_gpus=5, symmetric=None), nchunks=st.sampled_from([1, 2, 3, 10]))
def test_free_alltoall_is_optimal_only_at_the_lp_bound(topo: Topology, nchunks: int) -> None:
    res = synthesize("alltoall", topo, chunks=nchunks, routing="free")
    _check_against(res, optimal_bound("alltoall", topo).algbw_GBps, "alltoall")  # the compact LP


@SETTINGS
@given(topo=switch_fabrics(max_hosts=3), nchunks=st.sampled_from([1, 2, 3, 10]))
def test_routed_alltoall_is_optimal_only_at_the_routed_bound(topo: Topology, nchunks: int) -> None:
    res = synthesize("alltoall", topo, chunks=nchunks, routing="routed")
    _check_against(res, routed_bound("alltoall", topo), "alltoall")


@SETTINGS
@given(topo=random_topologies(max_gpus=4, symmetric=True, allow_down=False),
       demand=st.lists(st.sampled_from([0.0, 1e6, 3e6, 7e6]), min_size=16, max_size=16),
       nchunks=st.sampled_from([1, 2, 16]))
def test_alltoallv_is_optimal_only_at_the_lp_time(topo: Topology, demand: list[float], nchunks: int) -> None:
    n = topo.nranks
    matrix = [[0.0 if s == d else demand[s * 4 + d] for d in range(n)] for s in range(n)]
    res = synthesize_alltoallv(topo, matrix, nchunks=nchunks)
    lp = alltoallv_lp_bound(topo, matrix).time_s
    assert res.success and math.isclose(res.optimal_time_s, lp, rel_tol=1e-9, abs_tol=1e-15)
    status, gap = judge_time(res.completion_time_s, lp)
    assert res.status is status and (status is Status.OPTIMAL) == (gap == 0.0), res.message
    assert math.isclose(res.gap_pct, gap, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(("chunks", "expected"), [(1, Status.FEASIBLE), (3, Status.OPTIMAL)])
def test_depth_bounded_is_optimal_only_at_its_certified_bound(chunks: int, expected: Status) -> None:
    topo = load_topology("hpn:1x2x4", ["fail1"])  # depth 2: one chunk per root is 22 % short, three reach it
    res = synthesize_depth_bounded("allgather", topo, 2, chunks=chunks)
    assert res.schedule is not None and res.status is expected
    assert res.optimal_algbw_GBps == res.figures.depth_bound_algbw_GBps
    assert_judged(res.status, res.algbw_GBps, res.optimal_algbw_GBps, res.gap_pct, res.message)


def test_judge_is_the_rule() -> None:
    assert judge(100.0, 100.0 * (1 + 0.5 * OPTIMAL_RTOL)) == (Status.OPTIMAL, 0.0)
    status, gap = judge(100.0, 100.0 * (1 + 10 * OPTIMAL_RTOL))
    assert status is Status.FEASIBLE and 0 < gap < 1e-6
    assert judge(120.0, 100.0) == (Status.OPTIMAL, 0.0)  # above a sequential RS+AG bound
    assert judge(0.0, 0.0) == (Status.OPTIMAL, 0.0)  # nothing to move
    assert judge_time(0.0, 0.0) == (Status.OPTIMAL, 0.0)
    assert SynthResult(status=Status.FEASIBLE, message="", schedule=None, algbw_GBps=99.0, optimal_algbw_GBps=100.0,
                       gap_pct=1.0, solve_time_s=0.0).success


# Regressions: gapped schedules that said "optimal" before issue 28 (they fail on 0d66542).

def test_routed_allgather_below_its_routed_optimum_is_feasible() -> None:
    topo = forestcoll_dgx_a100(2)  # 16 GPUs, k <= 8 chunks per root: 346.39 of 346.67 GB/s (k = 13 reaches it)
    res = synthesize("allgather", topo, chunks=8)
    assert routing_of(res.figures) is not None
    assert res.status is Status.FEASIBLE and res.success
    assert res.gap_pct == pytest.approx(100 * (1 - res.algbw_GBps / routed_bound("allgather", topo)), rel=1e-9)
    assert res.gap_pct > 0.05
    assert res.status_text() == f"feasible (gap {res.gap_pct:.2f} % vs optimum {res.optimal_algbw_GBps:.2f} GB/s)"


def test_routed_alltoall_with_a_rounding_gap_is_feasible() -> None:
    topo = mi250_like(1)  # 10 chunks per block: 148.1 of 150 GB/s (12 reach it)
    res = synthesize("alltoall", topo, chunks=10)
    assert routing_of(res.figures) is not None and res.status is Status.FEASIBLE, res.message
    assert res.figures.binding_limit == "nchunks=10"
    assert res.gap_pct == pytest.approx(100 * (1 - res.algbw_GBps / routed_bound("alltoall", topo)), rel=1e-9)
    assert res.figures.gap == pytest.approx(res.gap_pct / 100, rel=1e-12)
