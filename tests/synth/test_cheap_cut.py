"""The cheap cuts (synth._cheap_cut) are proven upper bounds: never below the exact optimum, on random
fabrics and on degraded rail fabrics, where a slow NIC's host cut is the optimum itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from synth._cheap_cut import cheap_cut_algbw
from synth.bounds import optimal_bound
from synth.collective import Collective
from synth.topologies import Topology, load_topology
from tests.strategies import random_topologies

TREES = [c for c in Collective if c.is_tree]


@settings(max_examples=40, deadline=None)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=3, allow_down=False))
def test_cheap_cuts_never_undercut_the_optimum(topo: Topology) -> None:
    for collective in TREES:
        exact = optimal_bound(collective.value, topo).algbw_GBps
        assert cheap_cut_algbw(collective, topo) >= exact * (1 - 1e-9)


@pytest.mark.parametrize("spec", ["hpn:2x4x4", "hpn:1x16x8"])
def test_host_cut_is_the_optimum_after_fail2(spec: str) -> None:
    topo = load_topology(spec, ["fail2"])
    exact = optimal_bound("allgather", topo).algbw_GBps
    assert cheap_cut_algbw(Collective.ALLGATHER, topo) == pytest.approx(exact, rel=1e-9)
