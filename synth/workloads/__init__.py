"""Training-iteration workloads (one pipeline stage) and their iteration time per schedule family.

See ``docs/workloads.md``: the ``loopcoll.workload/1`` format, the built-in Llama-3.1-405B-like and
DeepSeek-v3-671B-like generators and the iteration-time model.

>>> from synth.workloads import llama405b
>>> llama405b(1024).meta["dp"]
128
"""

from __future__ import annotations

from synth.workloads.generators import GENERATORS, deepseek671b, generate, llama405b
from synth.workloads.iteration import (
    FAMILIES,
    CollectiveFigure,
    CollectiveTimer,
    IterationTimes,
    WhatIf,
    route_latency_s,
    run_iteration,
    whatif,
)
from synth.workloads.model import WORKLOAD_FORMAT, Communicator, Op, Workload, WorkloadError, read_workload, write_workload

__all__ = ["FAMILIES", "GENERATORS", "WORKLOAD_FORMAT", "CollectiveFigure", "CollectiveTimer", "Communicator",
           "IterationTimes", "Op", "WhatIf", "Workload", "WorkloadError", "deepseek671b", "generate", "llama405b",
           "read_workload", "route_latency_s", "run_iteration", "whatif", "write_workload"]
