"""Shared invariant checks for the ForestColl tests."""

from __future__ import annotations

from fractions import Fraction

from synth.bounds import optimal_bound
from synth.result import Status, SynthResult
from synth.topologies import Topology


def assert_exact_optimal(res: SynthResult, topo: Topology, collective: str = "allgather") -> None:
    assert res.status is Status.OPTIMAL, res.message
    assert res.schedule is not None
    res.schedule.validate(topo)
    bound = optimal_bound(collective, topo).rate_GBps
    assert isinstance(bound, Fraction)
    assert res.schedule.rate_GBps(topo) == bound
    assert res.gap_pct == 0.0
    assert res.schedule.collective == collective
