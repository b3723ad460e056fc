"""synth/forestcoll_warm/reduction.py: ReduceScatter and AllReduce from reversed trees."""

from __future__ import annotations

import pytest

from synth.bounds import optimal_bound
from synth.forestcoll_warm import synthesize_allgather, synthesize_allreduce, synthesize_reducescatter
from synth.schedule import RouteKind, Schedule
from synth.topologies import load_topology
from tests.synth.forestcoll_warm._helpers import assert_exact_optimal

CASES = [("ring:4", []), ("torus:3x3", []), ("nvswitch:8", []), ("dgx-a100:2", []), ("hpn:1x2x8", ["fail2"]),
         ("h200-proto", ["fail3"])]


@pytest.mark.parametrize(("spec", "failures"), CASES)
def test_reducescatter_is_exact_and_in_trees(spec: str, failures: list[str]) -> None:
    topo = load_topology(spec, failures)
    res = synthesize_reducescatter(topo)
    assert_exact_optimal(res, topo, "reducescatter")
    assert res.schedule is not None
    assert all(r.kind is RouteKind.IN_TREE for r in res.schedule.routes)
    assert res.algbw_GBps == pytest.approx(synthesize_allgather(topo).algbw_GBps)  # symmetric links


@pytest.mark.parametrize(("spec", "failures"), CASES)
def test_allreduce_is_half_allgather_on_symmetric_links(spec: str, failures: list[str]) -> None:
    topo = load_topology(spec, failures)
    res = synthesize_allreduce(topo)
    assert res.status.value == "optimal" and res.schedule is not None and res.gap_pct == 0.0
    res.schedule.validate(topo)
    # Half the AllGather optimum, or more where RS and AG bottleneck on different links (fail3).
    assert 2 * res.schedule.rate_GBps(topo) >= optimal_bound("allgather", topo).rate_GBps
    if not failures:
        assert 2 * res.schedule.rate_GBps(topo) == optimal_bound("allgather", topo).rate_GBps
    kinds = {r.kind for r in res.schedule.routes}
    assert kinds == {RouteKind.IN_TREE, RouteKind.OUT_TREE}


def test_reducescatter_on_asymmetric_links_uses_reversed_bound() -> None:
    topo = load_topology("dgx-a100:2")
    topo = topo.with_link("gpu0", "nvs0.0", gbps=1200.0)  # one direction only (in-excess when reversed)
    res = synthesize_reducescatter(topo)
    assert_exact_optimal(res, topo, "reducescatter")


def test_reduction_warm_start_from_json_is_exact() -> None:
    prev = synthesize_allreduce(load_topology("hpn:1x2x8")).schedule
    assert prev is not None
    topo = load_topology("hpn:1x2x8", ["fail1"])
    res = synthesize_allreduce(topo, warm_start=Schedule.from_json(prev.to_json()))
    assert res.warm and res.status.value == "optimal" and res.schedule is not None
    res.schedule.validate(topo)
    cold = synthesize_allreduce(topo).schedule
    assert cold is not None and res.schedule.rate_GBps(topo) == cold.rate_GBps(topo)
    rs_prev = synthesize_reducescatter(load_topology("hpn:1x2x8")).schedule
    assert_exact_optimal(synthesize_reducescatter(topo, warm_start=rs_prev), topo, "reducescatter")
