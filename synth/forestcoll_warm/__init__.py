"""AllGather by ForestColl tree packing, cold and warm; ReduceScatter and AllReduce by reversal.

This package will hold the synthesizer of issue 3 (exact optimum, switch removal by edge
splitting-off, arborescence packing, history-guided warm start).
"""
