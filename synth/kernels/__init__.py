"""Solver kernels that more than one synthesizer family uses: tree packing (Lovász/Edmonds,
:mod:`synth.kernels.packing`, for ForestColl and the routed tree collectives), the T-form master LP
over tree columns (:mod:`synth.kernels.tree_master`, for AllToAll column generation and the routed
LPs) and the silent HiGHS instance (:mod:`synth.kernels.highs`, for every direct HiGHS caller).

It owns only these shared pieces and may import ``synth.maxflow``, ``synth.solvers``,
``synth.errors`` and ``synth._types``; never a synthesizer family (``forestcoll_warm``,
``alltoall_cg``, ``routed``, ``latency``), which import it. Nothing is re-exported here: import the
module (``from synth.kernels.packing import pack``), so that loading one kernel loads no other.
"""
