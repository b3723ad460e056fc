"""Optimal bounds: the physical limit of every collective on a topology, proven exact.

Owns :func:`optimal_bound` and :class:`Bound` (``optimal``), the AllGather cut characterisation
(``allgather``), the compact AllToAll concurrent-flow LP (``alltoall``) and the AllToAllv compact
LP (``alltoallv``). It may import ``synth.topologies``, ``synth.schedule``, ``synth.routing``,
``synth.maxflow``, ``synth.kernels``, ``synth.solvers``, ``synth.result`` and the shared modules
(``synth.errors``, ``synth._types``, ``synth._deadline``, ``synth.alltoallv_schedule``); the
synthesizer families ``synth.alltoall_cg`` and ``synth.routed`` only inside the function that needs
them (see ``LAZY_IMPORTS`` in ``tests/test_layers.py``), since they import the bounds.

Examples
--------
>>> from synth.topologies import named_topology
>>> round(optimal_bound("alltoall", named_topology("hpn:1x2x8")).algbw_GBps, 6)
100.0
"""

from __future__ import annotations

from synth.bounds.optimal import COMPACT_LP_MAX_RANKS, Bound, busbw_GBps, optimal_bound

__all__ = ["COMPACT_LP_MAX_RANKS", "Bound", "busbw_GBps", "optimal_bound"]
