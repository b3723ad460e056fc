"""Flow-level simulation of schedules: pipelined slices, store-and-forward GPUs, max-min fair links.

:func:`simulate` and :func:`simulate_sweep` return :class:`SimResult` objects; the model is
documented in :mod:`synth.simulation.simulator`.

Examples
--------
>>> from synth.baselines import nccl_ring
>>> from synth.topologies import named_topology
>>> topo = named_topology("nvswitch:8")
>>> res = simulate(nccl_ring("allgather", topo), topo, 1 << 30)
>>> res.algbw_GBps <= res.bandwidth_term_algbw_GBps
True
"""

from __future__ import annotations

from synth.simulation.costmodel import IDEAL, CostProfile, ExecutorCost, executor_for, load_profile
from synth.simulation.simulator import SimResult, SimStatus, auto_slices, simulate, simulate_sweep
from synth.simulation.transfers import Transfer, TransferTimes, simulate_transfers

__all__ = ["IDEAL", "CostProfile", "ExecutorCost", "SimResult", "SimStatus", "Transfer", "TransferTimes", "auto_slices",
           "executor_for", "load_profile", "simulate", "simulate_sweep", "simulate_transfers"]
