"""NCCL-like baseline schedules in the schedule IR, so every comparison uses one model.

Owns the ring and direct (PXN) baselines of the uniform collectives (``nccl``) and the AllToAllv
baselines, direct and two-phase (``alltoallv``). It may import ``synth.topologies``,
``synth.schedule``, ``synth.routing``, ``synth.alltoallv_schedule`` and the shared modules
(``synth.errors``, ``synth._types``); no synthesizer, bound or simulator, so any of those can
compare against a baseline.

Examples
--------
>>> from synth.topologies import named_topology
>>> nccl_ring("allgather", named_topology("ring:4")).meta["baseline"]
'generic-ring'
"""

from __future__ import annotations

from synth.baselines.nccl import (
    BaselineChoice,
    baseline_choice,
    baseline_kind,
    describe_baseline,
    nccl_direct_alltoall,
    nccl_ring,
    ring_orders,
)
from synth.baselines.ringlp import weighted_rings

__all__ = ["BaselineChoice", "baseline_choice", "baseline_kind", "describe_baseline", "nccl_direct_alltoall",
           "nccl_ring", "ring_orders", "weighted_rings"]
