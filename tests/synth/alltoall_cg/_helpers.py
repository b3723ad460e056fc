"""Shared invariant checks for the AllToAll column-generation tests."""

from __future__ import annotations

from synth.result import SynthResult
from synth.topologies import Topology
from tests.synth._judged import assert_judged


def assert_valid_alltoall(result: SynthResult, topo: Topology, nchunks: int) -> None:
    """The schedule validates, its algbw matches the result, and routes stay within ``nchunks``."""
    assert_judged(result.status, result.algbw_GBps, result.optimal_algbw_GBps, result.gap_pct, result.message)
    sched = result.schedule
    assert sched is not None
    sched.validate(topo)
    assert sched.collective == "alltoall" and sched.nchunks == nchunks
    assert abs(sched.algbw_GBps(topo) - result.algbw_GBps) <= 1e-9 * result.algbw_GBps
    assert sched.bottleneck == sched.bottleneck_for(topo)
    assert sched.topology_fingerprint == topo.fingerprint
    assert sched.meta["synthesizer"] == "alltoall_cg"
    assert result.algbw_GBps <= result.optimal_algbw_GBps * (1 + 1e-9)
