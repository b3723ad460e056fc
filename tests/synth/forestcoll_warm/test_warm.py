"""synth/forestcoll_warm/warm.py: warm starts reach the cold optimum exactly and reuse trees."""

from __future__ import annotations

import pytest

from synth.forestcoll_warm import synthesize_allgather
from synth.schedule import Schedule
from synth.topologies import load_topology
from tests.synth.forestcoll_warm._helpers import assert_exact_optimal


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "dgx-a100:2", "h200-proto", "hpn:2x2x4"])
@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_warm_equals_cold_optimum_exactly(spec: str, failure: str) -> None:
    healthy = synthesize_allgather(load_topology(spec)).schedule
    assert healthy is not None
    prev = Schedule.from_json(healthy.to_json())  # as --warm-from reloads it
    topo = load_topology(spec, [failure])
    warm = synthesize_allgather(topo, warm_start=prev)
    cold = synthesize_allgather(topo)
    assert warm.warm and not cold.warm
    assert_exact_optimal(warm, topo)
    assert warm.schedule is not None and cold.schedule is not None
    assert warm.schedule.rate_GBps(topo) == cold.schedule.rate_GBps(topo)
    assert 0.0 <= warm.figures.reused_edges_frac <= 1.0


def test_warm_reuses_most_tree_edges_after_fail1() -> None:
    prev = synthesize_allgather(load_topology("hpn:1x2x8")).schedule
    res = synthesize_allgather(load_topology("hpn:1x2x8", ["fail1"]), warm_start=prev)
    assert res.figures.reused_edges_frac > 0.5


def test_warm_from_unrelated_schedule_still_exact() -> None:
    prev = synthesize_allgather(load_topology("torus:4x4")).schedule
    topo = load_topology("hpn:1x2x8")
    assert_exact_optimal(synthesize_allgather(topo, warm_start=prev), topo)


def test_warm_from_schedule_without_meta_still_exact() -> None:
    prev = synthesize_allgather(load_topology("hpn:1x2x8")).schedule
    assert prev is not None
    bare = Schedule(prev.collective, prev.nranks, prev.nchunks, prev.routes)
    topo = load_topology("hpn:1x2x8", ["fail2"])
    assert_exact_optimal(synthesize_allgather(topo, warm_start=bare), topo)


def test_warm_chain_of_failures_stays_exact() -> None:
    spec = "dgx-a100:2"
    prev = synthesize_allgather(load_topology(spec)).schedule
    for failures in (["fail1"], ["fail1", "fail2"], []):
        topo = load_topology(spec, failures)
        res = synthesize_allgather(topo, warm_start=prev)
        assert_exact_optimal(res, topo)
        prev = res.schedule


def test_warm_with_max_chunks() -> None:
    prev = synthesize_allgather(load_topology("dgx-a100:2"), max_chunks=1).schedule
    topo = load_topology("dgx-a100:2", ["fail1"])
    warm = synthesize_allgather(topo, max_chunks=1, warm_start=prev)
    cold = synthesize_allgather(topo, max_chunks=1)
    assert warm.schedule is not None and cold.schedule is not None
    warm.schedule.validate(topo)
    assert warm.schedule.rate_GBps(topo) == cold.schedule.rate_GBps(topo)
