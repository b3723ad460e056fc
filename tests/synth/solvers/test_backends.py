"""The LP backend interface: both backends, same answers, statuses mapped with a FAILED fallback."""

from __future__ import annotations

import numpy as np
import pytest

from synth.alltoall_cg import alltoall_lp_bound, synthesize_alltoall
from synth.bounds.alltoall import alltoall_rate_GBps
from synth.errors import SolverError
from synth.result import Status
from synth.solvers import LP_SOLVERS, lp_backend, status_from_highs, status_from_mathopt
from synth.topologies import load_topology, named_topology


@pytest.mark.parametrize("name", LP_SOLVERS)
def test_grow_solve_and_duals(name: str) -> None:
    lp = lp_backend(name)
    # min -x - 2y  s.t. x + y <= 4, x - y = 1
    lp.add_rows(np.array([-np.inf, 1.0]), np.array([4.0, 1.0]))
    lp.add_cols(np.array([-1.0, -2.0]), np.zeros(2), np.full(2, np.inf), np.array([0, 2]), np.array([0, 1, 0, 1]),
                np.array([1.0, 1.0, 1.0, -1.0]))
    sol = lp.solve(method="primal")
    assert sol.status is Status.OPTIMAL
    assert sol.objective == pytest.approx(-5.5)
    assert sol.col_values.tolist() == pytest.approx([2.5, 1.5])
    assert sol.row_duals.tolist() == pytest.approx([-1.5, 0.5])
    lp.set_col_bounds(np.array([1]), np.array([0.0]), np.array([1.0]))
    sol = lp.solve(method="dual")
    assert sol.objective == pytest.approx(-4.0)
    lp.set_coeff(0, 0, 2.0)  # 2x + y <= 4 with y <= 1, x = 1 + y
    assert lp.solve().objective == pytest.approx(-3.0)
    assert lp.num_rows == 2 and lp.num_cols == 2


@pytest.mark.parametrize("name", LP_SOLVERS)
def test_infeasible_maps_to_infeasible(name: str) -> None:
    lp = lp_backend(name)
    lp.add_rows(np.array([5.0]), np.array([5.0]))
    lp.add_cols(np.array([1.0]), np.zeros(1), np.ones(1), np.array([0]), np.array([0]), np.array([1.0]))
    assert lp.solve().status is Status.INFEASIBLE


def test_unknown_native_status_falls_back_to_failed() -> None:
    assert status_from_highs("kBrandNew") is Status.FAILED
    assert status_from_highs("kTimeLimit") is Status.TIME_LIMIT
    assert status_from_mathopt("FEASIBLE", "TIME") is Status.TIME_LIMIT
    assert status_from_mathopt("NUMERICAL_ERROR", "UNDETERMINED") is Status.FAILED
    assert status_from_mathopt("SOMETHING_NEW", "UNDETERMINED") is Status.FAILED


def test_unknown_backend_raises_naming_it() -> None:
    with pytest.raises(SolverError, match=r"unknown LP solver 'glpk'; allowed: highs, ortools"):
        lp_backend("glpk")


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "dgx-a100:2", "torus:3x3", "hpn:2x2x4"])
@pytest.mark.parametrize("failure", [None, "fail2"])
def test_both_backends_same_optimum_on_named_specs(spec: str, failure: str | None) -> None:
    if failure and spec.startswith("torus"):
        pytest.skip("no NIC to fail")
    topo = load_topology(spec, [failure] if failure else [])
    ref = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    results = {s: synthesize_alltoall(topo, solver=s) for s in LP_SOLVERS}
    for s, res in results.items():
        assert res.figures.lp_algbw_GBps == pytest.approx(ref, rel=1e-6), s
        assert res.schedule is not None
        res.schedule.validate(topo)
    assert alltoall_lp_bound(topo, solver="ortools").algbw_GBps == pytest.approx(ref, rel=1e-6)


def test_lp_bound_reports_saturated_links() -> None:
    topo = load_topology("hpn:1x2x8", ["fail2"])
    bound = alltoall_lp_bound(topo)
    assert bound.optimal
    assert bound.saturated and all(topo.has_link(a, b) for a, b in bound.saturated)
    assert bound.algbw_GBps == pytest.approx(topo.nranks * bound.rate_GBps)
    assert alltoall_lp_bound(named_topology("nvswitch:4")).algbw_GBps == pytest.approx(480.0)
