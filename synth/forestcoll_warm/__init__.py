"""AllGather by ForestColl tree packing, cold and warm; ReduceScatter and AllReduce by reversal.

Modules: ``_optimum`` (phase 1, exact (U, k), fixed-k search), ``_splitting`` (phase 2, exact
splitting-off), ``_packing`` (phase 3, arborescence packing), ``_mapback`` (physical paths),
``warm`` (warm-start state), ``allgather`` and ``reduction`` (public API).

Examples
--------
>>> from synth.topologies import named_topology
>>> synthesize_allgather(named_topology("ring:4")).status.value
'optimal'
"""

from __future__ import annotations

from synth.forestcoll_warm.allgather import synthesize_allgather
from synth.forestcoll_warm.reduction import synthesize_allreduce, synthesize_reducescatter

__all__ = ["synthesize_allgather", "synthesize_allreduce", "synthesize_reducescatter"]
