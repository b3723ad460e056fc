"""AllToAll by column generation on a maximum-concurrent-flow LP, warm-started, with deep-dive rounding.

MCCL §4.2: T-form restricted master over per-source tree columns,
vectorised shortest-path-tree pricing on the time-expanded graph (≤ ``max_steps`` GPU hops),
warm start from a previous result's column pool and basis (or a schedule's paths), and deep-dive
rounding to at most ``nchunks`` chunks per block. :func:`synthesize_alltoallv` does the same for an
arbitrary demand matrix (AllToAllv), warm as the matrix shifts. After capacity drops, a warm start from a
previous result first tries the certified local repair (``_repair``): only the blocks whose routes
cross a degraded link are re-routed, and the result is used only when a bound proves it is the
full LP optimum.

Examples
--------
>>> from synth.topologies import named_topology
>>> r = synthesize_alltoall(named_topology("nvswitch:4"), nchunks=1)
>>> r.status.value, round(r.algbw_GBps, 6)
('optimal', 480.0)
"""

from __future__ import annotations

from synth.alltoall_cg._warm import WarmState
from synth.alltoall_cg.alltoallv import (
    AllToAllvBound,
    AllToAllvResult,
    AllToAllvWarmState,
    alltoallv_lp_bound,
    synthesize_alltoallv,
)
from synth.alltoall_cg.synthesize import AllToAllBound, alltoall_lp_bound, synthesize_alltoall

__all__ = ["AllToAllBound", "AllToAllvBound", "AllToAllvResult", "AllToAllvWarmState", "WarmState",
           "alltoall_lp_bound", "alltoallv_lp_bound", "synthesize_alltoall", "synthesize_alltoallv"]
