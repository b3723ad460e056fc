"""CG LP optimum equals the independent compact LP on random topologies (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from synth.alltoall_cg import alltoall_lp_bound, synthesize_alltoall
from synth.bounds.alltoall import alltoall_rate_GBps
from synth.topologies import Topology
from tests.strategies import random_topologies


@settings(max_examples=120)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=3))
def test_cg_lp_equals_compact_lp(topo: Topology) -> None:
    ref = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    res = synthesize_alltoall(topo, nchunks=4)
    assert res.figures.lp_algbw_GBps == pytest.approx(ref, rel=1e-6)
    assert res.schedule is not None
    res.schedule.validate(topo)
    assert res.algbw_GBps <= ref * (1 + 1e-9)


@settings(max_examples=30)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=2))
def test_both_backends_agree_with_compact_lp(topo: Topology) -> None:
    ref = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    for solver in ("highs", "ortools"):
        bound = alltoall_lp_bound(topo, solver=solver)
        assert bound.optimal
        assert bound.algbw_GBps == pytest.approx(ref, rel=1e-6), solver
